package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tupper-dev/tupper/providers/memory"
	"github.com/tupper-dev/tupper/sandbox"
	"github.com/tupper-dev/tupper/tools"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// transcript drives a server over the SDK's in-memory transport with raw JSON-RPC and
// records every message both ways.
type transcript struct {
	t    *testing.T
	conn mcp.Connection
	log  bytes.Buffer
}

func (tr *transcript) record(dir string, msg jsonrpc.Message) {
	raw, err := jsonrpc.EncodeMessage(msg)
	if err != nil {
		tr.t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, raw, "", "  "); err != nil {
		tr.t.Fatal(err)
	}
	tr.log.WriteString(dir + " " + buf.String() + "\n\n")
}

// send writes one raw message and, for a request (one with an id), returns the response.
func (tr *transcript) send(raw string) *jsonrpc.Response {
	tr.t.Helper()
	msg, err := jsonrpc.DecodeMessage([]byte(raw))
	if err != nil {
		tr.t.Fatalf("bad test message %s: %v", raw, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tr.record("->", msg)
	if err := tr.conn.Write(ctx, msg); err != nil {
		tr.t.Fatal(err)
	}
	req, ok := msg.(*jsonrpc.Request)
	if !ok || !req.IsCall() {
		return nil
	}
	for {
		in, err := tr.conn.Read(ctx)
		if err != nil {
			tr.t.Fatalf("reading the answer to %s: %v", raw, err)
		}
		tr.record("<-", in)
		if resp, ok := in.(*jsonrpc.Response); ok && resp.ID == req.ID {
			return resp
		}
	}
}

func TestTranscript(t *testing.T) {
	ctx := t.Context()
	prov := memory.New()
	srv := newServer(Options{Provider: prov, Version: "test"}, tools.NewSession(prov, tools.SessionOptions{}), nil)
	clientT, serverT := mcp.NewInMemoryTransports()
	ss, err := srv.Connect(ctx, serverT, nil)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := clientT.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tr := &transcript{t: t, conn: conn}

	tr.send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"golden","version":"1.0.0"}}}`)
	tr.send(`{"jsonrpc":"2.0","method":"notifications/initialized","params":{}}`)
	list := tr.send(`{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{}}`)
	var listed struct {
		Tools []struct{ Name string }
	}
	if err := json.Unmarshal(list.Result, &listed); err != nil || len(listed.Tools) != len(tools.All()) {
		t.Errorf("tools/list: %d tools (%v), want %d", len(listed.Tools), err, len(tools.All()))
	}

	ok := tr.send(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"run_command","arguments":{"command":"echo hello; echo warning >&2"}}}`)
	wantResult(t, ok, false, "exit code: 0", "hello")
	tr.send(`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"write_file","arguments":{"path":"notes.txt","content":"one\ntwo\none\n"}}}`)
	fail := tr.send(`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"run_command","arguments":{"command":"cat notes.txt; exit 3"}}}`)
	wantResult(t, fail, true, "exit code: 3", "two")
	ambiguous := tr.send(`{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"edit_file","arguments":{"path":"notes.txt","find":"one","replace":"1"}}}`)
	wantResult(t, ambiguous, true, "edit_not_unique")
	missing := tr.send(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"read_file","arguments":{"path":"nope.txt"}}}`)
	wantResult(t, missing, true, "not_found")

	unknown := tr.send(`{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"format_disk","arguments":{}}}`)
	wantError(t, unknown, "unknown tool")
	malformed := tr.send(`{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"run_command","arguments":{"command":"ls","timeout":5}}}`)
	wantError(t, malformed, `unknown property "timeout"`)

	// The session's default sandbox exists now, and ends with the session.
	if n := count(t, prov); n != 1 {
		t.Errorf("%d sandboxes during the session, want the default one", n)
	}
	conn.Close()
	ss.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for count(t, prov) != 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := count(t, prov); n != 0 {
		t.Errorf("%d sandboxes after the session ended, want 0: the default sandbox must be destroyed", n)
	}

	file := filepath.Join("testdata", "session.golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, tr.log.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("%v (run go test ./mcpserver -run TestTranscript -update to create it)", err)
	}
	if !bytes.Equal(tr.log.Bytes(), want) {
		t.Errorf("the JSON-RPC transcript differs from %s; if intended, rerun with -update\n%s", file, tr.log.String())
	}
}

func count(t *testing.T, prov *memory.Provider) int {
	infos, err := sandbox.List(context.Background(), prov, sandbox.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return len(infos)
}

func wantResult(t *testing.T, resp *jsonrpc.Response, isError bool, contains ...string) {
	t.Helper()
	if resp.Error != nil {
		t.Errorf("got a protocol error %v, want a tool result", resp.Error)
		return
	}
	var res struct {
		IsError bool
		Content []struct{ Text string }
	}
	if err := json.Unmarshal(resp.Result, &res); err != nil || len(res.Content) != 1 {
		t.Errorf("result %s: %v", resp.Result, err)
		return
	}
	if res.IsError != isError {
		t.Errorf("isError %v, want %v: %s", res.IsError, isError, res.Content[0].Text)
	}
	for _, c := range contains {
		if !strings.Contains(res.Content[0].Text, c) {
			t.Errorf("result %q does not contain %q", res.Content[0].Text, c)
		}
	}
}

func wantError(t *testing.T, resp *jsonrpc.Response, contains string) {
	t.Helper()
	var we *jsonrpc.Error
	if resp.Error == nil {
		t.Errorf("got result %s, want a protocol error", resp.Result)
		return
	}
	raw, _ := json.Marshal(resp.Error)
	if err := json.Unmarshal(raw, &we); err != nil || we.Code != jsonrpc.CodeInvalidParams || !strings.Contains(we.Message, contains) {
		t.Errorf("error %s, want invalid params containing %q", raw, contains)
	}
}
