//go:build linux

package agentinst_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tupper-dev/tupper/agent"
	"github.com/tupper-dev/tupper/agent/agenttest"
	"github.com/tupper-dev/tupper/agent/client"
	"github.com/tupper-dev/tupper/internal/testenv"
	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/provider/agentinst"
)

// newAgent is the instance half over the agent at sock.
func newAgent(t *testing.T, sock string, cfg agentinst.Config) *agentinst.Agent {
	t.Helper()
	cfg.ID = "sb1"
	cfg.Client = client.New(sock)
	a := agentinst.NewAgent(cfg)
	t.Cleanup(func() { a.Close() })
	return a
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestExecResults(t *testing.T) {
	sock, _ := agenttest.Serve(t, agent.Config{DefaultWorkdir: "/"})
	a := newAgent(t, sock, agentinst.Config{})
	for _, tc := range []struct {
		cmd      string
		stdin    string
		code     int
		signal   string
		out, err string
	}{
		{cmd: "echo out; echo err >&2; exit 3", code: 3, out: "out\n", err: "err\n"},
		{cmd: "tr a-z A-Z", stdin: "hello", out: "HELLO"},
		{cmd: "kill -TERM $$", code: 143, signal: "SIGTERM"},
		{cmd: "kill -KILL $$", code: 137, signal: "SIGKILL"},
		{cmd: "kill -USR1 $$", code: 138, signal: "SIGUSR1"},
		{cmd: "kill -s RTMIN+2 $$ 2>/dev/null || kill -36 $$", code: 164, signal: "SIG36"},
	} {
		var out, errb bytes.Buffer
		req := provider.ExecRequest{Command: tc.cmd, Cwd: "/", Stdout: &out, Stderr: &errb}
		if tc.stdin != "" {
			req.Stdin = strings.NewReader(tc.stdin)
		}
		res, err := a.Exec(ctxT(t), req)
		if err != nil {
			t.Fatalf("%s: %v", tc.cmd, err)
		}
		if res.ExitCode != tc.code || res.Signal != tc.signal || out.String() != tc.out || errb.String() != tc.err {
			t.Errorf("%s: got %+v, stdout %q, stderr %q; want %d %q %q %q", tc.cmd, res, out.String(), errb.String(), tc.code, tc.signal, tc.out, tc.err)
		}
	}
}

// failingWriter takes one write, then fails.
type failingWriter struct{ n int }

func (w *failingWriter) Write(p []byte) (int, error) {
	w.n++
	if w.n > 1 {
		return 0, errors.New("the reader went away")
	}
	return len(p), nil
}

// A command whose output cannot be written is killed, and Exec says why.
func TestExecWriterFails(t *testing.T) {
	sock, _ := agenttest.Serve(t, agent.Config{DefaultWorkdir: "/"})
	a := newAgent(t, sock, agentinst.Config{})
	pidFile := filepath.Join(t.TempDir(), "pid")
	_, err := a.Exec(ctxT(t), provider.ExecRequest{
		Command: "echo $$ > " + pidFile + "; exec yes", Cwd: "/", Stdout: &failingWriter{},
	})
	if provider.CodeOf(err) != provider.CodeAborted || !strings.Contains(err.Error(), "writing stdout: the reader went away") {
		t.Fatalf("got %v, want aborted: writing stdout", err)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	waitGone(t, pid)
}

// waitGone waits until pid no longer runs (a zombie counts as gone).
func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil || strings.Contains(string(stat), ") Z ") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d still runs", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A detached command outlives its ctx with stdin, stdout and stderr on /dev/null.
func TestDetach(t *testing.T) {
	sock, _ := agenttest.Serve(t, agent.Config{DefaultWorkdir: "/"})
	a := newAgent(t, sock, agentinst.Config{})
	ctx, cancel := context.WithCancel(ctxT(t))
	res, err := a.Exec(ctx, provider.ExecRequest{Command: "sleep 60", Cwd: "/", Detach: true})
	cancel()
	if err != nil || res.PID <= 0 {
		t.Fatalf("detach: %+v %v", res, err)
	}
	defer syscall.Kill(-res.PID, syscall.SIGKILL)
	// The shell redirects its own stdio as its first step, just after the start.
	deadline := time.Now().Add(10 * time.Second)
	for fd := 0; fd < 3; {
		target, err := os.Readlink("/proc/" + strconv.Itoa(res.PID) + "/fd/" + strconv.Itoa(fd))
		if err == nil && target == "/dev/null" {
			fd++
			continue
		}
		if time.Now().After(deadline) {
			t.Fatalf("fd %d of the detached command: %q %v", fd, target, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := syscall.Kill(res.PID, 0); err != nil {
		t.Errorf("the detached command did not outlive its ctx: %v", err)
	}
}

// Errors get the contract's codes: from the agent's Connect codes and REST statuses, from a
// failed connection, and from Config.Gone and Config.Check.
func TestErrors(t *testing.T) {
	sock, stop := agenttest.Serve(t, agent.Config{DefaultWorkdir: "/"})
	var gone atomic.Bool
	a := newAgent(t, sock, agentinst.Config{Gone: func(context.Context) bool { return gone.Load() }})
	dir := t.TempDir()
	ctx := ctxT(t)
	// The code once: the contract's error carries it, and the agent's text without it (it
	// was "…: not_found: agent: not_found: open …").
	if _, err := a.ReadFile(ctx, filepath.Join(dir, "missing")); provider.CodeOf(err) != provider.CodeNotFound || strings.Count(err.Error(), "not_found") != 1 {
		t.Errorf("read missing: %v", err)
	}
	if _, err := a.ReadFile(ctx, dir); provider.CodeOf(err) != provider.CodeInvalidArgument {
		t.Errorf("read a directory: %v", err)
	}
	if _, err := a.Stat(ctx, filepath.Join(dir, "missing")); provider.CodeOf(err) != provider.CodeNotFound {
		t.Errorf("stat missing: %v", err)
	}
	// The agent answers unauthenticated for a user it does not know: Connect's 401.
	if _, err := a.Exec(ctx, provider.ExecRequest{Command: "true", User: "no-such-user-x"}); provider.CodeOf(err) != provider.CodeUnauthorized ||
		provider.MessageOf(err) != "invalid username: 'no-such-user-x'" {
		t.Errorf("unknown user: %v", err)
	}
	if err := a.WriteFile(ctx, filepath.Join(dir, "f"), strings.NewReader("x"), ptr(0o10000)); provider.CodeOf(err) != provider.CodeInvalidArgument {
		t.Errorf("mode out of range: %v", err)
	}
	if os.Mkdir(filepath.Join(dir, "d"), 0o755) != nil || os.WriteFile(filepath.Join(dir, "d", "f"), nil, 0o644) != nil {
		t.Fatal("setting up d/f")
	}
	if err := a.Remove(ctx, filepath.Join(dir, "d"), false); provider.CodeOf(err) != provider.CodeInvalidArgument {
		t.Errorf("remove a non-empty directory: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := a.Stat(cctx, dir); !errors.Is(err, context.Canceled) || provider.CodeOf(err) != provider.CodeAborted {
		t.Errorf("cancelled: %v", err)
	}

	stop()
	if _, err := a.Stat(ctx, dir); provider.CodeOf(err) != provider.CodeUnavailable {
		t.Errorf("agent unreachable: %v", err)
	}
	if _, err := a.ReadFile(ctx, filepath.Join(dir, "d", "f")); provider.CodeOf(err) != provider.CodeUnavailable {
		t.Errorf("agent unreachable, /files: %v", err)
	}
	gone.Store(true)
	if _, err := a.Exec(ctx, provider.ExecRequest{Command: "true"}); provider.CodeOf(err) != provider.CodeNotFound || !strings.Contains(err.Error(), "sandbox sb1 has stopped") {
		t.Errorf("sandbox gone: %v", err)
	}
}

// Config.Check refuses a call before it is sent; a paused sandbox (CodeConflict) is busy.
func TestCheck(t *testing.T) {
	sock, _ := agenttest.Serve(t, agent.Config{DefaultWorkdir: "/"})
	var paused atomic.Bool
	a := newAgent(t, sock, agentinst.Config{Check: func(context.Context) error {
		if paused.Load() {
			return provider.Errorf(provider.CodeConflict, "paused")
		}
		return nil
	}})
	ctx := ctxT(t)
	if busy, err := a.Busy(ctx); err != nil || busy {
		t.Errorf("idle: %v %v", busy, err)
	}
	paused.Store(true)
	if busy, err := a.Busy(ctx); err != nil || !busy {
		t.Errorf("paused: %v %v", busy, err)
	}
	marker := filepath.Join(t.TempDir(), "ran")
	if _, err := a.Exec(ctx, provider.ExecRequest{Command: "touch " + marker}); provider.CodeOf(err) != provider.CodeConflict {
		t.Errorf("exec while paused: %v", err)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the command ran although Check refused it")
	}
}

func ptr(m uint32) *uint32 { return &m }

// The agent's fast path for a mode (sent with the file) and envd's (chmod afterwards) leave
// the same file, as the host sees it and as Stat reports it.
func TestWriteModeMatchesEnvd(t *testing.T) {
	sock, _ := agenttest.Serve(t, agent.Config{DefaultWorkdir: "/"})
	fast := newAgent(t, sock, agentinst.Config{})
	base := agentinst.NewEnvd(agentinst.Config{ID: "sb1", Client: client.New(sock)})
	defer base.Close()
	dir := t.TempDir()
	ctx := ctxT(t)
	for _, mode := range []*uint32{nil, ptr(0), ptr(0o600), ptr(0o755), ptr(0o4755), ptr(0o1777)} {
		var modes [2]os.FileMode
		var infos [2]provider.FileInfo
		for k, w := range []interface {
			WriteFile(context.Context, string, io.Reader, *uint32) error
			Stat(context.Context, string) (provider.FileInfo, error)
		}{fast, base} {
			p := filepath.Join(dir, "sub", strconv.Itoa(k))
			if err := w.WriteFile(ctx, p, strings.NewReader("data"), mode); err != nil {
				t.Fatalf("%d: %v", k, err)
			}
			st, err := os.Stat(p)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := os.ReadFile(p)
			if string(b) != "data" {
				t.Errorf("%d: content %q", k, b)
			}
			modes[k] = st.Mode()
			if infos[k], err = w.Stat(ctx, p); err != nil {
				t.Fatal(err)
			}
			os.Remove(p)
		}
		if modes[0] != modes[1] || infos[0].Mode != infos[1].Mode || infos[0].Type != provider.TypeFile {
			t.Errorf("mode %v: agent %v (%o), envd %v (%o)", mode, modes[0], infos[0].Mode, modes[1], infos[1].Mode)
		}
		if mode != nil && uint32(modes[0].Perm()) != *mode&0o777 {
			t.Errorf("mode %o: the file has %v", *mode, modes[0])
		}
	}
}

// Envd reaches an agent over HTTP through a proxy that routes by header, as E2B's does: the
// routing header and the access token are on every request (REST, unary and streaming RPCs),
// the default user applies where a command names none, and a command's own user wins.
func TestEnvdOverHTTP(t *testing.T) {
	testenv.RequireRoot(t)
	sock, _ := agenttest.Serve(t, agent.Config{DefaultWorkdir: "/", AccessToken: "tok"})
	var unrouted atomic.Int32
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host = "http", "agent"
		},
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}},
		FlushInterval: -1,
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("E2b-Sandbox-Id") != "sb1" {
			unrouted.Add(1)
			http.Error(w, "no such sandbox", http.StatusBadGateway)
			return
		}
		rp.ServeHTTP(w, r)
	}))
	defer srv.Close()
	h := http.Header{}
	h.Set("E2b-Sandbox-Id", "sb1")
	e := agentinst.NewEnvd(agentinst.Config{ID: "sb1", Client: client.NewWithOptions(client.Options{
		HTTPClient: srv.Client(), BaseURL: srv.URL + "/", Header: h, AccessToken: "tok", User: "nobody",
	})})
	defer e.Close()
	ctx := ctxT(t)

	whoami := func(user string) string {
		var out bytes.Buffer
		res, err := e.Exec(ctx, provider.ExecRequest{Command: "id -un", Cwd: "/", User: user, Stdout: &out})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("as %q: %+v %v", user, res, err)
		}
		return strings.TrimSpace(out.String())
	}
	if u := whoami(""); u != "nobody" {
		t.Errorf("default user: %s", u)
	}
	if u := whoami("root"); u != "root" {
		t.Errorf("a command's own user: %s", u)
	}
	dir := t.TempDir()
	if os.Chmod(filepath.Dir(dir), 0o711) != nil || os.Chmod(dir, 0o777) != nil {
		t.Fatal("making the directory nobody's to write in")
	}
	p := filepath.Join(dir, "f")
	if err := e.WriteFile(ctx, p, strings.NewReader("hello"), ptr(0o640)); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(p); err != nil || st.Mode().Perm() != 0o640 || st.Sys().(*syscall.Stat_t).Uid != 65534 {
		t.Errorf("written as nobody with mode 0640: %v %v", st, err)
	}
	rc, err := e.ReadFile(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	if string(b) != "hello" {
		t.Errorf("read %q", b)
	}
	if list, err := e.ListDir(ctx, dir, false); err != nil || len(list) != 1 || list[0].Path != p {
		t.Errorf("list: %v %v", list, err)
	}
	if err := e.Rename(ctx, p, p+"2"); err != nil {
		t.Fatal(err)
	}
	if err := e.Remove(ctx, p+"2", false); err != nil {
		t.Fatal(err)
	}
	if n := unrouted.Load(); n != 0 {
		t.Errorf("%d requests without the routing header", n)
	}

	// Without the token the agent refuses, as envd does: unauthorized.
	bare := agentinst.NewEnvd(agentinst.Config{ID: "sb1", Client: client.NewWithOptions(client.Options{HTTPClient: srv.Client(), BaseURL: srv.URL, Header: h})})
	if _, err := bare.Stat(ctx, "/"); provider.CodeOf(err) != provider.CodeUnauthorized {
		t.Errorf("no token, RPC: %v", err)
	}
	if _, err := bare.ReadFile(ctx, "/etc/hostname"); provider.CodeOf(err) != provider.CodeUnauthorized {
		t.Errorf("no token, /files: %v", err)
	}
}
