package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/sandbox"
)

// newNetworkCmd is "tupper network ID": replace a running sandbox's network policy.
func newNetworkCmd() *cobra.Command {
	var (
		pf          providerFlags
		mode        string
		allow, deny []string
		learn       bool
		learned     bool
		egressProxy string
	)
	cmd := &cobra.Command{
		Use:   "network ID (--allow DEST... --deny DEST... | --mode all|none)",
		Short: "Change a running sandbox's egress policy",
		Long: "tupper network replaces the egress policy of a running sandbox. --allow and --deny take\n" +
			"a domain, *.domain, an IP address or a CIDR (each repeatable); --allow denies whatever it\n" +
			"does not name and --deny wins over --allow. --mode all opens everything public, --mode\n" +
			"none closes everything. Connections the new policy refuses are cut. The local provider\n" +
			"gives a sandbox created with network all its egress proxy at the first policy (its open\n" +
			"connections are cut); one created with --network none has no interface and cannot change.",
		Example: "  tupper network $id --allow pypi.org --allow files.pythonhosted.org\n  tupper network $id --mode none\n" +
			"  tupper network $id --learned   # the allow list of what a --learn sandbox reached",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var n sandbox.Network
			switch {
			case learned:
				if len(allow) > 0 || len(deny) > 0 || learn || mode != "" || egressProxy != "" {
					return fmt.Errorf("--learned changes nothing: give it alone")
				}
			case egressProxy != "":
				if mode != "" && mode != string(provider.NetworkAllow) && mode != string(provider.NetworkAll) {
					return fmt.Errorf("--egress-proxy goes with --allow/--deny, or alone (everything public, through the proxy)")
				}
				px, err := parseEgressProxy(egressProxy, os.LookupEnv)
				if err != nil {
					return err
				}
				n = sandbox.Network{Mode: provider.NetworkAllow, Allow: allow, Deny: deny, Learn: learn, Proxy: px}
			case len(allow) > 0 || len(deny) > 0 || learn:
				if mode != "" && mode != string(provider.NetworkAllow) {
					return fmt.Errorf("--allow, --deny and --learn go with no --mode (or --mode allow)")
				}
				n = sandbox.Network{Mode: provider.NetworkAllow, Allow: allow, Deny: deny, Learn: learn}
			case mode == "all":
				n = sandbox.NetworkAll
			case mode == "none":
				n = sandbox.NetworkNone
			default:
				return fmt.Errorf("give --allow/--deny, --learn, --learned, or --mode all or none")
			}
			ctx := cmd.Context()
			box, err := pf.connect(ctx, args[0])
			if err != nil {
				return err
			}
			defer box.Close()
			if learned {
				entries, _, err := box.EgressSince(ctx, "", 0)
				if err != nil {
					return err
				}
				fmt.Fprintln(cmd.OutOrStdout(), allowFlags(sandbox.LearnAllowList(entries)))
				return nil
			}
			return box.SetNetwork(ctx, n)
		},
	}
	pf.register(cmd)
	fl := cmd.Flags()
	fl.StringVar(&mode, "mode", "", "all or none (instead of lists)")
	fl.StringArrayVar(&allow, "allow", nil, "allow egress to DEST only (repeatable)")
	fl.StringArrayVar(&deny, "deny", nil, "deny egress to DEST (repeatable; wins over --allow)")
	fl.BoolVar(&learn, "learn", false, "learn mode: refuse nothing the lists do not, record every destination reached")
	fl.StringVar(&egressProxy, "egress-proxy", "", "tunnel the allowed TCP through this SOCKS5 proxy: socks5://[USER@]HOST:PORT, the password in $"+egressProxyPasswordEnv+"; a change without it goes out directly again")
	fl.BoolVar(&learned, "learned", false, "print, as --allow flags, the allow list that would permit what the sandbox reached so far")
	return cmd
}
