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
	b := &templateBuild{home: home}
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
		RunE: b.run,
	}
	f := cmd.Flags()
	f.StringArrayVarP(&b.tags, "tag", "t", nil, "the template's name (repeat for more names)")
	f.StringVarP(&b.file, "file", "f", "", "the Dockerfile (default CONTEXT/Dockerfile)")
	f.StringArrayVar(&b.buildArgs, "build-arg", nil, "a build argument NAME=VALUE (repeatable)")
	f.StringVar(&b.network, "network", "all", "network of RUN steps: all or none")
	f.StringVar(&b.target, "target", "", "build up to this stage")
	f.StringVar(&b.runtime, "runtime", "", "runtime of the step sandboxes: runc, crun or runsc (default: the provider's)")
	f.StringArrayVar(&b.allowPrivate, "allow-private", nil, "a private IPv4 range RUN steps may reach (repeatable)")
	f.BoolVar(&b.noCache, "no-cache", false, "run every step, even those in the cache")
	f.BoolVarP(&b.quiet, "quiet", "q", false, "print only errors and the template's name")
	return cmd
}

// templateBuild is tupper template build's flags.
type templateBuild struct {
	home                          *string
	tags, buildArgs, allowPrivate []string
	file, network, runtime        string
	target                        string
	noCache, quiet                bool
}

// run builds the context args[0] through the SDK, on the local provider configured by the
// flags (through the registry), its steps printed as docker build does.
func (b *templateBuild) run(cmd *cobra.Command, args []string) error {
	req, cfg, err := b.request(args[0])
	if err != nil {
		return err
	}
	p, err := provider.Open("local", cfg)
	if err != nil {
		return err
	}
	out := cmd.ErrOrStderr()
	req.Progress, req.Log = (&buildProgress{w: out, quiet: b.quiet}).event, out
	start := time.Now()
	t, err := sandbox.BuildTemplate(cmd.Context(), p, req)
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
}

// request is the build the flags ask for, of the context dir, and the configuration of the
// provider that runs its steps.
func (b *templateBuild) request(dir string) (sandbox.BuildRequest, local.Config, error) {
	bad := func(format string, args ...any) (sandbox.BuildRequest, local.Config, error) {
		return sandbox.BuildRequest{}, local.Config{}, provider.Errorf(provider.CodeInvalidArgument, "%s", fmt.Sprintf(format, args...))
	}
	if len(b.tags) == 0 {
		return bad("give the template's name with -t NAME")
	}
	allow, err := parseAllowPrivate(b.allowPrivate)
	if err != nil {
		return bad("%s", err.Error())
	}
	bargs := map[string]string{}
	for _, a := range b.buildArgs {
		k, v, ok := strings.Cut(a, "=")
		if !ok {
			v, ok = os.LookupEnv(k) // --build-arg NAME takes NAME from the environment
		}
		if k == "" || !ok {
			return bad("--build-arg %q: use NAME=VALUE, or NAME set in the environment", a)
		}
		bargs[k] = v
	}
	var mode provider.NetworkMode
	switch b.network {
	case "all", "":
		mode = provider.NetworkAll
	case "none":
		mode = provider.NetworkNone
	default:
		return bad("--network %q: all or none", b.network)
	}
	ctxDir, _ := filepath.Abs(dir)
	req := sandbox.BuildRequest{
		Name: b.tags[0], Tags: b.tags[1:], Context: ctxDir, Dockerfile: b.file, BuildArgs: bargs,
		Target: b.target, Network: mode, NoCache: b.noCache,
	}
	return req, local.Config{Home: *b.home, Runtime: b.runtime, AllowPrivate: allow}, nil
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
