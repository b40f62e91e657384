package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/tupper-dev/tupper/agent/spec"
	"github.com/tupper-dev/tupper/internal/testenv"
)

// runWith runs the binary at bin with only the environment given (and HOME).
func runWith(t *testing.T, bin string, env []string, args ...string) result {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append([]string{"HOME=" + os.Getenv("HOME")}, env...)
	return runCmd(t, cmd)
}

// sysPath has the runtimes and no tupper.
const sysPath = "PATH=/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin"

// The probe the local provider runs before it takes a binary as the agent.
func TestAgentProtocolProbe(t *testing.T) {
	r := tupper(t, t.TempDir(), "", "agent", spec.ProbeFlag)
	if want := fmt.Sprintf("%s %d\n", spec.ProbeReply, spec.Version); r.code != 0 || r.stdout != want {
		t.Fatalf("tupper agent %s: %+v, want %q", spec.ProbeFlag, r, want)
	}
	if r := tupper(t, t.TempDir(), "", "agent", "--help"); strings.Contains(r.stdout, spec.ProbeFlag) {
		t.Errorf("the probe flag is in the help: %s", r.stdout)
	}
}

// tupper is its own agent whatever its file is called and wherever it lives (here a 0700
// directory, with no tupper on PATH): the provider tells it is tupper by its build info and
// runs a copy of it from its home.
func TestRunningTupperIsTheAgentUnderAnyName(t *testing.T) {
	home := requireLocal(t)
	dir := filepath.Join(t.TempDir(), "private")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	renamed := filepath.Join(dir, "sbx")
	if err := os.Link(tupperBin(t), renamed); err != nil {
		t.Fatal(err)
	}
	r := runWith(t, renamed, []string{sysPath, "TUPPER_HOME=" + home}, "run", "--network", "none", "--", "echo", "hi")
	if r.code != 0 || r.stdout != "hi\n" {
		t.Fatalf("%s run: %+v", renamed, r)
	}
	b, err := os.ReadFile(renamed)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	copies, _ := filepath.Glob(filepath.Join(home, "agent", "*", "tupper"))
	if want := filepath.Join(home, "agent", hex.EncodeToString(sum[:])[:16], "tupper"); len(copies) != 1 || copies[0] != want {
		t.Fatalf("agent copies %v, want %s", copies, want)
	}
}

// doctor names each provider once per line, and adds an install hint only where something
// the hint installs is missing.
func TestDoctorSaysEachThingOnce(t *testing.T) {
	home := t.TempDir()
	r := runWith(t, tupperBin(t), []string{sysPath, "TUPPER_HOME=" + home, "TUPPER_AGENT=/nonexistent/tupper"}, "doctor")
	lines := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		name, rest, _ := strings.Cut(l, " ")
		lines[name] = strings.TrimSpace(rest)
	}
	t.Logf("tupper doctor:\n%s%s", r.stdout, r.stderr)
	if strings.Contains(r.stdout, "unavailable: unavailable") {
		t.Errorf("doubled code")
	}
	// The default runtime's line is its own, not a second line of the provider's.
	if rt := lines["default"]; runtime.GOOS == "linux" && !strings.HasPrefix(rt, "runtime of local: ") {
		t.Errorf("default runtime line: %q", rt)
	}
	// Where the Docker provider's containers get their agent: here, $TUPPER_AGENT.
	if got := lines["agent"]; got != "of docker containers: $TUPPER_AGENT (/nonexistent/tupper)" {
		t.Errorf("agent line: %q", got)
	}
	// Not configured: the hint says what to set.
	if got := lines["e2b"]; !strings.HasPrefix(got, "unavailable: E2B_API_KEY is not set (install: ") {
		t.Errorf("e2b: %q", got)
	}
	if got := lines["remote"]; !strings.HasPrefix(got, "unavailable: TUPPER_URL is not set (install: ") {
		t.Errorf("remote: %q", got)
	}
	// The runtimes are there (or root is missing): no hint to install them, no "local: local:".
	got := lines["local"]
	if !strings.HasPrefix(got, "unavailable: ") || strings.Contains(got, "install: ") || strings.Contains(got, "apt-get") || strings.Contains(got, "local: ") {
		t.Errorf("local: %q", got)
	}
	// With root and runc, the reason is the one thing missing.
	t.Run("reason", func(t *testing.T) {
		testenv.RequireRoot(t)
		testenv.RequireBinary(t, "runc")
		if got != "unavailable: the agent binary /nonexistent/tupper ($TUPPER_AGENT): does not exist" {
			t.Errorf("local: %q", got)
		}
	})
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// A config on standard input (--config -, how the Docker provider hands it over so that no
// file in the container holds it) is read to its end and parsed as a file's would be: one
// whose deadline has passed is obeyed, and malformed or oversized input stops the agent
// with the reason.
func TestAgentConfigOnStdin(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the agent runs on Linux only")
	}
	args := []string{"agent", "--listen", "tcp:127.0.0.1:0", "--config", "-"}
	if r := tupper(t, t.TempDir(), `{"deadlineUnix": 1}`, args...); r.code != 0 || !strings.Contains(r.stderr, "deadline") {
		t.Errorf("a config whose deadline has passed: %+v", r)
	}
	for _, c := range []struct{ name, stdin, want string }{
		{"malformed", "{not json", "agent config"},
		{"unknown field", `{"nope": 1}`, `unknown field "nope"`},
		{"too large", `{"env": {"A": "` + strings.Repeat("x", 16<<20) + `"}}`, "more than 16777216 bytes"},
	} {
		if r := tupper(t, t.TempDir(), c.stdin, args...); r.code == 0 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("%s: %+v, want a failure saying %q", c.name, r, c.want)
		}
	}
}

// --command-cgroup-fd takes an inherited descriptor of a cgroup v1 tasks file; anything else
// stops the agent with the reason before it serves, rather than run commands outside their
// limit or write a thread id into whatever the descriptor is.
func TestAgentCommandCgroupFD(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the agent runs on Linux only")
	}
	args := []string{"agent", "--listen", "tcp:127.0.0.1:0"}
	if r := tupper(t, t.TempDir(), "", append(args, "--command-cgroup-fd", "1")...); r.code == 0 || !strings.Contains(r.stderr, "must be an inherited descriptor") {
		t.Errorf("standard output as the cgroup: %+v", r)
	}
	plain := filepath.Join(t.TempDir(), "tasks")
	f, err := os.Create(plain)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command(tupperBin(t), append(args, "--command-cgroup-fd", "3")...)
	cmd.ExtraFiles = []*os.File{f}
	r := runCmd(t, cmd)
	if r.code == 0 || !strings.Contains(r.stderr, "not a cgroup v1 file") {
		t.Errorf("a regular file as the cgroup: %+v", r)
	}
	if b, _ := os.ReadFile(plain); len(b) != 0 {
		t.Errorf("the agent wrote %q into a file that is not a cgroup", b)
	}
}
