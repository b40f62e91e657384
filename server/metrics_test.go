package server

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/tupper-dev/tupper/internal/metrics"
	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/providers/memory"
	"github.com/tupper-dev/tupper/server/api"
)

// scrape reads /metrics of the main listener with cred and returns its status and text.
func (e *env) scrape(cred string) (int, string) {
	e.t.Helper()
	resp, body := e.do("GET", "/metrics", cred, nil)
	return resp.StatusCode, string(body)
}

// sample returns the value of the series line that starts with series (name and labels as
// Prometheus prints them), or -1 when there is none.
func sample(t *testing.T, text, series string) float64 {
	t.Helper()
	for line := range strings.Lines(text) {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return v
		}
	}
	return -1
}

// TestMetricsEndpoint: on the main listener, /metrics needs an API key (a sandbox token is
// refused); after a create and two runs, the counts are there by route pattern and API
// dialect, the gauges of the store are read, and no sandbox id, token or command appears.
func TestMetricsEndpoint(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Metrics = metrics.New() })
	sb := e.create(map[string]any{})
	const command = "echo metrics-secret-command"
	for range 2 {
		e.want(200, nil, "POST", "/v1/sandboxes/"+sb.ID+"/run", sb.Token, map[string]any{"command": command})
	}
	e.want(404, nil, "GET", "/v1/sandboxes/sb-that-does-not-exist", e.key, nil)

	if code, _ := e.scrape(""); code != http.StatusUnauthorized {
		t.Errorf("GET /metrics without a key: %d, want 401", code)
	}
	if code, _ := e.scrape(sb.Token); code != http.StatusForbidden {
		t.Errorf("GET /metrics with a sandbox token: %d, want 403", code)
	}
	code, text := e.scrape(e.key)
	if code != 200 {
		t.Fatalf("GET /metrics with a key: %d: %s", code, text)
	}
	for series, want := range map[string]float64{
		`tupper_exec_seconds_count{api="rest"}`:                                                   2,
		`tupper_http_requests_total{code="2xx",route="POST /v1/sandboxes/{id}/run"}`:              2,
		`tupper_http_requests_total{code="2xx",route="POST /v1/sandboxes"}`:                       1,
		`tupper_http_requests_total{code="4xx",route="GET /v1/sandboxes/{id}"}`:                   1,
		`tupper_sandbox_create_seconds_count{pooled="false",runtime="memory",template="default"}`: 1,
		`tupper_sandboxes{state="running"}`:                                                       1,
		`tupper_webhook_outbox_pending`:                                                           0,
		`tupper_egress_total{kind="dns",result="denied"}`:                                         0,
	} {
		if got := sample(t, text, series); got != want {
			t.Errorf("%s = %v, want %v\n%s", series, got, want, grep(text, series[:strings.IndexAny(series+"{", "{")]))
		}
	}
	if got := sample(t, text, `tupper_store_query_seconds_count{db="sqlite",op="query"}`); got <= 0 && !strings.Contains(text, `db="postgres"`) {
		t.Errorf("no store queries timed")
	}
	for _, name := range []string{"go_goroutines", "process_resident_memory_bytes"} {
		if !regexp.MustCompile(`(?m)^` + name + ` `).MatchString(text) {
			t.Errorf("%s is missing: the Go and process collectors are not registered", name)
		}
	}
	for _, secret := range []string{sb.ID, sb.Token, e.key, "metrics-secret-command", "sb-that-does-not-exist"} {
		if strings.Contains(text, secret) {
			t.Errorf("the metrics contain %q", secret)
		}
	}
}

// TestMetricsTemplateOfSnapshot: a sandbox made from a snapshot is counted under the
// template "snapshot", never under the snapshot's id.
func TestMetricsTemplateOfSnapshot(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Metrics = metrics.New() })
	sb := e.create(map[string]any{})
	var snap api.SnapshotTaken
	e.want(201, &snap, "POST", "/v1/sandboxes/"+sb.ID+"/snapshot", e.key, map[string]any{})
	e.create(map[string]any{"from": snap.ID})
	_, text := e.scrape(e.key)
	if strings.Contains(text, snap.ID) {
		t.Errorf("the snapshot's id %q is in the metrics", snap.ID)
	}
	if got := sample(t, text, `tupper_sandbox_create_seconds_count{pooled="false",runtime="memory",template="snapshot"}`); got != 1 {
		t.Errorf("creates from a snapshot = %v, want 1:\n%s", got, grep(text, "tupper_sandbox_create_seconds_count"))
	}
	if got := sample(t, text, `tupper_snapshot_seconds_count{kind="filesystem",result="ok"}`); got != 1 {
		t.Errorf("snapshots = %v, want 1", got)
	}
}

func grep(text, prefix string) string {
	var b strings.Builder
	for line := range strings.Lines(text) {
		if strings.HasPrefix(line, prefix) {
			b.WriteString(line)
		}
	}
	return b.String()
}

// TestMetricsOff: a server without Metrics answers /metrics 404, even with a key.
func TestMetricsOff(t *testing.T) {
	e := newEnv(t)
	if code, text := e.scrape(e.key); code != http.StatusNotFound {
		t.Fatalf("GET /metrics of a server without metrics: %d: %s", code, text)
	}
	if e.srv.MetricsHandler() != nil {
		t.Fatal("MetricsHandler of a server without metrics is not nil")
	}
}

// TestMetricsHandlerNeedsNoKey: the handler of the metrics listener serves without a
// credential (its address is loopback by default; docs/operations.md).
func TestMetricsHandlerNeedsNoKey(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Metrics = metrics.New() })
	ts := httptest.NewServer(e.srv.MetricsHandler())
	defer ts.Close()
	resp, err := http.Get(ts.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), "tupper_http_requests_total") && !strings.Contains(string(body), "# HELP tupper_") {
		t.Fatalf("metrics listener: %d: %.300s", resp.StatusCode, body)
	}
}

// pooled is a provider with a warm pool of the given state (provider.PoolReporter).
type pooled struct {
	provider.Provider
	ready atomic.Int64 // of a target of 2
}

func (p *pooled) PoolStats() (provider.PoolStats, bool) {
	return provider.PoolStats{Target: 2, Ready: int(p.ready.Load())}, true
}

// TestProbes: /healthz and /readyz need no credential; /readyz is 503, naming the check,
// while the pool has not filled once, and 200 after (and stays so when the pool drains);
// it is 503 again when the store stops answering, while /healthz stays 200.
func TestProbes(t *testing.T) {
	prov := &pooled{Provider: memory.New()}
	prov.ready.Store(1)
	e := newEnv(t, func(c *Config) { c.Provider = prov })
	ready := func(want int) api.Readiness {
		t.Helper()
		var r api.Readiness
		resp, body := e.do("GET", "/readyz", "", nil)
		if resp.StatusCode != want {
			t.Fatalf("GET /readyz: %d, want %d: %s", resp.StatusCode, want, body)
		}
		if err := json.Unmarshal(body, &r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	e.want(200, nil, "GET", "/healthz", "", nil)
	r := ready(503)
	if r.Ready || r.Checks["store"] != "ok" || r.Checks["provider"] != "ok" || !strings.Contains(r.Checks["pool"], "1 of 2") {
		t.Fatalf("readiness while the pool fills: %+v", r)
	}
	prov.ready.Store(2)
	if r := ready(200); !r.Ready || r.Checks["pool"] != "ok" {
		t.Fatalf("readiness with the pool full: %+v", r)
	}
	prov.ready.Store(0) // a burst of creates drained it
	ready(200)

	if err := e.st.Close(); err != nil {
		t.Fatal(err)
	}
	r = ready(503)
	if r.Checks["store"] == "ok" || r.Checks["provider"] != "ok" {
		t.Fatalf("readiness with the store closed: %+v", r)
	}
	e.want(200, nil, "GET", "/healthz", "", nil)
}
