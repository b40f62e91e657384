//go:build linux

package server_test

import (
	"strings"
	"testing"

	"github.com/tupper-dev/tupper/internal/testenv"
	"github.com/tupper-dev/tupper/server/servertest"
)

// Full snapshots and forks over the native API on real sandboxes: a runsc sandbox takes a
// named full snapshot, which is listed, inspected and deleted; a fork over REST gives each
// child a token that reaches that child only, with the parent's background process running
// in it; a runc sandbox refuses a full snapshot with 501 (unsupported).
func TestForkAndSnapshotsREST(t *testing.T) {
	prov := servertest.Local(t, 71)
	testenv.RequireBinary(t, "runsc")
	srv := servertest.Start(t, prov, "")
	type box struct{ ID, Token string }
	var sb box
	if code := call(t, "POST", srv.URL+"/v1/sandboxes", srv.Key, map[string]any{"network": "none", "runtime": "runsc"}, &sb); code != 201 {
		t.Fatalf("create: %d", code)
	}
	runOut := func(id, cred, cmd string) string {
		t.Helper()
		var res struct {
			Stdout   string
			ExitCode int
		}
		if code := call(t, "POST", srv.URL+"/v1/sandboxes/"+id+"/run", cred, map[string]any{"command": cmd}, &res); code != 200 || res.ExitCode != 0 {
			t.Fatalf("run %q in %s: %d %+v", cmd, id, code, res)
		}
		return strings.TrimSpace(res.Stdout)
	}
	runOut(sb.ID, sb.Token, `echo parent > /workspace/f; (n=0; while :; do n=$((n+1)); echo $n > /workspace/t.new; mv /workspace/t.new /workspace/t; sleep 0.05; done) >/dev/null 2>&1 & sleep 0.2`)

	var snap struct{ ID, Kind string }
	if code := call(t, "POST", srv.URL+"/v1/sandboxes/"+sb.ID+"/snapshot", srv.Key, map[string]any{"kind": "full", "name": "warm"}, &snap); code != 201 || snap.Kind != "full" {
		t.Fatalf("full snapshot: %d %+v", code, snap)
	}
	var list struct {
		Snapshots []struct{ ID, Name, Kind, Runtime, SandboxID string }
	}
	if code := call(t, "GET", srv.URL+"/v1/snapshots", srv.Key, nil, &list); code != 200 || len(list.Snapshots) != 1 {
		t.Fatalf("list: %d %+v", code, list)
	}
	if s := list.Snapshots[0]; s.ID != snap.ID || s.Name != "warm" || s.Kind != "full" || s.Runtime != "runsc" || s.SandboxID != sb.ID {
		t.Errorf("listed: %+v", s)
	}
	if code := call(t, "GET", srv.URL+"/v1/snapshots/"+snap.ID, sb.Token, nil, nil); code != 403 {
		t.Errorf("a sandbox token inspecting snapshots: %d, want 403", code)
	}
	if code := call(t, "DELETE", srv.URL+"/v1/snapshots/"+snap.ID, srv.Key, nil, nil); code != 204 {
		t.Errorf("delete: %d", code)
	}
	if code := call(t, "GET", srv.URL+"/v1/snapshots/"+snap.ID, srv.Key, nil, nil); code != 404 {
		t.Errorf("inspect after delete: %d, want 404", code)
	}

	var forked struct{ Sandboxes []box }
	if code := call(t, "POST", srv.URL+"/v1/sandboxes/"+sb.ID+"/fork", srv.Key, map[string]any{"n": 2, "labels": map[string]string{"k": "v"}}, &forked); code != 201 || len(forked.Sandboxes) != 2 {
		t.Fatalf("fork: %d %+v", code, forked)
	}
	for i, k := range forked.Sandboxes {
		if k.Token == "" || k.ID == sb.ID {
			t.Fatalf("child %d: %+v", i, k)
		}
		if got := runOut(k.ID, k.Token, "cat /workspace/f"); got != "parent" {
			t.Errorf("child %s: %q", k.ID, got)
		}
		// The loop counts every 50 ms, replacing the file by rename so a read never sees it
		// half written; a restored runsc sandbox on a loaded machine may take far longer to
		// run it again, so wait (up to 30 s) for the count to change.
		if got := runOut(k.ID, k.Token, `a=$(cat /workspace/t); i=0; while [ "$(cat /workspace/t)" = "$a" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done; [ "$(cat /workspace/t)" != "$a" ] && echo advanced || echo stuck at "$a"`); got != "advanced" {
			t.Errorf("child %s: the parent's background process is not running in it (%s)", k.ID, got)
		}
		// A child's token is that child's only.
		other := forked.Sandboxes[1-i].ID
		if code := call(t, "POST", srv.URL+"/v1/sandboxes/"+other+"/run", k.Token, map[string]any{"command": "true"}, nil); code != 403 && code != 404 {
			t.Errorf("child %d's token ran a command in its sibling: %d", i, code)
		}
	}
	runOut(forked.Sandboxes[0].ID, forked.Sandboxes[0].Token, "echo child > /workspace/f")
	if got := runOut(sb.ID, sb.Token, "cat /workspace/f"); got != "parent" {
		t.Errorf("the parent sees its child's write: %q", got)
	}
	if code := call(t, "GET", srv.URL+"/v1/snapshots", srv.Key, nil, &list); code != 200 || len(list.Snapshots) != 0 {
		t.Errorf("the fork left snapshots: %+v", list)
	}

	var rc box
	if code := call(t, "POST", srv.URL+"/v1/sandboxes", srv.Key, map[string]any{"network": "none", "runtime": "runc"}, &rc); code != 201 {
		t.Fatalf("create runc: %d", code)
	}
	if code := call(t, "POST", srv.URL+"/v1/sandboxes/"+rc.ID+"/snapshot", srv.Key, map[string]any{"kind": "full"}, nil); code != 501 {
		t.Errorf("a full snapshot of a runc sandbox: %d, want 501", code)
	}
}
