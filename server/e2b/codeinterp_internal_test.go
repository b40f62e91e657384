package e2b

import (
	"net/http/httptest"
	"testing"
)

// The requests of @e2b/code-interpreter 2.8.0 without a credential are served on the
// sandbox's id; nothing that runs code is, on any port.
func TestCodeInterpreterOpen(t *testing.T) {
	for _, c := range []struct {
		method, path string
		port         int
		want         bool
	}{
		{"GET", "/health", 49999, true},
		{"GET", "/contexts", 49999, true},
		{"POST", "/contexts", 49999, true},
		{"DELETE", "/contexts/abc", 49999, true},
		{"POST", "/contexts/abc/restart", 49999, true},
		{"POST", "/execute", 49999, false},
		{"POST", "/execute/", 49999, false},
		{"GET", "/contexts/abc", 49999, false},
		{"PUT", "/contexts", 49999, false},
		{"POST", "/contexts/abc/execute", 49999, false},
		{"GET", "/contexts", 8080, false},
		{"GET", "/health", 49983, false},
	} {
		r := httptest.NewRequest(c.method, "http://x"+c.path, nil)
		if got := CodeInterpreterOpen(r, c.port); got != c.want {
			t.Errorf("%s %s port %d open %v, want %v", c.method, c.path, c.port, got, c.want)
		}
	}
}
