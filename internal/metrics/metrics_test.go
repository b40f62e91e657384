package metrics

import (
	"context"
	"errors"
	"io"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

type source struct{}

func (source) SandboxStates(context.Context) (map[string]int, error) {
	return map[string]int{"running": 2}, nil
}
func (source) Pool() (PoolStats, bool) {
	return PoolStats{Target: 2, Ready: 1, Hits: 3, Misses: 1}, true
}
func (source) Outbox(context.Context) (int, time.Time, error) {
	return 1, time.Now().Add(-time.Minute), nil
}

// exposition returns the text m serves.
func exposition(t *testing.T, m *Metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	return string(body)
}

// full is a Metrics with a value in every family.
func full(t *testing.T) (*Metrics, string) {
	m := New()
	m.Watch(source{})
	m.ObserveCreate("runc", "host", true, time.Millisecond)
	m.ObserveExec(APIREST, time.Millisecond)
	m.ObserveRequest("GET /v1/sandboxes", 200, time.Millisecond)
	m.ObserveSnapshot("filesystem", time.Second, nil)
	m.ObserveFork("full", time.Second, errors.New("x"))
	m.CountEgress("dns", false)
	m.CountDelivery(DeliveryRetry)
	m.ObserveStore("query", "sqlite", time.Microsecond)
	return m, exposition(t, m)
}

func families(text string) []string {
	var out []string
	for _, m := range regexp.MustCompile(`(?m)^# TYPE (\S+) `).FindAllStringSubmatch(text, -1) {
		out = append(out, m[1])
	}
	return out
}

// TestNilMeasuresNothing: every method of a nil *Metrics is a no-op (a server without
// metrics calls them all).
func TestNilMeasuresNothing(t *testing.T) {
	var m *Metrics
	m.ObserveCreate("", "", false, 0)
	m.ObserveExec(APIE2B, 0)
	m.ObserveRequest("", 0, 0)
	m.ObserveSnapshot("", 0, nil)
	m.ObserveFork("", 0, nil)
	m.CountEgress("", true)
	m.CountDelivery("")
	m.ObserveStore("", "", 0)
	m.Watch(source{})
}

func TestExposition(t *testing.T) {
	_, text := full(t)
	for _, want := range []string{
		`tupper_sandbox_create_seconds_count{pooled="true",runtime="runc",template="host"} 1`,
		`tupper_http_requests_total{code="2xx",route="GET /v1/sandboxes"} 1`,
		`tupper_fork_seconds_count{kind="full",result="error"} 1`,
		`tupper_sandboxes{state="running"} 2`,
		`tupper_pool_misses_total 1`,
		`tupper_webhook_outbox_pending 1`,
		`tupper_egress_total{kind="connect",result="allowed"} 0`,
		`tupper_webhook_deliveries_total{result="retry"} 1`,
	} {
		if !strings.Contains(text, want+"\n") {
			t.Errorf("no %s in:\n%s", want, text)
		}
	}
	if age := regexp.MustCompile(`(?m)^tupper_webhook_outbox_oldest_age_seconds (\S+)$`).FindStringSubmatch(text); age == nil || !strings.HasPrefix(age[1], "6") {
		t.Errorf("outbox age: %v (want about 60 s)", age)
	}
}

// TestDocsAndDashboard: docs/operations.md describes every family the server exports, and
// every metric the Grafana dashboard queries is one it exports.
func TestDocsAndDashboard(t *testing.T) {
	_, text := full(t)
	fams := families(text)
	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if strings.HasPrefix(f, "tupper_") && !strings.Contains(string(doc), "`"+f+"`") {
			t.Errorf("docs/operations.md does not describe %s", f)
		}
	}
	dash, err := os.ReadFile("../../deploy/grafana/tupper.json")
	if err != nil {
		t.Fatal(err)
	}
	used := regexp.MustCompile(`\b(?:tupper|go|process)_[a-z_]+`).FindAllString(string(dash), -1)
	if len(used) < 10 {
		t.Fatalf("the dashboard queries %d metrics", len(used))
	}
	for _, u := range used {
		base := u
		for _, suf := range []string{"_bucket", "_count", "_sum"} {
			base = strings.TrimSuffix(base, suf)
		}
		if !slices.Contains(fams, u) && !slices.Contains(fams, base) {
			t.Errorf("the dashboard queries %s, which the server does not export", u)
		}
	}
}
