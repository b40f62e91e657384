package main

import (
	"fmt"

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
	)
	cmd := &cobra.Command{
		Use:   "network ID (--allow DEST... --deny DEST... | --mode all|none)",
		Short: "Change a running sandbox's egress policy",
		Long: "tupper network replaces the egress policy of a running sandbox. --allow and --deny take\n" +
			"a domain, *.domain, an IP address or a CIDR (each repeatable); --allow denies whatever it\n" +
			"does not name and --deny wins over --allow. --mode all opens everything public, --mode\n" +
			"none closes everything. Connections the new policy refuses are cut. The local provider\n" +
			"changes only sandboxes created with a policy (tupper create --allow/--deny).",
		Example: "  tupper network $id --allow pypi.org --allow files.pythonhosted.org\n  tupper network $id --mode none",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var n sandbox.Network
			switch {
			case len(allow) > 0 || len(deny) > 0:
				if mode != "" && mode != string(provider.NetworkAllow) {
					return fmt.Errorf("--allow and --deny go with no --mode (or --mode allow)")
				}
				n = sandbox.Network{Mode: provider.NetworkAllow, Allow: allow, Deny: deny}
			case mode == "all":
				n = sandbox.NetworkAll
			case mode == "none":
				n = sandbox.NetworkNone
			default:
				return fmt.Errorf("give --allow/--deny, or --mode all or none")
			}
			ctx := cmd.Context()
			prov, err := pf.resolveExisting(ctx)
			if err != nil {
				return err
			}
			box, err := sandbox.Connect(ctx, prov, args[0], sandbox.ConnectOptions{})
			if err != nil {
				return err
			}
			defer box.Close()
			return box.SetNetwork(ctx, n)
		},
	}
	pf.register(cmd)
	fl := cmd.Flags()
	fl.StringVar(&mode, "mode", "", "all or none (instead of lists)")
	fl.StringArrayVar(&allow, "allow", nil, "allow egress to DEST only (repeatable)")
	fl.StringArrayVar(&deny, "deny", nil, "deny egress to DEST (repeatable; wins over --allow)")
	return cmd
}
