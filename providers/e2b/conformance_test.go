//go:build linux

package e2b_test

import (
	"testing"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/providers/e2b"
	"github.com/tupper-dev/tupper/sandboxtest"
	"github.com/tupper-dev/tupper/server/servertest"
)

// TestConformance runs the whole conformance suite through E2B's API on a real server on
// loopback: the SDK → providers/e2b → E2B's REST API and envd protocol → tupper's server →
// the local provider (runc). It needs root and runc (the memory provider has no envd data
// plane): skipped on a developer's machine without them, failed under CI=true.
func TestConformance(t *testing.T) {
	servertest.RequireLocal(t, "the E2B data plane needs real sandboxes")
	sandboxtest.Run(t, func(t testing.TB) provider.Provider {
		prov := servertest.Provider(t, 6)
		srv := servertest.Start(t, prov, "")
		_, key, err := srv.Store.CreateE2BKey(t.Context(), "conformance")
		if err != nil {
			t.Fatal(err)
		}
		p, err := e2b.New(e2b.Config{
			APIKey: key, APIURL: srv.URL, SandboxURL: srv.URL,
			Pause: provider.CapabilitiesOf(prov).Has(provider.CapPause),
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Available(t.Context()); err != nil {
			t.Fatal(err)
		}
		return p
	})
}
