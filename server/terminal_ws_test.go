//go:build linux

package server_test

import (
	"context"
	"encoding/json"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/server/servertest"
)

// TestTerminalWebSocket drives a real terminal over the WebSocket on the local provider:
// typed input and output as binary messages, a resize as a text message, and the exit
// report before a normal close.
func TestTerminalWebSocket(t *testing.T) {
	prov := servertest.Provider(t, 8)
	if !provider.CapabilitiesOf(prov).Has("terminal") {
		servertestSkip(t, "the provider has no terminal (memory); TestTerminalErrors covers the refusal")
	}
	srv := servertest.Start(t, prov, "")
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	var info struct{ Capabilities []string }
	termCall(t, ctx, "GET", srv.URL+"/v1/info", srv.Key, "", &info)
	if !slices.Contains(info.Capabilities, "terminal") {
		t.Fatalf("/v1/info does not report the terminal capability: %v", info.Capabilities)
	}
	var sb struct{ ID, Token string }
	termCall(t, ctx, "POST", srv.URL+"/v1/sandboxes", srv.Key, `{}`, &sb)

	conn, resp, err := websocket.Dial(ctx, srv.URL+"/v1/sandboxes/"+sb.ID+"/terminal?cols=80&rows=24",
		&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + sb.Token}}})
	if err != nil {
		t.Fatalf("dial: %v (%v)", err, resp)
	}
	defer conn.CloseNow()

	var out strings.Builder
	var exit map[string]any
	// readUntil reads messages until re matches the output after from, or an exit report.
	readUntil := func(from int, re *regexp.Regexp) []string {
		t.Helper()
		for {
			if m := re.FindStringSubmatch(out.String()[from:]); m != nil {
				return m
			}
			typ, data, err := conn.Read(ctx)
			if err != nil {
				t.Fatalf("waiting for %q: %v; output so far %q", re, err, out.String())
			}
			if typ == websocket.MessageBinary {
				out.Write(data)
				continue
			}
			if err := json.Unmarshal(data, &exit); err != nil || exit["type"] != "exit" {
				t.Fatalf("unexpected control message %s", data)
			}
			return nil
		}
	}
	send := func(typ websocket.MessageType, s string) {
		t.Helper()
		if err := conn.Write(ctx, typ, []byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	send(websocket.MessageBinary, "stty size; echo s1-$((0+1))\n")
	if m := readUntil(0, regexp.MustCompile(`([0-9]+) ([0-9]+)\s+s1-1`)); m == nil || m[1]+" "+m[2] != "24 80" {
		t.Fatalf("initial size %q, want 24 80", m)
	}
	mark := out.Len()
	send(websocket.MessageText, `{"type":"resize","cols":91,"rows":37}`)
	send(websocket.MessageText, `{"type":"resize","cols":0,"rows":37}`) // refused with an error message
	typ, data, err := conn.Read(ctx)
	for err == nil && typ == websocket.MessageBinary { // output still under way
		out.Write(data)
		typ, data, err = conn.Read(ctx)
	}
	if err != nil || !strings.Contains(string(data), `"type":"error"`) || !strings.Contains(string(data), "invalid_argument") {
		t.Fatalf("bad resize: got %s %v, want an error message", data, err)
	}
	send(websocket.MessageBinary, "stty size; echo s2-$((1+1))\n")
	if m := readUntil(mark, regexp.MustCompile(`([0-9]+) ([0-9]+)\s+s2-2`)); m == nil || m[1]+" "+m[2] != "37 91" {
		t.Fatalf("size after resize %q, want 37 91", m)
	}
	send(websocket.MessageBinary, "exit 3\n")
	for exit == nil {
		typ, data, err := conn.Read(ctx)
		if err != nil {
			t.Fatalf("waiting for the exit report: %v", err)
		}
		if typ == websocket.MessageText {
			if err := json.Unmarshal(data, &exit); err != nil || exit["type"] != "exit" {
				t.Fatalf("unexpected control message %s", data)
			}
		}
	}
	if exit["exitCode"] != float64(3) {
		t.Errorf("exit report %v, want exitCode 3", exit)
	}
	_, _, err = conn.Read(ctx)
	if websocket.CloseStatus(err) != websocket.StatusNormalClosure {
		t.Errorf("after the exit report: %v, want a normal close", err)
	}
}

// termCall sends one JSON request and decodes the 2xx answer into out.
func termCall(t *testing.T, ctx context.Context, method, url, cred, body string, out any) {
	t.Helper()
	status, data := callCtx(t, ctx, method, url, cred, body)
	if status/100 != 2 {
		t.Fatalf("%s %s: status %d: %s", method, url, status, data)
	}
	if err := json.Unmarshal(data, out); err != nil {
		t.Fatal(err)
	}
}
