package server

import (
	"net/http"
	"strings"
	"testing"
)

// The terminal route answers JSON errors before any upgrade: bad sizes are 400, an unknown
// sandbox 404, a provider without terminals (memory) the unsupported error, and a request
// that is not a WebSocket upgrade 400.
func TestTerminalErrors(t *testing.T) {
	e := newEnv(t)
	sb := e.create(nil)
	ws := []string{"Upgrade", "websocket", "Connection", "Upgrade", "Sec-WebSocket-Version", "13", "Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="}
	for _, q := range []string{"cols=0", "rows=0", "cols=-1", "cols=1001", "rows=100000", "cols=abc", "rows=1.5"} {
		resp, data := e.do("GET", "/v1/sandboxes/"+sb.ID+"/terminal?"+q, sb.Token, nil, ws...)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(data), `"code":"invalid_argument"`) {
			t.Errorf("?%s: %d %s, want 400 invalid_argument", q, resp.StatusCode, data)
		}
	}
	resp, data := e.do("GET", "/v1/sandboxes/sb_nope/terminal", e.key, nil, ws...)
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(data), `"code":"not_found"`) {
		t.Errorf("unknown sandbox: %d %s, want 404", resp.StatusCode, data)
	}
	resp, data = e.do("GET", "/v1/sandboxes/"+sb.ID+"/terminal?cols=80&rows=24", sb.Token, nil, ws...)
	if resp.StatusCode != http.StatusNotImplemented || !strings.Contains(string(data), `"code":"unsupported"`) {
		t.Errorf("memory provider: %d %s, want 501 unsupported", resp.StatusCode, data)
	}
	var info struct{ Capabilities []string }
	e.want(200, &info, "GET", "/v1/info", e.key, nil)
	for _, c := range info.Capabilities {
		if c == "terminal" {
			t.Errorf("the memory provider's server reports the terminal capability")
		}
	}
}
