package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestVolumeCLI: tupper volume create, ls, inspect and rm, and --volume on run, against the
// local provider; a memory provider's refusal is a clear error.
func TestVolumeCLI(t *testing.T) {
	if r := tupper(t, t.TempDir(), "", "volume", "ls", "--provider", "memory"); r.code != exitTupperError || !strings.Contains(r.stderr, "has no volumes") {
		t.Errorf("volume ls on the memory provider: %+v", r)
	}
	if r := tupper(t, t.TempDir(), "", "run", "--provider", "memory", "--volume", "data:relative", "--", "true"); r.code != exitTupperError || !strings.Contains(r.stderr, "absolute") {
		t.Errorf("--volume data:relative: %+v", r)
	}
	home := requireLocal(t)
	if r := tupper(t, home, "", "volume", "create", "data", "--size", "64"); r.code != 0 || r.stdout != "data\n" {
		t.Fatalf("create: %+v", r)
	}
	if r := tupper(t, home, "", "run", "--network", "none", "--volume", "data:/data", "--", "sh", "-c", "echo kept > /data/f"); r.code != 0 {
		t.Fatalf("run with the volume: %+v", r)
	}
	if r := tupper(t, home, "", "run", "--network", "none", "-v", "data:/in:ro", "--", "sh", "-c", "cat /in/f; touch /in/g"); r.stdout != "kept\n" || r.code == 0 {
		t.Errorf("run with the volume read-only: %+v", r)
	}
	r := tupper(t, home, "", "volume", "inspect", "data")
	var v struct {
		Name      string
		SizeMB    int
		UsedBytes int64
		MountedBy []string
	}
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil || v.Name != "data" || v.SizeMB != 64 || v.UsedBytes == 0 || len(v.MountedBy) != 0 {
		t.Errorf("inspect: %+v %v", r, err)
	}
	if r := tupper(t, home, "", "volume", "ls"); r.code != 0 || !strings.Contains(r.stdout, "data") || !strings.Contains(r.stdout, "64.0 MiB") {
		t.Errorf("ls: %+v", r)
	}
	r = tupper(t, home, "", "create", "--network", "none", "--volume", "data:/data")
	id := strings.TrimSpace(r.stdout)
	if r.code != 0 {
		t.Fatalf("create a sandbox: %+v", r)
	}
	if r := tupper(t, home, "", "volume", "rm", "data"); r.code != exitTupperError || !strings.Contains(r.stderr, "mounted by sandbox "+id) {
		t.Errorf("rm while mounted: %+v", r)
	}
	if r := tupper(t, home, "", "rm", id); r.code != 0 {
		t.Fatalf("rm the sandbox: %+v", r)
	}
	if r := tupper(t, home, "", "volume", "rm", "data"); r.code != 0 {
		t.Errorf("rm: %+v", r)
	}
	if r := tupper(t, home, "", "volume", "inspect", "data"); r.code != exitTupperError || !strings.Contains(r.stderr, "not found") {
		t.Errorf("inspect after rm: %+v", r)
	}
}
