package docker

import (
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/tupper-dev/tupper/provider"
)

// The deadline a container's name carries (SetTimeout) wins over its label (Create), and a
// container is dead once stopped or past its deadline; paused and running ones live.
func TestDeadlineAndDead(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	for _, tc := range []struct {
		name, label string
		state       container.ContainerState
		deadline    int64
		dead        bool
	}{
		{"tupper-aaaaaaaaaaaaaaaaaaaa", "0", container.StateRunning, 0, false},
		{"tupper-aaaaaaaaaaaaaaaaaaaa", "", container.StatePaused, 0, false},
		{"tupper-aaaaaaaaaaaaaaaaaaaa", "999999", container.StateRunning, 999_999, true},
		{"tupper-aaaaaaaaaaaaaaaaaaaa", "1000001", container.StateRunning, 1_000_001, false},
		{"tupper-aaaaaaaaaaaaaaaaaaaa.1000005", "999999", container.StateRunning, 1_000_005, false},
		{"tupper-aaaaaaaaaaaaaaaaaaaa.999990", "1000005", container.StateRunning, 999_990, true},
		{"tupper-aaaaaaaaaaaaaaaaaaaa", "0", container.StateExited, 0, true},
	} {
		labels := map[string]string{labelDeadline: tc.label}
		d := deadlineOf(tc.name, labels)
		if got := map[bool]int64{true: 0, false: d.Unix()}[d.IsZero()]; got != tc.deadline {
			t.Errorf("deadlineOf(%q, %q) = %v, want %d", tc.name, tc.label, d, tc.deadline)
		}
		c := container.Summary{Names: []string{"/" + tc.name}, Labels: labels, State: tc.state}
		if got := dead(c, now); got != tc.dead {
			t.Errorf("dead(%s %q %s) = %v, want %v", tc.name, tc.label, tc.state, got, tc.dead)
		}
	}
}

// TestNetworkNoneRefused: a sandbox without a network cannot be reached by the agent's
// published port, so the provider refuses it, before making anything, rather than give it a
// network after all.
func TestNetworkNoneRefused(t *testing.T) {
	p := newTestProvider(t, Config{})
	if p.Capabilities()[provider.CapNetworkNone] {
		t.Fatal("network-none declared")
	}
	_, err := p.Create(t.Context(), provider.CreateSpec{Network: provider.Network{Mode: provider.NetworkNone}, Labels: map[string]string{"net": "none"}})
	if provider.CodeOf(err) != provider.CodeUnsupported || !strings.Contains(err.Error(), "network none") {
		t.Fatalf("create with network none = %v; want unsupported, saying why", err)
	}
	if infos, err := p.List(t.Context(), provider.ListFilter{Labels: map[string]string{"net": "none"}}); err != nil || len(infos) != 0 {
		t.Fatalf("after the refusal: %v, %+v; want no sandbox", err, infos)
	}
}
