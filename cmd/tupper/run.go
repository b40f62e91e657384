package main

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tupper-dev/tupper/provider"
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
		Long: "run creates a sandbox, runs the command in its working directory (the template's\n" +
			"WORKDIR, else /workspace) with its output streamed,\n" +
			"destroys the sandbox and exits with the command's exit code (124 on timeout,\n" +
			"125 when tupper itself fails).",
		Example: "  tupper run --network none -- sh -c 'echo hi'\n  tupper run --runtime runsc -e NAME=x -- python3 -c 'print(1)'\n" +
			"  tupper run --allow pypi.org --allow files.pythonhosted.org -- pip install requests\n  tupper run --learn -- pip install requests",
		Args: cobra.MinimumNArgs(1),
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
			err = streamRun(ctx, cmd, box, argvCommand(args), "", timeout, interactive)
			if opts.Network.Normalized().Mode == provider.NetworkAllow {
				egressNotes(ctx, cmd, box, "", f.learn)
			}
			return err
		},
	}
	f.register(cmd)
	cmd.Flags().DurationVar(&timeout, "timeout", sandbox.DefaultRunTimeout, "kill the command after this long")
	cmd.Flags().BoolVarP(&interactive, "interactive", "i", false, "pass standard input to the command")
	cmd.Flags().BoolVar(&keep, "keep", false, "keep the sandbox afterwards (prints its id on stderr)")
	return cmd
}

// maxDenialNotes bounds the "egress denied" lines run prints.
const maxDenialNotes = 10

// egressNotes prints on tupper's own stderr (never in the sandbox's output) what the
// sandbox's network policy refused since cursor after, one line per destination, and with
// learn the allow list that would permit what it reached. A provider that records nothing
// prints nothing.
func egressNotes(ctx context.Context, cmd *cobra.Command, box *sandbox.Sandbox, after string, learn bool) {
	entries, _, err := box.EgressSince(ctx, after, 0)
	if err != nil {
		return
	}
	errw := cmd.ErrOrStderr()
	why := map[string]string{}
	for _, e := range entries {
		if !e.Allowed {
			d := cmp.Or(e.Name, e.Dest)
			if _, ok := why[d]; !ok {
				why[d] = e.Reason
			}
		}
	}
	denied := sandbox.Denied(entries)
	for i, d := range denied {
		if i == maxDenialNotes {
			fmt.Fprintf(errw, "tupper: egress denied: %d more destinations\n", len(denied)-i)
			break
		}
		fmt.Fprintf(errw, "tupper: egress denied: %s (%s)\n", d, why[d])
	}
	if learn {
		allow := sandbox.LearnAllowList(entries)
		if len(allow) == 0 {
			fmt.Fprintln(errw, "tupper: learned: nothing was reached")
			return
		}
		fmt.Fprintf(errw, "tupper: learned: %s\n", allowFlags(allow))
	}
}

// allowFlags renders an allow list as the flags that give it.
func allowFlags(allow []string) string {
	words := make([]string, len(allow))
	for i, a := range allow {
		words[i] = "--allow " + sandbox.Quote(a)
	}
	return strings.Join(words, " ")
}

// argvCommand turns argv into one shell command line with every word quoted, so
// `tupper exec ID -- ls "a b"` runs ls with one argument.
func argvCommand(args []string) string {
	words := make([]string, len(args))
	for i, a := range args {
		words[i] = sandbox.Quote(a)
	}
	return strings.Join(words, " ")
}

// streamRun runs command in cwd ("" is the sandbox's Workdir), copying output to the command's stdout
// and stderr as it arrives. A non-zero exit, a timeout or an interruption comes back as an
// exitError carrying the code tupper exits with.
func streamRun(ctx context.Context, cmd *cobra.Command, box *sandbox.Sandbox, command, cwd string, timeout time.Duration, interactive bool) error {
	opts := sandbox.RunOptions{Cwd: cwd, Timeout: timeout, MaxOutputBytes: 64 << 20}
	if interactive {
		opts.StdinReader = cmd.InOrStdin()
	}
	h := box.Stream(ctx, command, opts)
	out, errw := cmd.OutOrStdout(), cmd.ErrOrStderr()
	for c := range h.Chunks() {
		if c.Stream == sandbox.Stderr {
			fmt.Fprint(errw, c.Text)
		} else {
			fmt.Fprint(out, c.Text)
		}
	}
	res, err := h.Wait()
	if err != nil {
		return err
	}
	switch {
	case res.TimedOut:
		fmt.Fprintf(errw, "tupper: command timed out after %v\n", timeout)
		return exitError{exitTimedOut}
	case res.Aborted:
		return exitError{exitAborted}
	case res.Truncated:
		fmt.Fprintln(errw, "tupper: output was truncated at 64 MiB per stream")
	}
	if res.ExitCode != 0 {
		return exitError{res.ExitCode}
	}
	return nil
}
