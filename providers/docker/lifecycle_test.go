package docker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/tupper-dev/tupper/provider"
)

// The deadline a container's name carries (SetTimeout) wins over its label (Create), and a
// container is dead once stopped (unless paused without its memory: its cold name) or past
// its deadline; paused and running ones live.
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
		// Paused without its memory: stopped, with the cold name; its deadline still holds.
		{"tupper-aaaaaaaaaaaaaaaaaaaa.cold", "0", container.StateExited, 0, false},
		{"tupper-aaaaaaaaaaaaaaaaaaaa.1000005.cold", "0", container.StateExited, 1_000_005, false},
		{"tupper-aaaaaaaaaaaaaaaaaaaa.999990.cold", "0", container.StateExited, 999_990, true},
		{"tupper-aaaaaaaaaaaaaaaaaaaa.cold", "999999", container.StateExited, 999_999, true},
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

// TestNetworkNone: a sandbox on Docker's none network has only loopback, and everything
// reaches its agent through the engine's exec of the relay: commands, many at once (one
// relay each), files, a port tunnel to a server inside, and a provider that did not make it
// (Connect after a restart). Nothing of a relay outlives its connection.
func TestNetworkNone(t *testing.T) {
	p := newTestProvider(t, Config{})
	if !p.Capabilities()[provider.CapNetworkNone] {
		t.Fatal("network-none not declared")
	}
	ctx := t.Context()
	t0 := time.Now()
	step := func(what string) { t.Logf("%s at %v", what, time.Since(t0).Round(time.Millisecond)) }
	inst, err := p.Create(ctx, provider.CreateSpec{Network: provider.Network{Mode: provider.NetworkNone}, Labels: map[string]string{"net": "none"}})
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close()
	i := inst.(*Instance)
	defer p.Destroy(context.Background(), i.id)
	in, err := p.inspectID(ctx, i.cid)
	if err != nil {
		t.Fatal(err)
	}
	if mode := in.Container.HostConfig.NetworkMode; mode != "none" || len(in.Container.NetworkSettings.Ports) != 0 {
		t.Fatalf("network mode %q, ports %v: want none and no published port", mode, in.Container.NetworkSettings.Ports)
	}
	run := func(inst provider.Instance, cmd string) string {
		t.Helper()
		var out strings.Builder
		res, err := inst.Exec(ctx, provider.ExecRequest{Command: cmd, Stdout: &out, Stderr: &out})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("%q: %v %+v %s", cmd, err, res, out.String())
		}
		return strings.TrimSpace(out.String())
	}
	if got := run(inst, `tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '`); got != "lo" {
		t.Errorf("interfaces: %q, want lo only", got)
	}
	step("created, interfaces read")
	// Eight commands at once, each a stream of its own.
	var wg sync.WaitGroup
	for n := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var out strings.Builder
			res, err := inst.Exec(ctx, provider.ExecRequest{Command: fmt.Sprintf("sleep 0.3; echo %d", n), Stdout: &out})
			if err != nil || res.ExitCode != 0 || strings.TrimSpace(out.String()) != fmt.Sprint(n) {
				t.Errorf("concurrent exec %d: %v %+v %q", n, err, res, out.String())
			}
		}()
	}
	wg.Wait()
	step("eight commands at once")
	// Files both ways, 4 MiB of every byte value.
	data := bytes.Repeat([]byte{0, 1, 2, 0xff, '\n', '\r', 0x1b}, 600_000)
	if err := i.WriteFile(ctx, "/workspace/blob", bytes.NewReader(data), nil); err != nil {
		t.Fatal(err)
	}
	rc, err := i.ReadFile(ctx, "/workspace/blob")
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back %d bytes (%v), wrote %d", len(got), err, len(data))
	}
	step("files")
	// A port tunnel to a server on the sandbox's loopback.
	run(inst, `(printf 'HTTP/1.0 200 OK\r\n\r\nfrom inside' | busybox nc -l -p 8123 >/dev/null 2>&1 || printf 'HTTP/1.0 200 OK\r\n\r\nfrom inside' | nc -l -p 8123 >/dev/null 2>&1) & sleep 0.3`)
	conn, err := i.DialPort(ctx, 8123)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "GET / HTTP/1.0\r\n\r\n")
	reply, _ := io.ReadAll(conn)
	conn.Close()
	if !strings.Contains(string(reply), "from inside") {
		t.Errorf("through the tunnel: %q", reply)
	}
	step("tunnel")
	// Another provider finds it by its labels and reaches it the same way.
	p2 := newTestProvider(t, Config{})
	again, err := p2.Connect(ctx, i.id)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if got := run(again, "echo again"); got != "again" {
		t.Errorf("through a second provider: %q", got)
	}
	step("second provider")
	// The relays end with their connections: once the clients are closed, no relay runs.
	inst.Close()
	again.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var out strings.Builder
		j, _ := p2.Connect(ctx, i.id)
		res, err := j.Exec(ctx, provider.ExecRequest{Command: "ps -eo args | grep -c '[a]gent --relay' || true", Stdout: &out})
		j.Close()
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("counting relays: %v %+v", err, res)
		}
		// The count includes the relay this very command came through.
		if strings.TrimSpace(out.String()) == "1" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("relays still running after their clients closed: %s", out.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestDestroyRacingRemovals: two providers (two tupper processes) destroy the same sandboxes
// at once, as a reap at a deadline and a client's Destroy do. The engine refuses the second
// removal while the first is under way; neither caller sees that refusal, and each sandbox is
// gone after both.
func TestDestroyRacingRemovals(t *testing.T) {
	a := newTestProvider(t, Config{})
	b := newTestProvider(t, Config{})
	ctx := t.Context()
	var ids []string
	for range 6 {
		inst, err := a.Create(ctx, provider.CreateSpec{})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, inst.(*Instance).id)
		inst.Close()
	}
	for _, id := range ids {
		errs := make(chan error, 2)
		for _, p := range []*Provider{a, b} {
			go func() { errs <- p.Destroy(ctx, id) }()
		}
		for range 2 {
			// The loser of the race may find nothing left to destroy: not found is its answer.
			if err := <-errs; err != nil && !errors.Is(err, provider.CodeNotFound) {
				t.Errorf("Destroy(%s) beside another: %v", id, err)
			}
		}
		if _, err := a.Connect(ctx, id); !errors.Is(err, provider.CodeNotFound) {
			t.Errorf("Connect(%s) after both destroys: %v, want not found", id, err)
		}
	}
}
