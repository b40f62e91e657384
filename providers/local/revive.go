//go:build linux

package local

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/tupper-dev/tupper/provider"
)

// A gVisor sandbox is one kernel: when its processes reach the pids limit, the sentry can
// make no host thread and the whole sandbox stops (docs/security.md, finding 7), and when
// they reach the memory limit the host's OOM killer ends the sentry (finding 4). Neither
// can be contained inside on this host: with gVisor's own pids limit inside, the sentry's
// host tasks still grow with the time a bomb runs (measured in docs/security.md). So such
// a sandbox comes back by itself instead of simply being gone: its holder keeps its disk,
// and the next Connect, List, reap or call on it that finds it stopped boots it again on
// its files, as the resume of a pause without memory does (coldpause.go), and records why
// it stopped (provider.Info.Restarts, Instance.Restarts). Every process it ran has ended, as after a reboot.
//
// Only those two causes are revived, read from the sandbox's host cgroups before anything
// is removed (pids.events, the OOM kill count). An agent that ended at its idle timeout or
// deadline says so in its run directory (agent.Config.EndFile, endedAsTold), and such a
// sandbox, or one whose holder died, is removed as before, whatever its cgroups counted. A sandbox revived reviveMax times within reviveWindow
// is removed too, so a template whose start command bombs cannot loop for ever.

const (
	reviveMax    = 3
	reviveWindow = 10 * time.Minute
	keptRestarts = 16 // the record keeps the last ones
)

// stopCause says why runsc sandbox rec's sentry died, from its host cgroups, or "" when no
// limit it can be revived from was reached.
func stopCause(rec *record) string {
	if rec.Runtime != RuntimeRunsc {
		return ""
	}
	if n := cgroupCounter(filepath.Join(pidsV1Root, "tupper", rec.ID, "pids.events"), "max"); n > 0 {
		return "its processes reached the pids limit (" + strconv.FormatInt(rec.Pids, 10) +
			"): under gVisor that stops the whole sandbox (docs/security.md, finding 7)"
	}
	for _, d := range cgroupDirs(rec.ID) {
		// cgroup v1 memory.oom_control, or v2 memory.events.
		if cgroupCounter(filepath.Join(d, "memory.oom_control"), "oom_kill") > 0 || cgroupCounter(filepath.Join(d, "memory.events"), "oom_kill") > 0 {
			return "it reached its memory limit (" + strconv.Itoa(rec.MemoryMB) +
				" MB): under gVisor the host's OOM killer ends the whole sandbox (docs/security.md, finding 4)"
		}
	}
	return ""
}

// cgroupCounter reads the counter key of a cgroup file of "key value" lines, or 0.
func cgroupCounter(path, key string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == key {
			n, _ := strconv.ParseInt(f[1], 10, 64)
			return n
		}
	}
	return 0
}

// revivable reports why sandbox rec, found dead, may be booted again ("" if not): a ready
// runsc sandbox, not paused or pooled, within its deadline, whose holder keeps its disk and
// whose sentry died of a limit (stopCause), not revived too often lately.
func (p *Provider) revivable(rec *record, now time.Time) string {
	if rec.Runtime != RuntimeRunsc || rec.Status != statusReady || rec.Pooled || rec.Paused ||
		alive(rec) || !holderAlive(rec) || !rec.Deadline.IsZero() && now.After(rec.Deadline) {
		return ""
	}
	recent := 0
	for _, r := range rec.Restarts {
		if now.Sub(r.At) < reviveWindow {
			recent++
		}
	}
	if recent >= reviveMax || p.endedAsTold(rec) {
		return ""
	}
	return stopCause(rec)
}

// endFileName is the file in the agent's run directory where it says why its deadline or
// idle timeout ended it (agent.Config.EndFile).
const endFileName = "ended"

// endedAsTold reports whether sandbox rec's agent said it ended at its deadline or idle
// timeout. The file is in a directory the sandbox's root owns: it is opened without
// following a symbolic link, and a bit of it read.
func (p *Provider) endedAsTold(rec *record) bool { return p.endTold(rec) != "" }

// revive boots sandbox rec again on its files, recording why it stopped. Call with the
// sandbox lock held, rec read under it and revivable. A boot that fails leaves the sandbox
// paused without memory, as a failed resume does: Resume may try again, Destroy removes it.
func (p *Provider) revive(ctx context.Context, rec *record, why string) error {
	rt, err := p.runtimeOf(rec)
	if err != nil {
		return err
	}
	rec.Restarts = append(rec.Restarts, provider.Restart{At: time.Now().UTC().Truncate(time.Millisecond), Reason: why})
	if n := len(rec.Restarts); n > keptRestarts {
		rec.Restarts = rec.Restarts[n-keptRestarts:]
	}
	// From here on a crash leaves it paused without memory, which a resume boots.
	rec.Paused, rec.Cold = true, true
	if err := p.lay.writeRecord(rec); err != nil {
		return err
	}
	return p.instance(rec).coldBoot(ctx, rt, rec)
}

// reviveDead boots sandbox id again if it died of a limit (revivable), under its lock, and
// reports whether it runs again (a boot that failed leaves it paused without memory).
func (p *Provider) reviveDead(ctx context.Context, id string) bool {
	rec, err := p.lay.readRecord(id)
	if err != nil || p.revivable(rec, time.Now()) == "" {
		return false
	}
	lk, err := p.lockSandbox(ctx, id)
	if err != nil {
		return false
	}
	defer lk.Unlock()
	if rec, err = p.lay.readRecord(id); err != nil {
		return false
	}
	why := p.revivable(rec, time.Now())
	if why == "" {
		return alive(rec)
	}
	return p.revive(ctx, rec, why) == nil
}

// Restarts returns the times the provider found the sandbox stopped by a limit and booted
// it again, with why, oldest first (at most the last 16).
func (i *Instance) Restarts(ctx context.Context) ([]provider.Restart, error) {
	rec, err := i.p.lay.readRecord(i.id)
	if err != nil {
		return nil, err
	}
	return rec.Restarts, nil
}
