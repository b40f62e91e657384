//go:build linux

package local

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tupper-dev/tupper/provider"
)

// A full snapshot under runsc carries memory and running processes: a background process
// that holds a value only in its memory keeps counting in every sandbox restored from it,
// files are as they were, restored copies are independent of each other and of the
// original (which runs on), the snapshot is listed, inspected and deleted, and runc refuses
// to restore it.
func TestFullSnapshot(t *testing.T) {
	t0 := time.Now()
	p := newTestProvider(t, RuntimeRunsc)
	t.Cleanup(func() { t.Logf("cleanup starts at %v", time.Since(t0)) })
	ctx := context.Background()
	a := create(t, p, provider.CreateSpec{Network: provider.Network{Mode: provider.NetworkNone}, Timeout: 10 * time.Minute})
	if !a.Capabilities().Has(provider.CapSnapshotFull) {
		t.Fatalf("a runsc sandbox lacks %s: %v", provider.CapSnapshotFull, a.Capabilities())
	}
	// The secret exists only in the shell's memory once its file is gone; the loop writes
	// it, with a count, every 50 ms.
	run(t, a, `set -e; echo kept > /workspace/file; echo s3cr3t-in-memory > /workspace/secret
`+counterLoop+`
sleep 0.3; rm /workspace/secret`)
	count := func(inst provider.Instance) (string, int) { return readCounter(t, inst) }
	_, before := count(a)
	t.Logf("created at %v", time.Since(t0))
	start := time.Now()
	snap, err := a.SnapshotKind(ctx, provider.SnapshotRequest{Kind: provider.SnapshotFull, Name: "warm"})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("full snapshot in %v", time.Since(start))

	// What the host trusts of a full snapshot is its own: the image and the metadata sit
	// in a directory only host root reaches.
	for _, f := range []string{"", "image", "meta.json"} {
		fi, err := os.Stat(filepath.Join(p.cfg.Home, "snapshots", snap, f))
		if err != nil || fi.Mode().Perm()&0o077 != 0 {
			t.Errorf("snapshot %s/%s: %v %v, want root's only", snap, f, fi.Mode(), err)
		}
	}
	// Sandbox code signalling its init as the host does after a checkpoint changes nothing:
	// the agent is not waiting, and serves on.
	run(t, a, "kill -USR2 1; sleep 0.1")
	// The original runs on, its process too.
	if !advances(func() int { _, n := count(a); return n }, before, runningWait) {
		t.Errorf("the original's counter stopped after the snapshot (before: %d)", before)
	}

	info, err := p.SnapshotInfo(ctx, snap)
	if err != nil {
		t.Fatal(err)
	}
	if info.Kind != provider.SnapshotFull || info.Name != "warm" || info.Runtime != RuntimeRunsc || info.Template != TemplateHost || info.Source != a.id || info.Size <= 0 {
		t.Errorf("snapshot info: %+v", info)
	}
	list, err := p.Snapshots(ctx)
	if err != nil || len(list) != 1 || list[0].ID != snap {
		t.Errorf("snapshots: %+v, %v", list, err)
	}

	// runc cannot restore memory saved by gVisor.
	_, err = p.Create(ctx, provider.CreateSpec{From: snap, Runtime: RuntimeRunc, Network: provider.Network{Mode: provider.NetworkNone}})
	if !errors.Is(err, provider.CodeUnsupported) {
		t.Errorf("runc restoring a full snapshot: %v, want unsupported", err)
	}

	var kids []*Instance
	for range 2 {
		rstart := time.Now()
		k := create(t, p, provider.CreateSpec{From: snap, Network: provider.Network{Mode: provider.NetworkNone}})
		t.Logf("restored %s in %v", k.id, time.Since(rstart))
		kids = append(kids, k)
	}
	for _, k := range kids {
		if got := run(t, k, "cat /workspace/file"); got != "kept" {
			t.Errorf("%s: file = %q", k.id, got)
		}
		if out, _, code := runCode(t, k, "cat /workspace/secret"); code == 0 {
			t.Errorf("%s: the deleted file is back: %q", k.id, out)
		}
		v, n1 := count(k)
		if v != "s3cr3t-in-memory" {
			t.Errorf("%s: the value held in memory is %q", k.id, v)
		}
		if !advances(func() int { _, n := count(k); return n }, n1, runningWait) {
			t.Errorf("%s: the restored background process is not running (stuck at %d)", k.id, n1)
		}
	}
	// Independent: a write in one is seen by no other.
	run(t, kids[0], "echo mine > /workspace/only0")
	for _, o := range []*Instance{a, kids[1]} {
		if _, _, code := runCode(t, o, "test -e /workspace/only0"); code == 0 {
			t.Errorf("%s sees a file written in %s", o.id, kids[0].id)
		}
	}
	t.Logf("checked copies at %v", time.Since(start))
	// Destroying a copy leaves the others running.
	if err := p.Destroy(ctx, kids[0].id); err != nil {
		t.Fatal(err)
	}
	if got := run(t, kids[1], "cat /workspace/file"); got != "kept" {
		t.Errorf("after destroying its sibling: %q", got)
	}

	t.Logf("destroyed a copy at %v", time.Since(start))
	// A filesystem snapshot of the same sandbox boots afresh: files, no processes.
	fs, err := a.SnapshotKind(ctx, provider.SnapshotRequest{})
	if err != nil {
		t.Fatal(err)
	}
	c := create(t, p, provider.CreateSpec{From: fs, Network: provider.Network{Mode: provider.NetworkNone}})
	_, n1 := count(c)
	time.Sleep(200 * time.Millisecond)
	if _, n2 := count(c); n2 != n1 {
		t.Errorf("a filesystem snapshot restored a running process (%d then %d)", n1, n2)
	}

	t.Logf("filesystem snapshot restored at %v", time.Since(start))
	if err := p.DeleteSnapshot(ctx, snap); err != nil {
		t.Fatal(err)
	}
	if _, err := p.SnapshotInfo(ctx, snap); !errors.Is(err, provider.CodeNotFound) {
		t.Errorf("inspecting a deleted snapshot: %v", err)
	}
	if _, err := os.Stat(filepath.Join(p.cfg.Home, "snapshots", snap)); !os.IsNotExist(err) {
		t.Errorf("the deleted snapshot is still on disk: %v", err)
	}
	if _, err := p.Create(ctx, provider.CreateSpec{From: snap}); !errors.Is(err, provider.CodeNotFound) {
		t.Errorf("restoring a deleted snapshot: %v", err)
	}
}

// A snapshot is listed only once complete: one whose write fails midway (here: after its
// contents and before its metadata) is neither listed nor left on disk, one a crashed
// process left half-written (a temporary directory whose pid is gone) is never listed and
// is removed by the next listing, and a listing while a snapshot is being written does not
// show it.
func TestSnapshotCrashSafe(t *testing.T) {
	p := newTestProvider(t, RuntimeRunc)
	ctx := context.Background()
	a := create(t, p, provider.CreateSpec{Network: provider.Network{Mode: provider.NetworkNone}})
	run(t, a, "echo data > /workspace/f")
	listed := func() int {
		t.Helper()
		l, err := p.Snapshots(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return len(l)
	}
	t.Cleanup(func() { testHookSnapshotWrite = nil })
	var during int
	testHookSnapshotWrite = func(tmp string) error {
		during = listed()
		return errors.New("disk gone")
	}
	if _, err := a.SnapshotKind(ctx, provider.SnapshotRequest{Name: "doomed"}); err == nil {
		t.Fatal("a snapshot whose write failed succeeded")
	}
	testHookSnapshotWrite = nil
	if during != 0 || listed() != 0 {
		t.Errorf("a half-written snapshot was listed (%d during, %d after)", during, listed())
	}
	dir := filepath.Join(p.cfg.Home, "snapshots")
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("a failed snapshot left %v", ents)
	}
	// What a process killed mid-write leaves: a temporary directory named for a pid that
	// is gone (pid_max is far above this).
	crashed := filepath.Join(dir, ".tmp-"+newID()+"-99999999")
	if err := os.MkdirAll(filepath.Join(crashed, "upper"), 0o700); err != nil {
		t.Fatal(err)
	}
	if listed() != 0 {
		t.Error("a crashed snapshot's temporary directory is listed")
	}
	if _, err := os.Stat(crashed); !os.IsNotExist(err) {
		t.Errorf("a crashed snapshot's temporary directory outlived a listing: %v", err)
	}
	// The next snapshot is whole.
	id, err := a.SnapshotKind(ctx, provider.SnapshotRequest{Name: "ok"})
	if err != nil {
		t.Fatal(err)
	}
	if l, _ := p.Snapshots(ctx); len(l) != 1 || l[0].ID != id || l[0].Name != "ok" || l[0].Kind != provider.SnapshotFilesystem {
		t.Errorf("listed: %+v", l)
	}
}
