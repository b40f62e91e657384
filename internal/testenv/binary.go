package testenv

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

// AgentEnv names a prebuilt tupper binary that TupperBinary returns instead of building one.
// It is also the variable the local provider reads for its agent.
const AgentEnv = "TUPPER_AGENT"

var (
	tupperOnce sync.Once
	tupperBin  string
	tupperDir  string
	tupperErr  error
)

// TupperBinary returns a tupper binary built from this checkout: $TUPPER_AGENT when set, else
// ./cmd/tupper built once per test binary, static (CGO_ENABLED=0, as the sandboxes' agent must
// be), without -race, into a temporary directory other users may search (0711: a process in a
// sandbox's user namespace may have to reach it). A test binary that calls it removes that
// directory by running its tests through Main.
func TupperBinary(t testing.TB) string {
	t.Helper()
	tupperOnce.Do(func() {
		if p := os.Getenv(AgentEnv); p != "" {
			tupperBin = p
			return
		}
		if tupperDir, tupperErr = os.MkdirTemp("", "tupper-test-bin-"); tupperErr != nil {
			return
		}
		if tupperErr = os.Chmod(tupperDir, 0o711); tupperErr != nil {
			return
		}
		tupperBin = filepath.Join(tupperDir, "tupper")
		cmd := exec.Command(goTool(), "build", "-o", tupperBin, "./cmd/tupper")
		cmd.Dir = moduleRoot()
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			tupperErr = fmt.Errorf("go build ./cmd/tupper: %v\n%s", err, out)
		}
	})
	if tupperErr != nil {
		t.Fatal(tupperErr)
	}
	return tupperBin
}

// Main runs m's tests and removes what TupperBinary built; a TestMain calls
// os.Exit(testenv.Main(m)).
func Main(m *testing.M) int {
	code := m.Run()
	if tupperDir != "" {
		os.RemoveAll(tupperDir)
	}
	return code
}

// moduleRoot is the directory of this checkout's go.mod.
func moduleRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// goTool is the go command: the one on PATH, else the one of the toolchain that built the test.
func goTool() string {
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
