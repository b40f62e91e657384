package e2b

import (
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/tupper-dev/tupper/provider"
)

// metrics is GET /sandboxes/{id}/metrics: the server's series of readings in the start and
// end of the query (unix seconds; Config.Series) when it has some; else one sample
// (Sandbox.Metrics), measured now, when now is inside them. A paused sandbox, or one on a
// provider that cannot measure it, has none.
func (s *Server) metrics(w http.ResponseWriter, r *http.Request, _ string) {
	q := r.URL.Query()
	now := time.Now()
	inRange := true
	var from, to time.Time
	if v := q.Get("start"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			writeError(w, provider.Errorf(provider.CodeInvalidArgument, "start must be unix seconds"))
			return
		}
		inRange = inRange && now.Unix() >= n
		from = time.Unix(n, 0)
	}
	if v := q.Get("end"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			writeError(w, provider.Errorf(provider.CodeInvalidArgument, "end must be unix seconds"))
			return
		}
		inRange = inRange && now.Unix() <= n+1
		to = time.Unix(n+1, 0)
	}
	id := r.PathValue("sandboxID")
	box, err := s.lookup(r.Context(), id)
	if err != nil {
		writeError(w, err)
		return
	}
	out := []sandboxMetric{}
	// The server's series, when it has readings in the range: E2B's SDKs chart them.
	if s.cfg.Series != nil {
		for _, m := range s.cfg.Series(id, from, to) {
			out = append(out, sandboxMetric{
				Timestamp: m.Time.UTC().Truncate(time.Second), TimestampUnix: m.Time.Unix(),
				CPUCount: max(int(math.Ceil(m.CPUs)), 1), CPUUsedPct: m.CPUUsedPct, MemUsed: m.MemUsedBytes, MemTotal: m.MemLimitBytes,
				DiskUsed: m.DiskUsedBytes, DiskTotal: m.DiskTotalBytes,
			})
		}
		if len(out) > 0 {
			writeJSON(w, http.StatusOK, out)
			return
		}
	}
	if inRange && box.Info.State != provider.StatePaused {
		m, err := box.Sandbox.Metrics(r.Context())
		switch {
		case err == nil:
			out = append(out, sandboxMetric{
				Timestamp: m.At.UTC().Truncate(time.Second), TimestampUnix: m.At.Unix(),
				CPUCount: m.CPUCount, CPUUsedPct: m.CPUUsedPct, MemUsed: m.MemUsed, MemTotal: m.MemTotal,
				MemCache: m.MemCache, DiskUsed: m.DiskUsed, DiskTotal: m.DiskTotal,
			})
		case provider.CodeOf(err) != provider.CodeUnsupported:
			writeError(w, e2bError(id, err))
			return
		}
	}
	writeJSON(w, http.StatusOK, out)
}
