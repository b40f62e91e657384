package main

import (
	"github.com/spf13/cobra"
)

func newRmCmd() *cobra.Command {
	var pf providerFlags
	cmd := &cobra.Command{
		Use:   "rm ID...",
		Short: "Destroy sandboxes",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			prov, err := pf.resolveExisting(ctx)
			if err != nil {
				return err
			}
			failed := 0
			for _, id := range args {
				if err := prov.Destroy(ctx, id); err != nil {
					cmd.PrintErrf("tupper: %s: %v\n", id, err)
					failed++
				}
			}
			if failed > 0 {
				return exitError{1}
			}
			return nil
		},
	}
	pf.register(cmd)
	return cmd
}
