//go:build linux

// Package prometheus tests the server's metrics as an operator reads them: a real
// Prometheus (Debian's package) scrapes a real server's metrics listener on loopback while
// a known workload runs through the REST and E2B APIs, then PromQL over Prometheus' HTTP
// API must return that workload's counts and non-empty histograms.
package prometheus

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tupper-dev/tupper/internal/metrics"
	"github.com/tupper-dev/tupper/internal/testenv"
	"github.com/tupper-dev/tupper/providers/e2b"
	"github.com/tupper-dev/tupper/providers/local"
	"github.com/tupper-dev/tupper/sandbox"
	"github.com/tupper-dev/tupper/server"
	"github.com/tupper-dev/tupper/server/servertest"
)

// The workload, and so the counts PromQL must return.
const (
	restRuns = 3 // POST /run in the pooled sandbox
	e2bRuns  = 2 // commands.run through E2B's data plane
)

func TestPrometheusScrapesTheServer(t *testing.T) {
	promBin := testenv.RequireBinary(t, "prometheus")
	servertest.RequireLocal(t, "pooled creates and E2B's data plane need real sandboxes")
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	// A server over the local provider with a warm pool of one, its metrics on a listener
	// of their own, as tupper serve --pool 1 --metrics-addr does.
	prov := servertest.LocalWith(t, 91, func(c *local.Config) { c.Pool = 1 })
	srv := servertest.Start(t, prov, "", func(c *server.Config) {
		c.Metrics = metrics.New()
		c.AllowPrivateWebhooks = true // the receiver is on loopback
	})
	mln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ms := &http.Server{Handler: srv.Server.MetricsHandler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = ms.Serve(mln) }()
	t.Cleanup(func() { ms.Close() })

	prom := startPrometheus(ctx, t, promBin, mln.Addr().String())

	// Ready once the pool has filled (readyz), so that the first create is a hit.
	waitFor(t, 2*time.Minute, "GET /readyz to answer 200 (the pool filled)", func() bool {
		resp, err := http.Get(srv.URL + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})

	// A webhook for sandbox.created, answered 204.
	var delivered atomic.Int64
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		delivered.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer recv.Close()
	api := &client{t: t, base: srv.URL, key: srv.Key}
	api.do(ctx, 201, "POST", "/v1/webhooks", map[string]any{"url": recv.URL, "events": []string{server.EventCreated}}, nil)

	// REST: two creates of the pool's shape back to back (a hit, then a miss: the pool
	// waits before it refills), commands in the first, a snapshot and a fork of it, and a
	// sandbox with an egress allow list that asks for a name it does not allow.
	var a, b struct{ ID string }
	poolShape := map[string]any{"network": map[string]any{"mode": "none"}}
	api.do(ctx, 201, "POST", "/v1/sandboxes", poolShape, &a)
	api.do(ctx, 201, "POST", "/v1/sandboxes", poolShape, &b)
	for range restRuns {
		var res struct{ ExitCode int }
		api.do(ctx, 200, "POST", "/v1/sandboxes/"+a.ID+"/run", map[string]any{"command": "true"}, &res)
	}
	api.do(ctx, 201, "POST", "/v1/sandboxes/"+a.ID+"/snapshot", map[string]any{}, nil)
	var kids struct{ Sandboxes []struct{ ID string } }
	api.do(ctx, 201, "POST", "/v1/sandboxes/"+a.ID+"/fork", map[string]any{"n": 1}, &kids)
	var eg struct{ ID string }
	api.do(ctx, 201, "POST", "/v1/sandboxes", map[string]any{"network": map[string]any{"allow": []string{"allowed.test"}}}, &eg)
	api.do(ctx, 200, "POST", "/v1/sandboxes/"+eg.ID+"/run", map[string]any{"command": "getent hosts denied.test; true"}, nil)

	// E2B: a create and commands through its control plane and envd data plane.
	_, e2bKey, err := srv.Store.CreateE2BKey(ctx, "prometheus")
	if err != nil {
		t.Fatal(err)
	}
	ep, err := e2b.New(e2b.Config{APIKey: e2bKey, APIURL: srv.URL, SandboxURL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	box, err := sandbox.Create(ctx, ep, sandbox.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer box.Destroy(context.WithoutCancel(ctx))
	for range e2bRuns {
		if res, err := box.Run(ctx, "true", sandbox.RunOptions{}); err != nil || !res.OK {
			t.Fatalf("E2B run: %+v %v", res, err)
		}
	}
	ids := []string{a.ID, b.ID, eg.ID, box.ID}
	for _, k := range kids.Sandboxes {
		ids = append(ids, k.ID)
	}
	creates := 4 // a, b, eg and the E2B one; the fork's child is counted by the fork
	wantDelivered := creates + len(kids.Sandboxes)
	waitFor(t, time.Minute, fmt.Sprintf("%d webhook deliveries", wantDelivered), func() bool { return delivered.Load() >= int64(wantDelivered) })

	// Prometheus has scraped the end of the workload once the last counts show.
	q := func(expr string) float64 { return prom.value(ctx, expr) }
	waitFor(t, time.Minute, "Prometheus to scrape the workload", func() bool {
		return prom.has(ctx, `tupper_exec_seconds_count{api="e2b"}`, e2bRuns) &&
			prom.has(ctx, `sum(tupper_webhook_deliveries_total{result="delivered"})`, float64(wantDelivered)) &&
			prom.has(ctx, `sum(tupper_egress_total{kind="dns",result="denied"}) > 0`, -1)
	})
	for expr, want := range map[string]float64{
		`up{job="tupper"}`:                                                           1,
		`tupper_exec_seconds_count{api="rest"}`:                                      restRuns + 1,
		`tupper_exec_seconds_count{api="e2b"}`:                                       e2bRuns,
		`sum(tupper_sandbox_create_seconds_count)`:                                   float64(creates),
		`tupper_pool_target`:                                                         1,
		`tupper_http_requests_total{route="POST /v1/sandboxes",code="2xx"}`:          3,
		`tupper_http_requests_total{route="POST /v1/sandboxes/{id}/run",code="2xx"}`: restRuns + 1,
		`tupper_snapshot_seconds_count{kind="filesystem",result="ok"}`:               1,
		`sum(tupper_fork_seconds_count{result="ok"})`:                                1,
		`sum(tupper_webhook_deliveries_total{result="delivered"})`:                   float64(wantDelivered),
		`sum(tupper_sandboxes{state="running"})`:                                     float64(len(ids)),
	} {
		if got := q(expr); got != want {
			t.Errorf("%s = %v, want %v", expr, got, want)
		}
	}
	// a and b are the only creates of the pool's shape: the first a hit, the second a miss
	// unless the refill (100 ms after the hand-out, then a create) beat it.
	hits := q(`tupper_pool_hits_total`)
	if hits < 1 || hits+q(`tupper_pool_misses_total`) != 2 {
		t.Errorf("pool hits %v, misses %v: want 2 between them, at least one hit", hits, q(`tupper_pool_misses_total`))
	}
	if got := q(`sum(tupper_sandbox_create_seconds_count{pooled="true"})`); got != hits {
		t.Errorf("pooled creates %v, pool hits %v", got, hits)
	}
	for _, expr := range []string{
		`sum(tupper_egress_total{kind="dns",result="denied"})`,
		// Non-empty histograms: a median from their buckets.
		`histogram_quantile(0.5, sum by (le) (tupper_exec_seconds_bucket{api="rest"}))`,
		`histogram_quantile(0.5, sum by (le) (tupper_exec_seconds_bucket{api="e2b"}))`,
		`histogram_quantile(0.5, sum by (le) (tupper_sandbox_create_seconds_bucket))`,
		`histogram_quantile(0.5, sum by (le) (tupper_http_request_duration_seconds_bucket))`,
		`sum(tupper_store_query_seconds_count)`,
		`go_goroutines{job="tupper"}`,
		`process_resident_memory_bytes{job="tupper"}`,
	} {
		if got := q(expr); !(got > 0) {
			t.Errorf("%s = %v, want > 0", expr, got)
		}
	}
	if got := q(`tupper_webhook_outbox_pending`); got != 0 {
		t.Errorf("tupper_webhook_outbox_pending = %v after every delivery", got)
	}

	// Cardinality: no label value Prometheus stored names a sandbox.
	for _, name := range prom.strings(ctx, "/api/v1/labels") {
		for _, v := range prom.strings(ctx, "/api/v1/label/"+url.PathEscape(name)+"/values") {
			for _, id := range ids {
				if strings.Contains(v, id) {
					t.Errorf("label %s has the value %q, which names sandbox %s", name, v, id)
				}
			}
		}
	}
}

// promServer is a Prometheus the test started.
type promServer struct {
	t   *testing.T
	url string
}

// startPrometheus runs Prometheus on loopback with a temporary configuration that scrapes
// target every half second, and stops it when the test ends.
func startPrometheus(ctx context.Context, t *testing.T, bin, target string) *promServer {
	dir := t.TempDir()
	conf := filepath.Join(dir, "prometheus.yml")
	yml := fmt.Sprintf("global:\n  scrape_interval: 500ms\n  scrape_timeout: 400ms\nscrape_configs:\n  - job_name: tupper\n    static_configs:\n      - targets: ['%s']\n", target)
	if err := os.WriteFile(conf, []byte(yml), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := freePort(t)
	cmd := exec.Command(bin, "--config.file="+conf, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("prometheus:\n%s", logs.String())
		}
	})
	p := &promServer{t: t, url: "http://" + addr}
	waitFor(t, time.Minute, "Prometheus to be ready", func() bool {
		select {
		case <-exited:
			t.Fatalf("prometheus exited: %s", logs.String())
		default:
		}
		resp, err := http.Get(p.url + "/-/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	return p
}

// freePort returns a loopback address no one listens on now.
func freePort(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// get reads one answer of Prometheus' HTTP API into data.
func (p *promServer) get(ctx context.Context, path string, data any) {
	p.t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "GET", p.url+path, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		p.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var out struct {
		Status string          `json:"status"`
		Data   json.RawMessage `json:"data"`
		Error  string          `json:"error"`
	}
	if err := json.Unmarshal(body, &out); err != nil || out.Status != "success" {
		p.t.Fatalf("prometheus %s: %v %s", path, err, body)
	}
	if err := json.Unmarshal(out.Data, data); err != nil {
		p.t.Fatalf("prometheus %s: %v", path, err)
	}
}

// value evaluates a PromQL expression of one series (a sum, or one label set) now; NaN
// when it has no series.
func (p *promServer) value(ctx context.Context, expr string) float64 {
	p.t.Helper()
	var data struct {
		Result []struct {
			Value [2]any `json:"value"`
		} `json:"result"`
	}
	p.get(ctx, "/api/v1/query?query="+url.QueryEscape(expr), &data)
	switch len(data.Result) {
	case 0:
		return nan()
	case 1:
	default:
		p.t.Fatalf("%s has %d series, want one", expr, len(data.Result))
	}
	s, _ := data.Result[0].Value[1].(string)
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		p.t.Fatalf("%s = %q: %v", expr, s, err)
	}
	return v
}

// has reports whether expr is want now (any value, when want is -1).
func (p *promServer) has(ctx context.Context, expr string, want float64) bool {
	v := p.value(ctx, expr)
	return v == v && (want == -1 || v == want)
}

func (p *promServer) strings(ctx context.Context, path string) []string {
	var out []string
	p.get(ctx, path, &out)
	return out
}

func nan() float64 { z := 0.0; return z / z }

// client calls the server's REST API with its API key.
type client struct {
	t         *testing.T
	base, key string
}

func (c *client) do(ctx context.Context, want int, method, path string, body, out any) {
	c.t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequestWithContext(ctx, method, c.base+path, bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+c.key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		c.t.Fatalf("%s %s: %d, want %d: %s", method, path, resp.StatusCode, want, data)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			c.t.Fatalf("%s %s: %v: %s", method, path, err, data)
		}
	}
}

// waitFor polls cond until it holds, failing the test after limit.
func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(limit); !cond(); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", limit, what)
		}
	}
}
