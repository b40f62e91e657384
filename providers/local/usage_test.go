//go:build linux

package local

import (
	"context"
	"errors"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/tupper-dev/tupper/internal/testenv"
	"github.com/tupper-dev/tupper/provider"
)

// TestUsageOf: what a sandbox does shows in the counters the host reads for the usage
// ledger: CPU time, a memory peak and disk use above the 64 MiB file it writes, the bytes of
// the connections the host makes to it (received) and its refusals (sent); and a destroyed
// sandbox is not found.
func TestUsageOf(t *testing.T) {
	forRuntimes(t, func(t *testing.T, rt string) {
		testenv.RequireRoot(t)
		testenv.RequireBinary(t, rt)
		p := newTestProvider(t, rt)
		spec := provider.CreateSpec{Network: netNone}
		withNet := p.Capabilities().Has(provider.CapNetworkAll)
		if withNet {
			spec.Network = provider.Network{Mode: provider.NetworkAll}
		}
		inst := create(t, p, spec)
		ctx := context.Background()
		run(t, inst, "head -c 64m /dev/zero > /tmp/f && i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done")
		const conns = 50
		if withNet {
			rec, err := p.lay.readRecord(inst.ID())
			if err != nil {
				t.Fatal(err)
			}
			for range conns { // nothing listens on port 9: each SYN is answered by a RST
				if c, err := net.DialTimeout("tcp", rec.IP+":9", time.Second); err == nil {
					c.Close()
				}
			}
		}
		u, err := p.UsageOf(ctx, inst.ID())
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %+v", rt, u)
		if u.CPUUsec <= 0 || u.MemPeak < 64<<20 || u.DiskUsed < 64<<20 || u.At.IsZero() {
			t.Errorf("usage %+v: want CPU time, and a memory peak and disk use of at least 64 MiB", u)
		}
		if withNet && (u.NetRx < conns*54 || u.NetTx < conns*40) {
			t.Errorf("network: received %d, sent %d bytes; want at least a SYN in and a RST out for each of %d connections", u.NetRx, u.NetTx, conns)
		}
		if !withNet && (u.NetRx != 0 || u.NetTx != 0) {
			t.Errorf("network none counted %d in, %d out", u.NetRx, u.NetTx)
		}
		if err := p.Destroy(ctx, inst.ID()); err != nil {
			t.Fatal(err)
		}
		if _, err := p.UsageOf(ctx, inst.ID()); !errors.Is(err, provider.CodeNotFound) {
			t.Errorf("UsageOf a destroyed sandbox: %v; want not found", err)
		}
	})
}

// BenchmarkUsageOf: one reading of a running sandbox's counters, as the server's sampler
// makes every interval for each sandbox.
func BenchmarkUsageOf(b *testing.B) {
	p := newTestProvider(b, RuntimeRunc)
	inst := create(b, p, provider.CreateSpec{Network: netNone})
	ctx := context.Background()
	var before, after syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &before)
	n := 0
	for b.Loop() {
		if _, err := p.UsageOf(ctx, inst.ID()); err != nil {
			b.Fatal(err)
		}
		n++
	}
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &after)
	// The process's CPU time per reading: on a busy machine, wall time (ns/op) waits for a CPU.
	cpu := time.Duration(after.Utime.Nano() + after.Stime.Nano() - before.Utime.Nano() - before.Stime.Nano())
	b.ReportMetric(float64(cpu.Microseconds())/float64(n), "cpu-µs/op")
}
