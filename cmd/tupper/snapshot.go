package main

import (
	"encoding/json"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/tupper-dev/tupper/sandbox"
	"github.com/tupper-dev/tupper/server/api"
)

func newSnapshotCmd() *cobra.Command {
	var (
		pf      providerFlags
		expires time.Duration
		asJSON  bool
		full    bool
		name    string
	)
	cmd := &cobra.Command{
		Use:   "snapshot ID",
		Short: "Snapshot a sandbox and print the snapshot's id; list, inspect and delete snapshots",
		Long: "snapshot captures sandbox ID so new sandboxes can start from it (the SDK's\n" +
			"CreateOptions.From). By default it captures the files; with --full, under gVisor\n" +
			"(runtime runsc), also memory and running processes, which every sandbox started from\n" +
			"it continues. Providers without snapshots say so (code unsupported).\n" +
			"snapshot ls, inspect and rm list, describe and delete the snapshots.",
		Example: "  snap=$(tupper snapshot $id --expires 24h)\n  tupper snapshot ls\n  tupper snapshot rm $snap",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			return withSandbox(ctx, &pf, args[0], func(box *sandbox.Sandbox) error {
				kind := sandbox.SnapshotFilesystem
				if full {
					kind = sandbox.SnapshotFull
				}
				snap, err := box.Snapshot(ctx, sandbox.SnapshotOptions{ExpiresIn: expires.Truncate(time.Millisecond), Kind: kind, Name: name})
				if err != nil {
					return err
				}
				if asJSON {
					return json.NewEncoder(cmd.OutOrStdout()).Encode(map[string]string{"id": snap, "sandbox": box.ID})
				}
				fmt.Fprintln(cmd.OutOrStdout(), snap) // cmd.Println writes to stderr
				return nil
			})
		},
	}
	pf.register(cmd)
	cmd.Flags().DurationVar(&expires, "expires", 0, "delete the snapshot after this long (0: keep it)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON for scripts")
	cmd.Flags().BoolVar(&full, "full", false, "also capture memory and running processes (runsc)")
	cmd.Flags().StringVar(&name, "name", "", "a name for the snapshot")
	cmd.AddCommand(newSnapshotLsCmd(), newSnapshotInspectCmd(), newSnapshotRmCmd())
	return cmd
}

func newSnapshotLsCmd() *cobra.Command {
	var (
		pf     providerFlags
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List snapshots: id, name, kind, sandbox, size, created, expires",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			prov, err := pf.resolveExisting(cmd.Context())
			if err != nil {
				return err
			}
			list, err := sandbox.Snapshots(cmd.Context(), prov)
			if err != nil {
				return err
			}
			rows := make([]api.Snapshot, 0, len(list))
			for _, in := range list {
				rows = append(rows, api.SnapshotOf(in))
			}
			if asJSON {
				return printJSON(cmd, map[string]any{"snapshots": rows})
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tNAME\tKIND\tSANDBOX\tSIZE\tCREATED\tEXPIRES")
			for _, r := range rows {
				expires := "-"
				if !r.ExpiresAt.IsZero() {
					expires = r.ExpiresAt.Local().Format(time.DateTime)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, dash(r.Name), r.Kind, dash(r.SandboxID), bytesHuman(r.Size), r.CreatedAt.Local().Format(time.DateTime), expires)
			}
			return tw.Flush()
		},
	}
	pf.register(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON for scripts")
	return cmd
}

func newSnapshotInspectCmd() *cobra.Command {
	var pf providerFlags
	cmd := &cobra.Command{
		Use:   "inspect SNAPSHOT",
		Short: "Print a snapshot as JSON",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			prov, err := pf.resolveExisting(cmd.Context())
			if err != nil {
				return err
			}
			in, err := sandbox.InspectSnapshot(cmd.Context(), prov, args[0])
			if err != nil {
				return err
			}
			return printJSON(cmd, api.SnapshotOf(in))
		},
	}
	pf.register(cmd)
	return cmd
}

func newSnapshotRmCmd() *cobra.Command {
	var pf providerFlags
	cmd := &cobra.Command{
		Use:   "rm SNAPSHOT...",
		Short: "Delete snapshots now",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			prov, err := pf.resolveExisting(cmd.Context())
			if err != nil {
				return err
			}
			failed := 0
			for _, id := range args {
				if err := sandbox.DeleteSnapshot(cmd.Context(), prov, id); err != nil {
					if len(args) == 1 {
						return err
					}
					cmd.PrintErrf("tupper: %s: %s\n", id, humanError(err))
					failed++
				}
			}
			if failed > 0 {
				return exitError{exitTupperError}
			}
			return nil
		},
	}
	pf.register(cmd)
	return cmd
}

// printJSON prints v as indented JSON.
func printJSON(cmd *cobra.Command, v any) error {
	enc := json.NewEncoder(cmd.OutOrStdout())
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// dash is s, or "-" when it is empty, for a table's cell.
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
