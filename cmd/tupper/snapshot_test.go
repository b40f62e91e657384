package main

import (
	"strings"
	"testing"
)

// TestSnapshotVerbs: snapshot ls, inspect and rm are subcommands (not sandbox ids to
// snapshot) and say so clearly where the provider cannot list or delete snapshots; inspect
// of a sandbox that does not exist is not_found. Against a server: server's
// TestSnapshotCLIAgainstServer.
func TestSnapshotVerbs(t *testing.T) {
	home := t.TempDir()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"snapshot", "ls", "--provider", "memory"}, "cannot list snapshots"},
		{[]string{"snapshot", "ls", "--json", "--provider", "memory"}, "cannot list snapshots"},
		{[]string{"snapshot", "inspect", "snap", "--provider", "memory"}, "cannot inspect snapshots"},
		{[]string{"snapshot", "rm", "snap", "--provider", "memory"}, "cannot delete snapshots"},
		{[]string{"inspect", "sb-nope", "--provider", "memory"}, "not_found"},
	} {
		if r := tupper(t, home, "", c.args...); r.code != exitTupperError || !strings.Contains(r.stderr, c.want) {
			t.Errorf("tupper %s: %+v, want exit %d and %q", strings.Join(c.args, " "), r, exitTupperError, c.want)
		}
	}
	if r := tupper(t, home, "", "snapshot", "--help"); r.code != 0 || !strings.Contains(r.stdout, "ls") || !strings.Contains(r.stdout, "rm") || !strings.Contains(r.stdout, "inspect") {
		t.Errorf("snapshot --help: %+v", r)
	}
}
