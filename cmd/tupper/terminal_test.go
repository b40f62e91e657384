package main

import (
	"regexp"
	"strings"
	"testing"
)

// TestExecTerminal drives `tupper exec -t` with piped standard input: no raw mode, an
// 80x24 terminal, the command's exit code passed on.
func TestExecTerminal(t *testing.T) {
	home := requireLocal(t)
	r := tupper(t, home, "", "create", "--network", "none")
	id := strings.TrimSpace(r.stdout)
	if r.code != 0 || id == "" {
		t.Fatalf("create: %+v", r)
	}
	t.Cleanup(func() { tupper(t, home, "", "rm", id) })

	r = tupper(t, home, "", "exec", "-t", id, "--", "sh", "-c", "tty; stty size; exit 5")
	if r.code != 5 {
		t.Errorf("exec -t: exit %d, want 5 (%+v)", r.code, r)
	}
	if !regexp.MustCompile(`^/dev/pts/[0-9]+\r?\n24 80\r?\n$`).MatchString(r.stdout) {
		t.Errorf("exec -t: stdout %q, want a /dev/pts path and 24 80", r.stdout)
	}

	// Without a command: a login shell, fed from the pipe; Ctrl-D at the end of the input
	// ends it.
	r = tupper(t, home, "echo in-$((20+1))\nexit 7\n", "exec", "-t", id)
	if r.code != 7 || !strings.Contains(r.stdout, "in-21") {
		t.Errorf("exec -t with a shell: %+v, want exit 7 and in-21", r)
	}

	// Input reaches the command through the terminal; Ctrl-D after it ends cat.
	r = tupper(t, home, "typed\n", "exec", "-t", id, "--", "cat")
	if r.code != 0 || strings.Count(r.stdout, "typed") != 2 {
		t.Errorf("exec -t cat: %+v, want the echo and cat's copy of the input", r)
	}

	if r := tupper(t, home, "", "exec", id); r.code != exitTupperError {
		t.Errorf("exec without -t or a command: %+v, want exit %d", r, exitTupperError)
	}
}
