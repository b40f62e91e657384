//go:build linux

package server_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/server/servertest"
)

// TestCreateNetworkForms creates sandboxes through a real server on loopback with each form
// of "network": the SDK's own ("all", "none", {"allow": [...]}) and the object form, and
// looks at the interfaces inside the sandbox where the provider has a shell (local).
func TestCreateNetworkForms(t *testing.T) {
	prov := servertest.Provider(t, 23)
	srv := servertest.Start(t, prov, "")
	caps := prov.Capabilities()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()

	call := func(method, path, cred, body string) (int, []byte) {
		t.Helper()
		return callCtx(t, ctx, method, srv.URL+path, cred, body)
	}

	// interfaces creates a sandbox with network (JSON) and returns its interfaces other than
	// lo, or "" where the provider has no shell to look with.
	interfaces := func(network string) string {
		t.Helper()
		status, data := call("POST", "/v1/sandboxes", srv.Key, `{"network": `+network+`}`)
		if status != http.StatusCreated {
			t.Fatalf("network %s: status %d: %s", network, status, data)
		}
		var sb struct{ ID, Token string }
		if err := json.Unmarshal(data, &sb); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { callCtx(t, context.Background(), "DELETE", srv.URL+"/v1/sandboxes/"+sb.ID, srv.Key, "") })
		if !caps.Has(provider.CapShell) {
			return ""
		}
		status, data = call("POST", "/v1/sandboxes/"+sb.ID+"/run", sb.Token,
			`{"command": "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | grep -vx lo | tr '\\n' ' '"}`)
		var res struct{ Stdout string }
		if status != http.StatusOK || json.Unmarshal(data, &res) != nil {
			t.Fatalf("network %s: run: %d %s", network, status, data)
		}
		return strings.TrimSpace(res.Stdout)
	}

	// "none", as a string and as an object: loopback only.
	for _, none := range []string{`"none"`, `{"mode": "none"}`} {
		if got := interfaces(none); got != "" {
			t.Errorf("network %s: interfaces %q besides lo", none, got)
		}
	}
	// "all": an interface to the outside where the provider gives one.
	if got := interfaces(`"all"`); caps.Has(provider.CapNetworkAll) && caps.Has(provider.CapShell) && got == "" {
		t.Errorf(`network "all": no interface besides lo`)
	}

	// {"allow": [...]} is an allow list, never all: refused as unsupported by a provider that
	// cannot enforce one, created by one that can.
	for _, allow := range []string{`{"allow": ["example.com"]}`, `{"mode": "allow", "allow": ["example.com"]}`} {
		status, data := call("POST", "/v1/sandboxes", srv.Key, `{"network": `+allow+`}`)
		want := http.StatusCreated
		if !caps.Has(provider.CapNetworkPolicy) {
			want = http.StatusNotImplemented
		}
		if status != want {
			t.Errorf("network %s: status %d, want %d: %s", allow, status, want, data)
		}
		if status == http.StatusCreated {
			var sb struct{ ID string }
			_ = json.Unmarshal(data, &sb)
			call("DELETE", "/v1/sandboxes/"+sb.ID, srv.Key, "")
		}
	}

	// What is not a network policy is a bad request, and says why.
	type apiError struct{ Code, Message string }
	for body, why := range map[string]string{
		`{"network": "some"}`:                                   `network mode "some"`,
		`{"network": "allow"}`:                                  "neither an allow nor a deny list",
		`{"network": {"allow": []}}`:                            "neither an allow nor a deny list",
		`{"network": {"mode": "none", "allow": ["a.example"]}}`: "allow or deny list given with mode",
		`{"network": {"allowed": ["a.example"]}}`:               `unknown field "allowed"`,
		`{"network": 7}`:                                        `"network" is "all", "none"`,
	} {
		status, data := call("POST", "/v1/sandboxes", srv.Key, body)
		var e apiError
		_ = json.Unmarshal(data, &e)
		if status != http.StatusBadRequest || e.Code != "invalid_argument" || !strings.Contains(e.Message, why) {
			t.Errorf("%s: status %d %s, want 400 invalid_argument saying %s", body, status, data, why)
		}
	}
}

// callCtx sends body to url with cred and returns the status and the response body.
func callCtx(t *testing.T, ctx context.Context, method, url, cred, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+cred)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, data
}
