//go:build linux

package agent_test

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/tupper-dev/tupper/agent"
	"github.com/tupper-dev/tupper/agent/client"
	"github.com/tupper-dev/tupper/internal/testenv"
)

// TestHiding checks, as root, that commands can neither see nor open the
// agent's socket directory and binary, cannot unmount the covers, and run
// in another mount namespace, while the agent (the same process) keeps its
// own view and keeps serving.
func TestHiding(t *testing.T) {
	testenv.RequireRoot(t)
	runDir := t.TempDir() // like /.tupper/run: the socket and the config
	sock := filepath.Join(runDir, "agent.sock")
	if err := os.WriteFile(filepath.Join(runDir, "config.json"), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "tupper") // like /.tupper/bin/tupper
	if err := os.WriteFile(bin, []byte("#!/bin/sh\necho binary-ran\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- agent.Serve(ctx, ln, agent.Config{HidePaths: []string{runDir, bin}}) }()
	c := client.New(sock)
	t.Cleanup(func() { cancel(); <-done; c.Close() })

	sh := func(user, script string) (string, int) {
		t.Helper()
		var out bytes.Buffer
		res, err := c.Exec(ctxT(t), client.ExecRequest{Command: script, User: user, Cwd: "/", Stdout: &out, Stderr: &out,
			Env: map[string]string{"RUN": runDir, "SOCK": sock, "BIN": bin}})
		if err != nil {
			t.Fatal(err)
		}
		return out.String(), res.ExitCode
	}
	for _, user := range []string{"root", "nobody"} {
		out, _ := sh(user, `
			test -e "$SOCK" && echo SOCKET-VISIBLE
			ls -A "$RUN"
			cat "$RUN/config.json" 2>/dev/null && echo CONFIG-READABLE
			cat "$BIN"
			"$BIN" 2>/dev/null
			echo x > "$RUN/new" 2>/dev/null && echo DIR-WRITABLE
			echo x > "$BIN" 2>/dev/null; cat "$BIN"
			umount "$RUN" 2>/dev/null && echo UNMOUNTED
			umount "$BIN" 2>/dev/null && echo UNMOUNTED
			echo end`)
		for _, bad := range []string{"SOCKET-VISIBLE", "agent.sock", "config.json", "CONFIG-READABLE", "binary", "DIR-WRITABLE", "UNMOUNTED"} {
			if strings.Contains(out, bad) {
				t.Errorf("as %s: %s:\n%s", user, bad, out)
			}
		}
		if !strings.HasSuffix(out, "end\n") {
			t.Errorf("as %s: script did not finish:\n%s", user, out)
		}
	}

	// Commands have no CAP_SYS_ADMIN in any set, even as root.
	out, _ := sh("root", `grep -E '^Cap(Inh|Prm|Eff|Bnd|Amb)' /proc/self/status`)
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 || len(f[1]) != 16 {
			t.Fatalf("capability line %q", line)
		}
		if f[1][16-6]&0x2 != 0 { // bit 21: hex digit 5 from the right, value 2
			t.Errorf("CAP_SYS_ADMIN kept: %s", line)
		}
	}
	// Another mount namespace than the agent's: this thread's (not the
	// spawner's: that one is locked to its goroutine) and the main
	// thread's, which is what /proc/<pid>/ns/mnt and runc exec see.
	runtime.LockOSThread()
	own, err := os.Readlink("/proc/thread-self/ns/mnt")
	runtime.UnlockOSThread()
	if err != nil {
		t.Fatal(err)
	}
	if leader, err := os.Readlink("/proc/self/ns/mnt"); err != nil || leader != own {
		t.Errorf("the main thread moved to mount namespace %q (%v), agent's is %q", leader, err, own)
	}
	out, _ = sh("root", "readlink /proc/self/ns/mnt")
	if got := strings.TrimSpace(out); got == own || !strings.HasPrefix(got, "mnt:[") {
		t.Errorf("command's mount namespace %q, agent's %q", got, own)
	}

	// The agent's own view is unchanged: its file API reads and writes the
	// hidden directory, and the host sees what it wrote.
	if err := c.WriteFile(ctxT(t), filepath.Join(runDir, "from-agent"), strings.NewReader("hi"), client.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(runDir, "from-agent")); err != nil || string(b) != "hi" {
		t.Errorf("agent's write into the hidden dir: %q %v", b, err)
	}
	if b, err := os.ReadFile(bin); err != nil || !strings.Contains(string(b), "binary-ran") {
		t.Errorf("hiding leaked into the agent's namespace: %q %v", b, err)
	}
	if out, _ := sh("root", `ls -A "$RUN"`); strings.TrimSpace(out) != "" {
		t.Errorf("command sees the agent's new file: %q", out)
	}
	// Exit codes, cwd and a second connection still work.
	if out, code := sh("root", "pwd; exit 7"); code != 7 || out != "/\n" {
		t.Errorf("exit 7 in /: %q %d", out, code)
	}
	c2 := client.New(sock)
	defer c2.Close()
	if err := c2.Health(ctxT(t)); err != nil {
		t.Fatal(err)
	}
}

// TestHidingConcurrent starts commands from many goroutines at once: they
// all go through the one spawner thread (run with -race).
func TestHidingConcurrent(t *testing.T) {
	testenv.RequireRoot(t)
	hidden := t.TempDir()
	os.WriteFile(filepath.Join(hidden, "secret"), []byte("x"), 0o600)
	ta := startAgent(t, agent.Config{HidePaths: []string{hidden}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	errs := make(chan string, 16)
	for i := 0; i < cap(errs); i++ {
		go func() {
			var out bytes.Buffer
			res, err := ta.c.Exec(ctx, client.ExecRequest{Argv: []string{"ls", "-A", hidden}, Stdout: &out, Stderr: &out})
			switch {
			case err != nil:
				errs <- err.Error()
			case res.ExitCode != 0 || out.Len() != 0:
				errs <- "exit " + res.Status + ": " + out.String()
			default:
				errs <- ""
			}
		}()
	}
	for i := 0; i < cap(errs); i++ {
		if e := <-errs; e != "" {
			t.Error(e)
		}
	}
}

// TestHidingNeedsRoot: without root the agent refuses hidePaths.
func TestHidingNeedsRoot(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("runs as root")
	}
	ln, err := net.Listen("unix", filepath.Join(t.TempDir(), "s"))
	if err != nil {
		t.Fatal(err)
	}
	if err := agent.Serve(context.Background(), ln, agent.Config{HidePaths: []string{"/tmp"}}); err == nil {
		t.Fatal("Serve with hidePaths as non-root succeeded")
	}
}
