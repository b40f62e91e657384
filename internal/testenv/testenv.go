// Package testenv holds the test helpers that decide whether a test can run on this machine.
//
// A test that needs root, a runtime binary or a kernel feature calls one of these helpers. On a
// developer's machine a missing requirement skips the test with a reason; when the CI
// environment variable is "true" it fails the test instead, so coverage never disappears
// silently in CI.
package testenv

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/tupper-dev/tupper/internal/flock"
)

// InCI reports whether the tests run under CI (CI=true), where missing requirements are failures.
func InCI() bool { return os.Getenv("CI") == "true" }

// Skip skips t with reason on a developer's machine and fails it under CI.
func Skip(t testing.TB, reason string) {
	t.Helper()
	if InCI() {
		t.Fatalf("requirement missing under CI=true: %s", reason)
	}
	t.Skipf("skipped (would fail under CI=true): %s", reason)
}

// Require skips or fails t (see Skip) unless ok.
func Require(t testing.TB, ok bool, reason string) {
	t.Helper()
	if !ok {
		Skip(t, reason)
	}
}

// RequireRoot requires the test to run as root.
func RequireRoot(t testing.TB) {
	t.Helper()
	Require(t, os.Geteuid() == 0, "needs root")
}

// RequireBinary requires name on PATH and returns its path.
func RequireBinary(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		Skip(t, name+" not found on PATH (install the distribution's package)")
		return ""
	}
	return p
}

// NPMProject makes dir's node_modules match its package-lock.json (`npm ci`) and returns dir,
// or skips (fails under CI) without node and npm. Test binaries of several packages run at
// once and share projects (test/mcp serves two packages): the install holds a lock beside
// the project, and is skipped when node_modules was installed from this very lock file.
func NPMProject(t testing.TB, dir string) string {
	t.Helper()
	RequireBinary(t, "node")
	npm := RequireBinary(t, "npm")
	lock, err := os.ReadFile(filepath.Join(dir, "package-lock.json"))
	if err != nil {
		t.Fatalf("npm project %s: %v", dir, err)
	}
	sum := sha256.Sum256(lock)
	want := hex.EncodeToString(sum[:])
	stamp := filepath.Join(dir, "node_modules", ".tupper-installed-from")
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	lk, err := flock.Acquire(ctx, filepath.Join(dir, ".npm-ci.lock"))
	if err != nil {
		t.Fatalf("npm project %s: %v", dir, err)
	}
	defer lk.Unlock()
	if got, err := os.ReadFile(stamp); err == nil && string(got) == want {
		return dir
	}
	cmd := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund", "--loglevel=error")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm ci in %s: %v\n%s", dir, err, out)
	}
	if err := os.WriteFile(stamp, []byte(want), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}
