//go:build linux

package local

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/sandbox"
)

// benchDirtyMiB is how much memory the benchmarks' parent sandbox dirties (a shell variable
// held by a background process) before it is snapshotted or forked.
const benchDirtyMiB = 16

// benchParent is a running runsc sandbox with a background process holding
// benchDirtyMiB of memory.
func benchParent(b *testing.B, p *Provider) *sandbox.Sandbox {
	ctx := context.Background()
	box, err := sandbox.Create(ctx, p, sandbox.CreateOptions{Network: sandbox.NetworkNone})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { box.Destroy(context.Background()) })
	// Half the bytes, twice as many in hex.
	res, err := box.Run(ctx, `(v=$(head -c `+strconv.Itoa(benchDirtyMiB<<19)+` /dev/urandom | od -An -tx1 | tr -d ' \n'); while :; do sleep 1; done) >/dev/null 2>&1 & sleep 1`, sandbox.RunOptions{})
	if err != nil || !res.OK {
		b.Fatal(res, err)
	}
	return box
}

// BenchmarkFork: a fork of a small running runsc sandbox, per child, for n = 1 and n = 10
// (children destroyed untimed).
func BenchmarkFork(b *testing.B) {
	p := newTestProvider(b, RuntimeRunsc)
	parent := benchParent(b, p)
	for _, n := range []int{1, 10} {
		b.Run("n="+strconv.Itoa(n), func(b *testing.B) {
			var per []time.Duration
			for b.Loop() {
				start := time.Now()
				kids, err := parent.Fork(context.Background(), sandbox.ForkOptions{N: n})
				if err != nil {
					b.Fatal(err)
				}
				per = append(per, time.Since(start)/time.Duration(n))
				b.StopTimer()
				for _, k := range kids {
					k.Destroy(context.Background())
				}
				b.StartTimer()
			}
			reportP50(b, per)
		})
	}
}

// BenchmarkCheckpoint: a full snapshot of a runsc sandbox with benchDirtyMiB of dirty
// memory, and a restore from it (create → first command), each p50.
func BenchmarkCheckpoint(b *testing.B) {
	p := newTestProvider(b, RuntimeRunsc)
	parent := benchParent(b, p)
	ctx := context.Background()
	var snaps, restores []time.Duration
	for b.Loop() {
		start := time.Now()
		snap, err := parent.Snapshot(ctx, sandbox.SnapshotOptions{Kind: sandbox.SnapshotFull})
		if err != nil {
			b.Fatal(err)
		}
		snaps = append(snaps, time.Since(start))
		start = time.Now()
		inst, err := p.Create(ctx, provider.CreateSpec{From: snap, Network: netNone})
		if err != nil {
			b.Fatal(err)
		}
		if res, err := inst.Exec(ctx, provider.ExecRequest{Command: "true"}); err != nil || res.ExitCode != 0 {
			b.Fatal(res, err)
		}
		restores = append(restores, time.Since(start))
		b.StopTimer()
		inst.Close()
		p.Destroy(ctx, inst.(*Instance).ID())
		p.DeleteSnapshot(ctx, snap)
		b.StartTimer()
	}
	reportP50(b, snaps)
	if len(restores) > 0 {
		b.ReportMetric(float64(p50(restores).Microseconds())/1000, "restore-ms-p50")
	}
}

// BenchmarkRestoreVsCold: runsc create → first command, from a full snapshot of a freshly
// booted sandbox against a cold create, side by side.
func BenchmarkRestoreVsCold(b *testing.B) {
	p := newTestProvider(b, RuntimeRunsc)
	ctx := context.Background()
	b.Run("cold", func(b *testing.B) {
		var durs []time.Duration
		for b.Loop() {
			durs = append(durs, createFirstCommand(b, p))
		}
		reportP50(b, durs)
	})
	b.Run("from-checkpoint", func(b *testing.B) {
		booted := create(b, p, provider.CreateSpec{Network: netNone})
		snap, err := booted.SnapshotKind(ctx, provider.SnapshotRequest{Kind: provider.SnapshotFull})
		if err != nil {
			b.Fatal(err)
		}
		var durs []time.Duration
		for b.Loop() {
			start := time.Now()
			inst, err := p.Create(ctx, provider.CreateSpec{From: snap, Network: netNone})
			if err != nil {
				b.Fatal(err)
			}
			if res, err := inst.Exec(ctx, provider.ExecRequest{Command: "true"}); err != nil || res.ExitCode != 0 {
				b.Fatal(res, err)
			}
			durs = append(durs, time.Since(start))
			b.StopTimer()
			inst.Close()
			p.Destroy(ctx, inst.(*Instance).ID())
			b.StartTimer()
		}
		reportP50(b, durs)
	})
}

func p50(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

// BenchmarkBootImage: runsc create → first command (`true`) done, from the boot image
// (Config.BootImages) against a cold boot, alternating in each iteration so
// that both see the same load; each p50, their ratio, and (logged) the p50 of each step of
// Create from the image. The image is saved by a create before the timing starts.
func BenchmarkBootImage(b *testing.B) {
	warm := newBootProvider(b)
	cold := newTestProvider(b, RuntimeRunsc)
	first := create(b, warm, provider.CreateSpec{Network: netNone}) // saves the image
	warm.Destroy(context.Background(), first.ID())
	var mu sync.Mutex
	steps := map[string][]time.Duration{}
	var order []string
	timing := false // only the creates from the image
	stepHook = func(name string, d time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		if timing {
			if _, ok := steps[name]; !ok {
				order = append(order, name)
			}
			steps[name] = append(steps[name], d)
		}
	}
	defer func() { stepHook = nil }()
	var fromImage, coldDurs []time.Duration
	for b.Loop() {
		coldDurs = append(coldDurs, createFirstCommand(b, cold))
		mu.Lock()
		timing = true
		mu.Unlock()
		fromImage = append(fromImage, createFirstCommand(b, warm))
		mu.Lock()
		timing = false
		mu.Unlock()
	}
	b.StopTimer()
	// The warm provider's creates restored its image.
	inst := create(b, warm, provider.CreateSpec{Network: netNone})
	if rec, err := warm.lay.readRecord(inst.ID()); err != nil || rec.BootImage == "" {
		b.Fatalf("a create of the warm provider booted cold (%v)", err)
	}
	ci, wi := p50(coldDurs), p50(fromImage)
	b.ReportMetric(float64(ci.Microseconds())/1000, "ms-p50-cold")
	b.ReportMetric(float64(wi.Microseconds())/1000, "ms-p50-image")
	b.ReportMetric(float64(ci)/float64(wi), "cold/image")
	for _, name := range order {
		b.Logf("from the image: step %-16s p50 %8.1f ms", name, float64(p50(steps[name]).Microseconds())/1000)
	}
}
