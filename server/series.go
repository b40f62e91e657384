package server

import (
	"sync"
	"time"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/server/api"
)

// series keeps the usage sampler's readings of each sandbox in memory, for
// GET /v1/sandboxes/{id}/metrics: the last seriesPoints of a live sandbox, and of one that
// ended (its readings stopped) for seriesKeepAfter more. Only the server that samples (the
// store's leader) has them; they do not survive a restart.
type series struct {
	mu sync.Mutex
	m  map[string]*ring
}

const (
	seriesPoints    = 60              // 10 min at the default 10 s interval
	seriesKeepAfter = 5 * time.Minute // how long an ended sandbox's series stays
)

// point is one reading, kept small: about 90 bytes, so 60 of each of 1,000 sandboxes are
// about 5 MB.
type point struct {
	at                                  int64 // unix ms
	cpuUsec, memUsed, memLimit, memPeak int64
	diskUsed, diskTotal, netRx, netTx   int64
	cpus                                float32
}

type ring struct {
	pts      []point // in order of arrival, the oldest overwritten
	next     int
	lastSeen time.Time // when the sampler last read it
}

// add records u as sandbox id's latest reading.
func (s *series) add(id string, u provider.Usage) {
	p := point{at: u.At.UnixMilli(), cpuUsec: u.CPUUsec, memUsed: u.MemUsed, memLimit: u.MemLimit, memPeak: u.MemPeak,
		diskUsed: u.DiskUsed, diskTotal: u.DiskTotal, netRx: u.NetRx, netTx: u.NetTx, cpus: float32(u.CPUs)}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]*ring{}
	}
	r := s.m[id]
	if r == nil {
		r = &ring{}
		s.m[id] = r
	}
	r.lastSeen = u.At
	if len(r.pts) < seriesPoints {
		r.pts = append(r.pts, p)
		return
	}
	r.pts[r.next] = p
	r.next = (r.next + 1) % seriesPoints
}

// sweep drops the series of sandboxes the sampler has not read for seriesKeepAfter.
func (s *series) sweep(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, r := range s.m {
		if now.Sub(r.lastSeen) > seriesKeepAfter {
			delete(s.m, id)
		}
	}
}

// get returns sandbox id's readings in [from, to] (zero: no bound), oldest first, each with
// its CPU use since the one before, and whether the server has a series of it at all.
func (s *series) get(id string, from, to time.Time) ([]api.MetricsSample, bool) {
	s.mu.Lock()
	r := s.m[id]
	var pts []point
	if r != nil {
		pts = append(append(pts, r.pts[r.next:]...), r.pts[:r.next]...)
	}
	s.mu.Unlock()
	if r == nil {
		return nil, false
	}
	out := []api.MetricsSample{}
	for i, p := range pts {
		at := time.UnixMilli(p.at).UTC()
		if !from.IsZero() && at.Before(from) || !to.IsZero() && at.After(to) {
			continue
		}
		m := api.MetricsSample{Time: at, CPUs: float64(p.cpus), CPUSeconds: float64(p.cpuUsec) / 1e6,
			MemUsedBytes: p.memUsed, MemLimitBytes: p.memLimit, MemPeakBytes: p.memPeak,
			DiskUsedBytes: p.diskUsed, DiskTotalBytes: p.diskTotal, NetRxBytes: p.netRx, NetTxBytes: p.netTx}
		if i > 0 && p.cpus > 0 && p.at > pts[i-1].at && p.cpuUsec >= pts[i-1].cpuUsec {
			pct := float64(p.cpuUsec-pts[i-1].cpuUsec) / 1e3 / float64(p.at-pts[i-1].at) / float64(p.cpus) * 100
			m.CPUUsedPct = float64(int64(min(pct, 100)*100)) / 100
		}
		out = append(out, m)
	}
	return out, true
}
