package local

import (
	"os"
	"testing"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/sandboxtest"
)

// TestConformance runs the shared provider suite under runc, and under runsc when
// TUPPER_RUNSC_CONFORMANCE=1: the suite takes several minutes under runsc's ptrace platform,
// and runsc 20221219 fails its cases that run GNU ls or stat (see the package doc on statx).
func TestConformance(t *testing.T) {
	forRuntimes(t, func(t *testing.T, rt string) {
		if rt == RuntimeRunsc && os.Getenv("TUPPER_RUNSC_CONFORMANCE") != "1" {
			t.Skip("set TUPPER_RUNSC_CONFORMANCE=1 to run the suite under runsc (minutes; statx cases fail on runsc 20221219)")
		}
		sandboxtest.Run(t, func(t testing.TB) provider.Provider { return newTestProvider(t, rt) })
	})
}
