//go:build linux

package agent_test

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tupper-dev/tupper/agent"
	"github.com/tupper-dev/tupper/agent/spec"
)

// An agent refuses a config written for another protocol version, saying both numbers, and
// serves one written for its own (or one that does not say, written by hand).
func TestProtocolVersion(t *testing.T) {
	other := spec.Version + 1
	cfg, err := agent.ParseConfig(fmt.Appendf(nil, `{"protocol": %d}`, other))
	if err == nil {
		t.Fatalf("ParseConfig accepted protocol %d: %+v", other, cfg)
	}
	for _, want := range []string{fmt.Sprintf("host speaks agent protocol %d", other), fmt.Sprintf("this agent protocol %d", spec.Version)} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}

	// Serve refuses it too, before serving anything.
	ln, err := net.Listen("unix", filepath.Join(t.TempDir(), "agent.sock"))
	if err != nil {
		t.Fatal(err)
	}
	if err := agent.Serve(context.Background(), ln, agent.Config{Protocol: other}); err == nil || !strings.Contains(err.Error(), "agent protocol") {
		t.Fatalf("Serve with protocol %d: %v", other, err)
	}

	for _, js := range []string{fmt.Sprintf(`{"protocol": %d}`, spec.Version), `{}`} {
		if _, err := agent.ParseConfig([]byte(js)); err != nil {
			t.Errorf("ParseConfig(%s): %v", js, err)
		}
	}
	ta := startAgent(t, agent.Config{Protocol: spec.Version})
	if err := ta.c.Health(ctxT(t)); err != nil {
		t.Fatalf("an agent of the host's protocol does not answer: %v", err)
	}
}
