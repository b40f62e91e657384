package main

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/tupper-dev/tupper/sandbox"
)

func newLogsCmd() *cobra.Command {
	var (
		pf     providerFlags
		follow bool
		after  string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "logs ID NAME",
		Short: "Print a background process's output",
		Long: "logs prints the output of the background process NAME in sandbox ID, from the start or\n" +
			"after --after CURSOR. With --follow it keeps printing until the process exits. With\n" +
			"--json each line is an object with its text, stream and the cursor that continues\n" +
			"after it, so a script can resume where it stopped.",
		Example: "  tupper logs $id web --follow\n  tupper logs $id web --json --after $cursor",
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			box, err := pf.connect(ctx, args[0])
			if err != nil {
				return err
			}
			defer box.Close()
			p, err := box.Process(ctx, args[1])
			if err != nil {
				return fmt.Errorf("%w\n(`tupper exec %s -- ls /var/lib/sandbox-sdk/procs` lists the process names)", err, args[0])
			}
			out := cmd.OutOrStdout()
			enc := json.NewEncoder(out)
			if follow {
				for line, err := range p.Lines(ctx, after) {
					if err != nil {
						if ctx.Err() != nil {
							return nil
						}
						return err
					}
					if asJSON {
						if err := enc.Encode(map[string]string{"text": line.Text, "stream": line.Stream, "cursor": line.Cursor}); err != nil {
							return err
						}
					} else {
						fmt.Fprintln(out, line.Text)
					}
				}
				return nil
			}
			for {
				page, err := p.Logs(ctx, sandbox.LogsOptions{After: after, MaxBytes: sandbox.MaxLogPageBytes})
				if err != nil {
					return err
				}
				if asJSON {
					if err := enc.Encode(map[string]any{"text": page.Text, "nextCursor": page.NextCursor, "truncated": page.Truncated}); err != nil {
						return err
					}
				} else {
					fmt.Fprint(out, page.Text)
				}
				after = page.NextCursor
				if !page.Truncated {
					return nil
				}
			}
		},
	}
	pf.register(cmd)
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing until the process exits")
	cmd.Flags().StringVar(&after, "after", "", "start after this cursor (from an earlier --json run)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON with cursors for scripts")
	return cmd
}
