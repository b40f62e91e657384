package main

import (
	"encoding/base64"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tupper-dev/tupper/sandbox"
)

// newCodeCmd is `tupper code`: a cell run in a context of a sandbox of the code-interpreter
// template (docs/code-interpreter.md), its output streamed, its final value printed.
func newCodeCmd() *cobra.Command {
	var (
		pf       providerFlags
		language string
		context  string
		timeout  time.Duration
		env      []string
	)
	cmd := &cobra.Command{
		Use:   "code ID [CODE]",
		Short: "Run a cell of code in a code-interpreter sandbox, keeping its variables",
		Long: "Run a cell of code (the argument, else standard input) in a context of a sandbox of the\n" +
			"code-interpreter template: its variables stay for the next cell. stdout and stderr stream\n" +
			"as they come, the cell's final value is printed last; an error prints its traceback and\n" +
			"exits 1. See docs/code-interpreter.md.",
		Example: "  id=$(tupper create --template code-interpreter)\n  tupper code $id 'x = 40'\n  tupper code $id 'x + 2'\n  tupper code $id -l javascript < cell.js",
		Args:    cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			code := ""
			if len(args) == 2 {
				code = args[1]
			} else {
				b, err := io.ReadAll(cmd.InOrStdin())
				if err != nil {
					return fmt.Errorf("reading the cell from standard input: %w", err)
				}
				code = string(b)
			}
			envs, err := parsePairs("--env", env)
			if err != nil {
				return err
			}
			box, err := pf.connect(ctx, args[0])
			if err != nil {
				return err
			}
			defer box.Close()
			out, errw := cmd.OutOrStdout(), cmd.ErrOrStderr()
			ex, err := box.RunCode(ctx, code, sandbox.CodeOptions{
				Language: language, Context: context, Env: envs, Timeout: timeout,
				OnStdout: func(s string) { io.WriteString(out, s) },
				OnStderr: func(s string) { io.WriteString(errw, s) },
				OnResult: func(r sandbox.CodeResult) {
					if !r.IsMain {
						fmt.Fprintln(out, describeResult(r))
					}
				},
			})
			if err != nil {
				if sandbox.CodeOf(err) == sandbox.CodeTimeout {
					fmt.Fprintf(errw, "tupper: the cell ran past %v and was interrupted; its context stays\n", timeout)
					return exitError{exitTimedOut}
				}
				return err
			}
			for _, r := range ex.Results {
				if r.IsMain {
					fmt.Fprintln(out, describeResult(r))
				}
			}
			if ex.Error != nil {
				fmt.Fprintln(errw, ex.Error.Traceback)
				if ex.Error.Traceback == "" || !strings.Contains(ex.Error.Traceback, ex.Error.Name) {
					fmt.Fprintf(errw, "%s: %s\n", ex.Error.Name, ex.Error.Value)
				}
				return exitError{1}
			}
			return nil
		},
	}
	pf.register(cmd)
	cmd.Flags().StringVarP(&language, "language", "l", "", "the language of the default context to run in: python (default) or javascript")
	cmd.Flags().StringVar(&context, "context", "", "a context id to run in instead (see the SDKs' createCodeContext)")
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "interrupt the cell after this long (0: never); its context stays")
	cmd.Flags().StringArrayVarP(&env, "env", "e", nil, "environment variable K=V for this cell (repeatable)")
	return cmd
}

// describeResult is a result as a terminal shows it: its text, and the other formats it has
// named (an image by its size).
func describeResult(r sandbox.CodeResult) string {
	var extra []string
	for _, f := range []struct{ name, data string }{{"png", r.PNG}, {"jpeg", r.JPEG}, {"svg", r.SVG}, {"html", r.HTML}} {
		if f.data == "" {
			continue
		}
		if n, err := base64.StdEncoding.DecodeString(strings.Join(strings.Fields(f.data), "")); err == nil && (f.name == "png" || f.name == "jpeg") {
			extra = append(extra, fmt.Sprintf("%s, %d bytes", f.name, len(n)))
		} else {
			extra = append(extra, f.name)
		}
	}
	if r.Chart != nil {
		extra = append(extra, fmt.Sprintf("chart: %v", r.Chart["type"]))
	}
	switch {
	case len(extra) == 0:
		return r.Text
	case r.Text == "":
		return "[" + strings.Join(extra, "; ") + "]"
	}
	return r.Text + " [" + strings.Join(extra, "; ") + "]"
}
