//go:build linux

package local

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/sandbox"
)

// A sandbox keeps its capabilities in its record, so a fresh provider connects without
// probing the host, and the SDK handle carries them; a record from before caps were kept
// falls back to the provider's.
func TestSandboxCapabilitiesFromRecord(t *testing.T) {
	p1 := newTestProvider(t, RuntimeRunc)
	inst := create(t, p1, provider.CreateSpec{Network: netNone})
	want := p1.capsFor(RuntimeRunc, &sandboxTemplate{name: TemplateHost})
	listed := provider.CapabilitiesOfInstance(p1, inst)
	if len(want) == 0 || !slices.Equal(provider.NewCapabilities(want...).List(), listed.List()) {
		t.Fatalf("instance caps %v, want %v", listed, want)
	}

	p2, err := New(p1.cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p2.Close()
	ctx := context.Background()
	b, err := sandbox.Connect(ctx, p2, inst.ID(), sandbox.ConnectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if b.Capabilities.String() != listed.String() {
		t.Errorf("handle caps %v, want %v", b.Capabilities, listed)
	}
	if res, err := b.Run(ctx, "true", sandbox.RunOptions{}); err != nil || !res.OK {
		t.Fatalf("run: %v %+v", err, res)
	}
	if len(p2.runtimes) != 0 {
		t.Errorf("connecting and running probed the host (runtimes %v)", p2.runtimes)
	}

	// An old record, without caps: the provider's apply.
	rec, err := p1.lay.readRecord(inst.ID())
	if err != nil {
		t.Fatal(err)
	}
	rec.Caps = nil
	old := p1.instance(rec)
	if old.Capabilities().String() != p1.Capabilities().String() {
		t.Errorf("caps of an old record %v, want the provider's %v", old.Capabilities(), p1.Capabilities())
	}
}

// capsFor gives the shell to a runsc sandbox only when that runsc is new enough.
func TestCapsForRuntime(t *testing.T) {
	p := &Provider{caps: provider.NewCapabilities(provider.CapShell, provider.CapGit)}
	p.runscDate = 20221219
	if slices.Contains(p.capsFor(RuntimeRunsc, &sandboxTemplate{name: TemplateHost}), provider.CapShell) {
		t.Error("old runsc got the shell capability")
	}
	if !slices.Contains(p.capsFor(RuntimeRunsc, &sandboxTemplate{name: TemplateHost}), provider.CapGit) {
		t.Error("capsFor dropped git")
	}
	p.runscDate = 20240729
	if fileExists("/bin/sh") && !slices.Contains(p.capsFor(RuntimeRunsc, &sandboxTemplate{name: TemplateHost}), provider.CapShell) {
		t.Error("new runsc lacks the shell capability")
	}
}

// A runtime that was found but cannot run here (crun on a hybrid cgroup host whose v2
// hierarchy holds a controller) fails a create that asks for it with unavailable and the
// reason, before anything is made.
func TestUnusableRuntime(t *testing.T) {
	p := newTestProvider(t, RuntimeRunc)
	p.probed()
	p.unusable[RuntimeCrun] = errors.New("crun refuses this host")
	_, err := p.Create(context.Background(), provider.CreateSpec{Runtime: RuntimeCrun, Network: netNone})
	if provider.CodeOf(err) != provider.CodeUnavailable || !strings.Contains(err.Error(), "crun refuses this host") {
		t.Fatalf("create under an unusable runtime: %v", err)
	}
	if ids, _ := p.lay.ids(); len(ids) != 0 {
		t.Errorf("it left sandboxes behind: %v", ids)
	}
}
