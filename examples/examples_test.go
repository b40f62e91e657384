//go:build linux

// Package examples holds small programs that use the Go SDK, one per directory, each its own
// main package. This test runs every one of them as a user would, against real sandboxes:
// with `go run`, and built into a private (0700) directory and started from there. Neither
// program is tupper, so each must find the agent on its own: on PATH for `go run`, beside
// the binary for the built one. It also checks that the README's Go snippets are taken from
// these programs.
package examples

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/tupper-dev/tupper/internal/testenv"
	"github.com/tupper-dev/tupper/providers/local"
)

// example is one program and what its output must hold.
type example struct {
	name   string
	python bool     // needs python3 in the sandbox (the host's, with the local provider)
	server bool     // talks to a tupper server (TUPPER_URL, TUPPER_API_KEY)
	want   []string // substrings of its stdout, in order
}

var examples = []example{
	{name: "quickstart", want: []string{
		"exit code 2\n",
		"stdout: hello from sandbox in /workspace\n",
		"stderr: ls: cannot access '/nothing': No such file or directory\n",
	}},
	{name: "codeinterpreter", python: true, want: []string{
		"--- cell 1\nmean 3.875 median 3.5\n",
		"--- cell 2\nwrote out/squares.csv\n",
		"--- cell 3\nTraceback", "NameError: name 'total' is not defined\n(exit code 1)\n",
		"--- out/squares.csv\nn,square\r\n1,1\r\n", "5,25\r\n",
	}},
	{name: "preview", python: true, want: []string{
		"preview: http://127.0.0.1:",
		"GET / 200 OK\n<h1>built in a sandbox</h1>\n",
		"server log:\n", `"GET / HTTP/1.1" 200`,
	}},
	{name: "remote", server: true, want: []string{
		" on remote, created true\n",
		"sent over HTTP\nline 1\nline 2\nline 3\n",
		"exit code 0 after ",
	}},
}

// sysPath is a PATH with the runtimes and python3 but no tupper.
const sysPath = "/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin"

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

// moduleRoot is the checkout this test is in.
func moduleRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(filepath.Dir(file))
}

func goTool(t testing.TB) string {
	t.Helper()
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	p := filepath.Join(runtime.GOROOT(), "bin", "go")
	testenv.Require(t, fileExists(p), "the go command is not on PATH")
	return p
}

// tupper is a static tupper built from this checkout.
func tupper(t testing.TB) string { return testenv.TupperBinary(t) }

func build(goCmd, pkg, out string) error {
	cmd := exec.Command(goCmd, "build", "-o", out, pkg)
	cmd.Dir = moduleRoot()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %v: %s", pkg, err, b)
	}
	return nil
}

// requireSandboxes skips (fails under CI) where real sandboxes cannot run.
func requireSandboxes(t *testing.T) {
	t.Helper()
	testenv.RequireRoot(t)
	testenv.RequireBinary(t, "runc")
}

// newHome returns a TUPPER_HOME of the test's own that sandboxes' uids can traverse, and
// destroys whatever sandbox an example leaves in it at the end (after failing the test for
// it).
func newHome(t *testing.T) string {
	t.Helper()
	home := t.TempDir()
	if err := os.Chmod(filepath.Dir(home), 0o711); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p, err := local.New(local.Config{Home: home, AgentPath: tupper(t)})
		if err != nil {
			t.Error(err)
			return
		}
		defer p.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		ents, _ := os.ReadDir(filepath.Join(home, "sandboxes"))
		for _, e := range ents {
			if !e.IsDir() {
				continue
			}
			t.Errorf("a sandbox was left behind: %s", e.Name())
			if err := p.Destroy(ctx, e.Name()); err != nil {
				t.Errorf("destroy %s: %v", e.Name(), err)
			}
		}
	})
	return home
}

// env is the environment of an example: this one's, minus anything that would pick the agent
// or the provider for it, plus extra.
func env(extra ...string) []string {
	var out []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case "PATH", "TUPPER_AGENT", "TUPPER_HOME", "TUPPER_PROVIDER", "TUPPER_URL", "TUPPER_API_KEY":
			continue
		}
		out = append(out, kv)
	}
	return append(out, extra...)
}

// runExample runs cmd and checks its output against ex.
func runExample(t *testing.T, ex example, cmd *exec.Cmd) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	t.Logf("%s: %v in %s\n%s%s", ex.name, cmd.Args, time.Since(start).Round(time.Millisecond), stdout.String(), stderr.String())
	if err != nil {
		t.Fatalf("%s failed: %v\nstderr: %s", ex.name, err, stderr.String())
	}
	out := stdout.String()
	rest := out
	for _, w := range ex.want {
		i := strings.Index(rest, w)
		if i < 0 {
			t.Fatalf("%s: output lacks %q (in order)\noutput:\n%s", ex.name, w, out)
		}
		rest = rest[i+len(w):]
	}
}

// assertOneAgentCopy checks that home holds exactly one copy of the agent, byte for byte the
// tupper binary the test built.
func assertOneAgentCopy(t *testing.T, home string) {
	t.Helper()
	copies, _ := filepath.Glob(filepath.Join(home, "agent", "*", "tupper"))
	if len(copies) != 1 {
		t.Fatalf("agent copies in %s: %v, want one", home, copies)
	}
	want, got := sha256File(t, tupper(t)), sha256File(t, copies[0])
	if got != want || !strings.Contains(copies[0], "/"+want[:16]+"/") {
		t.Fatalf("the agent copy %s (sha256 %s) is not the tupper binary (sha256 %s)", copies[0], got, want)
	}
	fi, err := os.Stat(copies[0])
	if err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("agent copy mode: %v %v", fi.Mode(), err)
	}
}

func sha256File(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// server starts `tupper serve` on a loopback port of its own with a home of its own and
// returns its URL and an API key for it.
func server(t *testing.T) (url, key string) {
	t.Helper()
	home := newHome(t)
	bin := tupper(t)
	out, err := exec.Command(bin, "keys", "create", "--home", home).Output()
	if err != nil {
		t.Fatalf("tupper keys create: %v", err)
	}
	key = strings.TrimSpace(string(out))
	cmd := exec.Command(bin, "serve", "--addr", "127.0.0.1:0", "--home", home, "--quiet")
	cmd.Env = env("TUPPER_HOME="+home, "PATH="+sysPath)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			t.Error("tupper serve did not stop on SIGINT")
			<-done
		}
	})
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default: // nobody waits any more; keep draining
			}
		}
	}()
	re := regexp.MustCompile(`serving on (http://127\.0\.0\.1:\d+)`)
	timeout := time.After(30 * time.Second)
	var seen []string
	for {
		select {
		case l := <-lines:
			seen = append(seen, l)
			if m := re.FindStringSubmatch(l); m != nil {
				return m[1], key
			}
		case <-timeout:
			t.Fatalf("tupper serve did not say where it listens: %q", seen)
		}
	}
}

// TestExamples runs every example with `go run` (the agent found on PATH) and as a binary in
// a 0700 directory (the agent found beside it), each against a fresh TUPPER_HOME.
func TestExamples(t *testing.T) {
	requireSandboxes(t)
	goCmd := goTool(t)
	bin := tupper(t)
	for _, ex := range examples {
		t.Run(ex.name, func(t *testing.T) {
			if ex.python {
				testenv.Require(t, fileExists("/usr/bin/python3"), "needs python3 on the host: the local provider's template binds the host's /usr")
			}
			var extra []string
			if ex.server {
				url, key := server(t)
				extra = append(extra, "TUPPER_URL="+url, "TUPPER_API_KEY="+key)
			}
			t.Run("go run", func(t *testing.T) {
				home := newHome(t)
				cmd := exec.Command(goCmd, "run", "./examples/"+ex.name)
				cmd.Dir = moduleRoot()
				// tupper is found on PATH; its directory is private, which no longer matters.
				cmd.Env = env(append(extra, "TUPPER_HOME="+home, "PATH="+filepath.Dir(bin)+":"+sysPath)...)
				runExample(t, ex, cmd)
				if !ex.server {
					assertOneAgentCopy(t, home)
				}
			})
			t.Run("built", func(t *testing.T) {
				home := newHome(t)
				dir := filepath.Join(t.TempDir(), "private")
				if err := os.Mkdir(dir, 0o700); err != nil {
					t.Fatal(err)
				}
				exe := filepath.Join(dir, ex.name)
				if err := build(goCmd, "./examples/"+ex.name, exe); err != nil {
					t.Fatal(err)
				}
				// tupper is found beside the program (a hard link: the same file, another name).
				if err := os.Link(bin, filepath.Join(dir, "tupper")); err != nil {
					t.Fatal(err)
				}
				cmd := exec.Command(exe)
				cmd.Env = env(append(extra, "TUPPER_HOME="+home, "PATH="+sysPath)...)
				runExample(t, ex, cmd)
				if !ex.server {
					assertOneAgentCopy(t, home)
				}
			})
		})
	}
}

// A program that finds no agent says, in one error, what to do: install tupper (the command
// for this checkout) or name a binary. It does not suggest installing the runtimes, which are
// there.
func TestNoAgentSaysWhatToDo(t *testing.T) {
	requireSandboxes(t)
	dir := filepath.Join(t.TempDir(), "private")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "quickstart")
	if err := build(goTool(t), "./examples/quickstart", exe); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = env("TUPPER_HOME="+newHome(t), "PATH="+sysPath)
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("quickstart ran without any tupper binary:\n%s", out)
	}
	msg := string(out)
	t.Log(msg)
	for _, want := range []string{
		"no tupper binary to run as the sandboxes' agent",
		"CGO_ENABLED=0 GOBIN=/usr/local/bin go install ./cmd/tupper", // this checkout
		"Config.AgentPath", "TUPPER_AGENT",
		"no tupper beside this program in " + dir, "none on PATH",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("the error does not say %q", want)
		}
	}
	for _, bad := range []string{"apt-get", "install: ", "unavailable: unavailable", "chmod"} {
		if strings.Contains(msg, bad) {
			t.Errorf("the error says %q", bad)
		}
	}
}

// Every Go snippet of the README is part of an example program, line for line (indentation
// aside), so the README shows code that the test above runs.
func TestReadmeSnippets(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(moduleRoot(), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	sources := map[string][]string{}
	for _, ex := range examples {
		b, err := os.ReadFile(filepath.Join(moduleRoot(), "examples", ex.name, "main.go"))
		if err != nil {
			t.Fatal(err)
		}
		sources[ex.name] = trimLines(string(b))
	}
	blocks := regexp.MustCompile("(?s)```go\n(.*?)```").FindAllStringSubmatch(string(readme), -1)
	if len(blocks) == 0 {
		t.Fatal("the README has no Go snippet")
	}
	for _, b := range blocks {
		snippet := trimLines(b[1])
		found := false
		for _, src := range sources {
			if containsLines(src, snippet) {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("this README snippet is in no example program:\n%s", b[1])
		}
	}
}

// trimLines splits s into lines without their leading and trailing white space, and without
// the blank lines at its ends.
func trimLines(s string) []string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimSpace(l)
	}
	return lines
}

// containsLines reports whether sub occurs in lines as a run of consecutive lines.
func containsLines(lines, sub []string) bool {
	for i := 0; i+len(sub) <= len(lines); i++ {
		match := true
		for j := range sub {
			if lines[i+j] != sub[j] {
				match = false
				break
			}
		}
		if match {
			return true
		}
	}
	return false
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }
