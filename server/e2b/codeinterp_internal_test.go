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
		token        bool
		want         bool
	}{
		{"GET", "/health", 49999, false, true},
		{"GET", "/contexts", 49999, false, true},
		{"POST", "/contexts", 49999, false, true},
		{"DELETE", "/contexts/abc", 49999, false, true},
		{"POST", "/contexts/abc/restart", 49999, false, true},
		{"POST", "/execute", 49999, false, false},
		{"POST", "/execute/", 49999, false, false},
		{"GET", "/contexts/abc", 49999, false, false},
		{"PUT", "/contexts", 49999, false, false},
		{"POST", "/contexts/abc/execute", 49999, false, false},
		{"GET", "/contexts", 8080, false, false},
		{"GET", "/health", 49983, false, false},
		// With a token the server's rules check it.
		{"GET", "/contexts", 49999, true, false},
	} {
		r := httptest.NewRequest(c.method, "http://x"+c.path, nil)
		if c.token {
			r.Header.Set("X-Access-Token", "sbt_x")
		}
		if got := CodeInterpreterOpen(r, c.port); got != c.want {
			t.Errorf("%s %s port %d (token %v): open %v, want %v", c.method, c.path, c.port, c.token, got, c.want)
		}
	}
}

func TestAccessTokenCredential(t *testing.T) {
	r := httptest.NewRequest("POST", "http://x/execute", nil)
	r.Header.Set("X-Access-Token", "sbt_a")
	AccessTokenCredential(r)
	if r.Header.Get("Authorization") != "Bearer sbt_a" || r.Header.Get("X-Access-Token") != "" {
		t.Errorf("headers after: %v", r.Header)
	}
	// A credential of its own wins; the token still goes.
	r = httptest.NewRequest("POST", "http://x/execute", nil)
	r.Header.Set("X-Access-Token", "sbt_a")
	r.Header.Set("X-API-Key", "e2b_k")
	AccessTokenCredential(r)
	if r.Header.Get("Authorization") != "" || r.Header.Get("X-Access-Token") != "" {
		t.Errorf("headers after: %v", r.Header)
	}
}
