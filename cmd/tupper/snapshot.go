package main

import (
	"encoding/json"
	"time"

	"github.com/spf13/cobra"

	"github.com/tupper-dev/tupper/sandbox"
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
		Short: "Snapshot a sandbox and print the snapshot's id",
		Long: "snapshot captures sandbox ID so new sandboxes can start from it (the SDK's\n" +
			"CreateOptions.From). By default it captures the files; with --full, under gVisor\n" +
			"(runtime runsc), also memory and running processes, which every sandbox started from\n" +
			"it continues. Providers without snapshots say so (code unsupported).",
		Example: "  snap=$(tupper snapshot $id --expires 24h)",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			prov, err := pf.resolveExisting(ctx)
			if err != nil {
				return err
			}
			box, err := sandbox.Connect(ctx, prov, args[0], sandbox.ConnectOptions{SkipRecoverSecrets: true})
			if err != nil {
				return err
			}
			defer box.Close()
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
			cmd.Println(snap)
			return nil
		},
	}
	pf.register(cmd)
	cmd.Flags().DurationVar(&expires, "expires", 0, "delete the snapshot after this long (0: keep it)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON for scripts")
	cmd.Flags().BoolVar(&full, "full", false, "also capture memory and running processes (runsc)")
	cmd.Flags().StringVar(&name, "name", "", "a name for the snapshot")
	return cmd
}
