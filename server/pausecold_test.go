//go:build linux

package server_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/providers/memory"
	"github.com/tupper-dev/tupper/server/servertest"
	"github.com/tupper-dev/tupper/store"
)

// coldServer is a server on a provider that pauses sandboxes without their memory (the
// local provider), with an API key that E2B's API takes too.
type coldServer struct {
	t   *testing.T
	srv *servertest.Server
	key string
}

func newColdServer(t *testing.T, n int) *coldServer {
	prov := servertest.Local(t, n)
	if !provider.CapabilitiesOf(prov).Has(provider.CapPauseCold) {
		t.Fatalf("the local provider does not declare %s", provider.CapPauseCold)
	}
	srv := servertest.Start(t, prov, "")
	_, key, err := srv.Store.CreateE2BKey(t.Context(), "pause-cold")
	if err != nil {
		t.Fatal(err)
	}
	return &coldServer{t: t, srv: srv, key: key}
}

// do sends body to the server with the key (as a bearer token on /v1, as E2B's X-API-Key
// elsewhere) and returns the status and the body.
func (c *coldServer) do(method, path, body string, out any) (int, string) {
	c.t.Helper()
	req, err := http.NewRequestWithContext(c.t.Context(), method, c.srv.URL+path, strings.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	if strings.HasPrefix(path, "/v1/") {
		req.Header.Set("Authorization", "Bearer "+c.key)
	} else {
		req.Header.Set("X-API-Key", c.key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(data, out); err != nil {
			c.t.Fatalf("%s %s: %v: %s", method, path, err, data)
		}
	}
	return resp.StatusCode, string(data)
}

// run runs cmd in sandbox id through the native API and returns its trimmed stdout.
func (c *coldServer) run(id, cmd string) string {
	c.t.Helper()
	var res struct {
		Stdout, Stderr string
		ExitCode       int
	}
	b, _ := json.Marshal(map[string]any{"command": cmd})
	if code, body := c.do("POST", "/v1/sandboxes/"+id+"/run", string(b), &res); code != 200 || res.ExitCode != 0 {
		c.t.Fatalf("run %q: %d %s %+v", cmd, code, body, res)
	}
	return strings.TrimSpace(res.Stdout)
}

func (c *coldServer) state(id string) string {
	c.t.Helper()
	var sb struct{ State string }
	if code, body := c.do("GET", "/v1/sandboxes/"+id, "", &sb); code != 200 {
		c.t.Fatalf("get %s: %d %s", id, code, body)
	}
	return sb.State
}

// record is the server's record of sandbox id.
func (c *coldServer) record(id string) store.Sandbox {
	c.t.Helper()
	rec, err := c.srv.Store.Sandbox(c.t.Context(), id)
	if err != nil {
		c.t.Fatal(err)
	}
	return rec
}

// lastEvent is the data of the latest event of type typ about sandbox id.
func (c *coldServer) lastEvent(id, typ string) map[string]any {
	c.t.Helper()
	var evs struct{ Events []store.Event }
	c.do("GET", "/v1/events?sandbox="+id+"&type="+typ, "", &evs)
	if len(evs.Events) == 0 {
		c.t.Fatalf("no %s event of %s", typ, id)
	}
	var data map[string]any
	json.Unmarshal(evs.Events[len(evs.Events)-1].Data, &data)
	return data
}

// The background process whose absence after a cold resume the tests check, and the
// command that counts it.
const (
	// The sleeper is counted only once it has exec'd: the command waits for it (up to 5 s).
	startSleeper = "echo before > /workspace/kept.txt; (sleep 1001 >/dev/null 2>&1 &); i=0; while [ $i -lt 500 ] && [ \"$(" + sleepers + ")\" != 1 ]; do sleep 0.01; i=$((i+1)); done"
	sleepers     = `n=0; for f in /proc/[0-9]*/cmdline; do if [ "$(tr '\0' ' ' < $f 2>/dev/null)" = "sleep 1001 " ]; then n=$((n+1)); fi; done; echo $n`
)

// A pause that keeps the files but not the memory, through each API: the native one
// ({"keepMemory": false}, then resume) and E2B's ({"memory": false}, then connect). The
// file written before is there after the resume, the background process started before is
// not; sandbox.paused says the memory was not kept, sandbox.resumed that it booted again;
// a second pause is 409; a sandbox created with autoResume is not woken by a use while paused
// so, only by an explicit resume.
func TestPauseColdThenResume(t *testing.T) {
	c := newColdServer(t, 73)
	for _, api := range []string{"native", "e2b"} {
		t.Run(api, func(t *testing.T) {
			c.t = t
			var id string
			if api == "native" {
				var sb struct{ ID string }
				if code, body := c.do("POST", "/v1/sandboxes", `{"network":"none","timeoutMs":300000}`, &sb); code != 201 {
					t.Fatalf("create: %d %s", code, body)
				}
				id = sb.ID
			} else {
				var sb struct{ SandboxID string }
				if code, body := c.do("POST", "/v2/sandboxes", `{"templateID":"base","timeout":300,"allow_internet_access":false}`, &sb); code != 201 {
					t.Fatalf("create: %d %s", code, body)
				}
				id = sb.SandboxID
			}
			defer c.do("DELETE", "/v1/sandboxes/"+id, "", nil)
			c.run(id, startSleeper)
			if got := c.run(id, sleepers); got != "1" {
				t.Fatalf("sleepers before the pause: %q", got)
			}

			pause := func() int {
				if api == "native" {
					code, _ := c.do("POST", "/v1/sandboxes/"+id+"/pause", `{"keepMemory":false}`, nil)
					return code
				}
				code, _ := c.do("POST", "/sandboxes/"+id+"/pause", `{"memory":false}`, nil)
				return code
			}
			if code := pause(); code != 204 {
				t.Fatalf("pause without memory: %d", code)
			}
			if s := c.state(id); s != string(provider.StatePaused) {
				t.Fatalf("state after the pause: %s", s)
			}
			if !c.record(id).MemoryDropped {
				t.Error("the record does not say the pause dropped the memory")
			}
			if d := c.lastEvent(id, "sandbox.paused"); d["memoryKept"] != false || d["memoryFreed"] != true {
				t.Errorf("sandbox.paused: %v, want memoryKept false, memoryFreed true", d)
			}
			if code := pause(); code != 409 {
				t.Errorf("a second pause: %d, want 409", code)
			}

			if api == "native" {
				if code, body := c.do("POST", "/v1/sandboxes/"+id+"/resume", "", nil); code != 204 {
					t.Fatalf("resume: %d %s", code, body)
				}
			} else {
				if code, body := c.do("POST", "/sandboxes/"+id+"/connect", `{"timeout":300}`, nil); code != 201 {
					t.Fatalf("connect: %d %s, want 201 (resumed)", code, body)
				}
			}
			if s := c.state(id); s != string(provider.StateRunning) {
				t.Fatalf("state after the resume: %s", s)
			}
			if got := c.run(id, "cat /workspace/kept.txt"); got != "before" {
				t.Errorf("the file after the resume: %q", got)
			}
			if got := c.run(id, sleepers); got != "0" {
				t.Errorf("sleepers after the resume: %q, want none (a cold boot)", got)
			}
			if d := c.lastEvent(id, "sandbox.resumed"); d["coldBoot"] != true {
				t.Errorf("sandbox.resumed: %v, want coldBoot true", d)
			}
			if c.record(id).MemoryDropped {
				t.Error("the record still says the memory was dropped after the resume")
			}
		})
	}

	// The MCP tools: pause_sandbox with keep_memory false, then resume_sandbox, through the
	// same lifecycle (recorded, evented).
	t.Run("mcp", func(t *testing.T) {
		c.t = t
		ctx := t.Context()
		cs := mcpSession(ctx, t, c.srv)
		tool := func(name string, args map[string]any) string {
			t.Helper()
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
			if err != nil || res.IsError {
				t.Fatalf("%s %v: %v %+v", name, args, err, res)
			}
			var text strings.Builder
			for _, ct := range res.Content {
				if tc, ok := ct.(*mcp.TextContent); ok {
					text.WriteString(tc.Text)
				}
			}
			return text.String()
		}
		var created struct {
			ID string `json:"sandbox_id"`
		}
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "create_sandbox", Arguments: map[string]any{"network": "none"}})
		if err != nil || res.IsError {
			t.Fatalf("create_sandbox: %v %+v", err, res)
		}
		b, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(b, &created); err != nil || created.ID == "" {
			t.Fatalf("create_sandbox result %s: %v", b, err)
		}
		id := created.ID
		defer tool("destroy_sandbox", map[string]any{"sandbox_id": id})
		tool("run_command", map[string]any{"sandbox_id": id, "command": startSleeper})
		if out := tool("pause_sandbox", map[string]any{"sandbox_id": id, "keep_memory": false}); !strings.Contains(out, "keeping only its files") {
			t.Errorf("pause_sandbox: %q", out)
		}
		if rec := c.record(id); rec.State != provider.StatePaused || !rec.MemoryDropped {
			t.Fatalf("the record after pause_sandbox: %+v", rec)
		}
		tool("resume_sandbox", map[string]any{"sandbox_id": id})
		if rec := c.record(id); rec.State != provider.StateRunning {
			t.Fatalf("the record after resume_sandbox: %+v", rec)
		}
		if out := tool("run_command", map[string]any{"sandbox_id": id, "command": "cat /workspace/kept.txt; " + sleepers}); !strings.Contains(out, "before\n0") {
			t.Errorf("after resume_sandbox: %q", out)
		}
	})

	t.Run("autoResume", func(t *testing.T) {
		c.t = t
		var sb struct{ ID string }
		if code, body := c.do("POST", "/v1/sandboxes", `{"network":"none","timeoutMs":300000,"onTimeout":"pause","autoResume":true}`, &sb); code != 201 {
			t.Fatalf("create: %d %s", code, body)
		}
		defer c.do("DELETE", "/v1/sandboxes/"+sb.ID, "", nil)
		c.run(sb.ID, startSleeper)
		if code, body := c.do("POST", "/v1/sandboxes/"+sb.ID+"/pause", `{"keepMemory":false}`, nil); code != 204 {
			t.Fatalf("pause without memory: %d %s", code, body)
		}
		// A use does not boot it again behind the client's back.
		if code, _ := c.do("POST", "/v1/sandboxes/"+sb.ID+"/run", `{"command":"true"}`, nil); code < 400 {
			t.Errorf("a command in a sandbox paused without memory: %d, want a failure", code)
		}
		if s := c.state(sb.ID); s != string(provider.StatePaused) {
			t.Fatalf("a use woke a sandbox paused without memory: %s", s)
		}
		if code, body := c.do("POST", "/v1/sandboxes/"+sb.ID+"/resume", "", nil); code != 204 {
			t.Fatalf("resume: %d %s", code, body)
		}
		if got := c.run(sb.ID, "cat /workspace/kept.txt; "+sleepers); got != "before\n0" {
			t.Errorf("after the resume: %q", got)
		}
	})
}

// onTimeout pause-cold (native) and autoPause with autoPauseMemory false (E2B): at the
// deadline the reaper pauses the sandbox without its memory; paused, it has no deadline, a
// resume gives it its timeout again, and its files are there, its processes are not.
// autoResume with such a pause is refused at create (400) in both dialects.
func TestOnTimeoutPauseCold(t *testing.T) {
	c := newColdServer(t, 74)
	for _, api := range []string{"native", "e2b"} {
		t.Run(api, func(t *testing.T) {
			c.t = t
			var id string
			if api == "native" {
				if code, body := c.do("POST", "/v1/sandboxes", `{"onTimeout":"pause-cold","autoResume":true}`, nil); code != 400 || !strings.Contains(body, "autoResume cannot go with a pause that drops memory") {
					t.Errorf("autoResume with onTimeout pause-cold: %d %s, want 400", code, body)
				}
				var sb struct{ ID, OnTimeout string }
				if code, body := c.do("POST", "/v1/sandboxes", `{"network":"none","timeoutMs":120000,"onTimeout":"pause-cold"}`, &sb); code != 201 || sb.OnTimeout != store.OnTimeoutPauseCold {
					t.Fatalf("create: %d %s", code, body)
				}
				id = sb.ID
			} else {
				if code, body := c.do("POST", "/v2/sandboxes", `{"templateID":"base","autoPause":true,"autoPauseMemory":false,"autoResume":{"enabled":true}}`, nil); code != 400 {
					t.Errorf("autoResume with autoPauseMemory false: %d %s, want 400", code, body)
				}
				var sb struct{ SandboxID string }
				if code, body := c.do("POST", "/v2/sandboxes", `{"templateID":"base","timeout":120,"autoPause":true,"autoPauseMemory":false,"allow_internet_access":false}`, &sb); code != 201 {
					t.Fatalf("create: %d %s", code, body)
				}
				id = sb.SandboxID
				var d struct {
					Lifecycle struct {
						OnTimeout  string
						AutoResume bool
					}
				}
				c.do("GET", "/sandboxes/"+id, "", &d)
				if d.Lifecycle.OnTimeout != "pause" || d.Lifecycle.AutoResume {
					t.Errorf("E2B's lifecycle of the sandbox: %+v, want pause without autoResume", d.Lifecycle)
				}
			}
			defer c.do("DELETE", "/v1/sandboxes/"+id, "", nil)
			c.run(id, startSleeper)
			if code, body := c.do("POST", "/v1/sandboxes/"+id+"/timeout", `{"timeoutMs":500}`, nil); code >= 300 {
				t.Fatalf("set timeout: %d %s", code, body)
			}
			time.Sleep(time.Second)
			if err := c.srv.Server.Reconcile(t.Context()); err != nil {
				t.Fatal(err)
			}
			rec := c.record(id)
			if rec.State != provider.StatePaused || !rec.MemoryDropped || !rec.Deadline.IsZero() {
				t.Fatalf("past its deadline: %+v; want paused without memory and without a deadline", rec)
			}
			if d := c.lastEvent(id, "sandbox.paused"); d["reason"] != "timeout" || d["memoryKept"] != false {
				t.Errorf("sandbox.paused at the deadline: %v", d)
			}
			if err := c.srv.Server.Reconcile(t.Context()); err != nil {
				t.Fatal(err)
			}
			if s := c.state(id); s != string(provider.StatePaused) {
				t.Fatalf("a second reconcile: %s", s)
			}
			if code, body := c.do("POST", "/v1/sandboxes/"+id+"/resume", "", nil); code != 204 {
				t.Fatalf("resume: %d %s", code, body)
			}
			if rec := c.record(id); rec.State != provider.StateRunning || time.Until(rec.Deadline) < time.Minute {
				t.Errorf("after the resume: %+v; want running with its timeout again", rec)
			}
			if got := c.run(id, "cat /workspace/kept.txt; "+sleepers); got != "before\n0" {
				t.Errorf("after the resume: %q", got)
			}
		})
	}
}

// On a provider without pause-cold (memory), a pause without memory and a create that asks
// for one at its timeout are 501 in both dialects, saying why, and change nothing.
func TestPauseColdUnsupported(t *testing.T) {
	srv := servertest.Start(t, memory.New(), "")
	_, key, err := srv.Store.CreateE2BKey(t.Context(), "pause-cold")
	if err != nil {
		t.Fatal(err)
	}
	c := &coldServer{t: t, srv: srv, key: key}
	var sb struct{ ID string }
	if code, body := c.do("POST", "/v1/sandboxes", `{}`, &sb); code != 201 {
		t.Fatalf("create: %d %s", code, body)
	}
	for _, tc := range []struct{ path, body string }{
		{"/v1/sandboxes/" + sb.ID + "/pause", `{"keepMemory":false}`},
		{"/sandboxes/" + sb.ID + "/pause", `{"memory":false}`},
	} {
		if code, body := c.do("POST", tc.path, tc.body, nil); code != 501 || !strings.Contains(body, `lacks the \"pause-cold\" capability`) {
			t.Errorf("POST %s %s: %d %s, want 501 naming pause-cold", tc.path, tc.body, code, body)
		}
	}
	if s := c.state(sb.ID); s != string(provider.StateRunning) {
		t.Errorf("state after the refused pauses: %s", s)
	}
	for _, tc := range []struct{ path, body string }{
		{"/v1/sandboxes", `{"onTimeout":"pause-cold"}`},
		{"/v2/sandboxes", `{"templateID":"base","autoPause":true,"autoPauseMemory":false}`},
	} {
		if code, body := c.do("POST", tc.path, tc.body, nil); code != 501 || !strings.Contains(body, "pause-cold") {
			t.Errorf("POST %s %s: %d %s, want 501", tc.path, tc.body, code, body)
		}
	}
	if code, body := c.do("POST", "/v1/sandboxes/"+sb.ID+"/pause", `{"keepMemory":"no"}`, nil); code != 400 {
		t.Errorf("a malformed pause body: %d %s, want 400", code, body)
	}
	var list struct{ Sandboxes []json.RawMessage }
	c.do("GET", "/v1/sandboxes", "", &list)
	if len(list.Sandboxes) != 1 {
		t.Errorf("sandboxes after the refused creates: %d, want 1", len(list.Sandboxes))
	}
}
