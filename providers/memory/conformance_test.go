package memory_test

import (
	"testing"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/providers/memory"
	"github.com/tupper-dev/tupper/sandboxtest"
)

// TestConformance runs the cross-provider suite against the memory provider.
func TestConformance(t *testing.T) {
	sandboxtest.Run(t, func(t testing.TB) provider.Provider { return memory.New() })
}
