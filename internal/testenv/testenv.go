// Package testenv holds the test helpers that decide whether a test can run on this machine.
//
// A test that needs root, a runtime binary or a kernel feature calls one of these helpers. On a
// developer's machine a missing requirement skips the test with a reason; when the CI
// environment variable is "true" it fails the test instead, so coverage never disappears
// silently in CI.
package testenv

import (
	"os"
	"os/exec"
	"testing"
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
