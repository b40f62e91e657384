//go:build linux

package local

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tupper-dev/tupper/provider"
)

// TestEndedAsTold: an agent that its idle timeout ends says so in its run directory, so that
// a sandbox that ended as told is removed, never booted again (revive.go); under every
// runtime, hidden directory and all.
func TestEndedAsTold(t *testing.T) {
	forRuntimesAsRoot(t, func(t *testing.T, rt string) {
		p := newTestProvider(t, rt)
		inst := create(t, p, provider.CreateSpec{Network: netNone, IdleTimeout: 2 * time.Second})
		rec, err := p.lay.readRecord(inst.ID())
		if err != nil {
			t.Fatal(err)
		}
		if p.endedAsTold(rec) {
			t.Fatal("a running sandbox's agent says it ended")
		}
		for start := time.Now(); alive(rec); time.Sleep(100 * time.Millisecond) {
			if time.Since(start) > time.Minute {
				t.Fatal("the idle timeout did not end the sandbox")
			}
		}
		b, _ := os.ReadFile(filepath.Join(p.lay.run(inst.ID()), endFileName))
		if !strings.Contains(string(b), "idle timeout") || !p.endedAsTold(rec) {
			t.Errorf("the agent's end file says %q", b)
		}
		if why := p.revivable(rec, time.Now()); why != "" {
			t.Errorf("a sandbox its idle timeout ended is revivable: %s", why)
		}
		if _, err := p.Connect(context.Background(), inst.ID()); provider.CodeOf(err) != provider.CodeNotFound {
			t.Errorf("connect after the idle timeout: %v, want not_found", err)
		}
		// Removed by that Connect, it ended as idle (ended.go).
		if end, ok := p.EndOf(context.Background(), inst.ID()); !ok || end.Reason != "idle" {
			t.Errorf("EndOf after the idle timeout = %+v, %v; want idle", end, ok)
		}
	})
}
