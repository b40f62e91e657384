package main

import (
	"strings"
	"testing"
)

// tupper fork ID -n 2 prints two new ids; each copy has the parent's files and its own
// writes; --full on a runtime without memory snapshots is an unsupported error.
func TestForkCLI(t *testing.T) {
	home := requireLocal(t)
	r := tupper(t, home, "", "create", "--network", "none", "--runtime", "runc")
	id := strings.TrimSpace(r.stdout)
	if r.code != 0 || id == "" {
		t.Fatalf("create: %+v", r)
	}
	if r := tupper(t, home, "", "exec", id, "--", "sh", "-c", "echo parent > /workspace/f"); r.code != 0 {
		t.Fatalf("exec: %+v", r)
	}
	r = tupper(t, home, "", "fork", id, "-n", "2")
	kids := strings.Fields(r.stdout)
	if r.code != 0 || len(kids) != 2 || kids[0] == kids[1] {
		t.Fatalf("fork printed %q (stderr %q)", r.stdout, r.stderr)
	}
	if r := tupper(t, home, "", "exec", kids[0], "--", "sh", "-c", "echo kid > /workspace/f"); r.code != 0 {
		t.Fatalf("exec in a copy: %+v", r)
	}
	for _, k := range []string{id, kids[1]} {
		if r := tupper(t, home, "", "exec", k, "--", "cat", "/workspace/f"); r.stdout != "parent\n" {
			t.Errorf("%s: %+v", k, r)
		}
	}
	if r := tupper(t, home, "", "snapshot", id, "--full"); r.code != exitTupperError || !strings.Contains(r.stderr, "unsupported") {
		t.Errorf("a full snapshot under runc: %+v", r)
	}
}
