package store

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tupper-dev/tupper/internal/testenv"
)

// TestUsageLedger: a line is made from the sandbox's record, samples only raise its
// figures, its end comes from the record's, it outlives a reopen, and From/To select the
// sandboxes that lived in the window.
func TestUsageLedger(t *testing.T) {
	eachStore(t, func(t *testing.T, spec string) {
		ctx := context.Background()
		s := open(t, spec)
		k, _, err := s.CreateKey(ctx, "ops")
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
		for _, id := range []string{"sbA", "sbB"} {
			if err := s.PutSandbox(ctx, Sandbox{ID: id, Provider: "local", APIKeyID: k.ID, Labels: map[string]string{"team": "x"}, CreatedAt: start}, Hash(NewToken())); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.RecordUsage(ctx,
			UsageSample{SandboxID: "sbA", Template: "base", Runtime: "runc", Node: "n1", At: time.Now(), CPUUsec: 2_000_000, MemPeak: 100, DiskUsed: 50, NetRx: 10, NetTx: 20},
			UsageSample{SandboxID: "sbNone", CPUUsec: 5}, // no record: nothing written
		); err != nil {
			t.Fatal(err)
		}
		// A later sample with lower figures (another server's, or a counter that restarted)
		// lowers nothing, and an empty template keeps the line's.
		if err := s.RecordUsage(ctx, UsageSample{SandboxID: "sbA", At: time.Now(), CPUUsec: 1, MemPeak: 300, DiskUsed: 10}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.MarkDestroyed(ctx, "sbA", End{Reason: EndDestroyed, By: k.ID}); err != nil {
			t.Fatal(err)
		}
		if err := s.EndUsage(ctx, "sbA", &UsageSample{At: time.Now(), CPUUsec: 2_500_000, NetTx: 30}); err != nil {
			t.Fatal(err)
		}
		// sbB was never sampled: its end makes its line.
		if _, err := s.MarkDestroyed(ctx, "sbB", End{Reason: EndTimeout}); err != nil {
			t.Fatal(err)
		}
		if err := s.EndUsage(ctx, "sbB", nil); err != nil {
			t.Fatal(err)
		}
		s.Close()
		s = open(t, spec)
		got, err := s.Usage(ctx, UsageFilter{})
		if err != nil || len(got) != 2 {
			t.Fatalf("Usage = %+v, %v; want 2 lines", got, err)
		}
		a, b := got[0], got[1]
		if a.SandboxID != "sbA" {
			a, b = b, a
		}
		if a.APIKeyID != k.ID || a.Labels["team"] != "x" || a.Template != "base" || a.Runtime != "runc" || a.Node != "n1" ||
			!a.StartedAt.Equal(start) || a.EndedAt.IsZero() || a.EndReason != EndDestroyed ||
			a.CPUUsec != 2_500_000 || a.MemPeak != 300 || a.DiskPeak != 50 || a.NetRx != 10 || a.NetTx != 30 {
			t.Errorf("sbA's line = %+v", a)
		}
		if b.SandboxID != "sbB" || b.EndReason != EndTimeout || b.EndedAt.IsZero() || b.CPUUsec != 0 || !b.SampledAt.IsZero() {
			t.Errorf("sbB's line = %+v", b)
		}
		for _, c := range []struct {
			f    UsageFilter
			want int
		}{
			{UsageFilter{From: time.Now().Add(-time.Minute)}, 2},
			{UsageFilter{From: time.Now().Add(time.Minute)}, 0},
			{UsageFilter{To: start}, 0},
			{UsageFilter{To: start.Add(time.Millisecond)}, 2},
		} {
			if got, err := s.Usage(ctx, c.f); err != nil || len(got) != c.want {
				t.Errorf("Usage(%+v) = %d lines, %v; want %d", c.f, len(got), err, c.want)
			}
		}
	})
}

// BenchmarkRecordUsage: one sampler pass over 1,000 live sandboxes (one transaction), on
// each database.
func BenchmarkRecordUsage(b *testing.B) {
	for _, db := range []string{"sqlite", "postgres"} {
		b.Run(db, func(b *testing.B) {
			ctx := context.Background()
			spec := b.TempDir()
			if db == "postgres" {
				spec = testenv.PostgresDB(b)
			}
			s := open(b, spec)
			samples := make([]UsageSample, 1000)
			for i := range samples {
				id := fmt.Sprintf("sb%04d", i)
				if err := s.PutSandbox(ctx, Sandbox{ID: id, Provider: "local", CreatedAt: time.Now()}, Hash(NewToken())); err != nil {
					b.Fatal(err)
				}
				samples[i] = UsageSample{SandboxID: id, Node: "n1"}
			}
			n := int64(0)
			for b.Loop() {
				n++
				for i := range samples {
					samples[i].At, samples[i].CPUUsec, samples[i].MemPeak = time.Now(), n*1000, n
				}
				if err := s.RecordUsage(ctx, samples...); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
