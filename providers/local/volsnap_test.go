//go:build linux

package local

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tupper-dev/tupper/internal/testenv"
	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/sandbox"
)

// Volumes with snapshots, forks and pause (docs/volumes.md, "With snapshots, forks and
// pause"): a volume is never copied into a snapshot; a sandbox from a snapshot, or forked,
// mounts the same volumes again by name (shared with every other sandbox that mounts them),
// a saved runsc sandbox (its saved pause) keeps them mounted, and the volume's MOUNTED BY follows each.

// volSnapProvider is a provider of runtime rt with volume "v" (32 MB) made.
func volSnapProvider(t *testing.T, rt string) *Provider {
	t.Helper()
	p := newTestProvider(t, rt)
	testenv.Require(t, provider.CapabilitiesOf(p).Has(provider.CapVolumes), "volumes need loop devices and mkfs.ext4 (e2fsprogs)")
	if _, err := p.CreateVolume(context.Background(), provider.VolumeRequest{Name: "v", SizeMB: 32}); err != nil {
		t.Fatal(err)
	}
	return p
}

// vMounts are the mounts of volume "v" the tests use: read-write at /data, read-only at /ro.
var vMounts = []provider.VolumeMount{{Name: "v", Path: "/data"}, {Name: "v", Path: "/ro", ReadOnly: true}}

// mountedBy returns the sandboxes volume name is mounted by, sorted.
func mountedBy(t *testing.T, p *Provider, name string) []string {
	t.Helper()
	info, err := p.VolumeInfo(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(info.MountedBy)
	return info.MountedBy
}

func wantMountedBy(t *testing.T, p *Provider, name string, ids ...string) {
	t.Helper()
	slices.Sort(ids)
	if got := mountedBy(t, p, name); !slices.Equal(got, ids) {
		t.Errorf("volume %s mounted by %v, want %v", name, got, ids)
	}
}

// checkVolume checks that inst sees file f of volume v at /data with content want, that a
// write of its own lands in the volume (read back by other, which mounts it at /data), and
// that /ro is read-only.
func checkVolume(t *testing.T, inst, other provider.Instance, f, want string) {
	t.Helper()
	if got, _, code := runCode(t, inst, "cat /data/"+f); code != 0 || got != want {
		t.Errorf("/data/%s = %q (exit %d), want %q", f, got, code, want)
	}
	if got, _, code := runCode(t, inst, "cat /ro/"+f); code != 0 || got != want {
		t.Errorf("/ro/%s = %q (exit %d), want %q", f, got, code, want)
	}
	mark := "w-" + newID()[:8]
	run(t, inst, "echo "+mark+" > /data/"+mark)
	if got, _, _ := runCode(t, other, "cat /data/"+mark); got != mark {
		t.Errorf("a write to /data is not in the volume: another sandbox reads %q", got)
	}
	if _, _, code := runCode(t, inst, "echo x > /ro/ro-written"); code == 0 {
		t.Errorf("/ro is writable: the read-only flag was lost")
	}
}

// nothingMade fails t when the create that failed left a sandbox directory.
func nothingMade(t *testing.T, p *Provider, before []string) {
	t.Helper()
	if ids, _ := p.lay.ids(); len(ids) != len(before) {
		t.Errorf("a refused create left sandboxes: %v (before: %v)", ids, before)
	}
}

// A filesystem snapshot (runc) of a sandbox with a volume: the volume's files are not in
// it, a sandbox from it mounts the volume again (same paths, same read-only flag) and
// shares it with the original, one given its own Volumes mounts those instead, the
// volume can be deleted once no sandbox mounts it (the snapshot does not hold it), and
// then a create from the snapshot is not_found naming the volume, before anything is made.
func TestVolumeFilesystemSnapshot(t *testing.T) {
	p := volSnapProvider(t, RuntimeRunc)
	ctx := context.Background()
	none := provider.Network{Mode: provider.NetworkNone}
	if _, err := p.CreateVolume(ctx, provider.VolumeRequest{Name: "w", SizeMB: 16}); err != nil {
		t.Fatal(err)
	}
	a := create(t, p, provider.CreateSpec{Network: none, Volumes: vMounts})
	run(t, a, "echo before > /data/before && echo own > /workspace/own")
	snap, err := a.SnapshotKind(ctx, provider.SnapshotRequest{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := p.readSnapshot(snap)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(m.Volumes, vMounts) {
		t.Errorf("the snapshot records volumes %+v, want %+v", m.Volumes, vMounts)
	}
	// And says so: SnapshotInfo, and the native API's snapshot JSON through the SDK.
	if si, err := p.SnapshotInfo(ctx, snap); err != nil || !slices.Equal(si.Volumes, vMounts) {
		t.Errorf("SnapshotInfo volumes %+v (%v), want %+v", si.Volumes, err, vMounts)
	}
	// The volume's files are not copied: the snapshot's upper layer has the mount points
	// at most, empty.
	if ents, err := os.ReadDir(filepath.Join(p.lay.snapshot(snap), "upper", "data")); len(ents) != 0 {
		t.Errorf("the snapshot holds files of the volume: %v %v", ents, err)
	}
	wantMountedBy(t, p, "v", a.id)
	run(t, a, "echo after > /data/after")

	b := create(t, p, provider.CreateSpec{Network: none, From: snap})
	if got := run(t, b, "cat /workspace/own"); got != "own" {
		t.Errorf("the sandbox's own file: %q", got)
	}
	checkVolume(t, b, a, "before", "before")
	// Shared, not copied: what the original wrote after the snapshot is there too.
	if got, _, _ := runCode(t, b, "cat /data/after"); got != "after" {
		t.Errorf("a file written to the volume after the snapshot: %q", got)
	}
	wantMountedBy(t, p, "v", a.id, b.id)

	// Volumes given to the create are the ones mounted.
	c := create(t, p, provider.CreateSpec{Network: none, From: snap, Volumes: []provider.VolumeMount{{Name: "w", Path: "/other"}}})
	if _, _, code := runCode(t, c, "test -e /data/before || test -e /ro/before"); code == 0 {
		t.Errorf("a sandbox given its own volumes mounts the snapshot's too")
	}
	run(t, c, "echo w > /other/f")
	wantMountedBy(t, p, "v", a.id, b.id)
	wantMountedBy(t, p, "w", c.id)

	if err := p.DeleteVolume(ctx, "v"); !errors.Is(err, provider.CodeConflict) || !strings.Contains(err.Error(), b.id) {
		t.Errorf("delete while a sandbox from the snapshot mounts it: %v; want conflict naming %s", err, b.id)
	}
	for _, id := range []string{a.id, b.id} {
		if err := p.Destroy(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	wantMountedBy(t, p, "v")
	// A snapshot is not a mount: the volume it names can be deleted.
	if err := p.DeleteVolume(ctx, "v"); err != nil {
		t.Fatalf("delete a volume only a snapshot names: %v", err)
	}
	before, _ := p.lay.ids()
	_, err = p.Create(ctx, provider.CreateSpec{Network: none, From: snap})
	if !errors.Is(err, provider.CodeNotFound) || !strings.Contains(err.Error(), "volume v ") {
		t.Errorf("create from a snapshot whose volume is gone: %v; want not_found naming volume v", err)
	}
	nothingMade(t, p, before)
	// Given volumes that exist, the snapshot still starts.
	d := create(t, p, provider.CreateSpec{Network: none, From: snap, Volumes: []provider.VolumeMount{{Name: "w", Path: "/data"}}})
	if got := run(t, d, "cat /data/f"); got != "w" {
		t.Errorf("volume w at /data: %q", got)
	}
}

// A full snapshot (runsc) of a sandbox with a volume: the restored sandbox mounts it again
// and shares it (a write the original makes after the snapshot is seen, and the other way
// round), read-only stays read-only, a process that held a file of the volume open runs on
// writing to it, and a create that names other volumes is refused before anything is made.
func TestVolumeFullSnapshot(t *testing.T) {
	p := volSnapProvider(t, RuntimeRunsc)
	ctx := context.Background()
	none := provider.Network{Mode: provider.NetworkNone}
	a := create(t, p, provider.CreateSpec{Network: none, Volumes: vMounts, Timeout: 10 * time.Minute})
	// A process with a file of the volume open, appending to it every 50 ms the name in a
	// file of the sandbox's own disk.
	run(t, a, `echo before > /data/before; echo a > /workspace/who
(exec 3>>/data/log; while :; do cat /workspace/who >&3; sleep 0.05; done) >/dev/null 2>&1 &
sleep 0.3`)
	snap, err := a.SnapshotKind(ctx, provider.SnapshotRequest{Kind: provider.SnapshotFull})
	if err != nil {
		t.Fatal(err)
	}
	// The original writes on to the file the restored process will hold open.
	run(t, a, "echo after > /data/after; sleep 0.2")
	before, _ := p.lay.ids()
	for _, vols := range [][]provider.VolumeMount{
		{{Name: "v", Path: "/data"}},
		{{Name: "v", Path: "/data"}, {Name: "v", Path: "/ro"}},
		{{Name: "v", Path: "/elsewhere"}, {Name: "v", Path: "/ro", ReadOnly: true}},
	} {
		_, err := p.Create(ctx, provider.CreateSpec{Network: none, From: snap, Volumes: vols})
		if !errors.Is(err, provider.CodeInvalidArgument) || !strings.Contains(err.Error(), "v at /data") {
			t.Errorf("a full snapshot restored with volumes %+v: %v; want invalid_argument naming its volumes", vols, err)
		}
	}
	nothingMade(t, p, before)
	k := create(t, p, provider.CreateSpec{Network: none, From: snap})
	checkVolume(t, k, a, "before", "before")
	run(t, k, "echo k > /workspace/who")
	fromK := func() int { return strings.Count(run(t, a, "cat /data/log"), "k") }
	if !advances(fromK, fromK(), runningWait) {
		t.Errorf("the restored process holding a file of the volume open does not write to it")
	}
	if got, _, _ := runCode(t, k, "cat /data/after"); got != "after" {
		t.Errorf("a file the original wrote to the volume after the snapshot: %q", got)
	}
	run(t, k, "echo fromk > /data/fromk")
	if got := run(t, a, "cat /data/fromk"); got != "fromk" {
		t.Errorf("the original reads %q from the restored one's write", got)
	}
	wantMountedBy(t, p, "v", a.id, k.id)
	// The same volumes named again, in the create, restore too.
	k2 := create(t, p, provider.CreateSpec{Network: none, From: snap, Volumes: vMounts})
	checkVolume(t, k2, a, "before", "before")
	wantMountedBy(t, p, "v", a.id, k.id, k2.id)
	for _, id := range []string{a.id, k.id, k2.id} {
		if err := p.Destroy(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	wantMountedBy(t, p, "v")
	if err := p.DeleteVolume(ctx, "v"); err != nil {
		t.Fatalf("delete a volume only a snapshot names: %v", err)
	}
	before, _ = p.lay.ids()
	if _, err := p.Create(ctx, provider.CreateSpec{Network: none, From: snap}); !errors.Is(err, provider.CodeNotFound) || !strings.Contains(err.Error(), "volume v ") {
		t.Errorf("restore of a full snapshot whose volume is gone: %v; want not_found naming volume v", err)
	}
	nothingMade(t, p, before)
}

// Fork through the SDK (full under runsc, filesystem under runc): the children mount the
// parent's volumes, shared with it: a write the parent makes after the fork is seen by
// a child, and a child's by the parent.
func TestVolumeFork(t *testing.T) {
	for _, rt := range []string{RuntimeRunsc, RuntimeRunc} {
		t.Run(rt, func(t *testing.T) {
			p := volSnapProvider(t, rt)
			ctx := context.Background()
			parent, err := sandbox.Create(ctx, p, sandbox.CreateOptions{Network: sandbox.NetworkNone, Volumes: vMounts, Timeout: 10 * time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			pi, err := p.Connect(ctx, parent.ID)
			if err != nil {
				t.Fatal(err)
			}
			defer pi.Close()
			run(t, pi, "echo before > /data/before")
			kids, err := parent.Fork(ctx, sandbox.ForkOptions{N: 1})
			if err != nil {
				t.Fatal(err)
			}
			k, err := p.Connect(ctx, kids[0].ID)
			if err != nil {
				t.Fatal(err)
			}
			defer k.Close()
			run(t, pi, "echo after-fork > /data/after")
			checkVolume(t, k, pi, "before", "before")
			if got, _, _ := runCode(t, k, "cat /data/after"); got != "after-fork" {
				t.Errorf("the child reads %q from the parent's write after the fork", got)
			}
			wantMountedBy(t, p, "v", parent.ID, kids[0].ID)
			if err := p.DeleteVolume(ctx, "v"); !errors.Is(err, provider.CodeConflict) {
				t.Errorf("delete while the parent and child mount it: %v; want conflict", err)
			}
			if err := kids[0].Destroy(ctx); err != nil {
				t.Fatal(err)
			}
			wantMountedBy(t, p, "v", parent.ID)
		})
	}
}

// A saved runsc sandbox (the saved pause: pause-frees-memory) keeps its volume: it still counts as
// mounting it (delete refused), another sandbox writes to it meanwhile, and after resume
// the saved one reads that, its process that held a file of the volume open writes on,
// and its own writes reach the volume; destroyed saved, it mounts it no more.
func TestVolumeSavedPause(t *testing.T) {
	p := volSnapProvider(t, RuntimeRunsc)
	ctx := context.Background()
	none := provider.Network{Mode: provider.NetworkNone}
	a := create(t, p, provider.CreateSpec{Network: none, Volumes: vMounts, Timeout: 10 * time.Minute})
	if !a.Capabilities().Has(provider.CapPauseFreesMemory) {
		t.Fatalf("a runsc sandbox lacks %s", provider.CapPauseFreesMemory)
	}
	// A process with a file of the volume open, appending to it every 50 ms.
	run(t, a, `echo before > /data/before
(exec 3>>/data/log; while :; do echo x >&3; sleep 0.05; done) >/dev/null 2>&1 &
sleep 0.3`)
	lines := func(inst provider.Instance) int {
		return len(strings.Fields(run(t, inst, "cat /data/log")))
	}
	if err := a.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	rec, err := p.lay.readRecord(a.id)
	if err != nil || !rec.Saved {
		t.Fatalf("not saved: %+v %v", rec, err)
	}
	wantMountedBy(t, p, "v", a.id)
	if err := p.DeleteVolume(ctx, "v"); !errors.Is(err, provider.CodeConflict) || !strings.Contains(err.Error(), a.id) {
		t.Errorf("delete while a saved sandbox mounts it: %v; want conflict naming %s", err, a.id)
	}
	b := create(t, p, provider.CreateSpec{Runtime: RuntimeRunc, Network: none, Volumes: []provider.VolumeMount{{Name: "v", Path: "/data"}}})
	run(t, b, "echo while-saved > /data/while")
	n1 := lines(b)
	if err := a.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	checkVolume(t, a, b, "before", "before")
	if got, _, _ := runCode(t, a, "cat /data/while"); got != "while-saved" {
		t.Errorf("after resume, a file written while saved reads %q", got)
	}
	if !advances(func() int { return lines(b) }, n1, runningWait) {
		t.Errorf("the process writing to the volume stopped at %d lines", n1)
	}
	wantMountedBy(t, p, "v", a.id, b.id)
	if err := a.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Destroy(ctx, a.id); err != nil {
		t.Fatal(err)
	}
	wantMountedBy(t, p, "v", b.id)
	if got := run(t, b, "cat /data/before"); got != "before" {
		t.Errorf("after the saved sandbox's destroy: %q", got)
	}
}
