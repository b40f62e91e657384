package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/providers/local"
	"github.com/tupper-dev/tupper/sandbox"
)

// newTemplateBuildCmd is "tupper template build": a Dockerfile built into a template, each
// step in a sandbox of the local provider whose state is in home.
func newTemplateBuildCmd(home *string) *cobra.Command {
	var (
		tags, buildArgs, allowPrivate []string
		file, network, runtime        string
		target                        string
		noCache, quiet                bool
	)
	cmd := &cobra.Command{
		Use:   "build -t NAME [flags] CONTEXT",
		Short: "Build a template from a Dockerfile",
		Long: "build makes template NAME from CONTEXT/Dockerfile (or -f FILE): FROM a template, an\n" +
			"image (imported as by `template import`), an earlier stage or scratch; RUN, COPY, ADD,\n" +
			"ENV, ARG, WORKDIR, USER, LABEL, EXPOSE, CMD, ENTRYPOINT and SHELL. Each RUN runs in a\n" +
			"real sandbox (network all unless --network none) and what it changes becomes a layer;\n" +
			"an unchanged step is taken from the cache. FROM debian is the built-in template made\n" +
			"from this machine's own Debian mirror. See docs/templates.md.",
		Example: "  tupper template build -t py .\n" +
			"  tupper template build -t app -f docker/Dockerfile --build-arg VERSION=2 --no-cache .",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(tags) == 0 {
				return provider.Errorf(provider.CodeInvalidArgument, "%s", "give the template's name with -t NAME")
			}
			allow, err := parseAllowPrivate(allowPrivate)
			if err != nil {
				return provider.Errorf(provider.CodeInvalidArgument, "%s", err.Error())
			}
			bargs := map[string]string{}
			for _, a := range buildArgs {
				k, v, ok := strings.Cut(a, "=")
				if !ok {
					v, ok = os.LookupEnv(k) // --build-arg NAME takes NAME from the environment
				}
				if k == "" || !ok {
					return provider.Errorf(provider.CodeInvalidArgument, "%s", fmt.Sprintf("--build-arg %q: use NAME=VALUE, or NAME set in the environment", a))
				}
				bargs[k] = v
			}
			var mode provider.NetworkMode
			switch network {
			case "all", "":
				mode = provider.NetworkAll
			case "none":
				mode = provider.NetworkNone
			default:
				return provider.Errorf(provider.CodeInvalidArgument, "%s", fmt.Sprintf("--network %q: all or none", network))
			}
			// The provider that runs the steps, configured by these flags through the registry.
			p, err := provider.Open("local", local.Config{Home: *home, Runtime: runtime, AllowPrivate: allow})
			if err != nil {
				return err
			}
			out := cmd.ErrOrStderr()
			pr := &buildProgress{w: out, quiet: quiet}
			ctxDir, _ := filepath.Abs(args[0])
			start := time.Now()
			t, err := sandbox.BuildTemplate(cmd.Context(), p, sandbox.BuildRequest{
				Name: tags[0], Tags: tags[1:], Context: ctxDir, Dockerfile: file, BuildArgs: bargs,
				Target: target, Network: mode, NoCache: noCache, Progress: pr.event, Log: out,
			})
			if err != nil {
				return templateErr(err)
			}
			unit := "layers"
			if len(t.LayerIDs) == 1 {
				unit = "layer"
			}
			fmt.Fprintf(out, "built template %s (%d %s) in %s\n", t.Name, len(t.LayerIDs), unit, time.Since(start).Round(time.Millisecond))
			fmt.Fprintln(cmd.OutOrStdout(), t.Name)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringArrayVarP(&tags, "tag", "t", nil, "the template's name (repeat for more names)")
	f.StringVarP(&file, "file", "f", "", "the Dockerfile (default CONTEXT/Dockerfile)")
	f.StringArrayVar(&buildArgs, "build-arg", nil, "a build argument NAME=VALUE (repeatable)")
	f.StringVar(&network, "network", "all", "network of RUN steps: all or none")
	f.StringVar(&target, "target", "", "build up to this stage")
	f.StringVar(&runtime, "runtime", "", "runtime of the step sandboxes: runc, crun or runsc (default: the provider's)")
	f.StringArrayVar(&allowPrivate, "allow-private", nil, "a private IPv4 range RUN steps may reach (repeatable)")
	f.BoolVar(&noCache, "no-cache", false, "run every step, even those in the cache")
	f.BoolVarP(&quiet, "quiet", "q", false, "print only errors and the template's name")
	return cmd
}

// buildProgress prints a build's events as docker build does: the step, cached or its
// output, and a failure's line.
type buildProgress struct {
	w     io.Writer
	quiet bool
}

func (b *buildProgress) event(ev sandbox.BuildEvent) {
	if b.quiet && ev.Kind != "error" {
		return
	}
	switch ev.Kind {
	case "step":
		fmt.Fprintf(b.w, "Step %d/%d : %s\n", ev.Step, ev.Steps, ev.Instruction)
	case "cached":
		if ev.Layer == "" {
			fmt.Fprintf(b.w, " ---> Using cache (no changes)\n")
		} else {
			fmt.Fprintf(b.w, " ---> Using cache %s\n", shortDigest(ev.Layer))
		}
	case "output":
		io.WriteString(b.w, ev.Output)
	case "done":
		if ev.Layer != "" {
			fmt.Fprintf(b.w, " ---> %s\n", shortDigest(ev.Layer))
		}
	}
}
