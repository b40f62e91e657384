package main

import "testing"

// Each subcommand is built alone when named, and its table name is its cobra name, so
// lazy construction never turns a real command into "unknown command".
func TestRootBuildsOnlyTheNamedSubcommand(t *testing.T) {
	all := newRootCmd(nil).Commands()
	if len(all) != len(subcommands) {
		t.Fatalf("full tree has %d commands, the table %d", len(all), len(subcommands))
	}
	for _, c := range subcommands {
		root := newRootCmd([]string{c.name, "--help"})
		cmds := root.Commands()
		if len(cmds) != 1 || cmds[0].Name() != c.name {
			t.Errorf("newRootCmd(%q): got %d commands, first %q", c.name, len(cmds), cmds[0].Name())
		}
		found, _, err := root.Find([]string{c.name})
		if err != nil || found.Name() != c.name {
			t.Errorf("Find(%q) = %v, %v", c.name, found.Name(), err)
		}
	}
	for _, args := range [][]string{nil, {}, {"--help"}, {"help", "exec"}, {"nope"}, {"--url", "x", "exec"}} {
		if n := len(newRootCmd(args).Commands()); n != len(subcommands) {
			t.Errorf("newRootCmd(%q) built %d commands, want all %d", args, n, len(subcommands))
		}
	}
}
