package server

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/tupper-dev/tupper/server/api"
)

// TestAuthMatrix sends every authenticated route no credential, a malformed one, a revoked
// key and the token of another sandbox, and checks each is refused (401 or 403) before the
// handler runs; and that a sandbox token cannot reach account routes.
func TestAuthMatrix(t *testing.T) {
	e := newEnv(t)
	a := e.create(nil)
	b := e.create(nil)
	_, revoked, err := e.st.CreateKey(context.Background(), "old")
	if err != nil {
		t.Fatal(err)
	}
	keys, _ := e.st.Keys(context.Background())
	for _, k := range keys {
		if k.Name == "old" {
			if _, err := e.st.RevokeKey(context.Background(), k.ID); err != nil {
				t.Fatal(err)
			}
		}
	}
	fill := strings.NewReplacer("{id}", a.ID, "{name}", "p1", "{port}", "8080", "{path...}", "x", "{webhook}", "wh_x", "{sig}", "x.y", "{context}", "c1")
	checked := 0
	for _, rt := range e.srv.table() {
		if rt.Scope == scopePublic {
			continue
		}
		method := rt.Method
		if method == "" {
			method = "GET"
		}
		path := fill.Replace(rt.Path)
		name := method + " " + rt.Path
		cases := []struct {
			what   string
			cred   string
			header string
			want   int
		}{
			{"no credential", "", "", 401},
			{"malformed credential", "hunter2", "", 401},
			{"unknown key", "ak_0000000000000000000000000000000000000000", "", 401},
			{"revoked key", revoked, "", 401},
			{"revoked key in X-API-Key", "", revoked, 401},
			{"another sandbox's token", b.Token, "", 403},
		}
		if rt.Scope == scopeAny {
			cases = cases[:5]
		}
		for _, c := range cases {
			var hdr []string
			if c.header != "" {
				hdr = []string{"X-API-Key", c.header}
			}
			resp, data := e.do(method, path, c.cred, nil, hdr...)
			if resp.StatusCode != c.want {
				t.Errorf("%s with %s: status %d, want %d: %s", name, c.what, resp.StatusCode, c.want, data)
			}
			if c.want == 401 && resp.Header.Get("WWW-Authenticate") == "" {
				t.Errorf("%s with %s: 401 without WWW-Authenticate", name, c.what)
			}
		}
		if rt.Scope == scopeAccount {
			// Not even a sandbox's own token reaches account routes.
			resp, data := e.do(method, path, a.Token, nil)
			if resp.StatusCode != http.StatusForbidden {
				t.Errorf("%s with a sandbox token: status %d, want 403: %s", name, resp.StatusCode, data)
			}
		}
		checked++
	}
	if checked < 50 {
		t.Fatalf("checked only %d routes", checked)
	}
	// The right token works on its own sandbox, and the key on any.
	e.want(200, nil, "GET", "/v1/sandboxes/"+a.ID, a.Token, nil)
	e.want(200, nil, "GET", "/v1/sandboxes/"+b.ID, e.key, nil)
	e.want(200, nil, "GET", "/v1/info", a.Token, nil)
	e.want(200, nil, "GET", "/v1/health", "", nil)
	e.want(200, nil, "GET", "/v1/openapi.json", "", nil)
	resp, _ := e.do("GET", "/v1/sandboxes/"+a.ID, "", nil, "X-API-Key", e.key)
	if resp.StatusCode != 200 {
		t.Fatalf("X-API-Key: status %d", resp.StatusCode)
	}
}

// TestNoCredentialsInLogs captures the server's log while keys, tokens, webhook secrets,
// signed URLs and secrets pass through it, and checks none of them appears.
func TestNoCredentialsInLogs(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.AllowPrivateWebhooks = true })
	sb := e.create(map[string]any{"secrets": map[string]string{"API_TOKEN": "s3cr3t-value-123"}})
	var wh api.Webhook
	e.want(201, &wh, "POST", "/v1/webhooks", e.key, map[string]any{"url": "http://127.0.0.1:1/hook"})
	var signed struct{ URL string }
	e.want(200, &signed, "POST", "/v1/sandboxes/"+sb.ID+"/files/presign", sb.Token, map[string]string{"path": "a.txt", "method": "PUT"})
	resp, err := http.NewRequest("PUT", signed.URL, strings.NewReader("data"))
	if err != nil {
		t.Fatal(err)
	}
	r, err := http.DefaultClient.Do(resp)
	if err != nil || r.StatusCode != 204 {
		t.Fatalf("signed upload: %v %v", r, err)
	}
	r.Body.Close()
	e.do("POST", "/v1/sandboxes/"+sb.ID+"/run", sb.Token, map[string]any{"command": "echo $API_TOKEN"})
	e.do("GET", "/v1/sandboxes/"+sb.ID, "ak_wrong0000000000000000000000000000000000", nil)
	e.do("GET", "/v1/sandboxes/"+sb.ID+"?token="+sb.Token, "", nil)
	e.do("POST", "/v1/sandboxes/"+sb.ID+"/git/clone", sb.Token, map[string]any{"url": "https://x:" + e.key + "@example.invalid/r.git"})
	// A bound secret, which this server's provider (memory) refuses: nor in the answer.
	resp2, body := e.do("POST", "/v1/sandboxes", e.key, map[string]any{"secrets": map[string]any{"GH": map[string]any{"value": "b0und-value-456", "hosts": []string{"api.example.com"}}}})
	if resp2.StatusCode != http.StatusNotImplemented || !strings.Contains(string(body), "bound secrets") || strings.Contains(string(body), "b0und-value-456") {
		t.Errorf("create with a bound secret on memory: %d %s, want 501 naming bound secrets, without the value", resp2.StatusCode, body)
	}
	logs := e.logs.String()
	if !strings.Contains(logs, "route=") {
		t.Fatalf("no request lines logged: %q", logs)
	}
	sig := signed.URL[strings.Index(signed.URL, "sig=")+4:]
	for what, secret := range map[string]string{
		"api key": e.key, "sandbox token": sb.Token, "webhook secret": wh.Secret,
		"url signature": sig, "sandbox secret": "s3cr3t-value-123", "wrong key": "ak_wrong00000000",
		"bound secret": "b0und-value-456",
	} {
		if strings.Contains(logs, secret) {
			t.Errorf("the log holds the %s", what)
		}
	}
}
