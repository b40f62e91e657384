//go:build linux

package local

import (
	"context"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/sandbox"
)

const mib = 1 << 20

// snapshotStoreBytes is what Home's snapshots take on disk: their directories and the
// block store.
func snapshotStoreBytes(p *Provider) (snaps, blocks int64) {
	return dirBytes(p.lay.snapshots()), dirBytes(p.lay.blocks().Dir())
}

// Ten filesystem snapshots of a sandbox holding 64 MiB of random data take about one copy
// on disk, and each restores whole.
func TestSnapshotBlocksDiskFilesystem(t *testing.T) {
	p := newTestProvider(t, RuntimeRunc)
	ctx := context.Background()
	a := create(t, p, provider.CreateSpec{Network: provider.Network{Mode: provider.NetworkNone}, Timeout: 10 * time.Minute})
	sum := run(t, a, `head -c 64M /dev/urandom > /workspace/big && sha256sum /workspace/big`)
	var ids []string
	var one int64
	for i := range 10 {
		id, err := a.Snapshot(ctx, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
		if i == 0 {
			m, err := p.readSnapshot(id)
			if err != nil {
				t.Fatal(err)
			}
			one = m.Size
		}
	}
	snaps, blocks := snapshotStoreBytes(p)
	t.Logf("ten filesystem snapshots of a sandbox with 64 MiB of random data: one copy %.1f MiB; blocks %.1f MiB, snapshot directories %.1f MiB, total %.1f MiB (%.2f copies)",
		float64(one)/mib, float64(blocks)/mib, float64(snaps)/mib, float64(snaps+blocks)/mib, float64(snaps+blocks)/float64(one))
	if one < 64*mib {
		t.Fatalf("one snapshot holds %d bytes, less than the file", one)
	}
	if snaps+blocks > 2*one {
		t.Errorf("ten snapshots take %d bytes, more than twice one copy (%d)", snaps+blocks, one)
	}
	b := create(t, p, provider.CreateSpec{From: ids[7], Network: provider.Network{Mode: provider.NetworkNone}})
	if got := run(t, b, `sha256sum /workspace/big`); got != sum {
		t.Fatalf("restored: %q, want %q", got, sum)
	}
	// Deleting all but one keeps its blocks; deleting the last frees them.
	for _, id := range ids[:9] {
		if err := p.DeleteSnapshot(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if _, blocks := snapshotStoreBytes(p); blocks < 64*mib {
		t.Fatalf("deleting nine of ten snapshots left %d bytes of blocks for the tenth", blocks)
	}
	c := create(t, p, provider.CreateSpec{From: ids[9], Network: provider.Network{Mode: provider.NetworkNone}})
	if got := run(t, c, `sha256sum /workspace/big`); got != sum {
		t.Fatalf("restored from the last: %q, want %q", got, sum)
	}
	if err := p.DeleteSnapshot(ctx, ids[9]); err != nil {
		t.Fatal(err)
	}
	if _, blocks := snapshotStoreBytes(p); blocks > 64<<10 {
		t.Errorf("no snapshot left, %d bytes of blocks left", blocks)
	}
}

// Ten forks (filesystem, runc): the snapshot that carries them costs one copy while they
// are made and nothing after; each child holds its own copy in its own writable layer.
func TestSnapshotBlocksDiskFork(t *testing.T) {
	p := newTestProvider(t, RuntimeRunc)
	ctx := context.Background()
	parent, err := sandbox.Create(ctx, p, sandbox.CreateOptions{Network: sandbox.NetworkNone})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { parent.Destroy(context.Background()) })
	res, err := parent.Run(ctx, `head -c 64M /dev/urandom > /workspace/big && sha256sum /workspace/big`, sandbox.RunOptions{})
	if err != nil || !res.OK {
		t.Fatal(res, err)
	}
	var peak atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			s, b := snapshotStoreBytes(p)
			if s+b > peak.Load() {
				peak.Store(s + b)
			}
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	kids, err := parent.Fork(ctx, sandbox.ForkOptions{N: 10})
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	var upper int64
	for _, k := range kids {
		t.Cleanup(func() { k.Destroy(context.Background()) })
		r, err := k.Run(ctx, `sha256sum /workspace/big`, sandbox.RunOptions{})
		if err != nil || r.Stdout != res.Stdout {
			t.Fatalf("%s: %q %v, want %q", k.ID, r.Stdout, err, res.Stdout)
		}
		rec, err := p.lay.readRecord(k.ID)
		if err != nil {
			t.Fatal(err)
		}
		d, err := p.diskDir(rec)
		if err != nil {
			t.Fatal(err)
		}
		upper += dirBytes(filepath.Join(d, "upper"))
	}
	snaps, blocks := snapshotStoreBytes(p)
	t.Logf("ten forks of a sandbox with 64 MiB of random data: the snapshot carrying them took at most %.1f MiB on disk, %.1f MiB after; the children's writable layers (tmpfs) hold %.1f MiB",
		float64(peak.Load())/mib, float64(snaps+blocks)/mib, float64(upper)/mib)
	if peak.Load() > 2*64*mib {
		t.Errorf("the fork's snapshot took %d bytes on disk, more than two copies", peak.Load())
	}
	if blocks > 64<<10 {
		t.Errorf("the fork's snapshot is gone and %d bytes of blocks are left", blocks)
	}
}

// Ten full snapshots (runsc) of a sandbox holding 48 MiB of random data in memory (its
// /dev/shm) store that data once: each after the first adds what changed in memory, and a
// restore has the data.
func TestSnapshotBlocksDiskFull(t *testing.T) {
	p := newTestProvider(t, RuntimeRunsc)
	ctx := context.Background()
	a := create(t, p, provider.CreateSpec{Network: provider.Network{Mode: provider.NetworkNone}, Timeout: 10 * time.Minute})
	sum := run(t, a, `head -c 48M /dev/urandom > /dev/shm/big && sha256sum /dev/shm/big`)
	var ids []string
	var one, first int64
	for i := range 10 {
		id, err := a.SnapshotKind(ctx, provider.SnapshotRequest{Kind: provider.SnapshotFull, Expires: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
		if i == 0 {
			m, err := p.readSnapshot(id)
			if err != nil {
				t.Fatal(err)
			}
			one = m.Size
			s, b := snapshotStoreBytes(p)
			first = s + b
			t.Logf("one full snapshot: image and layer %.1f MiB as files; %.1f MiB stored (blocks %.1f, directories %.1f)",
				float64(one)/mib, float64(s+b)/mib, float64(b)/mib, float64(s)/mib)
		}
	}
	snaps, blocks := snapshotStoreBytes(p)
	t.Logf("ten full snapshots of a sandbox with 48 MiB of random data in memory: one copy %.1f MiB; blocks %.1f MiB, snapshot directories %.1f MiB, total %.1f MiB (%.2f copies; %.1f MiB for each after the first)",
		float64(one)/mib, float64(blocks)/mib, float64(snaps)/mib, float64(snaps+blocks)/mib, float64(snaps+blocks)/float64(one), float64(snaps+blocks-first)/9/mib)
	if one < 48*mib {
		t.Fatalf("one full snapshot holds %d bytes, less than the data in memory", one)
	}
	// Each later snapshot stores what changed in memory since (the sandbox's own activity:
	// a few MiB of pages, and the kernel's state in checkpoint.img), not the 48 MiB again.
	if each := (snaps + blocks - first) / 9; each > one/5 {
		t.Errorf("each later full snapshot takes %d bytes, more than a fifth of one copy (%d)", each, one)
	}
	b := create(t, p, provider.CreateSpec{From: ids[5]})
	if got := run(t, b, `sha256sum /dev/shm/big`); got != sum {
		t.Fatalf("restored: %q, want %q", got, sum)
	}
}
