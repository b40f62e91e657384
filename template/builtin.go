package template

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/tupper-dev/tupper/provider"
)

// Builtin is a template the store makes on first use rather than holding from the start:
// a provider lists it before it is made, and whatever names it — a create, a build's FROM
// or COPY --from — makes it (Store.Ensure).
type Builtin struct {
	Name  string
	About string // what it is, as a template's Source
	Takes string // how long making it takes, said before a create that makes it
	// Images are image references that mean this template (E2B's fromBaseImage sends
	// e2bdev/base, for its base image): a FROM of one makes and uses it instead of asking
	// a registry. Compared without a docker.io/ prefix or a :latest tag.
	Images []string
}

// Builtins are the store's built-in templates, in the order they are listed.
var Builtins = []Builtin{
	{Name: Debian, About: "built in: made on first use from this machine's apt mirror", Takes: "a minute or two"},
	{Name: Base, About: "built in: debian with Python, Node.js, git, curl and sudo (E2B's base), built on first use", Takes: "a few minutes: debian, then Python, Node.js, git, curl and sudo",
		Images: []string{"e2bdev/base"}},
	{Name: CodeInterpreter, About: "built in: base with an IPython kernel, numpy, pandas, matplotlib, scipy, scikit-learn and the code-interpreter server of E2B's SDK (port 49999), built on first use",
		Takes:  "several minutes: debian, base, then the Debian packages of Python's data libraries",
		Images: []string{"e2bdev/code-interpreter"}},
}

// BuiltinNamed returns the built-in template called name.
func BuiltinNamed(name string) (Builtin, bool) {
	for _, b := range Builtins {
		if b.Name == name {
			return b, true
		}
	}
	return Builtin{}, false
}

// builtinFor returns the built-in template ref means: by its name, or by one of its images.
func builtinFor(ref string) (Builtin, bool) {
	if b, ok := BuiltinNamed(ref); ok {
		return b, true
	}
	img := strings.TrimPrefix(strings.TrimPrefix(ref, "docker.io/"), "index.docker.io/")
	img = strings.TrimSuffix(img, ":latest")
	for _, b := range Builtins {
		for _, i := range b.Images {
			if img == i {
				return b, true
			}
		}
	}
	return Builtin{}, false
}

// EnsureOptions configure Ensure.
type EnsureOptions struct {
	// Runner runs the steps of a built-in template that is built (base: its Dockerfile on
	// debian). Without one such a template cannot be made (CodeInvalidArgument).
	Runner Runner
	// Output receives a line when a built-in template is being made, then its build's
	// steps (nil: nothing).
	Output io.Writer
}

func (o EnsureOptions) progress() func(BuildEvent) {
	if o.Output == nil {
		return nil
	}
	return func(ev BuildEvent) {
		switch ev.Kind {
		case "step":
			fmt.Fprintf(o.Output, "  Step %d/%d : %s\n", ev.Step, ev.Steps, ev.Instruction)
		case "output":
			io.WriteString(o.Output, ev.Output)
		}
	}
}

// Ensure is the one resolver of a template reference, for creates and builds alike: a
// template of the store by name or tag, or a built-in template (Builtins) by its name or
// one of its Images, made first when the store lacks it (a minute or more, once; concurrent
// callers wait for one). Anything else the store lacks is CodeNotFound, which a build's FROM
// answers by importing the image from its registry (BuildOptions.Pull).
func (s *Store) Ensure(ctx context.Context, ref string, opts EnsureOptions) (*Template, error) {
	b, ok := builtinFor(ref)
	if !ok {
		return s.Get(ref)
	}
	t, err := s.Get(b.Name)
	stale := err == nil && b.Name == CodeInterpreter && !codeInterpreterCurrent(t) // another tupper's server
	if provider.CodeOf(err) != provider.CodeNotFound && !stale {
		return t, err
	}
	if opts.Output != nil {
		fmt.Fprintf(opts.Output, "making the built-in template %s (once; %s)\n", b.Name, b.Takes)
	}
	switch b.Name {
	case Debian:
		return s.EnsureDebian(ctx, DebianOptions{})
	case Base:
		return s.EnsureBase(ctx, BaseOptions{Runner: opts.Runner, Progress: opts.progress()})
	case CodeInterpreter:
		return s.EnsureCodeInterpreter(ctx, CodeInterpreterOptions{Runner: opts.Runner, Progress: opts.progress()})
	}
	return nil, provider.Errorf(provider.CodeInternal, "built-in template %s: no way to make it", b.Name)
}
