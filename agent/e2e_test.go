//go:build linux

package agent_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/tupper-dev/tupper/agent"
	"github.com/tupper-dev/tupper/agent/client"
	"github.com/tupper-dev/tupper/agent/spec/process"
	"github.com/tupper-dev/tupper/agent/spec/process/processconnect"
	"github.com/tupper-dev/tupper/internal/testenv"
)

type envelope struct {
	flags byte
	body  []byte
}

// startJSON posts a Start request the way E2B's JS SDK does and returns the
// response envelopes.
func startJSON(t *testing.T, sock, body string, hdr map[string]string) (int, []envelope) {
	t.Helper()
	var in bytes.Buffer
	in.WriteByte(0)
	binary.Write(&in, binary.BigEndian, uint32(len(body)))
	in.WriteString(body)
	req, _ := http.NewRequest("POST", "http://sandbox/process.Process/Start", &in)
	req.Header.Set("Content-Type", "application/connect+json")
	req.Header.Set("Connect-Protocol-Version", "1")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := rawHTTP(sock).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out []envelope
	for {
		var h [5]byte
		if _, err := io.ReadFull(resp.Body, h[:]); err != nil {
			break
		}
		b := make([]byte, binary.BigEndian.Uint32(h[1:]))
		io.ReadFull(resp.Body, b)
		out = append(out, envelope{h[0], b})
	}
	return resp.StatusCode, out
}

func TestStartRawConnectJSON(t *testing.T) {
	ta := startAgent(t, agent.Config{})
	status, envs := startJSON(t, ta.sock, `{"process":{"cmd":"/bin/bash","args":["-l","-c","echo hi; exit 2"]},"stdin":false}`,
		map[string]string{"Connect-Timeout-Ms": "60000", "Keepalive-Ping-Interval": "50"})
	if status != 200 || len(envs) < 4 {
		t.Fatalf("status %d, %d envelopes", status, len(envs))
	}
	var first struct {
		Event struct {
			Start struct {
				Pid int `json:"pid"`
			} `json:"start"`
		} `json:"event"`
	}
	if json.Unmarshal(envs[0].body, &first); first.Event.Start.Pid <= 0 {
		t.Errorf("first envelope %s", envs[0].body)
	}
	var stdout []byte
	for _, e := range envs[1 : len(envs)-2] {
		var d struct {
			Event struct {
				Data struct {
					Stdout []byte `json:"stdout"`
				} `json:"data"`
			} `json:"event"`
		}
		json.Unmarshal(e.body, &d)
		stdout = append(stdout, d.Event.Data.Stdout...)
	}
	if string(stdout) != "hi\n" {
		t.Errorf("stdout %q", stdout)
	}
	end := envs[len(envs)-2]
	var endEv map[string]map[string]map[string]any
	json.Unmarshal(end.body, &endEv)
	if e := endEv["event"]["end"]; e["exitCode"] != float64(2) || e["exited"] != true || e["status"] != "exit status 2" || e["error"] != "exit status 2" {
		t.Errorf("end envelope %s", end.body)
	}
	last := envs[len(envs)-1]
	if last.flags != 2 || string(last.body) != "{}" {
		t.Errorf("end-stream %d %s", last.flags, last.body)
	}
}

func TestStartDeadlineExceededJSON(t *testing.T) {
	ta := startAgent(t, agent.Config{})
	_, envs := startJSON(t, ta.sock, `{"process":{"cmd":"/bin/sh","args":["-c","sleep 100"]}}`,
		map[string]string{"Connect-Timeout-Ms": "200"})
	if len(envs) < 3 {
		t.Fatalf("%d envelopes", len(envs))
	}
	if end := string(envs[len(envs)-2].body); !strings.Contains(end, `"status":"signal: killed"`) {
		t.Errorf("end %s", end)
	}
	last := envs[len(envs)-1]
	if last.flags != 2 || !strings.Contains(string(last.body), `"code":"deadline_exceeded"`) {
		t.Errorf("end-stream %s", last.body)
	}
}

func TestKeepalive(t *testing.T) {
	ta := startAgent(t, agent.Config{})
	_, envs := startJSON(t, ta.sock, `{"process":{"cmd":"/bin/sh","args":["-c","sleep 2.5"]}}`,
		map[string]string{"Keepalive-Ping-Interval": "1"})
	n := 0
	for _, e := range envs {
		if strings.Contains(string(e.body), `"keepalive"`) {
			n++
		}
	}
	if n < 2 {
		t.Errorf("%d keepalives in a 2.5 s stream at 1 s", n)
	}
}

func TestPTY(t *testing.T) { testPTY(t, agent.Config{}) }

// TestPTYHidden starts the PTY from the spawner's thread (Setsid, Setctty).
func TestPTYHidden(t *testing.T) {
	testenv.RequireRoot(t)
	testPTY(t, agent.Config{HidePaths: []string{t.TempDir()}})
}

func testPTY(t *testing.T, cfg agent.Config) {
	if _, err := os.Stat("/dev/ptmx"); err != nil {
		testenv.Skip(t, "no /dev/ptmx")
	}
	ta := startAgent(t, cfg)
	pc := processconnect.NewProcessClient(rawHTTP(ta.sock), "http://sandbox")
	ctx := ctxT(t)
	stream, err := pc.Start(ctx, connect.NewRequest(&process.StartRequest{
		Process: &process.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", "stty size; read line; echo got:$line"}},
		Pty:     &process.PTY{Size: &process.PTY_Size{Cols: 100, Rows: 30}},
	}))
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	var pid uint32
	sentInput := false
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		if s := ev.GetStart(); s != nil {
			pid = s.GetPid()
		}
		out.Write(ev.GetData().GetPty())
		if !sentInput && strings.Contains(out.String(), "30 100") {
			sentInput = true
			_, err := pc.SendInput(ctx, connect.NewRequest(&process.SendInputRequest{
				Process: &process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: pid}},
				Input:   &process.ProcessInput{Input: &process.ProcessInput_Pty{Pty: []byte("abc\n")}},
			}))
			if err != nil {
				t.Fatal(err)
			}
		}
		if end := ev.GetEnd(); end != nil && end.GetExitCode() != 0 {
			t.Errorf("end %v", end)
		}
	}
	if !strings.Contains(out.String(), "got:abc") {
		t.Errorf("pty output %q", out.String())
	}
}

func TestLifetimeDeadline(t *testing.T) {
	dir := t.TempDir()
	ln, _ := net.Listen("unix", filepath.Join(dir, "s"))
	done := make(chan error, 1)
	go func() {
		done <- agent.Serve(context.Background(), ln, agent.Config{DeadlineUnix: time.Now().Add(time.Hour).Unix()})
	}()
	c := client.New(filepath.Join(dir, "s"))
	ctx := ctxT(t)
	pid, err := c.Detach(ctx, client.ExecRequest{Command: "sleep 100"})
	if err != nil {
		t.Fatal(err)
	}
	// Bring the deadline forward through the extension endpoint.
	if err := c.SetDeadline(ctx, time.Now().Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if b, _ := c.Busy(ctx); b.DeadlineUnix == 0 {
		t.Errorf("busy %+v", b)
	}
	select {
	case err := <-done:
		if !errors.Is(err, agent.ErrDeadline) {
			t.Errorf("serve: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("agent outlived its deadline")
	}
	waitDead(t, pid)
	if c.Health(ctx) == nil {
		t.Error("agent still answers")
	}
}

func TestIdleTimeout(t *testing.T) {
	dir := t.TempDir()
	ln, _ := net.Listen("unix", filepath.Join(dir, "s"))
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- agent.Serve(context.Background(), ln, agent.Config{IdleTimeoutSeconds: 1}) }()
	c := client.New(filepath.Join(dir, "s"))
	// A running process keeps the agent alive past the idle timeout.
	if _, err := c.Exec(ctxT(t), client.ExecRequest{Command: "sleep 1.5"}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, agent.ErrIdle) {
			t.Errorf("serve: %v", err)
		}
		if d := time.Since(start); d < 2500*time.Millisecond {
			t.Errorf("stopped after %v: busy time counted as idle", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("agent never went idle")
	}
}

func sign(path, op, user, token string, exp int64) string {
	s := path + ":" + op + ":" + user + ":" + token
	if exp != 0 {
		s += ":" + strconv.FormatInt(exp, 10)
	}
	sum := sha256.Sum256([]byte(s))
	return "v1_" + base64.RawStdEncoding.EncodeToString(sum[:])
}

func TestAccessToken(t *testing.T) {
	const token = "s3cret"
	ta := startAgent(t, agent.Config{AccessToken: token})
	ctx := ctxT(t)
	hc := rawHTTP(ta.sock)
	// The client sends the token.
	if _, err := ta.c.Exec(ctx, client.ExecRequest{Command: "true"}); err != nil {
		t.Fatal(err)
	}
	// Without it: RPC and extensions are refused, /health is not.
	noTok := client.New(ta.sock)
	if _, err := noTok.Exec(ctx, client.ExecRequest{Command: "true"}); client.CodeOf(err) != client.CodeUnauthenticated {
		t.Errorf("rpc without token: %v", err)
	}
	if _, err := noTok.Busy(ctx); client.CodeOf(err) != client.CodeUnauthenticated {
		t.Errorf("busy without token: %v", err)
	}
	if err := noTok.Health(ctx); err != nil {
		t.Errorf("health: %v", err)
	}
	wrong := client.NewWithOptions(client.Options{SocketPath: ta.sock, AccessToken: "nope"})
	if _, err := wrong.Stat(ctx, "/"); client.CodeOf(err) != client.CodeUnauthenticated {
		t.Errorf("wrong token: %v", err)
	}
	// /files with a signed URL instead of the header.
	f := filepath.Join(t.TempDir(), "s.txt")
	os.WriteFile(f, []byte("signed"), 0o644)
	get := func(q string) int {
		resp, err := hc.Get("http://sandbox/files?" + q)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if s := get("path=" + f); s != 401 {
		t.Errorf("unsigned: %d", s)
	}
	if s := get("path=" + f + "&signature=" + url.QueryEscape(sign(f, "read", "", token, 0))); s != 200 {
		t.Errorf("signed: %d", s)
	}
	if s := get("path=" + f + "&signature=" + url.QueryEscape(sign(f, "write", "", token, 0))); s != 401 {
		t.Errorf("signed for write, used for read: %d", s)
	}
	exp := time.Now().Add(time.Minute).Unix()
	if s := get("path=" + f + "&signature=" + url.QueryEscape(sign(f, "read", "", token, exp)) + "&signature_expiration=" + strconv.FormatInt(exp, 10)); s != 200 {
		t.Errorf("signed with expiry: %d", s)
	}
	old := time.Now().Add(-time.Minute).Unix()
	if s := get("path=" + f + "&signature=" + url.QueryEscape(sign(f, "read", "", token, old)) + "&signature_expiration=" + strconv.FormatInt(old, 10)); s != 401 {
		t.Errorf("expired: %d", s)
	}
}

func TestRunAsUser(t *testing.T) {
	testenv.RequireRoot(t)
	ta := startAgent(t, agent.Config{})
	var out bytes.Buffer
	res, err := ta.c.Exec(ctxT(t), client.ExecRequest{Command: "id -u; id -g; echo $USER $HOME", User: "nobody", Cwd: "/", Stdout: &out})
	if err != nil || res.ExitCode != 0 {
		t.Fatal(res, err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 || lines[0] != "65534" || !strings.HasPrefix(lines[2], "nobody ") {
		t.Errorf("as nobody: %q", out.String())
	}
	if _, err := ta.c.Exec(ctxT(t), client.ExecRequest{Command: "true", User: "no-such-user-x"}); client.CodeOf(err) != client.CodeUnauthenticated {
		t.Errorf("unknown user: %v", err)
	}
}

// TestReapAsPID1 runs the agent as PID 1 of a new PID namespace and checks
// that orphans are reaped while exit statuses still reach their callers.
func TestReapAsPID1(t *testing.T) {
	testenv.RequireRoot(t)
	unshare := testenv.RequireBinary(t, "unshare")
	sock := filepath.Join(t.TempDir(), "pid1.sock")
	cmd := exec.Command(unshare, "--pid", "--fork", "--kill-child", "--mount-proc", os.Args[0])
	cmd.Env = append(os.Environ(), "TUPPER_TEST_AGENT_SOCKET="+sock)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	c := client.New(sock)
	ctx := ctxT(t)
	for deadline := time.Now().Add(10 * time.Second); c.Health(ctx) != nil; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("agent did not come up")
		}
	}
	var out bytes.Buffer
	if _, err := c.Exec(ctx, client.ExecRequest{Command: "echo $PPID", Stdout: &out}); err != nil || strings.TrimSpace(out.String()) != "1" {
		t.Fatalf("agent is not PID 1: %q %v", out.String(), err)
	}
	// Orphans: grandchildren whose parent exits at once get reparented to PID 1.
	for i := 0; i < 20; i++ {
		if _, err := c.Exec(ctx, client.ExecRequest{Command: "(sleep 0.05 &) ; exit 0"}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 30; i++ {
		res, err := c.Exec(ctx, client.ExecRequest{Command: "exit " + strconv.Itoa(i%5)})
		if err != nil || res.ExitCode != i%5 {
			t.Fatalf("exit status lost under wait4(-1): %+v %v", res, err)
		}
	}
	time.Sleep(300 * time.Millisecond) // the orphans' sleeps end
	out.Reset()
	_, err := c.Exec(ctx, client.ExecRequest{Command: `for s in /proc/[0-9]*/stat; do cut -d' ' -f3 "$s"; done 2>/dev/null | grep -c Z || true`, Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.TrimSpace(out.String()); n != "0" {
		t.Errorf("%s zombies left", n)
	}
}

// TestSetIdleTimeout: an agent started without an idle timeout learns one through
// POST /tupper/deadline (what a pooled sandbox gets when it is handed out) and goes idle
// after it, counted from the request.
func TestSetIdleTimeout(t *testing.T) {
	dir := t.TempDir()
	ln, _ := net.Listen("unix", filepath.Join(dir, "s"))
	done := make(chan error, 1)
	go func() { done <- agent.Serve(context.Background(), ln, agent.Config{}) }()
	c := client.New(filepath.Join(dir, "s"))
	ctx := ctxT(t)
	if err := c.SetLimits(ctx, time.Time{}, -time.Second); err == nil {
		t.Error("a negative idle timeout was accepted")
	}
	time.Sleep(1200 * time.Millisecond) // idle before the timeout was set does not count
	start := time.Now()
	if err := c.SetLimits(ctx, time.Time{}, time.Second); err != nil {
		t.Fatal(err)
	}
	if b, _ := c.Busy(ctx); b.DeadlineUnix != 0 {
		t.Errorf("busy %+v: a deadline was set", b)
	}
	select {
	case err := <-done:
		if !errors.Is(err, agent.ErrIdle) {
			t.Errorf("serve: %v", err)
		}
		if d := time.Since(start); d < 900*time.Millisecond {
			t.Errorf("stopped %v after the idle timeout was set", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("agent never went idle")
	}
}
