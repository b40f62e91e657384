//go:build linux

package local

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/sandbox"
)

// hog allocates far past the test sandboxes' memory limit: tail keeps a whole line, and
// /dev/zero has no newline.
const hog = "head -c 1024m /dev/zero | tail > /dev/null"

// TestCommandOOMKilled: a command the kernel's OOM killer ends is reported as OOM-killed,
// not as a bare 137; a command killed by SIGKILL otherwise is not, even after an OOM kill in
// the same sandbox. Under runsc the host's OOM killer ends the whole sandbox instead (the
// sentry holds all of its memory): it comes back on its files (revive.go), and once it has
// come back reviveMax times within reviveWindow it is removed, and ends as oom_killed.
func TestCommandOOMKilled(t *testing.T) {
	forRuntimesAsRoot(t, func(t *testing.T, rt string) {
		p := newTestProvider(t, rt)
		inst := create(t, p, provider.CreateSpec{Network: netNone, Size: provider.Size{CPU: 1, MemoryMB: 128, DiskGB: 1}})
		if rt == RuntimeRunsc {
			runscOOM(t, p, inst)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var errOut bytes.Buffer
		res, err := inst.Exec(ctx, provider.ExecRequest{Command: hog, Stderr: &errOut})
		if err != nil {
			t.Fatalf("the hog: %v", err)
		}
		// sh -c exits 137 when the OOM killer SIGKILLs its pipeline's tail.
		if !res.OOMKilled || res.ExitCode != 137 {
			t.Errorf("the hog ended %+v (stderr %q), want OOM-killed, 137", res, errOut.String())
		}
		// Alone, without a shell between, it is the command the OOM killer SIGKILLs.
		settled(t, inst.ID())
		res, err = inst.Exec(ctx, provider.ExecRequest{Command: "exec tail /dev/zero"})
		if err != nil || !res.OOMKilled || res.ExitCode != 137 || res.Signal != "SIGKILL" {
			t.Errorf("exec tail /dev/zero: %+v, %v; want OOM-killed, 137, SIGKILL", res, err)
		}
		settled(t, inst.ID())
		res, err = inst.Exec(ctx, provider.ExecRequest{Command: "kill -9 $$"})
		if err != nil || res.OOMKilled || res.ExitCode != 137 {
			t.Errorf("a command killed by SIGKILL: %+v, %v; want 137, not OOM-killed", res, err)
		}
		if res, err := inst.Exec(ctx, provider.ExecRequest{Command: "exit 3"}); err != nil || res.OOMKilled || res.ExitCode != 3 {
			t.Errorf("exit 3: %+v, %v", res, err)
		}
		// A background process too (the SDK's wrapper shell reads the count around it).
		box, err := sandbox.Connect(ctx, p, inst.ID(), sandbox.ConnectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer box.Close()
		for _, c := range []struct {
			cmd string
			oom bool
		}{{hog, true}, {"kill -9 $$", false}} {
			settled(t, inst.ID())
			proc, err := box.Start(ctx, c.cmd, sandbox.StartOptions{})
			if err != nil {
				t.Fatal(err)
			}
			es, err := proc.Wait(ctx)
			if err != nil || es.ExitCode != 137 || es.OOMKilled != c.oom {
				t.Errorf("background %q: %+v, %v; want 137, OOM-killed %v", c.cmd, es, err, c.oom)
			}
		}
		if _, ok := p.EndOf(ctx, inst.ID()); ok {
			t.Errorf("a live sandbox has an end")
		}
	})
}

// settled waits for sandbox id's memory to be freed after an OOM kill: a command started
// while the memory of the one killed is still charged can be the OOM killer's next pick,
// and is then rightly reported OOM-killed.
func settled(t *testing.T, id string) {
	t.Helper()
	for start := time.Now(); time.Since(start) < 10*time.Second; time.Sleep(20 * time.Millisecond) {
		used := int64(-1)
		for _, d := range cgroupDirs(id) {
			for _, f := range []string{"memory.usage_in_bytes", "memory.current"} {
				if b, err := os.ReadFile(filepath.Join(d, f)); err == nil {
					used, _ = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
				}
			}
		}
		if used < 0 {
			t.Fatalf("no memory usage in the cgroups of %s", id)
		}
		if used < 64<<20 {
			return
		}
	}
	t.Fatalf("the memory of %s was not freed after the OOM kill", id)
}

// runscOOM: under runsc each hog ends the whole sandbox, which comes back reviveMax times;
// the next time it is removed and EndOf says oom_killed. Each time the hog's result says the
// OOM killer ended it. A command that fails otherwise is not taken for one.
func runscOOM(t *testing.T, p *Provider, inst *Instance) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for i := 0; ; i++ {
		rec, err := p.lay.readRecord(inst.ID())
		if err != nil {
			t.Fatalf("after %d hogs: %v", i, err)
		}
		res, err := inst.Exec(ctx, provider.ExecRequest{Command: hog})
		t.Logf("hog %d: %+v %v", i+1, res, err)
		// Its whole sandbox ended, and the command's result says why all the same.
		if err != nil || !res.OOMKilled || res.ExitCode != 137 || res.Signal != "SIGKILL" {
			t.Errorf("under runsc the hog ended %+v, %v; want OOM-killed, 137, SIGKILL", res, err)
		}
		if alive(rec) {
			t.Errorf("the sentry the OOM killer ended is alive")
		}
		c, err := p.Connect(ctx, inst.ID())
		if err == nil {
			c.Close()
			if i >= reviveMax {
				t.Fatalf("the sandbox came back %d times", i+1)
			}
			continue
		}
		if provider.CodeOf(err) != provider.CodeNotFound || i != reviveMax {
			t.Fatalf("connect after hog %d: %v; want not_found after %d", i+1, err, reviveMax+1)
		}
		break
	}
	end, ok := p.EndOf(ctx, inst.ID())
	if !ok || end.Reason != "oom_killed" || !strings.Contains(end.Message, "memory limit (128 MB)") {
		t.Errorf("EndOf = %+v, %v; want oom_killed", end, ok)
	}
	if res, err := inst.Exec(ctx, provider.ExecRequest{Command: "true"}); provider.CodeOf(err) != provider.CodeNotFound || res.OOMKilled {
		t.Errorf("exec in the ended sandbox: %+v, %v; want not_found", res, err)
	}
}

// TestInitOOMKilled: under runc and crun a sandbox whose agent (its init) the OOM killer
// ends ends as oom_killed. The host gives the agent the lowest OOM score, so a command raises
// it first (anyone may raise a score) and fills memory no process holds (a tmpfs), which
// leaves the agent the largest process to kill.
// (Under runsc the OOM killer ends the sentry, not the agent: TestCommandOOMKilled.)
func TestInitOOMKilled(t *testing.T) {
	for _, rt := range []string{RuntimeRunc, RuntimeCrun} {
		t.Run(rt, func(t *testing.T) { initOOMKilled(t, rt) })
	}
}

func initOOMKilled(t *testing.T, rt string) {
	t.Parallel()
	p := newTestProvider(t, rt)
	inst := create(t, p, provider.CreateSpec{Network: netNone, Size: provider.Size{CPU: 1, MemoryMB: 48, DiskGB: 1}})
	rec, err := p.lay.readRecord(inst.ID())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := inst.Exec(ctx, provider.ExecRequest{Command: "echo 1000 > /proc/1/oom_score_adj && head -c 60m /dev/zero > /dev/shm/fill"})
	t.Logf("the fill: %+v %v", res, err)
	for start := time.Now(); alive(rec); time.Sleep(50 * time.Millisecond) {
		if time.Since(start) > 30*time.Second {
			t.Fatal("the agent lives on")
		}
	}
	if c, err := p.Connect(ctx, inst.ID()); provider.CodeOf(err) != provider.CodeNotFound {
		if c != nil {
			c.Close()
		}
		t.Fatalf("connect after the agent was killed: %v", err)
	}
	if end, ok := p.EndOf(ctx, inst.ID()); !ok || end.Reason != "oom_killed" {
		t.Errorf("EndOf = %+v, %v; want oom_killed", end, ok)
	}
}
