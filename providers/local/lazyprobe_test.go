//go:build linux

package local

import (
	"context"
	"errors"
	"os"
	"testing"

	"github.com/tupper-dev/tupper/provider"
)

// New does not probe the host; the first call that needs the probe does, and a provider
// that cannot work here says so from Connect and List rather than "not found". Runs
// anywhere: without root the reason is root, with root it is the missing agent binary.
func TestProbeIsLazyAndConnectSaysWhatIsMissing(t *testing.T) {
	home, err := os.MkdirTemp("", "tl-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(home) })
	p, err := New(Config{Home: home, AgentPath: "/nonexistent/tupper"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if len(p.runtimes) != 0 || p.unavail != nil {
		t.Fatalf("New probed: runtimes %v, unavail %v", p.runtimes, p.unavail)
	}
	ctx := context.Background()
	_, err = p.Connect(ctx, "abcdefghijklmnopqrst")
	if !errors.Is(err, provider.CodeUnavailable) {
		t.Fatalf("Connect on a provider that cannot work here: %v, want unavailable", err)
	}
	if _, err := p.List(ctx, provider.ListFilter{}); !errors.Is(err, provider.CodeUnavailable) {
		t.Fatalf("List: %v, want unavailable", err)
	}
	if err := p.Available(ctx); err == nil || err.Error() != p.unavail.Error() {
		t.Fatalf("Available = %v, the probe said %v", err, p.unavail)
	}
}
