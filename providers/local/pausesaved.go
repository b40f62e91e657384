//go:build linux

package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/tupper-dev/tupper/provider"
)

// The saved pause (runsc, network none: provider.CapPauseFreesMemory). The freezer keeps a
// paused sandbox's memory resident; under runsc, Pause instead saves the sandbox to disk and ends its runtime processes, and
// Resume restores it in place: the same id, record, token, labels, disk, address and
// network namespace, its processes running on with their memory as it was.
//
// What stays while a sandbox is saved so is what the holder keeps (holder.go): its mount
// namespace, and with it the sandbox's disk (its writable layer and /tmp), its root file
// system's overlay, and under network "all" or "allow" the network namespace bound in it
// with its veth and address (and the egress proxy of "allow"). The checkpoint image holds
// the rest: gVisor's kernel and every process's memory. It is written to
// sandboxes/<id>/saved.tmp/ and renamed to saved/ once complete, before the record says
// Saved: a sandbox whose init is gone but whose image is complete and holder alive is
// dormant, not dead, whatever a crash left in its record.
//
// The holder and the egress proxy live in the sandbox's cgroups, which runsc removes when it
// deletes the container: they move to the root of each hierarchy while the sandbox is
// saved, and back into the cgroups the restore makes. The agent's host socket is closed
// before the checkpoint (gVisor cannot save it; see SnapshotKind) and opened again at the
// same path after the restore.

// saved is where a saved sandbox's checkpoint image is; savedTmp is where it is written.
func (l layout) saved(id string) string    { return filepath.Join(l.dir(id), "saved") }
func (l layout) savedTmp(id string) string { return filepath.Join(l.dir(id), "saved.tmp") }

// dormant reports whether r is a paused sandbox whose runtime is gone but which lives on:
// its holder (so its disk) alive, and its memory on disk (a saved pause, its image
// complete) or dropped (a cold pause, coldpause.go).
func (p *Provider) dormant(r *record) bool {
	return !alive(r) && holderAlive(r) && (r.Cold || fileExists(p.lay.saved(r.ID)))
}

// live reports whether r runs or is dormant.
func (p *Provider) live(r *record) bool { return alive(r) || p.dormant(r) }

// withoutCheckpoint drops from caps what needs gVisor's checkpoint, which refuses a sandbox
// on the host's network stack (runsc --network=host: network "all" and "allow"): such a
// sandbox's pause is the freezer, and it takes filesystem snapshots only.
func withoutCheckpoint(caps []provider.Capability, rt string, net provider.NetworkMode) []provider.Capability {
	if rt != RuntimeRunsc || net == provider.NetworkNone {
		return caps
	}
	return slices.DeleteFunc(caps, func(c provider.Capability) bool {
		return c == provider.CapPauseFreesMemory || c == provider.CapSnapshotFull
	})
}

// freesMemory reports whether a paused sandbox of r releases its memory: runsc, with a
// holder to keep its disk.
func freesMemory(r *record) bool {
	return r.Runtime == RuntimeRunsc && r.HolderPID != 0 && runscNetwork(r) == "none" &&
		provider.NewCapabilities(r.Caps...).Has(provider.CapPauseFreesMemory)
}

// pauseSaved saves a running runsc sandbox to disk and ends its runtime. Call with the sandbox
// lock held, rec read under it. On failure the sandbox runs on (its agent listening again),
// unless the checkpoint ended it, which is then reported.
func (i *Instance) pauseSaved(ctx context.Context, rt ociRuntime, rec *record) (err error) {
	p := i.p
	id := rec.ID
	os.RemoveAll(p.lay.savedTmp(id))
	os.RemoveAll(p.lay.saved(id)) // a restore's leftover: the sandbox runs, so it is stale
	if err := os.Mkdir(p.lay.savedTmp(id), 0o700); err != nil {
		return err
	}
	defer os.RemoveAll(p.lay.savedTmp(id))
	c := agentClient(p.lay.socket(id))
	qerr := c.Quiesce(ctx)
	c.Close()
	bg := context.WithoutCancel(ctx)
	checkpointed := false
	defer func() {
		if err != nil && !checkpointed {
			rejoinCgroups(rec)
			i.relisten(bg, rt, rec)
		}
	}()
	if qerr != nil {
		return qerr
	}
	// runsc removes the sandbox's cgroups with the container: the processes that outlive
	// it leave them first.
	if err := leaveCgroups(rec); err != nil {
		return err
	}
	if err := rt.run(ctx, runscNetwork(rec), "checkpoint", "--image-path", p.lay.savedTmp(id), id); err != nil {
		if alive(rec) {
			return err
		}
		checkpointed = true // it ended anyway: nothing to save it from
		return fmt.Errorf("%w (the sandbox ended)", err)
	}
	checkpointed = true
	if err := os.Rename(p.lay.savedTmp(id), p.lay.saved(id)); err != nil {
		return err
	}
	// The checkpoint ended the sandbox; its container is forgotten (a stopped one, so
	// nothing is killed) and what runsc left of its cgroups removed.
	if err := rt.remove(bg, runscNetwork(rec), id); err != nil {
		return err
	}
	removeCgroups(id)
	rec.Paused, rec.Saved = true, true
	return p.lay.writeRecord(rec)
}

// resumeSaved restores a saved sandbox in place from its image, in its own mount namespace,
// and waits for its agent. Call with the sandbox lock held, rec read under it. A restore
// that fails leaves the sandbox saved.
func (i *Instance) resumeSaved(ctx context.Context, rt ociRuntime, rec *record) error {
	p := i.p
	id := rec.ID
	w, err := joinNSWorker(rec)
	if err != nil {
		return err
	}
	defer w.close()
	os.Remove(p.lay.pidFile(id))
	err = w.do(func() error {
		return rt.restore(ctx, runscNetwork(rec), id, p.lay.dir(id), p.lay.pidFile(id), p.lay.log(id), p.lay.saved(id))
	})
	fail := func(err error) error {
		bg := context.WithoutCancel(ctx)
		rt.remove(bg, runscNetwork(rec), id)
		removeCgroups(id)
		return err
	}
	if err != nil {
		return fail(err)
	}
	pid, err := readPidFile(p.lay.pidFile(id))
	if err != nil {
		return fail(err)
	}
	rec.InitPID, rec.InitStart = pid, procStart(pid)
	if err := rejoinCgroups(rec); err != nil {
		return fail(err)
	}
	// The restored agent waits, its listener closed, for the word to listen again.
	if err := rt.kill(ctx, runscNetwork(rec), id, "USR2"); err != nil {
		return fail(err)
	}
	if err := p.waitAgent(ctx, rec); err != nil {
		return fail(err)
	}
	// Time moved on while it was saved: the agent's deadline and idle clock start again
	// from the record's.
	if err := p.giveAgentLimits(ctx, rec); err != nil {
		return fail(err)
	}
	rec.Paused, rec.Saved = false, false
	if err := p.lay.writeRecord(rec); err != nil {
		return err
	}
	os.RemoveAll(p.lay.saved(id))
	return nil
}

// giveAgentLimits tells a sandbox's agent, restored or booted again, the record's deadline
// and idle timeout; its idle clock starts now.
func (p *Provider) giveAgentLimits(ctx context.Context, rec *record) error {
	cl := agentClient(p.lay.socket(rec.ID))
	defer cl.Close()
	return cl.SetLimits(ctx, agentDeadline(rec.Deadline), rec.IdleTimeout)
}

// agentDeadline is the deadline the agent enforces for a record's: rounded up to the
// second, as the agent's config keeps it (DeadlineUnix); zero for none.
func agentDeadline(d time.Time) time.Time {
	if d.IsZero() {
		return d
	}
	return d.Add(999 * time.Millisecond)
}

// leaveCgroups moves the processes of a sandbox that outlive its runtime (the holder, the
// egress proxy) to the root of each cgroup hierarchy.
func leaveCgroups(rec *record) error {
	var errs []error
	for _, pid := range survivors(rec) {
		for _, d := range cgroupDirs(rec.ID) {
			if _, err := os.Stat(d); err != nil {
				continue
			}
			root := filepath.Dir(filepath.Dir(d)) // d is <hierarchy>/tupper/<id>
			if err := os.WriteFile(filepath.Join(root, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
				errs = append(errs, fmt.Errorf("move pid %d out of %s: %w", pid, d, err))
			}
		}
	}
	return errors.Join(errs...)
}

// rejoinCgroups moves the processes leaveCgroups moved back into the sandbox's cgroups.
func rejoinCgroups(rec *record) error {
	var errs []error
	for _, pid := range survivors(rec) {
		errs = append(errs, joinCgroups(rec.ID, pid))
	}
	return errors.Join(errs...)
}

// survivors are the live processes of a sandbox besides its runtime's.
func survivors(rec *record) []int {
	var out []int
	if holderAlive(rec) {
		out = append(out, rec.HolderPID)
	}
	if e := rec.Egress; e != nil && e.PID > 0 && procStart(e.PID) == e.Start {
		out = append(out, e.PID)
	}
	return out
}
