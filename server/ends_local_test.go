//go:build linux

package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/providers/remote"
	"github.com/tupper-dev/tupper/sandbox"
	"github.com/tupper-dev/tupper/server/api"
	"github.com/tupper-dev/tupper/server/servertest"
	"github.com/tupper-dev/tupper/store"
)

// TestOOMKilledOverREST: a command the kernel's OOM killer ends in a real sandbox (runc) is
// oomKilled in the REST run result and the exec stream's exit frame, and so in the Go SDK's
// RunResult through the server (providers/remote); a command that fails otherwise is not.
func TestOOMKilledOverREST(t *testing.T) {
	srv := servertest.Start(t, servertest.Local(t, 91), "")
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	do := func(method, path string, body any, out any) int {
		t.Helper()
		b, _ := json.Marshal(body)
		req, _ := http.NewRequestWithContext(ctx, method, srv.URL+path, bytes.NewReader(b))
		req.Header.Set("Authorization", "Bearer "+srv.Key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if out != nil {
			if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
				t.Fatalf("%s %s: %v", method, path, err)
			}
		}
		return resp.StatusCode
	}
	var sb api.Sandbox
	if code := do("POST", "/v1/sandboxes", map[string]any{"network": map[string]any{"mode": "none"}, "size": map[string]any{"cpu": 1, "memoryMb": 128, "diskGb": 1}}, &sb); code != 201 {
		t.Fatalf("create: %d", code)
	}
	// First a command SIGKILL ends without an OOM: not oomKilled. (After an OOM kill, a
	// command started while the memory of the one killed is still being freed can be the
	// OOM killer's next pick; TestCommandOOMKilled waits for it.)
	var res api.RunResult
	if code := do("POST", "/v1/sandboxes/"+sb.ID+"/run", map[string]any{"command": "kill -9 $$"}, &res); code != 200 || res.OOMKilled || res.ExitCode != 137 {
		t.Errorf("REST run of a command killed by SIGKILL: %d %+v; want 137, not oomKilled", code, res)
	}
	const hog = "head -c 1024m /dev/zero | tail > /dev/null"
	if code := do("POST", "/v1/sandboxes/"+sb.ID+"/run", map[string]any{"command": hog}, &res); code != 200 || !res.OOMKilled || res.ExitCode != 137 || res.OK {
		t.Errorf("REST run of the hog: %d %+v; want oomKilled, 137", code, res)
	}
	// A background process: its wait result, and the process.exited event.
	var proc api.Process
	if code := do("POST", "/v1/sandboxes/"+sb.ID+"/processes", map[string]any{"command": "exec tail /dev/zero", "name": "hog"}, &proc); code != 200 && code != 201 {
		t.Fatalf("start the hog: %d", code)
	}
	var wr api.WaitResult
	if code := do("POST", "/v1/sandboxes/"+sb.ID+"/processes/hog/wait", map[string]any{"timeoutMs": 60000}, &wr); code != 200 || wr.Status != "exited" || !wr.OOMKilled || wr.ExitCode == nil || *wr.ExitCode != 137 {
		t.Errorf("REST wait of the hog: %d %+v; want exited, oomKilled, 137", code, wr)
	}
	evs, err := srv.Store.Events(ctx, store.EventFilter{SandboxID: sb.ID, Type: "process.exited"})
	if err != nil || len(evs) != 1 || !strings.Contains(string(evs[0].Data), `"oomKilled":true`) {
		t.Errorf("process.exited events: %+v, %v; want one with oomKilled", evs, err)
	}

	// The Go SDK through the server: providers/remote's exec is the NDJSON exec stream.
	rp := remote.New(remote.Config{URL: srv.URL, APIKey: srv.Key})
	box, err := sandbox.Connect(ctx, rp, sb.ID, sandbox.ConnectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer box.Close()
	r, err := box.Run(ctx, "exec tail /dev/zero", sandbox.RunOptions{})
	if err != nil || !r.OOMKilled || r.ExitCode != 137 || r.Signal != "SIGKILL" {
		t.Errorf("SDK run of the hog: %+v, %v; want OOMKilled, 137, SIGKILL", r, err)
	}
	inst, err := rp.Connect(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close()
	if er, err := inst.Exec(ctx, provider.ExecRequest{Command: "exec tail /dev/zero", Cwd: "/"}); err != nil || !er.OOMKilled || er.ExitCode != 137 {
		t.Errorf("the hog over the exec stream: %+v, %v; want 137, OOM-killed", er, err)
	}
}
