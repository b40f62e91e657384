package server

import (
	"cmp"
	"context"
	"github.com/tupper-dev/tupper/provider"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/tupper-dev/tupper/server/api"
	"github.com/tupper-dev/tupper/store"
)

// usageLoop samples every live sandbox's counters into the usage ledger every
// UsageInterval, while this server leads the store: one sampler per store.
func (s *Server) usageLoop(ctx context.Context) {
	t := time.NewTicker(s.cfg.UsageInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, err := s.lc.SampleAllUsage(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("sampling the sandboxes' usage", "err", err)
		}
		s.series.sweep(time.Now())
	}
}

// getUsage sums the usage ledger (GET /v1/usage?from=&to=&groupBy=).
func (s *Server) getUsage(w http.ResponseWriter, r *http.Request, _ *caller) {
	var f store.UsageFilter
	var err error
	if f.From, f.To, err = queryRange(r); err != nil {
		writeError(w, err)
		return
	}
	groupBy := r.URL.Query().Get("groupBy")
	groupOf, err := usageGrouping(groupBy)
	if err != nil {
		writeError(w, err)
		return
	}
	lines, err := s.st.Usage(r.Context(), f)
	if err != nil {
		writeError(w, err)
		return
	}
	out := api.UsageReport{GroupBy: groupBy, Groups: SumUsage(lines, groupOf, time.Now())}
	if !f.From.IsZero() {
		out.From = &f.From
	}
	if !f.To.IsZero() {
		out.To = &f.To
	}
	writeJSON(w, http.StatusOK, out)
}

// usageGrouping is the group of a ledger line that groupBy names.
func usageGrouping(groupBy string) (func(store.UsageRecord) string, error) {
	if name, ok := strings.CutPrefix(groupBy, "label:"); ok && name != "" {
		return func(u store.UsageRecord) string { return u.Labels[name] }, nil
	}
	switch groupBy {
	case "":
		return func(store.UsageRecord) string { return "total" }, nil
	case "key":
		return func(u store.UsageRecord) string { return u.APIKeyID }, nil
	case "template":
		return func(u store.UsageRecord) string { return u.Template }, nil
	case "runtime":
		return func(u store.UsageRecord) string { return u.Runtime }, nil
	case "node":
		return func(u store.UsageRecord) string { return u.Node }, nil
	case "sandbox":
		return func(u store.UsageRecord) string { return u.SandboxID }, nil
	}
	return nil, badRequest("groupBy=%q: use key, template, runtime, node, sandbox or label:NAME", groupBy)
}

// SumUsage sums ledger lines by group, largest CPU use first (then by name); now ends the
// lifetime of the sandboxes still running.
func SumUsage(lines []store.UsageRecord, groupOf func(store.UsageRecord) string, now time.Time) []api.UsageGroup {
	by := map[string]*api.UsageGroup{}
	for _, u := range lines {
		name := groupOf(u)
		g := by[name]
		if g == nil {
			g = &api.UsageGroup{Group: name}
			by[name] = g
		}
		g.Sandboxes++
		end := u.EndedAt
		if end.IsZero() {
			g.Running++
			end = now
		}
		g.SandboxSeconds += max(end.Sub(u.StartedAt).Seconds(), 0)
		g.CPUSeconds += float64(u.CPUUsec) / 1e6
		g.MemoryPeakBytes = max(g.MemoryPeakBytes, u.MemPeak)
		g.DiskPeakBytes = max(g.DiskPeakBytes, u.DiskPeak)
		g.NetRxBytes += u.NetRx
		g.NetTxBytes += u.NetTx
	}
	out := make([]api.UsageGroup, 0, len(by))
	for _, g := range by {
		g.SandboxSeconds = float64(int64(g.SandboxSeconds*1000)) / 1000
		g.CPUSeconds = float64(int64(g.CPUSeconds*1e6)) / 1e6
		out = append(out, *g)
	}
	slices.SortFunc(out, func(a, b api.UsageGroup) int {
		return cmp.Or(cmp.Compare(b.CPUSeconds, a.CPUSeconds), strings.Compare(a.Group, b.Group))
	})
	return out
}

// getMetrics is GET /v1/sandboxes/{id}/metrics?from=&to=: the sampler's readings of the
// sandbox (series). A running sandbox this server has no readings of (the leader of a store
// other servers share samples it) is read now: a series of one reading, which the next calls
// here extend. One the provider counts nothing of, or that ended long ago, has none.
func (s *Server) getMetrics(w http.ResponseWriter, r *http.Request, _ *caller) {
	id := r.PathValue("id")
	from, to, err := queryRange(r)
	if err != nil {
		writeError(w, err)
		return
	}
	samples, ok := s.series.get(id, from, to)
	if !ok {
		rec, err := s.st.Sandbox(r.Context(), id)
		if err != nil {
			writeError(w, err)
			return
		}
		if rec.State != provider.StatePaused {
			s.lc.SampleUsage(r.Context(), id)
			samples, ok = s.series.get(id, from, to)
		}
		if !ok {
			samples = []api.MetricsSample{}
		}
	}
	writeJSON(w, http.StatusOK, api.MetricsSeries{Samples: samples})
}

// queryRange is a request's from and to query parameters (queryTime; absent: zero).
func queryRange(r *http.Request) (from, to time.Time, err error) {
	if from, err = queryTime(r, "from"); err != nil {
		return
	}
	to, err = queryTime(r, "to")
	return
}
