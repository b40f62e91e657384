package testenv

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// AgentEnv names a prebuilt tupper binary that TupperBinary returns instead of building one.
// It is also the variable the local provider reads for its agent.
const AgentEnv = "TUPPER_AGENT"

// MemoryTag is the build tag that adds the memory provider to the tupper command
// (cmd/tupper/providers_memory.go). The product binary leaves it out, having no use for a
// provider without isolation; the binary tests run has it, so that tests of the CLI and of
// tupper serve run on any machine, root or not.
const MemoryTag = "tupper_memory"

// builds are the commands built for this test binary, by package, each once.
var (
	buildsMu  sync.Mutex
	builds    = map[string]*build{}
	buildsDir string // their directory, removed by Main
)

type build struct {
	once sync.Once
	path string
	err  error
}

// TupperBinary returns the tupper binary tests run: $TUPPER_AGENT when set, else
// ./cmd/tupper built with the memory provider (-tags tupper_memory, MemoryTag) once per test
// binary, static (CGO_ENABLED=0, as the sandboxes' agent must be), without -race, into a
// temporary directory other users may search (0711: a process in a sandbox's user namespace
// may have to reach it). A prebuilt $TUPPER_AGENT must have that tag for the tests that use
// --provider memory. A test binary that calls it removes that directory by running its
// tests through Main.
func TupperBinary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv(AgentEnv); p != "" {
		return p
	}
	return Command(t, "./cmd/tupper", MemoryTag)
}

// Command returns the command of package pkg (such as "./cmd/tupper-bench") built from this
// checkout with tags, as TupperBinary builds tupper: once per test binary, static, without
// -race, into the directory Main removes, named after pkg's last element.
func Command(t testing.TB, pkg string, tags ...string) string {
	t.Helper()
	buildsMu.Lock()
	b := builds[pkg]
	if b == nil {
		b = &build{}
		builds[pkg] = b
	}
	buildsMu.Unlock()
	b.once.Do(func() { b.path, b.err = buildCommand(pkg, tags) })
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

func buildCommand(pkg string, tags []string) (string, error) {
	buildsMu.Lock()
	var err error
	if buildsDir == "" {
		if buildsDir, err = os.MkdirTemp("", "tupper-test-bin-"); err == nil {
			err = os.Chmod(buildsDir, 0o711)
		}
	}
	dir := buildsDir
	buildsMu.Unlock()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, filepath.Base(pkg))
	args := []string{"build", "-o", bin}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	cmd := exec.Command(GoTool(), append(args, pkg)...)
	cmd.Dir = moduleRoot()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go %s: %v\n%s", strings.Join(cmd.Args[1:], " "), err, out)
	}
	return bin, nil
}

// Main runs m's tests and removes what TupperBinary and Command built; a TestMain calls
// os.Exit(testenv.Main(m)).
func Main(m *testing.M) int {
	code := m.Run()
	if buildsDir != "" {
		os.RemoveAll(buildsDir)
	}
	return code
}

// moduleRoot is the directory of this checkout's go.mod.
func moduleRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// GoTool is the go command: the one on PATH, else the one of the toolchain that built the test.
func GoTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(runtime.GOROOT(), "bin", "go")
}

// Run runs cmd with its output captured and returns it with the exit code; failing to start
// it fails the test.
func Run(t testing.TB, cmd *exec.Cmd) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("running %v: %v", cmd.Args, err)
	}
	return out.String(), errb.String(), code
}

// LocalHome requires what the local provider needs (root, runc) and returns a new state
// directory for the tupper binary's local provider (its TUPPER_HOME): short, since unix
// socket paths below it must stay under 108 bytes, and 0711, since sandboxes run as
// unprivileged host uids that must traverse it. When the test ends, TupperBinary removes
// the sandboxes a failed test left in it (ls, rm), then the directory goes.
func LocalHome(t testing.TB) string {
	t.Helper()
	RequireRoot(t)
	RequireBinary(t, "runc")
	home, err := os.MkdirTemp("/tmp", "tc")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(home, 0o711); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		tupper := func(args ...string) string {
			cmd := exec.Command(TupperBinary(t), args...)
			cmd.Env = append(os.Environ(), "TUPPER_HOME="+home, "TUPPER_PROVIDER=")
			out, _, _ := Run(t, cmd)
			return out
		}
		var rows []struct{ ID string }
		_ = json.Unmarshal([]byte(tupper("ls", "--json")), &rows)
		for _, row := range rows {
			tupper("rm", row.ID)
		}
		os.RemoveAll(home)
	})
	return home
}
