package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/tupper-dev/tupper/sandbox"
)

func newRunCmd() *cobra.Command {
	var (
		f           createFlags
		timeout     time.Duration
		interactive bool
		keep        bool
	)
	cmd := &cobra.Command{
		Use:   "run [flags] -- CMD [ARG...]",
		Short: "Run one command in a new sandbox, then destroy it",
		Long: "run creates a sandbox, runs the command in /workspace with its output streamed,\n" +
			"destroys the sandbox and exits with the command's exit code (124 on timeout,\n" +
			"125 when tupper itself fails).",
		Example: "  tupper run --network none -- sh -c 'echo hi'\n  tupper run --runtime runsc -e NAME=x -- python3 -c 'print(1)'",
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts, err := f.options()
			if err != nil {
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
			if keep {
				cmd.PrintErrf("tupper: sandbox %s kept\n", box.ID)
			} else {
				defer func() {
					dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
					defer cancel()
					if err := box.Destroy(dctx); err != nil {
						cmd.PrintErrln("tupper: destroying the sandbox:", err)
					}
				}()
			}
			return streamRun(ctx, cmd, box, argvCommand(args), "", timeout, interactive)
		},
	}
	f.register(cmd)
	cmd.Flags().DurationVar(&timeout, "timeout", sandbox.DefaultRunTimeout, "kill the command after this long")
	cmd.Flags().BoolVarP(&interactive, "interactive", "i", false, "pass standard input to the command")
	cmd.Flags().BoolVar(&keep, "keep", false, "keep the sandbox afterwards (prints its id on stderr)")
	return cmd
}

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
			prov, err := pf.resolveExisting(ctx)
			if err != nil {
				return err
			}
			box, err := sandbox.Connect(ctx, prov, args[0], sandbox.ConnectOptions{})
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
	cmd.Flags().StringVarP(&cwd, "workdir", "w", "", "working directory (default /workspace)")
	return cmd
}
