package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// tupper pause --drop-memory ends a local sandbox's processes and keeps its files; tupper
// resume boots it again. A plain pause and resume continue a process.
func TestPauseResume(t *testing.T) {
	home := requireLocal(t)
	r := tupper(t, home, "", "create", "--network", "none")
	id := strings.TrimSpace(r.stdout)
	if r.code != 0 || id == "" {
		t.Fatalf("create: %+v", r)
	}
	state := func() string {
		t.Helper()
		r := tupper(t, home, "", "ls", "--json")
		var rows []struct{ ID, State string }
		if err := json.Unmarshal([]byte(r.stdout), &rows); err != nil || len(rows) != 1 || rows[0].ID != id {
			t.Fatalf("ls --json: %s (%v)", r.stdout, err)
		}
		return rows[0].State
	}
	if r := tupper(t, home, "", "exec", id, "--", "sh", "-c", "echo kept > /workspace/f; setsid sleep 4242 </dev/null >/dev/null 2>&1 &"); r.code != 0 {
		t.Fatalf("exec: %+v", r)
	}
	sleepers := func() string {
		t.Helper()
		r := tupper(t, home, "", "exec", id, "--", "sh", "-c", `n=0; for f in /proc/[0-9]*/cmdline; do tr '\0' ' ' < "$f" 2>/dev/null | grep -q '^sleep 4242' && n=$((n+1)); done; echo $n`)
		if r.code != 0 {
			t.Fatalf("exec: %+v", r)
		}
		return strings.TrimSpace(r.stdout)
	}

	if r := tupper(t, home, "", "pause", id); r.code != 0 {
		t.Fatalf("pause: %+v", r)
	}
	if got := state(); got != "paused" {
		t.Errorf("state after pause: %s", got)
	}
	if r := tupper(t, home, "", "resume", id); r.code != 0 {
		t.Fatalf("resume: %+v", r)
	}
	if got := sleepers(); got != "1" {
		t.Errorf("after a pause with memory, %s sleep processes, want 1", got)
	}

	if r := tupper(t, home, "", "pause", id, "--drop-memory"); r.code != 0 {
		t.Fatalf("pause --drop-memory: %+v", r)
	}
	if got := state(); got != "paused" {
		t.Errorf("state after pause --drop-memory: %s", got)
	}
	if r := tupper(t, home, "", "exec", id, "--", "true"); r.code != exitTupperError || !strings.Contains(r.stderr, "conflict") {
		t.Errorf("exec while paused: %+v", r)
	}
	if r := tupper(t, home, "", "pause", id, "--drop-memory"); r.code != 0 {
		t.Errorf("a second pause --drop-memory: %+v", r)
	}
	if r := tupper(t, home, "", "resume", id); r.code != 0 {
		t.Fatalf("resume: %+v", r)
	}
	if got := state(); got != "running" {
		t.Errorf("state after resume: %s", got)
	}
	if r := tupper(t, home, "", "exec", id, "--", "cat", "/workspace/f"); r.code != 0 || r.stdout != "kept\n" {
		t.Errorf("the file after resume: %+v", r)
	}
	if got := sleepers(); got != "0" {
		t.Errorf("after pause --drop-memory, %s sleep processes from before, want 0", got)
	}
	if r := tupper(t, home, "", "pause", "nosuchsandbox", "--drop-memory"); r.code != exitTupperError || !strings.Contains(r.stderr, "not_found") {
		t.Errorf("pause of a missing sandbox: %+v", r)
	}
}
