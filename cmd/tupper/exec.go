package main

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/tupper-dev/tupper/sandbox"
)

func newExecCmd() *cobra.Command {
	var (
		pf          providerFlags
		timeout     time.Duration
		interactive bool
		tty         bool
		cwd         string
	)
	cmd := &cobra.Command{
		Use:     "exec ID -- CMD [ARG...]",
		Short:   "Run a command in an existing sandbox",
		Example: "  tupper exec $id -- ls -la\n  echo data | tupper exec -i $id -- cat\n  tupper exec -t $id",
		Args: func(cmd *cobra.Command, args []string) error {
			if tty {
				return cobra.MinimumNArgs(1)(cmd, args)
			}
			return cobra.MinimumNArgs(2)(cmd, args)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			box, err := pf.connect(ctx, args[0])
			if err != nil {
				return err
			}
			defer box.Close()
			if tty {
				return runTerminal(ctx, cmd, box, args[1:], cwd)
			}
			return streamRun(ctx, cmd, box, argvCommand(args[1:]), cwd, timeout, interactive)
		},
	}
	pf.register(cmd)
	cmd.Flags().DurationVar(&timeout, "timeout", sandbox.DefaultRunTimeout, "kill the command after this long")
	cmd.Flags().BoolVarP(&interactive, "interactive", "i", false, "pass standard input to the command")
	cmd.Flags().BoolVarP(&tty, "tty", "t", false, "run on an interactive terminal (a login shell without CMD); implies -i, ignores --timeout")
	cmd.Flags().StringVarP(&cwd, "workdir", "w", "", "working directory (default: the template's WORKDIR, else /workspace)")
	return cmd
}
