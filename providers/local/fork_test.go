//go:build linux

package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/providers/local/internal/blocks"
	"github.com/tupper-dev/tupper/sandbox"
)

// Fork through the SDK: under runsc the children continue the parent's processes (a full
// fork), under runc they boot afresh on its files (the filesystem fallback); either way the
// parent runs on, the children are independent, and the snapshot that carried them is gone.
func TestFork(t *testing.T) {
	for _, tc := range []struct {
		rt   string
		kind provider.SnapshotKind
	}{{RuntimeRunsc, provider.SnapshotFull}, {RuntimeRunc, provider.SnapshotFilesystem}} {
		t.Run(tc.rt, func(t *testing.T) {
			t0 := time.Now()
			p := newTestProvider(t, tc.rt)
			t.Cleanup(func() { t.Logf("cleanup at %v", time.Since(t0)) })
			ctx := context.Background()
			parent, err := sandbox.Create(ctx, p, sandbox.CreateOptions{Network: sandbox.NetworkNone, Secrets: map[string]string{"TOKEN": "fork-secret-value"}})
			if err != nil {
				t.Fatal(err)
			}
			if got := parent.ForkKind(); got != tc.kind {
				t.Fatalf("ForkKind = %q, want %q", got, tc.kind)
			}
			sh := func(b *sandbox.Sandbox, cmd string) string {
				t.Helper()
				res, err := b.Run(ctx, cmd, sandbox.RunOptions{})
				if err != nil || !res.OK {
					t.Fatalf("%s: %q: %v %+v", b.ID, cmd, err, res)
				}
				return strings.TrimSpace(res.Stdout)
			}
			sh(parent, `echo parent > /workspace/f
(i=0; while :; do i=$((i+1)); echo $i > /workspace/n.tmp; mv /workspace/n.tmp /workspace/n; sleep 0.05; done) >/dev/null 2>&1 &
sleep 0.2`)
			counter := func(b *sandbox.Sandbox) int {
				n, _ := strconv.Atoi(sh(b, "cat /workspace/n"))
				return n
			}
			// A process started through the SDK: its record is in the children's files either
			// way; only a full fork's children have the process itself.
			sleeper, err := parent.Start(ctx, "sleep 1000", sandbox.StartOptions{Name: "sleeper"})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("parent ready at %v", time.Since(t0))
			start := time.Now()
			kids, err := parent.Fork(ctx, sandbox.ForkOptions{N: 2, Labels: map[string]string{"role": "child"}})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("forked 2 in %v", time.Since(start))
			if len(kids) != 2 || kids[0].ID == kids[1].ID || kids[0].ID == parent.ID {
				t.Fatalf("children: %v", kids)
			}
			for _, k := range kids {
				t.Cleanup(func() { k.Destroy(context.Background()) })
				// First, before other commands use up pids: the SDK's view of the parent's
				// process. A filesystem fork's child boots anew, numbering its processes from
				// 1 again, so a process group of its own takes the parent's process's pid
				// (made sure here) and is not taken for it; a full fork's child has the
				// process itself.
				t.Logf("sleeper pid %d, child took %s", sleeper.PID(), sh(k, fmt.Sprintf("i=0; while [ $i -lt 1000 ]; do setsid sleep 1000 & [ $! -ge %d ] && break; i=$((i+1)); done; echo $!", sleeper.PID())))
				want := sandbox.ProcessExited
				if tc.kind == provider.SnapshotFull {
					want = sandbox.ProcessRunning
				}
				if pr, err := k.Process(ctx, "sleeper"); err != nil {
					t.Errorf("%s: Process(sleeper): %v", k.ID, err)
				} else if st, err := pr.Status(ctx); err != nil || st != want {
					t.Errorf("%s: the parent's sleeper in a %s fork: %q %v, want %q", k.ID, tc.kind, st, err, want)
				}
				if k.Labels["role"] != "child" {
					t.Errorf("%s: labels %v", k.ID, k.Labels)
				}
				if got := sh(k, "cat /workspace/f"); got != "parent" {
					t.Errorf("%s: file = %q", k.ID, got)
				}
				// The parent's secret is redacted from the child's output too.
				if got := sh(k, "echo $TOKEN"); strings.Contains(got, "fork-secret-value") {
					t.Errorf("%s: the parent's secret is not redacted: %q", k.ID, got)
				}
				// A full fork's process must run again (waited for: a restored runsc
				// sandbox on a loaded machine is slow to); a filesystem fork's must not
				// (half a second shows it).
				n1 := counter(k)
				wait := 500 * time.Millisecond
				if tc.kind == provider.SnapshotFull {
					wait = runningWait
				}
				if running := advances(func() int { return counter(k) }, n1, wait); running != (tc.kind == provider.SnapshotFull) {
					t.Errorf("%s: counter from %d, running %v; a %s fork must carry running processes: %v", k.ID, n1, running, tc.kind, tc.kind == provider.SnapshotFull)
				}

			}
			t.Logf("children checked at %v", time.Since(t0))
			// The parent runs on.
			n1 := counter(parent)
			if !advances(func() int { return counter(parent) }, n1, runningWait) {
				t.Errorf("the parent's process stopped at %d", n1)
			}
			// Independent.
			sh(kids[0], "echo kid0 > /workspace/f")
			for _, o := range []*sandbox.Sandbox{parent, kids[1]} {
				if got := sh(o, "cat /workspace/f"); got != "parent" {
					t.Errorf("%s sees %q written in %s", o.ID, got, kids[0].ID)
				}
			}
			// The snapshot that carried the children is deleted (not merely unlisted, as a
			// transient one is).
			if snaps, err := sandbox.Snapshots(ctx, p); err != nil || len(snaps) != 0 {
				t.Errorf("snapshots left after the fork: %+v %v", snaps, err)
			}
			if ents, err := os.ReadDir(filepath.Join(p.cfg.Home, "snapshots")); err != nil {
				t.Error(err)
			} else {
				for _, e := range ents {
					if validID(e.Name()) || strings.HasPrefix(e.Name(), ".") {
						t.Errorf("left in the snapshot store after the fork: %s", e.Name())
					}
				}
			}
			// runc cannot take a full snapshot: refused with unsupported.
			if tc.rt == RuntimeRunc {
				_, err := parent.Snapshot(ctx, sandbox.SnapshotOptions{Kind: sandbox.SnapshotFull})
				if !errors.Is(err, provider.CodeUnsupported) {
					t.Errorf("a full snapshot under runc: %v, want unsupported", err)
				}
			}
		})
	}
}

// TestTransientSnapshot: the snapshot a fork takes (provider.SnapshotRequest.Transient) is
// plain (its image and files as they are, no blocks), not listed, inspected and restored as
// any other, and deleted without leaving blocks; the sandbox runs on after it.
func TestTransientSnapshot(t *testing.T) {
	for _, tc := range []struct {
		rt   string
		kind provider.SnapshotKind
	}{{RuntimeRunsc, provider.SnapshotFull}, {RuntimeRunc, provider.SnapshotFilesystem}} {
		t.Run(tc.rt, func(t *testing.T) {
			p := newTestProvider(t, tc.rt)
			ctx := context.Background()
			a := create(t, p, provider.CreateSpec{Network: netNone})
			// Large enough that a kept snapshot stores it as blocks.
			run(t, a, "head -c 3000000 /dev/urandom > /workspace/big; sha256sum /workspace/big > /workspace/sum; echo v > /workspace/secret; "+counterLoop+" sleep 0.2")
			snap, err := a.SnapshotKind(ctx, provider.SnapshotRequest{Kind: tc.kind, Transient: true, Expires: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			dir := filepath.Join(p.cfg.Home, "snapshots", snap)
			if _, err := os.Stat(filepath.Join(dir, blocks.ManifestName)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("a transient snapshot has a block manifest (%v)", err)
			}
			if fi, err := os.Stat(filepath.Join(dir, "upper", "workspace", "big")); err != nil || fi.Size() != 3000000 {
				t.Errorf("a transient snapshot's large file is not there whole: %v", err)
			}
			if tc.kind == provider.SnapshotFull {
				if ents, err := os.ReadDir(filepath.Join(dir, "image")); err != nil || len(ents) == 0 {
					t.Errorf("a transient full snapshot's image: %v %v", ents, err)
				}
			}
			if snaps, err := p.Snapshots(ctx); err != nil || len(snaps) != 0 {
				t.Errorf("a transient snapshot is listed: %+v %v", snaps, err)
			}
			if si, err := p.SnapshotInfo(ctx, snap); err != nil || si.Kind != tc.kind {
				t.Errorf("SnapshotInfo(%s) = %+v %v", snap, si, err)
			}
			// The sandbox runs on.
			_, n := readCounter(t, a)
			if !advances(func() int { _, n := readCounter(t, a); return n }, n, runningWait) {
				t.Errorf("the sandbox's counter stopped after a transient snapshot")
			}
			b := create(t, p, provider.CreateSpec{From: snap, Network: netNone})
			if got := run(t, b, "sha256sum -c /workspace/sum >/dev/null && echo ok"); got != "ok" {
				t.Errorf("restored from a transient snapshot: %q", got)
			}
			if tc.kind == provider.SnapshotFull {
				_, n := readCounter(t, b)
				if !advances(func() int { _, n := readCounter(t, b); return n }, n, runningWait) {
					t.Errorf("the restored sandbox's process does not run")
				}
			}
			if err := p.DeleteSnapshot(ctx, snap); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the deleted snapshot's directory: %v", err)
			}
		})
	}
}
