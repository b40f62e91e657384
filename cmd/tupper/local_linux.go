// The parts of the CLI that configure or measure the local provider, which exists on Linux
// only; local_other.go says so elsewhere.

package main

import (
	"context"
	"fmt"
	"os"
	"runtime"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/providers/local"
	"github.com/tupper-dev/tupper/template"
)

// localWith returns a local provider made with opts in place of prov, which must be the
// local provider: for the flags that configure that provider itself (flags names them).
func localWith(prov provider.Provider, opts localOptions, flags string) (*local.Provider, error) {
	if _, ok := prov.(*local.Provider); !ok {
		return nil, fmt.Errorf("%s needs the local provider, not %s", flags, prov.Name())
	}
	return local.New(local.Config{Pool: opts.pool, AllowPrivate: opts.allowPrivate, NoTemplateMirror: opts.noTemplateMirror,
		Runtime: opts.runtime, BootImages: opts.bootImages})
}

// pruneBootImages removes the local provider's boot images in home that no create would use
// again (their template gone, or made from another runsc or agent), after a template's
// removal or a prune, and returns how many.
func pruneBootImages(ctx context.Context, home string) (int, error) {
	p, err := local.New(local.Config{Home: home})
	if err != nil {
		return 0, err
	}
	defer p.Close()
	return p.PruneBootImages(ctx)
}

// announceBuiltin says, before a create that will make a built-in template (debian, base)
// first, why it takes a while.
func (f *createFlags) announceBuiltin(prov provider.Provider) {
	lp, ok := prov.(*local.Provider)
	b, builtin := template.BuiltinNamed(f.template)
	if !ok || !builtin {
		return
	}
	if t, err := lp.Template(context.Background(), f.template); err == nil && t.Layers == 0 {
		fmt.Fprintf(os.Stderr, "tupper: making the %s template from this machine's apt mirror (once; %s)\n", b.Name, b.Takes)
	}
}

// localDoctorLines say which OCI runtime the local provider uses when none is asked for, and
// why, then what the sandboxes of templates made from a package mirror reach of it; none off
// Linux.
func localDoctorLines(ctx context.Context) []string {
	if runtime.GOOS != "linux" {
		return nil
	}
	p, err := local.New(local.Config{})
	if err != nil {
		return nil
	}
	defer p.Close()
	name, why := p.DefaultRuntime()
	return append([]string{fmt.Sprintf("default runtime of local: %s (%s)", name, why)}, p.MirrorReport(ctx)...)
}
