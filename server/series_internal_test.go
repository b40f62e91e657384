package server

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/tupper-dev/tupper/provider"
)

// TestSeries: a sandbox's series keeps its last seriesPoints readings in order, computes CPU
// use between readings, selects by time, and is dropped seriesKeepAfter after its last one.
func TestSeries(t *testing.T) {
	var s series
	t0 := time.Now().Truncate(time.Millisecond)
	for i := range seriesPoints + 5 {
		// 1 CPU, busy half of every 10 s.
		s.add("sb", provider.Usage{At: t0.Add(time.Duration(i) * 10 * time.Second), CPUUsec: int64(i) * 5_000_000, CPUs: 1, MemUsed: int64(i)})
	}
	got, ok := s.get("sb", time.Time{}, time.Time{})
	if !ok || len(got) != seriesPoints {
		t.Fatalf("get = %d samples, %v; want %d", len(got), ok, seriesPoints)
	}
	if got[0].MemUsedBytes != 5 || got[len(got)-1].MemUsedBytes != seriesPoints+4 || got[0].CPUUsedPct != 0 || got[1].CPUUsedPct != 50 {
		t.Errorf("first %+v, second %+v, last %+v", got[0], got[1], got[len(got)-1])
	}
	if sel, _ := s.get("sb", t0.Add(600*time.Second), t0.Add(620*time.Second)); len(sel) != 3 {
		t.Errorf("get from 600 s to 620 s: %d samples; want 3", len(sel))
	}
	if _, ok := s.get("other", time.Time{}, time.Time{}); ok {
		t.Error("a sandbox never sampled has a series")
	}
	last := t0.Add(time.Duration(seriesPoints+4) * 10 * time.Second)
	s.sweep(last.Add(seriesKeepAfter - time.Second))
	if _, ok := s.get("sb", time.Time{}, time.Time{}); !ok {
		t.Error("dropped before seriesKeepAfter")
	}
	s.sweep(last.Add(seriesKeepAfter + time.Second))
	if _, ok := s.get("sb", time.Time{}, time.Time{}); ok {
		t.Error("kept past seriesKeepAfter")
	}
}

// BenchmarkSeriesMemory: the heap that full series of 1,000 sandboxes hold (the issue's
// "memory of the server with 1,000 sandboxes sampled"), reported as heap-MB.
func BenchmarkSeriesMemory(b *testing.B) {
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		var s series
		t0 := time.Now()
		for i := range seriesPoints {
			for id := range 1000 {
				s.add(fmt.Sprintf("sandbox%016d", id), provider.Usage{At: t0.Add(time.Duration(i) * 10 * time.Second), CPUUsec: int64(i)})
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/1e6, "heap-MB")
		runtime.KeepAlive(&s)
	}
}
