package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/tupper-dev/tupper/sandbox"
)

func newLsCmd() *cobra.Command {
	var (
		pf     providerFlags
		asJSON bool
		labels []string
	)
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List sandboxes",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			filter, err := parsePairs("--label", labels)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			prov, err := pf.resolveExisting(ctx)
			if err != nil {
				return err
			}
			infos, err := sandbox.List(ctx, prov, sandbox.ListOptions{Labels: filter})
			if err != nil {
				return err
			}
			slices.SortFunc(infos, func(a, b sandbox.Info) int { return a.CreatedAt.Compare(b.CreatedAt) })
			if asJSON {
				type row struct {
					ID        string            `json:"id"`
					Key       string            `json:"key,omitempty"`
					Labels    map[string]string `json:"labels"`
					State     string            `json:"state"`
					CreatedAt time.Time         `json:"createdAt"`
				}
				rows := make([]row, 0, len(infos))
				for _, in := range infos {
					rows = append(rows, row{in.ID, in.Key, in.Labels, string(in.State), in.CreatedAt})
				}
				return printJSON(cmd, rows)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tSTATE\tCREATED\tKEY\tLABELS")
			for _, in := range infos {
				var ls []string
				for _, k := range slices.Sorted(maps.Keys(in.Labels)) {
					if k != sandbox.SDKLabel {
						ls = append(ls, k+"="+in.Labels[k])
					}
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", in.ID, in.State, in.CreatedAt.Local().Format(time.DateTime), in.Key, strings.Join(ls, ","))
			}
			return tw.Flush()
		},
	}
	pf.register(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON for scripts")
	cmd.Flags().StringArrayVar(&labels, "label", nil, "only sandboxes with label K=V (repeatable)")
	return cmd
}
