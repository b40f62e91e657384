package docker

import (
	"testing"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/sandboxtest"
)

// TestConformance runs the shared provider suite on the Docker provider against a real
// engine, with the host template (the host's /usr, bind-mounted read-only).
func TestConformance(t *testing.T) {
	sandboxtest.Run(t, func(t testing.TB) provider.Provider { return newTestProvider(t, Config{}) })
}
