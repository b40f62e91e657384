package docker

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/tupper-dev/tupper/provider"
)

// TestPauseCold pauses a sandbox without its memory and resumes it from a second provider,
// as after a restart of tupper: the container is stopped (listed paused, not reaped, its
// agent refusing calls), and the resume boots a new agent with the sandbox's environment and
// secrets on the same files, reached again on its new port (network all) or through the
// relay (network none); no process from before is left. A second cold pause works from the
// provider that did not make the sandbox, and Destroy removes what the pause kept.
func TestPauseCold(t *testing.T) {
	p := newTestProvider(t, Config{})
	if !provider.CapabilitiesOf(p).Has(provider.CapPauseCold) {
		t.Fatal("pause-cold not declared")
	}
	for _, mode := range []provider.NetworkMode{provider.NetworkAll, provider.NetworkNone} {
		t.Run(string(mode), func(t *testing.T) {
			ctx := t.Context()
			inst, err := p.Create(ctx, provider.CreateSpec{
				Network: provider.Network{Mode: mode}, Env: map[string]string{"KEPT": "env"},
				Secrets: map[string]string{"TOKEN": "s3cret"}, Labels: map[string]string{"cold": string(mode)},
			})
			if err != nil {
				t.Fatal(err)
			}
			defer inst.Close()
			id := inst.(*Instance).id
			defer p.Destroy(context.WithoutCancel(ctx), id)
			run := func(in provider.Instance, cmd string) string {
				t.Helper()
				var out strings.Builder
				res, err := in.Exec(ctx, provider.ExecRequest{Command: cmd, Cwd: "/workspace", Stdout: &out, Stderr: &out})
				if err != nil || res.ExitCode != 0 {
					t.Fatalf("%s: %v %+v %q", cmd, err, res, out.String())
				}
				return out.String()
			}
			// sleepers counts the processes "sleep 1001" in the sandbox.
			const sleepers = `n=0; for f in /proc/[0-9]*/cmdline; do if [ "$(tr '\0' ' ' < $f 2>/dev/null)" = "sleep 1001 " ]; then n=$((n+1)); fi; done; echo $n`
			// Counted only once it has exec'd: the command waits for it (up to 5 s).
			run(inst, "echo before > kept.txt; (sleep 1001 >/dev/null 2>&1 &); i=0; while [ $i -lt 500 ] && [ \"$("+sleepers+")\" != 1 ]; do sleep 0.01; i=$((i+1)); done")
			if got := run(inst, sleepers); got != "1\n" {
				t.Fatalf("sleepers before the pause: %q", got)
			}
			t0 := time.Now()
			if err := inst.(provider.ColdPauser).PauseCold(ctx); err != nil {
				t.Fatal(err)
			}
			t.Logf("pause without memory: %v", time.Since(t0).Round(time.Millisecond))
			if err := inst.(provider.ColdPauser).PauseCold(ctx); err != nil {
				t.Fatalf("a second cold pause: %v", err)
			}
			if in, err := inst.Info(ctx); err != nil || in.State != provider.StatePaused {
				t.Fatalf("info after the cold pause: %+v %v", in, err)
			}
			if _, err := inst.Exec(ctx, provider.ExecRequest{Command: "true"}); provider.CodeOf(err) != provider.CodeConflict {
				t.Errorf("exec in a cold-paused sandbox: %v, want conflict", err)
			}
			if _, err := p.Reap(ctx); err != nil {
				t.Fatal(err)
			}
			infos, err := p.List(ctx, provider.ListFilter{Labels: map[string]string{"cold": string(mode)}})
			if err != nil || len(infos) != 1 || infos[0].ID != id || infos[0].State != provider.StatePaused {
				t.Fatalf("list after the cold pause and a reap: %+v %v", infos, err)
			}

			// A second provider, as a restarted tupper: it knows the sandbox is paused so,
			// and its resume finds the agent's config in the engine.
			p2 := newTestProvider(t, Config{})
			again, err := p2.Connect(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			defer again.Close()
			if in, err := again.Info(ctx); err != nil || in.State != provider.StatePaused {
				t.Fatalf("info from another provider: %+v %v", in, err)
			}
			if _, err := again.Exec(ctx, provider.ExecRequest{Command: "true"}); provider.CodeOf(err) != provider.CodeConflict {
				t.Errorf("exec from another provider in a cold-paused sandbox: %v, want conflict", err)
			}
			t0 = time.Now()
			if err := again.(provider.Pauser).Resume(ctx); err != nil {
				t.Fatal(err)
			}
			t.Logf("resume (a boot, from another provider): %v", time.Since(t0).Round(time.Millisecond))
			if in, err := again.Info(ctx); err != nil || in.State != provider.StateRunning {
				t.Fatalf("info after the resume: %+v %v", in, err)
			}
			if got := run(again, "cat kept.txt; echo $KEPT $TOKEN"); got != "before\nenv s3cret\n" {
				t.Errorf("after the resume: %q", got)
			}
			if got := run(again, sleepers); got != "0\n" {
				t.Errorf("sleepers after the resume: %q, want none", got)
			}
			if err := again.(provider.Pauser).Resume(ctx); err != nil {
				t.Errorf("resuming a running sandbox: %v", err)
			}

			// Paused so again by the provider that did not make it, resumed by the one that did
			// (whose handle dials the agent anew).
			if err := again.(provider.ColdPauser).PauseCold(ctx); err != nil {
				t.Fatal(err)
			}
			if err := inst.(provider.Pauser).Resume(ctx); err != nil {
				t.Fatal(err)
			}
			if got := run(inst, "cat kept.txt"); got != "before\n" {
				t.Errorf("after the second resume: %q", got)
			}

			if err := p.Destroy(ctx, id); err != nil {
				t.Fatal(err)
			}

			// A sandbox's first pause without memory from a provider that did not make it
			// (the CLI's: each command a process of its own): Create kept the config.
			fresh, err := p.Create(ctx, provider.CreateSpec{Network: provider.Network{Mode: mode}, Env: map[string]string{"KEPT": "fresh"}})
			if err != nil {
				t.Fatal(err)
			}
			defer fresh.Close()
			freshID := fresh.(*Instance).id
			defer p.Destroy(context.WithoutCancel(ctx), freshID)
			other := newTestProvider(t, Config{})
			oh, err := other.Connect(ctx, freshID)
			if err != nil {
				t.Fatal(err)
			}
			defer oh.Close()
			if err := oh.(provider.ColdPauser).PauseCold(ctx); err != nil {
				t.Fatalf("a first pause without memory from another provider: %v", err)
			}
			if err := oh.(provider.Pauser).Resume(ctx); err != nil {
				t.Fatal(err)
			}
			if got := run(oh, "echo $KEPT"); got != "fresh\n" {
				t.Errorf("after another provider's pause and resume: %q", got)
			}
			if err := p.Destroy(ctx, freshID); err != nil {
				t.Fatal(err)
			}
			if _, err := p.cli.VolumeInspect(ctx, coldVolumePrefix+freshID, client.VolumeInspectOptions{}); provider.CodeOf(p.err(err, "")) != provider.CodeNotFound {
				t.Errorf("the config's volume after Destroy: %v, want not found", err)
			}
			if _, err := p.cli.VolumeInspect(ctx, coldVolumePrefix+id, client.VolumeInspectOptions{}); provider.CodeOf(p.err(err, "")) != provider.CodeNotFound {
				t.Errorf("the cold pause's volume after Destroy: %v, want not found", err)
			}
		})
	}
}
