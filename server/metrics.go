package server

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/tupper-dev/tupper/internal/metrics"
	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/server/api"
)

// Operating the server: Prometheus metrics (Config.Metrics, served by MetricsHandler on a
// listener of their own and at GET /metrics with an API key) and Kubernetes' probes,
// /healthz and /readyz, which need no credential. docs/operations.md lists the metrics.

// execAPI maps the REST routes that run a command to the dialect label of
// tupper_exec_seconds; E2B's data plane and MCP's run_command record their own.
var execAPI = map[string]string{
	"POST /v1/sandboxes/{id}/run":  metrics.APIREST,
	"POST /v1/sandboxes/{id}/exec": metrics.APIREST,
}

// observeRequest records a request by its route pattern; a route that runs a command and
// answered 2xx also records its exec latency.
func (s *Server) observeRequest(route string, status int, d time.Duration) {
	m := s.cfg.Metrics
	if m == nil {
		return
	}
	m.ObserveRequest(route, status, d)
	if api, ok := execAPI[route]; ok && status/100 == 2 {
		m.ObserveExec(api, d)
	}
}

// MetricsHandler serves the metrics in Prometheus' text format with no credential, for a
// listener of its own (tupper serve --metrics-addr); nil when Config.Metrics is nil.
func (s *Server) MetricsHandler() http.Handler {
	if s.cfg.Metrics == nil {
		return nil
	}
	return s.cfg.Metrics.Handler()
}

// metricsRoute serves GET /metrics on the main listener, behind an API key.
func (s *Server) metricsRoute(w http.ResponseWriter, r *http.Request, _ *caller) {
	if s.cfg.Metrics == nil {
		writeError(w, provider.Errorf(provider.CodeNotFound, "this server collects no metrics (tupper serve --metrics=false)"))
		return
	}
	s.cfg.Metrics.Handler().ServeHTTP(w, r)
}

// metricsSource answers the gauges read at each scrape (metrics.Source).
type metricsSource struct{ s *Server }

func (m metricsSource) SandboxStates(ctx context.Context) (map[string]int, error) {
	recs, err := m.s.st.Sandboxes(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, r := range recs {
		out[string(r.State)]++
	}
	return out, nil
}

func (m metricsSource) Pool() (metrics.PoolStats, bool) {
	pr, ok := m.s.prov.(provider.PoolReporter)
	if !ok {
		return metrics.PoolStats{}, false
	}
	p, ok := pr.PoolStats()
	return metrics.PoolStats{Target: p.Target, Ready: p.Ready, Hits: p.Hits, Misses: p.Misses}, ok
}

func (m metricsSource) Outbox(ctx context.Context) (int, time.Time, error) {
	return m.s.st.Outbox(ctx)
}

// healthz is Kubernetes' liveness probe: the process serves HTTP. It checks nothing else,
// so that a store outage does not get the server restarted (readyz takes it out of
// rotation instead).
func (s *Server) healthz(w http.ResponseWriter, r *http.Request, _ *caller) {
	writeJSON(w, http.StatusOK, api.Health{OK: true})
}

// readyTimeout bounds each check of readyz.
const readyTimeout = 2 * time.Second

// readyz is Kubernetes' readiness probe: 200 when the store answers, the provider can
// create sandboxes and the warm pool (if any) has been full once since the server started,
// else 503; the body says which check failed. The pool need only have filled once: a burst
// of creates that empties it must not take the server out of rotation.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request, _ *caller) {
	ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
	defer cancel()
	out := api.Readiness{Ready: true, Checks: map[string]string{}}
	check := func(name string, err error) {
		if err != nil {
			out.Ready = false
			out.Checks[name] = provider.StripCredentials(provider.MessageOf(err))
			return
		}
		out.Checks[name] = "ok"
	}
	check("store", s.st.Ping(ctx))
	check("provider", s.prov.Available(ctx))
	if pr, ok := s.prov.(provider.PoolReporter); ok {
		if p, ok := pr.PoolStats(); ok {
			check("pool", s.poolFilled(p))
		}
	}
	status := http.StatusOK
	if !out.Ready {
		status = http.StatusServiceUnavailable
	}
	writeJSON(w, status, out)
}

// poolFilled latches once the pool has been full.
func (s *Server) poolFilled(p provider.PoolStats) error {
	if s.poolWasFull.Load() || p.Ready >= p.Target {
		s.poolWasFull.Store(true)
		return nil
	}
	return provider.Errorf(provider.CodeUnavailable, "the warm pool is filling: %d of %d sandboxes started", p.Ready, p.Target)
}

// e2bRoute names a request E2B's API served, for the log and the metrics: its control
// plane's route pattern, or the part of envd's API a data-plane request reached (a
// Connect service, never its method, which the client chooses).
func e2bRoute(r *http.Request) string {
	if r.Pattern != "" {
		return "e2b " + r.Pattern
	}
	p := r.URL.Path
	switch {
	case p == "/health", p == "/files":
		return "envd " + p
	case strings.HasPrefix(p, "/process.Process/"):
		return "envd process.Process"
	case strings.HasPrefix(p, "/filesystem.Filesystem/"):
		return "envd filesystem.Filesystem"
	}
	return "envd other"
}
