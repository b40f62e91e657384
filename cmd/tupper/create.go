package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/tupper-dev/tupper/sandbox"
)

func newCreateCmd() *cobra.Command {
	var (
		f        createFlags
		lifetime time.Duration
		idle     time.Duration
		key      string
		from     string
	)
	cmd := &cobra.Command{
		Use:     "create [flags]",
		Short:   "Create a sandbox and print its id",
		Example: "  id=$(tupper create --network none --timeout 1h)\n  tupper exec $id -- uname -a",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts, err := f.options()
			if err != nil {
				return err
			}
			opts.Timeout, opts.IdleTimeout, opts.Key, opts.From = lifetime, idle, key, from
			if err := opts.Validate(); err != nil {
				return err
			}
			ctx := cmd.Context()
			prov, err := f.resolve(ctx)
			if err != nil {
				return err
			}
			box, err := sandbox.Create(ctx, prov, opts)
			if err != nil {
				return err
			}
			defer box.Close()
			fmt.Fprintln(cmd.OutOrStdout(), box.ID)
			return nil
		},
	}
	f.register(cmd)
	cmd.Flags().DurationVar(&lifetime, "timeout", 0, "destroy the sandbox after this long (0: never)")
	cmd.Flags().DurationVar(&idle, "idle-timeout", 0, "destroy the sandbox after this long idle (0: never)")
	cmd.Flags().StringVar(&key, "key", "", "get-or-create key: print the id of the sandbox made with this key, or make one")
	cmd.Flags().StringVar(&from, "from", "", "start from this snapshot (an id printed by tupper snapshot)")
	return cmd
}
