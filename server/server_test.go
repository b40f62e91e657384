package server

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tupper-dev/tupper/internal/syncbuf"
	"github.com/tupper-dev/tupper/internal/testenv"
	"github.com/tupper-dev/tupper/providers/memory"
	"github.com/tupper-dev/tupper/providers/remote"
	"github.com/tupper-dev/tupper/server/api"
	"github.com/tupper-dev/tupper/store"
)

type env struct {
	t    *testing.T
	srv  *Server
	ts   *httptest.Server
	st   *store.Store
	key  string
	logs *syncbuf.Buffer
}

func newEnv(t *testing.T, mod ...func(*Config)) *env {
	t.Helper()
	return newEnvLoop(t, true, mod...)
}

// newEnvLoop is newEnv with the server's background loops (Run: reconciling, reaping,
// webhooks) started or not; a test that calls Reconcile itself must not race the loop's.
func newEnvLoop(t *testing.T, loop bool, mod ...func(*Config)) *env {
	t.Helper()
	ctx := context.Background()
	st, err := store.OpenURL(ctx, testenv.StoreSpec(t, t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncbuf.Buffer{}
	ts := httptest.NewUnstartedServer(nil)
	cfg := Config{
		Provider: memory.New(), Store: st, BaseURL: "http://" + ts.Listener.Addr().String(),
		Logger:         slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		WebhookBackoff: 50 * time.Millisecond, ReapInterval: time.Hour,
	}
	for _, m := range mod {
		m(&cfg)
	}
	srv, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts.Config = srv.HTTPServer()
	ts.Start()
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	if loop {
		go func() { srv.Run(rctx); close(done) }()
	} else {
		close(done)
	}
	t.Cleanup(func() {
		cancel()
		<-done
		ts.Close()
		srv.Close()
		st.Close()
	})
	_, key, err := st.CreateKey(ctx, "test")
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, srv: srv, ts: ts, st: st, key: key, logs: logs}
}

// do sends a request; body is JSON-encoded unless it is a string or []byte.
func (e *env) do(method, path, cred string, body any, hdr ...string) (*http.Response, []byte) {
	e.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		data, _ := json.Marshal(b)
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, e.ts.URL+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	if cred != "" {
		req.Header.Set("Authorization", "Bearer "+cred)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i] == "Host" {
			req.Host = hdr[i+1]
		}
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := e.ts.Client().Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp, data
}

// want checks the status and decodes the body into out (if not nil).
func (e *env) want(status int, out any, method, path, cred string, body any, hdr ...string) []byte {
	e.t.Helper()
	resp, data := e.do(method, path, cred, body, hdr...)
	if resp.StatusCode != status {
		e.t.Fatalf("%s %s: status %d, want %d: %s", method, path, resp.StatusCode, status, data)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			e.t.Fatalf("%s %s: %v: %s", method, path, err, data)
		}
	}
	return data
}

func (e *env) create(body any) api.Sandbox {
	e.t.Helper()
	var sb api.Sandbox
	e.want(201, &sb, "POST", "/v1/sandboxes", e.key, body)
	if sb.ID == "" || !strings.HasPrefix(sb.Token, "sbt_") {
		e.t.Fatalf("create returned %+v", sb)
	}
	return sb
}

func TestCreateRunDelete(t *testing.T) {
	e := newEnv(t)
	sb := e.create(map[string]any{"labels": map[string]string{"team": "a"}, "env": map[string]string{"GREETING": "hi"}})
	if sb.Labels["team"] != "a" || sb.State != "running" {
		t.Fatalf("sandbox = %+v", sb)
	}
	var res api.RunResult
	e.want(200, &res, "POST", "/v1/sandboxes/"+sb.ID+"/run", sb.Token,
		map[string]any{"command": "echo $GREETING; echo err >&2; cat; exit 3", "stdin": "in\n"})
	if res.ExitCode != 3 || res.OK || res.Stdout != "hi\nin\n" || res.Stderr != "err\n" || res.Cwd != "/workspace" {
		t.Fatalf("run = %+v", res)
	}
	var list struct{ Sandboxes []api.Sandbox }
	e.want(200, &list, "GET", "/v1/sandboxes?label=team=a", e.key, nil)
	if len(list.Sandboxes) != 1 || list.Sandboxes[0].ID != sb.ID {
		t.Fatalf("list = %+v", list)
	}
	e.want(200, &list, "GET", "/v1/sandboxes?label=team=b", e.key, nil)
	if len(list.Sandboxes) != 0 {
		t.Fatalf("list team=b = %+v", list)
	}
	e.want(204, nil, "DELETE", "/v1/sandboxes/"+sb.ID, e.key, nil)
	e.want(404, nil, "DELETE", "/v1/sandboxes/"+sb.ID, e.key, nil)
	e.want(404, nil, "GET", "/v1/sandboxes/"+sb.ID, e.key, nil)
	// The token died with its sandbox.
	e.want(401, nil, "GET", "/v1/sandboxes/"+sb.ID, sb.Token, nil)
	var evs struct{ Events []store.Event }
	e.want(200, &evs, "GET", "/v1/events?sandbox="+sb.ID, e.key, nil)
	var types []string
	for _, ev := range evs.Events {
		types = append(types, ev.Type)
	}
	if strings.Join(types, ",") != "sandbox.created,sandbox.destroyed" {
		t.Fatalf("events = %v", types)
	}
	e.want(200, &evs, "GET", "/v1/events?type=sandbox.destroyed", e.key, nil)
	if len(evs.Events) != 1 {
		t.Fatalf("events by type = %+v", evs)
	}
}

func TestGetOrCreateByKey(t *testing.T) {
	e := newEnv(t)
	var wg sync.WaitGroup
	ids := make(chan string, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, data := e.do("POST", "/v1/sandboxes", e.key, map[string]any{"key": "user:1"})
			if resp.StatusCode != 201 && resp.StatusCode != 200 {
				t.Errorf("create: %d %s", resp.StatusCode, data)
				return
			}
			var sb api.Sandbox
			json.Unmarshal(data, &sb)
			ids <- sb.ID
		}()
	}
	wg.Wait()
	close(ids)
	seen := map[string]bool{}
	for id := range ids {
		seen[id] = true
	}
	if len(seen) != 1 {
		t.Fatalf("one key made %d sandboxes: %v", len(seen), seen)
	}
}

func TestErrors(t *testing.T) {
	e := newEnv(t)
	sb := e.create(nil)
	var ae api.Error
	e.want(400, &ae, "POST", "/v1/sandboxes", e.key, `{"nope": 1}`)
	if ae.Code != "invalid_argument" || !strings.Contains(ae.Message, "nope") {
		t.Fatalf("unknown field: %+v", ae)
	}
	e.want(400, &ae, "POST", "/v1/sandboxes/"+sb.ID+"/run", e.key, `{"command":`)
	e.want(400, &ae, "POST", "/v1/sandboxes/"+sb.ID+"/run", e.key, `{"command":"true"} {}`)
	e.want(400, &ae, "POST", "/v1/sandboxes", e.key, map[string]any{"network": map[string]string{"mode": "wifi"}})
	big := `{"command":"` + strings.Repeat("x", MaxJSONBody) + `"}`
	e.want(413, &ae, "POST", "/v1/sandboxes/"+sb.ID+"/run", e.key, big)
	if ae.Code != "resource_exhausted" {
		t.Fatalf("413 code = %s", ae.Code)
	}
	e.want(404, &ae, "GET", "/v1/sandboxes/sb_nope", e.key, nil)
	if ae.Code != "not_found" {
		t.Fatalf("404 code = %s", ae.Code)
	}
	// The message is the error's without its code, which the body has beside it: a client
	// prints "code: message" (Go's remote provider as provider.Error does, @tupper/sdk's
	// TupperError), and the code once. It was "not_found: not_found: …".
	if strings.Contains(ae.Message, "not_found") || ae.Message == "" {
		t.Errorf("404 message %q repeats the code", ae.Message)
	}
	_, err := remote.New(remote.Config{URL: e.ts.URL, APIKey: e.key}).Connect(t.Context(), "sb_nope")
	if want := "not_found: " + ae.Message; err == nil || err.Error() != want || strings.Count(err.Error(), "not_found") != 1 {
		t.Errorf("the remote provider's error: %v, want %q", err, want)
	}
	e.want(404, &ae, "POST", "/v1/sandboxes/"+sb.ID+"/files/read", e.key, map[string]string{"path": "/nope"})
	e.want(404, &ae, "GET", "/v1/sandboxes/"+sb.ID+"/processes/nope", e.key, nil)
	e.want(404, &ae, "DELETE", "/v1/webhooks/wh_nope", e.key, nil)
	// The memory provider cannot pause: unsupported is 501.
	if !e.srv.Capabilities().Has("pause") {
		e.want(501, &ae, "POST", "/v1/sandboxes/"+sb.ID+"/pause", e.key, nil)
		if ae.Code != "unsupported" {
			t.Fatalf("pause code = %s", ae.Code)
		}
	}
	e.want(204, nil, "POST", "/v1/sandboxes/"+sb.ID+"/files/write", e.key, map[string]string{"path": "a.txt", "content": "x x"})
	e.want(422, &ae, "POST", "/v1/sandboxes/"+sb.ID+"/files/edit", e.key, map[string]string{"path": "a.txt", "find": "x", "replace": "y"})
	if ae.Code != "edit_not_unique" {
		t.Fatalf("edit code = %s", ae.Code)
	}
}
