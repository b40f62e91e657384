//go:build linux

package server_test

import (
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestServeMetricsFlags: tupper serve --metrics-addr serves the metrics with no key on a
// listener of their own, while the main listener wants one; --metrics=false collects none.
func TestServeMetricsFlags(t *testing.T) {
	get := func(url, key string) (int, string) {
		t.Helper()
		resp, body := send(t, "GET", url, key, "", nil)
		return resp.StatusCode, string(body)
	}
	home := t.TempDir()
	key := newKey(t, home)
	c := startServeArgs(t, home, []string{"--provider", "memory", "--metrics-addr", "127.0.0.1:0"})
	if err := c.waitServing(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`metrics on (http://\S+/metrics)`).FindStringSubmatch(c.logs())
	if m == nil {
		t.Fatalf("tupper serve did not say where its metrics are:\n%s", c.logs())
	}
	if code, body := get(m[1], ""); code != 200 || !strings.Contains(body, "# TYPE tupper_egress_total counter") {
		t.Errorf("GET %s without a key: %d %.300s", m[1], code, body)
	}
	if code, _ := get(c.url+"/metrics", ""); code != http.StatusUnauthorized {
		t.Errorf("GET /metrics of the main listener without a key: %d, want 401", code)
	}
	if code, body := get(c.url+"/metrics", key); code != 200 || !strings.Contains(body, "process_resident_memory_bytes") {
		t.Errorf("GET /metrics of the main listener with a key: %d %.300s", code, body)
	}
	for _, p := range []string{"/healthz", "/readyz"} {
		if code, body := get(c.url+p, ""); code != 200 {
			t.Errorf("GET %s: %d %s", p, code, body)
		}
	}

	home2 := t.TempDir()
	key2 := newKey(t, home2)
	off := startServeArgs(t, home2, []string{"--provider", "memory", "--metrics=false"})
	if err := off.waitServing(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(off.logs(), "metrics on") {
		t.Errorf("--metrics=false opened a metrics listener:\n%s", off.logs())
	}
	if code, _ := get(off.url+"/metrics", key2); code != http.StatusNotFound {
		t.Errorf("GET /metrics with --metrics=false: %d, want 404", code)
	}
}
