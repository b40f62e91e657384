//go:build linux

package remote_test

import (
	"testing"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/providers/remote"
	"github.com/tupper-dev/tupper/sandboxtest"
	"github.com/tupper-dev/tupper/server/servertest"
)

// TestConformance runs the whole conformance suite through a real server on loopback: the
// SDK → providers/remote → HTTP → tupper's server → the local provider (runc) as root, or
// the memory provider on a developer's machine (logged; under CI=true local is required).
func TestConformance(t *testing.T) {
	sandboxtest.Run(t, func(t testing.TB) provider.Provider {
		srv := servertest.Start(t, servertest.Provider(t, 1), "")
		p := remote.New(remote.Config{URL: srv.URL, APIKey: srv.Key})
		if err := p.Available(t.Context()); err != nil {
			t.Fatal(err)
		}
		return p
	})
}
