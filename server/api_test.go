package server

import (
	"bufio"
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/tupper-dev/tupper/server/api"
)

func TestRunStreams(t *testing.T) {
	e := newEnv(t)
	sb := e.create(nil)
	body := map[string]any{"command": "echo one; echo two >&2; exit 2"}
	// NDJSON: chunk lines, then the result.
	_, data := e.do("POST", "/v1/sandboxes/"+sb.ID+"/run", sb.Token, body, "Accept", "application/x-ndjson")
	var out, errOut strings.Builder
	var last map[string]any
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		var ev map[string]any
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("ndjson line %q: %v", sc.Text(), err)
		}
		switch ev["type"] {
		case "stdout":
			out.WriteString(ev["text"].(string))
		case "stderr":
			errOut.WriteString(ev["text"].(string))
		}
		last = ev
	}
	if out.String() != "one\n" || errOut.String() != "two\n" || last["type"] != "result" || last["exitCode"] != float64(2) {
		t.Fatalf("ndjson: out %q err %q last %v", out.String(), errOut.String(), last)
	}
	// SSE: event and data lines.
	resp, data := e.do("POST", "/v1/sandboxes/"+sb.ID+"/run", sb.Token, body, "Accept", "text/event-stream")
	if strings.Contains(string(data), `\u003e`) {
		t.Errorf("streamed JSON escapes HTML: %s", data)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	if !strings.Contains(string(data), "event: stdout\ndata: {\"text\":\"one") || !strings.Contains(string(data), "event: result\ndata: {\"ok\":false,\"exitCode\":2") {
		t.Fatalf("sse: %s", data)
	}
	// A timeout is a result.
	var res api.RunResult
	e.want(200, &res, "POST", "/v1/sandboxes/"+sb.ID+"/run", sb.Token, map[string]any{"command": "sleep 5", "timeoutMs": 100})
	if !res.TimedOut || res.OK {
		t.Fatalf("timeout: %+v", res)
	}
}

func TestFilesAPI(t *testing.T) {
	e := newEnv(t)
	sb := e.create(map[string]any{"trackChanges": true})
	p := "/v1/sandboxes/" + sb.ID
	e.want(204, nil, "POST", p+"/files/write", sb.Token, map[string]string{"path": "src/a.go", "content": "package a\n// TODO x\n", "mode": "0600"})
	e.want(204, nil, "PUT", p+"/files/content?path=src/b.bin", sb.Token, []byte{0xff, 0xfe, 0})
	var rd map[string]string
	e.want(200, &rd, "POST", p+"/files/read", sb.Token, map[string]string{"path": "src/b.bin"})
	if rd["encoding"] != "base64" || rd["content"] != "//4A" {
		t.Fatalf("read binary: %v", rd)
	}
	var st api.FileInfo
	e.want(200, &st, "GET", p+"/files/stat?path=src/a.go", sb.Token, nil)
	if st.Type != "file" || st.Mode&0o777 != 0o600 || st.Path != "/workspace/src/a.go" {
		t.Fatalf("stat: %+v", st)
	}
	var ex map[string]bool
	e.want(200, &ex, "GET", p+"/files/exists?path=src/nope", sb.Token, nil)
	if ex["exists"] {
		t.Fatal("exists: nope exists")
	}
	e.want(204, nil, "POST", p+"/files/edit", sb.Token, map[string]string{"path": "src/a.go", "find": "TODO x", "replace": "DONE"})
	e.want(204, nil, "POST", p+"/files/mkdir", sb.Token, map[string]string{"path": "d/e"})
	e.want(204, nil, "POST", p+"/files/rename", sb.Token, map[string]string{"from": "src/b.bin", "to": "d/e/b.bin"})
	var ls struct{ Entries []api.FileInfo }
	e.want(200, &ls, "GET", p+"/files/list?path=/workspace&recursive=true&glob=**/*.bin", sb.Token, nil)
	if len(ls.Entries) != 1 || ls.Entries[0].Path != "/workspace/d/e/b.bin" {
		t.Fatalf("list: %+v", ls)
	}
	var ms struct{ Matches []api.Match }
	e.want(200, &ms, "POST", p+"/files/search", sb.Token, map[string]string{"query": "DONE"})
	if len(ms.Matches) != 1 || ms.Matches[0].Line != 2 {
		t.Fatalf("search: %+v", ms)
	}
	var ch api.Changes
	e.want(200, &ch, "GET", p+"/files/changes", sb.Token, nil)
	if len(ch.Added) != 2 {
		t.Fatalf("changes: %+v", ch)
	}
	e.want(204, nil, "POST", p+"/files/remove", sb.Token, map[string]any{"path": "d", "recursive": true})
	e.want(404, nil, "GET", p+"/files/stat?path=d", sb.Token, nil)
}

func TestProcessesAPI(t *testing.T) {
	e := newEnv(t)
	sb := e.create(nil)
	p := "/v1/sandboxes/" + sb.ID
	var pr api.Process
	e.want(201, &pr, "POST", p+"/processes", sb.Token, map[string]any{
		"command": "echo starting; echo ready; sleep 0.3; echo bye", "name": "web", "ready": map[string]string{"log": "^ready$"},
	})
	if pr.Name != "web" || !pr.Ready {
		t.Fatalf("start: %+v", pr)
	}
	var wait map[string]any
	e.want(200, &wait, "POST", p+"/processes/web/wait", sb.Token, map[string]int{"timeoutMs": 10000})
	if wait["status"] != "exited" || wait["exitCode"] != float64(0) {
		t.Fatalf("wait: %v", wait)
	}
	var page struct {
		Text, NextCursor string
		Truncated        bool
	}
	e.want(200, &page, "GET", p+"/processes/web/logs?maxBytes=9", sb.Token, nil)
	if page.Text != "starting\n" || !page.Truncated {
		t.Fatalf("logs page: %+v", page)
	}
	_, data := e.do("GET", p+"/processes/web/lines?after="+page.NextCursor, sb.Token, nil)
	if !strings.Contains(string(data), `"text":"ready"`) || !strings.Contains(string(data), `"text":"bye"`) || strings.Contains(string(data), "starting") || !strings.Contains(string(data), `{"type":"end"}`) {
		t.Fatalf("lines after the cursor: %s", data)
	}
	var list struct{ Processes []api.Process }
	e.want(200, &list, "GET", p+"/processes", sb.Token, nil)
	if len(list.Processes) != 1 || list.Processes[0].Status != "exited" {
		t.Fatalf("processes: %+v", list)
	}
	var evs struct{ Events []struct{ Type string } }
	e.want(200, &evs, "GET", p+"/events", sb.Token, nil)
	var types []string
	for _, ev := range evs.Events {
		types = append(types, ev.Type)
	}
	if strings.Join(types, ",") != "sandbox.created,process.started,process.exited" {
		t.Fatalf("events: %v", types)
	}
	// keep-alive moves the deadline (memory enforces timeouts).
	var dl map[string]string
	e.want(200, &dl, "POST", p+"/keep-alive", sb.Token, nil)
	if dl["deadline"] == "" {
		t.Fatalf("keep-alive: %v", dl)
	}
}

// The raw exec primitive reports a command cut off by its timeoutMs as a timeout frame.
func TestExecTimeoutFrame(t *testing.T) {
	e := newEnv(t)
	sb := e.create(nil)
	_, data := e.do("POST", "/v1/sandboxes/"+sb.ID+"/exec", sb.Token, `{"command":"sleep 5","cwd":"/workspace","timeoutMs":100}`+"\n")
	var last api.ExecFrame
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		if err := json.Unmarshal(sc.Bytes(), &last); err != nil {
			t.Fatalf("frame %q: %v", sc.Text(), err)
		}
	}
	if last.Type != "error" || last.Code != "timeout" {
		t.Fatalf("last frame %+v, want an error frame with code timeout (body %s)", last, data)
	}
}
