// The parts of the CLI that configure or measure the local provider, which exists on Linux
// only; local_other.go says so elsewhere.

package main

import (
	"context"
	"fmt"
	"runtime"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/providers/local"
)

// localConfig is the local provider's configuration made of opts, for the registry
// (provider.ResolveOptions.Config); flags names the flags that gave opts.
func localConfig(opts localOptions, _ string) (any, error) {
	return local.Config{Pool: opts.pool, AllowPrivate: opts.allowPrivate, NoTemplateMirror: opts.noTemplateMirror,
		Runtime: opts.runtime, BootImages: opts.bootImages}, nil
}

// bootImagePruner is the local provider's upkeep of its boot images (bootimage.go), which
// no other provider has and the SDK does not offer: tupper template prune asks for it.
type bootImagePruner interface {
	PruneBootImages(ctx context.Context) (int, error)
}

// pruneBootImages removes the boot images of prov, the local provider, that no create would
// use again (their template gone, or made from another runsc or agent), and returns how
// many.
func pruneBootImages(ctx context.Context, prov provider.Provider) (int, error) {
	b, ok := prov.(bootImagePruner)
	if !ok {
		return 0, nil
	}
	return b.PruneBootImages(ctx)
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
