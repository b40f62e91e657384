package server

import (
	"strings"
	"testing"

	"github.com/tupper-dev/tupper/server/api"
)

// TestRunCodeBadInput sends POST /code what it must refuse before a cell runs; the cells
// themselves run in test/codeinterp, on the real template.
func TestRunCodeBadInput(t *testing.T) {
	e := newEnv(t)
	a := e.create(nil)
	b := e.create(nil)
	path := "/v1/sandboxes/" + a.ID + "/code"
	var ae api.Error
	e.want(400, &ae, "POST", path, a.Token, map[string]any{})
	if !strings.Contains(ae.Message, "code is empty") {
		t.Errorf("no code: %+v", ae)
	}
	e.want(400, &ae, "POST", path, a.Token, map[string]any{"code": "1", "language": "python", "contextId": "c1"})
	e.want(400, &ae, "POST", path, a.Token, map[string]any{"code": "1", "timeoutMs": -1})
	e.want(400, &ae, "POST", path, a.Token, map[string]any{"code": "1", "cell": 2})
	e.want(404, &ae, "POST", "/v1/sandboxes/sb_nope/code", e.key, map[string]any{"code": "1"})
	e.want(403, &ae, "POST", path, b.Token, map[string]any{"code": "1"})
	e.want(403, &ae, "GET", path+"/contexts", b.Token, nil)
	// A sandbox of another template has no code-interpreter server: the error says which
	// template has it (the memory provider has no ports at all: unsupported), before any
	// stream starts.
	for _, accept := range []string{"application/json", "application/x-ndjson"} {
		resp, data := e.do("POST", path, a.Token, map[string]any{"code": "1"}, "Accept", accept)
		if !strings.Contains(string(data), "code-interpreter template") && !strings.Contains(string(data), `"unsupported"`) ||
			resp.StatusCode < 500 || resp.Header.Get("Content-Type") != "application/json" {
			t.Errorf("%s, a sandbox without the server: %d %s", accept, resp.StatusCode, data)
		}
	}
}
