//go:build linux

package local

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tupper-dev/tupper/provider"
)

// Why a sandbox that ended by itself ended (provider.EndReporter). The reap that removes a
// dead sandbox first writes why into ended/ID.json in the home, which EndOf reads: a server
// that finds the sandbox gone (a reconcile, a request) records the reason rather than a bare
// "expired". The files are kept for endKeep, far longer than a server's reconcile takes to
// notice, and removed by a later reap.

// endKeep is how long the reason of a removed sandbox is kept.
const endKeep = time.Hour

func (l layout) ended() string              { return filepath.Join(l.home, "ended") }
func (l layout) endedFile(id string) string { return filepath.Join(l.ended(), id+".json") }

// EndOf implements provider.EndReporter: why sandbox id ended by itself, from what its reap
// wrote, or from the sandbox itself when it is dead but not yet removed.
func (p *Provider) EndOf(ctx context.Context, id string) (provider.End, bool) {
	if !validID(id) {
		return provider.End{}, false
	}
	if b, err := os.ReadFile(p.lay.endedFile(id)); err == nil {
		var e provider.End
		if json.Unmarshal(b, &e) == nil && e.Reason != "" {
			return e, true
		}
	}
	rec, err := p.lay.readRecord(id)
	if err != nil || rec.Pooled || !p.dead(rec, time.Now()) {
		return provider.End{}, false
	}
	return p.endCause(rec, time.Now()), true
}

// endCause says why dead sandbox rec ended: its deadline, its agent's idle timeout (which
// the agent writes in its run directory, endedAsTold), the OOM killer (its memory cgroup
// counted a kill and its init is gone: under runsc the sentry, which the host's OOM killer
// ends; under runc and crun the agent, which the host ranks below every command, so in
// practice only once a command raised its score or none is left to kill), or else its init's
// exit.
func (p *Provider) endCause(rec *record, now time.Time) provider.End {
	if !rec.Deadline.IsZero() && now.After(rec.Deadline) {
		return provider.End{Reason: "timeout"}
	}
	if told := p.endTold(rec); told != "" {
		if strings.Contains(told, "idle") {
			return provider.End{Reason: "idle"}
		}
		return provider.End{Reason: "timeout"}
	}
	if rec.Status == statusCreating {
		return provider.End{Reason: "error", Message: "its create never finished"}
	}
	if n := oomKillCount(rec.ID); n > 0 {
		return provider.End{Reason: "oom_killed", Message: "it reached its memory limit (" + strconv.Itoa(rec.MemoryMB) +
			" MB) and the kernel's OOM killer ended its init (OOM kills in its memory cgroup: " + strconv.FormatInt(n, 10) + ")"}
	}
	if rec.Runtime == RuntimeRunsc && cgroupCounter(filepath.Join(pidsV1Root, "tupper", rec.ID, "pids.events"), "max") > 0 {
		return provider.End{Reason: "error", Message: "its processes reached the pids limit (" + strconv.FormatInt(rec.Pids, 10) +
			"), which under gVisor stops the whole sandbox (docs/security.md, finding 7)"}
	}
	if !holderAlive(rec) && alive(rec) {
		return provider.End{Reason: "error", Message: "its holder process died"}
	}
	return provider.End{Reason: "error", Message: "its init (the agent) exited"}
}

// oomKillCount is the OOM kills the memory cgroup of sandbox id counted (v1
// memory.oom_control, v2 memory.events).
func oomKillCount(id string) int64 {
	var n int64
	for _, d := range cgroupDirs(id) {
		n = max(n, cgroupCounter(filepath.Join(d, "memory.oom_control"), "oom_kill"), cgroupCounter(filepath.Join(d, "memory.events"), "oom_kill"))
	}
	return n
}

// endTold is what sandbox rec's agent wrote when its deadline or idle timeout ended it, or "".
func (p *Provider) endTold(rec *record) string {
	f, err := os.OpenFile(filepath.Join(p.lay.run(rec.ID), endFileName), os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return ""
	}
	defer f.Close()
	b := make([]byte, 64)
	n, _ := f.Read(b)
	return string(b[:n])
}

// recordEnd writes why dead sandbox rec ended, for EndOf, before its reap removes it. A
// pooled sandbox was never anyone's: nothing is written.
func (p *Provider) recordEnd(rec *record) {
	if rec.Pooled {
		return
	}
	b, _ := json.Marshal(p.endCause(rec, time.Now()))
	if err := os.MkdirAll(p.lay.ended(), 0o700); err != nil {
		return
	}
	tmp := p.lay.endedFile(rec.ID) + ".tmp"
	if os.WriteFile(tmp, b, 0o600) == nil {
		os.Rename(tmp, p.lay.endedFile(rec.ID))
	}
}

// pruneEnded removes the reasons kept longer than endKeep.
func (p *Provider) pruneEnded(now time.Time) {
	ents, err := os.ReadDir(p.lay.ended())
	if err != nil {
		return
	}
	for _, e := range ents {
		if info, err := e.Info(); err == nil && now.Sub(info.ModTime()) > endKeep {
			os.Remove(filepath.Join(p.lay.ended(), e.Name()))
		}
	}
}

// Exec is the agent's (agentinst.Agent.Exec), except for a command whose whole sandbox the
// host's OOM killer ended, which only happens under runsc (the sentry holds all of the
// sandbox's memory): its connection to the agent breaks, and rather than that error it is
// reported as what it is, a command the OOM killer ended (137, SIGKILL, OOMKilled), once the
// sandbox has come back on its files (revive.go) or ended as oom_killed. Under runc and crun
// the agent itself tells an OOM kill (agent/oom.go). A sandbox that had stopped before the
// command started fails it as before.
func (i *Instance) Exec(ctx context.Context, req provider.ExecRequest) (provider.ExecResult, error) {
	if req.Detach || i.runtime() != RuntimeRunsc {
		return i.Agent.Exec(ctx, req)
	}
	start := time.Now()
	if rec, err := i.p.lay.readRecord(i.id); err != nil || !alive(rec) {
		return i.Agent.Exec(ctx, req)
	}
	res, err := i.Agent.Exec(ctx, req)
	if err == nil || ctx.Err() != nil {
		return res, err
	}
	// A dead sentry breaks the stream (provider, unavailable) or is found stopped (not
	// found); any other failure (a paused sandbox, a bad request) is not this.
	if c := provider.CodeOf(err); c != provider.CodeProvider && c != provider.CodeUnavailable && c != provider.CodeNotFound {
		return res, err
	}
	if i.p.stoppedByOOM(ctx, i.id, start) {
		return provider.ExecResult{ExitCode: 128 + int(unix.SIGKILL), Signal: "SIGKILL", OOMKilled: true}, nil
	}
	return res, err
}

func (i *Instance) runtime() string {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.rec.Runtime
}

// sentryExitWait bounds how long stoppedByOOM waits for a sentry the OOM killer chose to
// be gone.
const sentryExitWait = 5 * time.Second

// stoppedByOOM reports whether runsc sandbox id stopped at its memory limit since since: it
// came back from that (a restart since then says so) or ended of it. A call failing as the
// sentry dies can see it alive still: it waits for the sentry to be gone (or not) first.
func (p *Provider) stoppedByOOM(ctx context.Context, id string, since time.Time) bool {
	rec, err := p.lay.readRecord(id)
	if err == nil && oomKillCount(id) == 0 && len(rec.Restarts) == 0 {
		return false // nothing was OOM-killed: not this
	}
	for deadline := time.Now().Add(sentryExitWait); err == nil && alive(rec) && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		rec, err = p.lay.readRecord(id)
	}
	if err == nil {
		p.reviveDead(ctx, id)
		if rec, err = p.lay.readRecord(id); err == nil {
			for _, r := range rec.Restarts {
				if !r.At.Before(since.Truncate(time.Millisecond)) && strings.Contains(r.Reason, "memory limit") {
					return true
				}
			}
		}
	}
	end, ok := p.EndOf(ctx, id)
	return ok && end.Reason == "oom_killed"
}
