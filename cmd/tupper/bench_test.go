package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// findBench takes tupper-bench beside tupper before the one on PATH, and without either
// says how to install it.
func TestFindBench(t *testing.T) {
	dir := t.TempDir()
	self := filepath.Join(dir, "tupper")
	onPath := func(string) (string, error) { return "/elsewhere/tupper-bench", nil }
	nowhere := func(string) (string, error) { return "", exec.ErrNotFound }
	if p, err := findBench(self, onPath); err != nil || p != "/elsewhere/tupper-bench" {
		t.Errorf("on PATH: %q %v", p, err)
	}
	_, err := findBench(self, nowhere)
	if err == nil {
		t.Fatal("found a tupper-bench that is nowhere")
	}
	for _, want := range []string{"neither beside this tupper (in " + dir + ") nor on PATH",
		"`go install github.com/tupper-dev/tupper/cmd/tupper-bench@", "`make build`"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error %q does not say %q", err, want)
		}
	}
	beside := filepath.Join(dir, benchCommand)
	if runtime.GOOS == "windows" {
		beside += ".exe"
	}
	if err := os.WriteFile(beside, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	if p, err := findBench(self, onPath); err != nil || p != beside {
		t.Errorf("beside: %q %v, want %s", p, err, beside)
	}
}

// `tupper bench ARGS` runs tupper-bench ARGS, telling it which tupper ran it, and exits with
// its exit code; without tupper-bench it exits 125 and says how to get it. (The bench itself
// through `tupper bench`: cmd/tupper-bench's TestBenchSmoke.)
func TestBenchForwards(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("a shell script stands for tupper-bench")
	}
	bin := tupperBin(t)
	if _, err := os.Stat(filepath.Join(filepath.Dir(bin), benchCommand)); err == nil {
		t.Skipf("a tupper-bench beside %s would be found first", bin)
	}
	dir := t.TempDir()
	script := "#!/bin/sh\necho \"$" + benchTupperEnv + "\" \"$@\"\nexit 3\n"
	if err := os.WriteFile(filepath.Join(dir, benchCommand), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	r := runWith(t, bin, []string{"PATH=" + dir + string(filepath.ListSeparator) + os.Getenv("PATH")}, "bench", "--n", "2", "--help")
	if r.code != 3 || r.stdout != bin+" --n 2 --help\n" {
		t.Errorf("tupper bench through a stand-in: %+v; want exit 3 and %q", r, bin+" --n 2 --help\n")
	}
	r = runWith(t, bin, []string{"PATH=" + t.TempDir()}, "bench", "--n", "2")
	if r.code != exitTupperError || !strings.Contains(r.stderr, "go install github.com/tupper-dev/tupper/cmd/tupper-bench@") {
		t.Errorf("tupper bench without tupper-bench: %+v; want exit %d saying how to install it", r, exitTupperError)
	}
}
