//go:build linux

package e2b_test

import (
	"net/url"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/tupper-dev/tupper/providers/memory"
	"github.com/tupper-dev/tupper/server/servertest"
)

type logEntry struct {
	Timestamp time.Time         `json:"timestamp"`
	Level     string            `json:"level"`
	Message   string            `json:"message"`
	Fields    map[string]string `json:"fields"`
}

func messages(es []logEntry) []string {
	out := []string{}
	for _, e := range es {
		out = append(out, e.Message)
	}
	return out
}

// TestSandboxLogs: GET /v2/sandboxes/{id}/logs and the deprecated v1 form serve the
// sandbox's recorded lifecycle, in both directions, filtered by cursor, level and search,
// and still after the sandbox has ended.
func TestSandboxLogs(t *testing.T) {
	srv := servertest.Start(t, memory.New(), "")
	_, key, err := srv.Store.CreateE2BKey(t.Context(), "test")
	if err != nil {
		t.Fatal(err)
	}
	u := srv.URL
	var sb struct{ SandboxID string }
	if r := call(t, "POST", u+"/v2/sandboxes", key, `{"templateID":"base","metadata":{"who":"logs"}}`, nil, &sb); r.StatusCode != 201 {
		t.Fatalf("create: %d", r.StatusCode)
	}
	id := sb.SandboxID
	for _, op := range []struct{ path, body string }{
		{"/sandboxes/" + id + "/timeout", `{"timeout":600}`},
		{"/v2/sandboxes/" + id + "/connect", `{"timeout":3600}`}, // later: moves it
	} {
		if r := call(t, "POST", u+op.path, key, op.body, nil, nil); r.StatusCode >= 300 {
			t.Fatalf("POST %s: %d", op.path, r.StatusCode)
		}
	}
	logs := func(query url.Values) []logEntry {
		t.Helper()
		var out struct{ Logs []logEntry }
		if r := call(t, "GET", u+"/v2/sandboxes/"+id+"/logs?"+query.Encode(), key, "", nil, &out); r.StatusCode != 200 {
			t.Fatalf("logs?%s: %d", query.Encode(), r.StatusCode)
		}
		return out.Logs
	}
	fwd := logs(url.Values{"direction": {"forward"}})
	want := []string{"sandbox.created", "sandbox.timeout_set", "sandbox.timeout_set"}
	if got := messages(fwd); !slices.Equal(got, want) {
		t.Fatalf("forward logs: %q, want %q", got, want)
	}
	if c := fwd[0]; c.Level != "info" || c.Fields["metadata"] != `{"who":"logs"}` || c.Fields["api"] != "e2b" || c.Timestamp.IsZero() {
		t.Errorf("the created entry: %+v", c)
	}
	if d := fwd[1].Fields["deadline"]; d == "" {
		t.Errorf("the timeout entry has no deadline: %+v", fwd[1])
	}
	back := logs(url.Values{})
	if got, rev := messages(back), slices.Clone(want); !slices.Equal(got, func() []string { slices.Reverse(rev); return rev }()) {
		t.Errorf("backward (default) logs: %q", got)
	}
	if got := messages(logs(url.Values{"limit": {"2"}, "direction": {"forward"}})); !slices.Equal(got, want[:2]) {
		t.Errorf("limit 2: %q", got)
	}
	if got := messages(logs(url.Values{"search": {"created"}})); !slices.Equal(got, []string{"sandbox.created"}) {
		t.Errorf("search created: %q", got)
	}
	if got := logs(url.Values{"level": {"warn"}}); len(got) != 0 {
		t.Errorf("level warn before the sandbox ended: %q", messages(got))
	}
	// A cursor in the future, forward: nothing; backward from before the first entry: nothing.
	future := strconv.FormatInt(time.Now().Add(time.Hour).UnixMilli(), 10)
	if got := logs(url.Values{"cursor": {future}, "direction": {"forward"}}); len(got) != 0 {
		t.Errorf("forward from an hour ahead: %q", messages(got))
	}
	past := strconv.FormatInt(fwd[0].Timestamp.Add(-time.Second).UnixMilli(), 10)
	if got := logs(url.Values{"cursor": {past}}); len(got) != 0 {
		t.Errorf("backward from before the first entry: %q", messages(got))
	}
	for _, q := range []string{"direction=sideways", "level=loud", "limit=1001", "cursor=x"} {
		if r := call(t, "GET", u+"/v2/sandboxes/"+id+"/logs?"+q, key, "", nil, nil); r.StatusCode != 400 {
			t.Errorf("logs?%s: %d, want 400", q, r.StatusCode)
		}
	}

	var v1 struct {
		Logs []struct {
			Timestamp time.Time
			Line      string
		}
		LogEntries []logEntry
	}
	// start is in milliseconds (E2B's unit): every entry of that millisecond or later is in,
	// which takes in the created entry too when the two calls fell in one millisecond.
	start := fwd[1].Timestamp.UnixMilli()
	var wantV1 []string
	for _, e := range fwd {
		if e.Timestamp.UnixMilli() >= start {
			wantV1 = append(wantV1, e.Message)
		}
	}
	if r := call(t, "GET", u+"/sandboxes/"+id+"/logs?start="+strconv.FormatInt(start, 10), key, "", nil, &v1); r.StatusCode != 200 {
		t.Fatalf("v1 logs: %d", r.StatusCode)
	}
	if got := messages(v1.LogEntries); !slices.Equal(got, wantV1) || len(v1.Logs) != len(got) {
		t.Errorf("v1 logs from the timeout on: %q, %d lines, want %q", got, len(v1.Logs), wantV1)
	} else if i := len(got) - 1; v1.Logs[i].Line != "sandbox.timeout_set deadline="+v1.LogEntries[i].Fields["deadline"] || !v1.Logs[i].Timestamp.Equal(v1.LogEntries[i].Timestamp) {
		l := v1.Logs[i]
		t.Errorf("v1 line: %+v", l)
	}

	if r := call(t, "DELETE", u+"/sandboxes/"+id, key, "", nil, nil); r.StatusCode != 204 {
		t.Fatalf("kill: %d", r.StatusCode)
	}
	if got := logs(url.Values{"limit": {"1"}}); !slices.Equal(messages(got), []string{"sandbox.destroyed"}) {
		t.Errorf("the newest entry after a kill: %q", messages(got))
	} else if k, err := srv.Store.AuthenticateKey(t.Context(), key); err != nil || got[0].Fields["reason"] != "destroyed" || got[0].Fields["by"] != k.ID {
		// Why it ended, and by which key: the one that killed it. (Not "the newest key": two
		// keys made in one millisecond list in either order.)
		t.Errorf("the destroyed entry's fields: %v", got[0].Fields)
	}
	var e struct{ Code int }
	if r := call(t, "GET", u+"/v2/sandboxes/nosuchsandbox/logs", key, "", nil, &e); r.StatusCode != 404 || e.Code != 404 {
		t.Errorf("logs of an unknown sandbox: %d %+v", r.StatusCode, e)
	}
	if r := call(t, "GET", u+"/v2/sandboxes/"+id+"/logs", "", "", nil, nil); r.StatusCode != 401 {
		t.Errorf("logs without a key: %d", r.StatusCode)
	}
}
