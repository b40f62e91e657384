package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
)

// benchCommand is the program `tupper bench` runs: the bench is a command of its own
// (cmd/tupper-bench), two fifths of the CLI's code that no sandbox needs, kept out of the
// tupper binary. `tupper bench` stays, as the way to it that users and docs know.
const benchCommand = "tupper-bench"

// benchTupperEnv tells tupper-bench which tupper to measure: the one that ran it.
const benchTupperEnv = "TUPPER_BENCH_TUPPER"

func newBenchCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "bench [flags]",
		Short: "Measure tupper against docker and the OCI runtime side by side (runs tupper-bench)",
		Long: "tupper bench runs tupper-bench, found beside tupper or on PATH, with the same arguments,\n" +
			"measuring this tupper. `tupper bench --help` lists its flags; docs/performance.md has\n" +
			"its figures.",
		DisableFlagParsing: true, // every flag is tupper-bench's, --help included
		RunE: func(cmd *cobra.Command, args []string) error {
			self, err := os.Executable()
			if err != nil {
				return fmt.Errorf("tupper bench: where is this tupper: %w", err)
			}
			bench, err := findBench(self, exec.LookPath)
			if err != nil {
				return err
			}
			env := append(os.Environ(), benchTupperEnv+"="+self)
			// The bench replaces this process: its signals and exit code are the command's.
			err = syscall.Exec(bench, append([]string{bench}, args...), env)
			if runtime.GOOS != "windows" {
				return fmt.Errorf("tupper bench: run %s: %w", bench, err)
			}
			c := exec.Command(bench, args...) // not CommandContext: the bench cleans up on ^C itself
			c.Stdin, c.Stdout, c.Stderr, c.Env = os.Stdin, os.Stdout, os.Stderr, env
			if err := c.Run(); err != nil {
				var ee *exec.ExitError
				if errors.As(err, &ee) {
					return exitError{ee.ExitCode()}
				}
				return fmt.Errorf("tupper bench: run %s: %w", bench, err)
			}
			return nil
		},
	}
}

// findBench finds tupper-bench beside self (this tupper's executable), else with lookPath on
// PATH; when there is none it says how to get it.
func findBench(self string, lookPath func(string) (string, error)) (string, error) {
	name := benchCommand
	if runtime.GOOS == "windows" {
		name += ".exe"
	}
	beside := filepath.Join(filepath.Dir(self), name)
	if fi, err := os.Stat(beside); err == nil && !fi.IsDir() {
		return beside, nil
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("tupper bench: %w", err)
	}
	if p, err := lookPath(benchCommand); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("tupper bench runs %s, which is not installed: it is neither beside this tupper (in %s) nor on PATH.\n"+
		"Install it with `go install github.com/tupper-dev/tupper/cmd/%s@%s`, or in a checkout run `make build` (bin/tupper and bin/%s)",
		benchCommand, filepath.Dir(self), benchCommand, moduleVersion(), benchCommand)
}

// moduleVersion is the version of the tupper module this binary was built from, for go
// install: its release, else latest (a build from a checkout has no version to install).
func moduleVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v := bi.Main.Version; strings.HasPrefix(v, "v") && !strings.Contains(v, "+dirty") {
			return v
		}
	}
	return "latest"
}
