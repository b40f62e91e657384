// Command tupper-bench measures tupper side by side with the alternatives present on this
// machine (docker, the OCI runtime's own exec, Docker Engine's API, E2B's SDK) and prints
// p50, p99 and the ratios. It is `tupper bench`: that command runs this one, found beside
// tupper or on PATH. It is a command of its own so that the tupper binary holds the product
// only; docs/performance.md has its figures and how to reproduce them.
//
//	tupper-bench                              # the CLI section: tupper run / exec and the SDK against docker
//	tupper-bench --api --concurrent 100       # a tupper serve it starts itself, against Docker Engine's API
//	tupper-bench --density-max 500            # idle density, per runtime
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"syscall"
)

// exitBenchError is the exit code of the bench's own failures, as tupper's (docker run's 125).
const exitBenchError = 125

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	cmd := newBenchCmd()
	err := cmd.ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(cmd.ErrOrStderr(), "tupper-bench:", err)
		os.Exit(exitBenchError)
	}
}

// tupperEnv names the tupper binary to measure when --tupper does not: `tupper bench` sets
// it to itself, so that the bench measures the very tupper that ran it.
const tupperEnv = "TUPPER_BENCH_TUPPER"

// findTupper is the tupper binary the bench runs (tupper run, exec, version and serve) and
// whose agent its sandboxes run: flag (--tupper, else $TUPPER_BENCH_TUPPER) when given, else
// tupper beside this program, else tupper on PATH.
func findTupper(flag string) (string, error) {
	if flag != "" {
		if _, err := os.Stat(flag); err != nil {
			return "", fmt.Errorf("--tupper (or $%s): %w", tupperEnv, err)
		}
		return filepath.Abs(flag)
	}
	name := "tupper"
	if runtime.GOOS == "windows" {
		name += ".exe"
	}
	var beside string
	if exe, err := os.Executable(); err == nil {
		beside = filepath.Join(filepath.Dir(exe), name)
		if fi, err := os.Stat(beside); err == nil && !fi.IsDir() {
			return beside, nil
		}
	}
	if p, err := exec.LookPath("tupper"); err == nil {
		return filepath.Abs(p)
	}
	return "", errors.New("the bench measures the tupper command, and there is none beside this program (" + beside +
		") nor on PATH: build both with `make build`, or name one with --tupper")
}
