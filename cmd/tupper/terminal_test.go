//go:build linux

package main

import (
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/tupper-dev/tupper/providers/local"
	"github.com/tupper-dev/tupper/sandbox"
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

// TestExecTerminalRedactsSecrets: `tupper exec -t` goes through the SDK, so a secret the
// sandbox was created with is redacted from the terminal's output as from `tupper exec`'s.
func TestExecTerminalRedactsSecrets(t *testing.T) {
	home := requireLocal(t)
	prov, err := local.New(local.Config{Home: home, AgentPath: tupperBin(t)})
	if err != nil {
		t.Fatal(err)
	}
	const secret = "tok-7c1f9e2ab34d5e6f"
	ctx := t.Context()
	box, err := sandbox.Create(ctx, prov, sandbox.CreateOptions{
		Network: sandbox.NetworkNone,
		Secrets: map[string]string{"TUPPER_TEST_TOKEN": secret},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = box.Destroy(context.Background()) })
	box.Close()

	// The command prints the secret whole, and again split by a byte the shell removes, so
	// the terminal (which sees the joined text) must redact it too.
	script := `printf '[%s]\n' "$TUPPER_TEST_TOKEN"; printf 'tok-7c1f9e2a%s\n' b34d5e6f`
	for _, args := range [][]string{
		{"exec", "-t", box.ID, "--", "sh", "-c", script},
		{"exec", box.ID, "--", "sh", "-c", script},
	} {
		r := tupper(t, home, "", args...)
		if r.code != 0 {
			t.Fatalf("tupper %v: %+v", args, r)
		}
		out := strings.ReplaceAll(r.stdout, "\r\n", "\n")
		if strings.Contains(out, secret) || strings.Contains(r.stderr, secret) {
			t.Errorf("tupper %v printed the secret: %q", args, out)
		}
		if want := "[" + sandbox.Redacted + "]\n" + sandbox.Redacted + "\n"; out != want {
			t.Errorf("tupper %v: stdout %q, want %q", args, out, want)
		}
	}
}
