package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/providers/remote"
	"github.com/tupper-dev/tupper/sandbox"
	"github.com/tupper-dev/tupper/server/api"
)

func newLsCmd() *cobra.Command {
	var (
		pf     providerFlags
		asJSON bool
		all    bool
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
			var ended []api.Sandbox
			if all {
				rp, ok := prov.(*remote.Provider)
				if !ok {
					return fmt.Errorf("ls -a lists the sandboxes a server recorded as ended, and provider %s keeps no such record: give --url (or $TUPPER_URL)", prov.Name())
				}
				if ended, err = rp.Ended(ctx, provider.ListFilter{Labels: filter}); err != nil {
					return err
				}
			}
			if asJSON {
				type row struct {
					ID        string            `json:"id"`
					Key       string            `json:"key,omitempty"`
					Labels    map[string]string `json:"labels"`
					State     string            `json:"state"`
					CreatedAt time.Time         `json:"createdAt"`
					EndedAt   time.Time         `json:"endedAt,omitzero"`
					End       *api.End          `json:"end,omitempty"`
				}
				rows := make([]row, 0, len(infos)+len(ended))
				for _, in := range infos {
					rows = append(rows, row{ID: in.ID, Key: in.Key, Labels: in.Labels, State: string(in.State), CreatedAt: in.CreatedAt})
				}
				for _, sb := range ended {
					rows = append(rows, row{sb.ID, sb.Key, sb.Labels, sb.State, sb.CreatedAt, sb.EndedAt, sb.End})
				}
				return printJSON(cmd, rows)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			if all {
				fmt.Fprintln(tw, "ID\tSTATE\tCREATED\tKEY\tLABELS\tENDED\tREASON")
			} else {
				fmt.Fprintln(tw, "ID\tSTATE\tCREATED\tKEY\tLABELS")
			}
			for _, in := range infos {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s", in.ID, in.State, in.CreatedAt.Local().Format(time.DateTime), in.Key, labelList(in.Labels))
				if all {
					fmt.Fprint(tw, "\t\t")
				}
				fmt.Fprintln(tw)
			}
			for _, sb := range ended {
				fmt.Fprintf(tw, "%s\tended\t%s\t%s\t%s\t%s\t%s\n", sb.ID, sb.CreatedAt.Local().Format(time.DateTime), sb.Key, labelList(sb.Labels),
					sb.EndedAt.Local().Format(time.DateTime), endText(sb.End))
			}
			return tw.Flush()
		},
	}
	pf.register(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON for scripts")
	cmd.Flags().BoolVarP(&all, "all", "a", false, "also list the sandboxes that ended (the server's latest 100), with when and why (see docs/sandboxes.md); needs a server (--url)")
	cmd.Flags().StringArrayVar(&labels, "label", nil, "only sandboxes with label K=V (repeatable)")
	return cmd
}

// labelList is labels as K=V,K=V in key order, without the SDK's own label.
func labelList(labels map[string]string) string {
	var ls []string
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		if k != sandbox.SDKLabel {
			ls = append(ls, k+"="+labels[k])
		}
	}
	return strings.Join(ls, ",")
}

// endText is why a sandbox ended, for people: "destroyed by key_…", "oom_killed: …".
func endText(e *api.End) string {
	if e == nil || e.Reason == "" {
		return "(not recorded)"
	}
	s := e.Reason
	if e.By != "" {
		s += " by " + e.By
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}
