// The parts of the CLI that configure or measure the local provider, which exists on Linux
// only; local_other.go says so elsewhere.

package main

import (
	"context"
	"fmt"
	"io"
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

// localReporter is what the local provider tells tupper doctor beyond the contract: its
// default runtime and why, and what templates made from a package mirror reach of it.
type localReporter interface {
	DefaultRuntime() (name, why string)
	MirrorReport(ctx context.Context) []string
}

var _ localReporter = (*local.Provider)(nil) // doctor's lines cannot vanish by a rename

// localDoctorLines say which OCI runtime the local provider uses when none is asked for, and
// why, then what the sandboxes of templates made from a package mirror reach of it; none off
// Linux. The provider is opened through the registry, as every command does.
func localDoctorLines(ctx context.Context) []string {
	if runtime.GOOS != "linux" {
		return nil
	}
	p, err := provider.Open("local", local.Config{})
	if err != nil {
		return nil
	}
	if c, ok := p.(io.Closer); ok {
		defer c.Close()
	}
	r, ok := p.(localReporter)
	if !ok {
		return nil
	}
	name, why := r.DefaultRuntime()
	return append([]string{fmt.Sprintf("default runtime of local: %s (%s)", name, why)}, r.MirrorReport(ctx)...)
}
