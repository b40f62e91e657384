package main

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/tupper-dev/tupper/sandbox"
)

func newForkCmd() *cobra.Command {
	var (
		pf      providerFlags
		n       int
		timeout time.Duration
		labels  []string
		asJSON  bool
	)
	cmd := &cobra.Command{
		Use:   "fork ID",
		Short: "Copy a running sandbox into new ones and print their ids",
		Long: "fork makes N new sandboxes from running sandbox ID, which keeps running. Each copy is\n" +
			"independent. Under gVisor (runtime runsc) the copies continue its memory and running\n" +
			"processes; elsewhere they start afresh on a copy of its files. Providers without\n" +
			"snapshots say so (code unsupported).",
		Example: "  for kid in $(tupper fork $id -n 3); do tupper exec $kid -- ./try.sh & done",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			lab, err := parsePairs("--label", labels)
			if err != nil {
				return err
			}
			return withSandbox(ctx, &pf, args[0], func(box *sandbox.Sandbox) error {
				kids, err := box.Fork(ctx, sandbox.ForkOptions{N: n, Timeout: timeout, Labels: lab})
				if err != nil {
					return err
				}
				ids := make([]string, 0, len(kids))
				for _, k := range kids {
					ids = append(ids, k.ID)
					k.Close()
				}
				if asJSON {
					return json.NewEncoder(cmd.OutOrStdout()).Encode(map[string]any{"sandbox": box.ID, "kind": box.ForkKind(), "ids": ids})
				}
				for _, id := range ids {
					fmt.Fprintln(cmd.OutOrStdout(), id)
				}
				return nil
			})
		},
	}
	pf.register(cmd)
	cmd.Flags().IntVarP(&n, "n", "n", 1, "how many copies")
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "destroy each copy after this long (0: never)")
	cmd.Flags().StringArrayVar(&labels, "label", nil, "label K=V of each copy (repeatable)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON for scripts")
	return cmd
}
