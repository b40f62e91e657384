//go:build linux

package local

import (
	"os"
	"testing"

	"github.com/tupper-dev/tupper/internal/testenv"
	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/sandboxtest"
)

// TestConformance runs the shared provider suite under runc, runsc and crun. Under runsc it
// takes minutes (gVisor's ptrace platform, as this host has no KVM): -short skips it on a
// developer's machine, never under CI=true. runsc from before 2023 fails GNU ls and stat
// (statx), so the provider does not declare "shell" there and the suite skips those cases.
func TestConformance(t *testing.T) {
	forRuntimes(t, func(t *testing.T, rt string) {
		if rt == RuntimeRunsc && testing.Short() && !testenv.InCI() {
			t.Skip("-short: the suite under runsc takes minutes")
		}
		sandboxtest.Run(t, func(t testing.TB) provider.Provider { return newTestProvider(t, rt) })
	})
}

// TestConformanceBootImages runs the suite's groups that a restored sandbox's start reaches
// (create, connect, run, lifecycle: snapshots, pause, fork) under runsc with boot images on
// (Config.BootImages): the first create of a shape saves a checkpoint of its own sandbox and
// lets it run on, later ones of the same provider restore it. The rest of the suite is the
// same code after the start; TestBootImage compares a restored sandbox with a cold one. The
// whole suite with images on: TUPPER_TEST_BOOTIMAGE_GROUPS=all. Like runsc's run of
// TestConformance, -short skips it outside CI.
func TestConformanceBootImages(t *testing.T) {
	if testing.Short() && !testenv.InCI() {
		t.Skip("-short: the suite under runsc takes minutes")
	}
	groups := []string{"Create", "Connect", "Run", "Lifecycle"}
	if os.Getenv("TUPPER_TEST_BOOTIMAGE_GROUPS") == "all" {
		groups = nil
	}
	sandboxtest.RunWith(t, sandboxtest.Config{Factory: func(t testing.TB) provider.Provider { return newBootProvider(t) }, Groups: groups})
}

// TestConformanceFallbacks runs the suite once more with the provider's fast paths hidden
// (sandboxtest.Bare), under the default runtime, so the core's shell fallbacks for files,
// activity, log ranges and get-or-create are proven on a real sandbox too.
func TestConformanceFallbacks(t *testing.T) {
	sandboxtest.Run(t, func(t testing.TB) provider.Provider { return sandboxtest.Bare(newTestProvider(t, "")) })
}
