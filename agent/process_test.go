//go:build linux

package agent_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tupper-dev/tupper/agent"
	"github.com/tupper-dev/tupper/agent/client"
	"github.com/tupper-dev/tupper/internal/syncbuf"
)

func TestExecOutputAndExitCodes(t *testing.T) {
	ta := startAgent(t, agent.Config{})
	ctx := ctxT(t)
	var out, errb bytes.Buffer
	res, err := ta.c.Exec(ctx, client.ExecRequest{Command: "echo out; echo err >&2; exit 3", Stdout: &out, Stderr: &errb})
	if err != nil {
		t.Fatal(err)
	}
	if out.String() != "out\n" || errb.String() != "err\n" {
		t.Errorf("stdout %q stderr %q", out.String(), errb.String())
	}
	if res.ExitCode != 3 || !res.Exited || res.Status != "exit status 3" || res.PID <= 0 {
		t.Errorf("result %+v", res)
	}
	res, err = ta.c.Exec(ctx, client.ExecRequest{Argv: []string{"true"}})
	if err != nil || res.ExitCode != 0 || res.Status != "exit status 0" {
		t.Errorf("true: %+v %v", res, err)
	}
	res, err = ta.c.Exec(ctx, client.ExecRequest{Command: "kill -9 $$"})
	if err != nil || res.ExitCode != -1 || res.Exited || res.Status != "signal: killed" {
		t.Errorf("kill -9: %+v %v", res, err)
	}
	_, err = ta.c.Exec(ctx, client.ExecRequest{Argv: []string{"no-such-program-xyz"}})
	if client.CodeOf(err) != client.CodeInvalidArgument || !strings.Contains(err.Error(), "not found") {
		t.Errorf("missing program: %v", err)
	}
}

func TestExecOrderAndLargeOutput(t *testing.T) {
	ta := startAgent(t, agent.Config{})
	var out bytes.Buffer
	// 200k numbered lines: order and completeness across many chunks.
	res, err := ta.c.Exec(ctxT(t), client.ExecRequest{Command: "seq 1 200000", Stdout: &out})
	if err != nil || res.ExitCode != 0 {
		t.Fatal(res, err)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 200000 {
		t.Fatalf("got %d lines", len(lines))
	}
	for i, l := range lines {
		if l != strconv.Itoa(i+1) {
			t.Fatalf("line %d is %q", i, l)
		}
	}
}

func TestExecStdin(t *testing.T) {
	ta := startAgent(t, agent.Config{})
	ctx := ctxT(t)
	var out bytes.Buffer
	in := strings.Repeat("hello stdin\n", 20000) // several SendInput chunks
	res, err := ta.c.Exec(ctx, client.ExecRequest{Command: "cat", Stdin: strings.NewReader(in), Stdout: &out})
	if err != nil || res.ExitCode != 0 {
		t.Fatal(res, err)
	}
	if out.String() != in {
		t.Errorf("cat echoed %d bytes, want %d", out.Len(), len(in))
	}
	// Without Stdin the process reads EOF at once.
	out.Reset()
	res, err = ta.c.Exec(ctx, client.ExecRequest{Command: "cat; echo eof", Stdout: &out})
	if err != nil || out.String() != "eof\n" {
		t.Errorf("closed stdin: %q %+v %v", out.String(), res, err)
	}
}

func TestExecEnvCwdUser(t *testing.T) {
	ta := startAgent(t, agent.Config{Env: map[string]string{"SBX": "sandbox", "OVER": "config"}})
	ctx := ctxT(t)
	home, _ := os.UserHomeDir()
	sub, err := os.MkdirTemp(home, "agent-cwd-")
	if err != nil {
		t.Skip("home not writable:", err)
	}
	defer os.RemoveAll(sub)
	var out bytes.Buffer
	res, err := ta.c.Exec(ctx, client.ExecRequest{
		Command: `printf '%s|%s|%s|%s|%s' "$SBX" "$OVER" "$REQ" "$HOME" "$(pwd)"; test -n "$PATH" && test -n "$USER"`,
		Env:     map[string]string{"OVER": "request", "REQ": "r"},
		Cwd:     filepath.Base(sub), // relative: against the home directory
		Stdout:  &out,
	})
	if err != nil || res.ExitCode != 0 {
		t.Fatal(res, err, out.String())
	}
	want := "sandbox|request|r|" + home + "|" + sub
	if out.String() != want {
		t.Errorf("got %q want %q", out.String(), want)
	}
	_, err = ta.c.Exec(ctx, client.ExecRequest{Command: "true", Cwd: "/no/such/dir"})
	if client.CodeOf(err) != client.CodeInvalidArgument || !strings.Contains(err.Error(), "/no/such/dir") {
		t.Errorf("missing cwd: %v", err)
	}
}

// A user the sandbox does not have is refused in envd's words, as E2B's SDKs show them
// (commands.run with a user, a template's runCmd with one): it was "user "x" not found in
// /etc/passwd".
func TestExecUnknownUser(t *testing.T) {
	ta := startAgent(t, agent.Config{})
	_, err := ta.c.WithUser("no-such-user").Exec(ctxT(t), client.ExecRequest{Command: "true"})
	if client.CodeOf(err) != client.CodeUnauthenticated || !strings.HasSuffix(err.Error(), "invalid username: 'no-such-user'") {
		t.Errorf("exec as an unknown user: %v", err)
	}
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

func waitDead(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("process %d still alive", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestTimeoutKillsProcessGroup(t *testing.T) {
	ta := startAgent(t, agent.Config{})
	pidFile := filepath.Join(t.TempDir(), "bg.pid")
	start := time.Now()
	res, err := ta.c.Exec(ctxT(t), client.ExecRequest{
		Command: "sleep 100 & echo $! > " + pidFile + "; sleep 100",
		Timeout: 300 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if !res.TimedOut || res.Exited || res.Status != "signal: killed" {
		t.Errorf("result %+v", res)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %v", d)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	bg, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	waitDead(t, bg) // the background child of the group died too
}

func TestDetachAttachSignal(t *testing.T) {
	ta := startAgent(t, agent.Config{})
	ctx := ctxT(t)
	pidFile := filepath.Join(t.TempDir(), "bg.pid")
	pid, err := ta.c.Detach(ctx, client.ExecRequest{Command: "sleep 100 & echo $! > " + pidFile + "; echo started; sleep 100", Tag: "svc"})
	if err != nil {
		t.Fatal(err)
	}
	list, err := ta.c.List(ctx)
	if err != nil || len(list) != 1 || list[0].PID != pid || list[0].Tag != "svc" || list[0].Cmd != "/bin/sh" {
		t.Fatalf("list %+v %v", list, err)
	}
	busy, err := ta.c.Busy(ctx)
	if err != nil || !busy.Busy || busy.Processes != 1 {
		t.Errorf("busy %+v %v", busy, err)
	}
	// The detached process outlives its Start stream.
	var bgPid int
	for deadline := time.Now().Add(5 * time.Second); ; {
		b, _ := os.ReadFile(pidFile)
		if bgPid, _ = strconv.Atoi(strings.TrimSpace(string(b))); bgPid > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !alive(pid) || bgPid == 0 {
		t.Fatal("detached process is not running")
	}
	attached := make(chan client.ExecResult, 1)
	go func() {
		res, err := ta.c.AttachTag(ctx, "svc", nil, nil)
		if err != nil {
			t.Error(err)
		}
		attached <- res
	}()
	time.Sleep(50 * time.Millisecond) // let Attach subscribe; the result below holds either way
	if err := ta.c.Signal(ctx, pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	res := <-attached
	if res.PID != pid || res.Status != "signal: terminated" || res.Exited {
		t.Errorf("attach result %+v", res)
	}
	waitDead(t, bgPid) // SIGTERM went to the whole group
	// An ended process can still be attached to: start then end at once.
	res, err = ta.c.Attach(ctx, pid, nil, nil)
	if err != nil || res.Status != "signal: terminated" {
		t.Errorf("attach after end: %+v %v", res, err)
	}
	if err := ta.c.Signal(ctx, pid, syscall.SIGKILL); !client.IsNotFound(err) {
		t.Errorf("signal after end: %v", err)
	}
	if _, err := ta.c.Attach(ctx, 999999, nil, nil); !client.IsNotFound(err) {
		t.Errorf("attach unknown: %v", err)
	}
	busy, _ = ta.c.Busy(ctx)
	if busy.Busy {
		t.Errorf("still busy: %+v", busy)
	}
}

func TestCancelKillsProcess(t *testing.T) {
	ta := startAgent(t, agent.Config{})
	ctx, cancel := context.WithCancel(ctxT(t))
	var out syncbuf.Buffer
	done := make(chan struct{})
	var res client.ExecResult
	var err error
	go func() {
		res, err = ta.c.Exec(ctx, client.ExecRequest{Command: "echo $$; exec sleep 100", Stdout: &out})
		close(done)
	}()
	for out.String() == "" {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	<-done
	if !errors.Is(err, context.Canceled) {
		t.Errorf("err %v", err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(out.String()))
	if pid != res.PID {
		t.Errorf("pid %d vs %d", pid, res.PID)
	}
	waitDead(t, pid)
}

func TestOutputOfBackgroundChildDoesNotHang(t *testing.T) {
	ta := startAgent(t, agent.Config{})
	start := time.Now()
	var out bytes.Buffer
	// The background sleep keeps stdout open after the shell exits.
	res, err := ta.c.Exec(ctxT(t), client.ExecRequest{Command: "echo hi; sleep 5 &", Stdout: &out})
	if err != nil || res.ExitCode != 0 || out.String() != "hi\n" {
		t.Fatal(res, err, out.String())
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("exec waited for the background child: %v", d)
	}
}

// TestOutputWrittenBeforeExitIsKept: with no grace at all after the exit (as if the
// agent were not scheduled for the whole grace, as in a sandbox throttled by its CPU
// quota), everything a command wrote before it exited still arrives, on a pipe and on a
// terminal; and a background writer that never stops does not hold the result.
func TestOutputWrittenBeforeExitIsKept(t *testing.T) {
	defer agent.SetDrainGrace(0)()
	ta := startAgent(t, agent.Config{})
	for i := range 40 {
		var out, errb bytes.Buffer
		res, err := ta.c.Exec(ctxT(t), client.ExecRequest{Command: "head -c 60000 /dev/zero; echo err >&2", Stdout: &out, Stderr: &errb})
		if err != nil || res.ExitCode != 0 || out.Len() != 60000 || errb.String() != "err\n" {
			t.Fatalf("run %d: %+v %v: %d bytes of stdout, stderr %q", i, res, err, out.Len(), errb.String())
		}
	}
	for i := range 10 {
		term, err := ta.c.Terminal(ctxT(t), client.TerminalRequest{Argv: []string{"/bin/sh", "-c", "echo hi"}, Cols: 80, Rows: 24})
		if err != nil {
			t.Fatal(err)
		}
		out, _ := io.ReadAll(term)
		res, err := term.Wait(ctxT(t))
		if err != nil || res.ExitCode != 0 || !strings.Contains(string(out), "hi") {
			t.Fatalf("terminal run %d: %+v %v: %q", i, res, err, out)
		}
	}
	start := time.Now()
	var out syncbuf.Buffer
	res, err := ta.c.Exec(ctxT(t), client.ExecRequest{Command: "(timeout 5 yes &); echo started", Stdout: &out})
	if err != nil || res.ExitCode != 0 || !strings.Contains(out.String(), "started") {
		t.Fatal(res, err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("a writer that never stops held the result for %v", d)
	}
}
