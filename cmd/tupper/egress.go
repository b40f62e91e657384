package main

import (
	"github.com/spf13/cobra"

	"github.com/tupper-dev/tupper/egress"
)

// newEgressProxyCmd is "tupper egress-proxy": the per-sandbox egress proxy the local provider
// starts on the host for a sandbox with a network policy (egress.Main). Hidden: nobody runs
// it by hand.
func newEgressProxyCmd() *cobra.Command {
	var config string
	cmd := &cobra.Command{
		Use:    "egress-proxy --config PATH",
		Short:  "Enforce a sandbox's egress policy (started by the local provider)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return egress.Main(cmd.Context(), config)
		},
	}
	cmd.Flags().StringVar(&config, "config", "", "the proxy's configuration file")
	cmd.MarkFlagRequired("config")
	return cmd
}
