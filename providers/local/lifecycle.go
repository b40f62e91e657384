//go:build linux

package local

import (
	"context"
	"errors"
	mathrand "math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tupper-dev/tupper/internal/flock"
	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/providers/local/internal/hostnet"
)

// alive reports whether the sandbox's init is still the process recorded at create.
func alive(r *record) bool {
	return r.InitPID > 0 && procStart(r.InitPID) == r.InitStart
}

// lockSandbox serialises Destroy, Pause and friends on one sandbox across processes.
func (p *Provider) lockSandbox(ctx context.Context, id string) (*flock.Lock, error) {
	if !validID(id) {
		return nil, errNotFound(id)
	}
	path := filepath.Join(p.lay.sandboxes(), "."+id+".lock")
	lk, err := flock.Acquire(ctx, path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, errNotFound(id)
		}
		return nil, err
	}
	// A sandbox torn down meanwhile (or never there): the lock file is this call's own
	// making, as a teardown removes the sandbox's, so it goes again rather than be left
	// behind (a reap in another process racing a Destroy left them).
	if _, err := os.Stat(p.lay.dir(id)); errors.Is(err, os.ErrNotExist) {
		os.Remove(path)
		lk.Unlock()
		return nil, errNotFound(id)
	}
	return lk, nil
}

// lockRecord takes sandbox id's lock and reads its record under it; the caller releases the
// lock (nil on error: nothing is held).
func (p *Provider) lockRecord(ctx context.Context, id string) (*flock.Lock, *record, error) {
	lk, err := p.lockSandbox(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	rec, err := p.lay.readRecord(id)
	if err != nil {
		lk.Unlock()
		return nil, nil, err
	}
	return lk, rec, nil
}

// Destroy stops the sandbox and removes everything it left.
func (p *Provider) Destroy(ctx context.Context, id string) error {
	defer p.reapSome(ctx)
	lk, rec, err := p.lockRecord(ctx, id)
	if err != nil {
		return err
	}
	defer lk.Unlock()
	return p.teardown(ctx, rec)
}

// teardown removes a sandbox: holder, container, network, mounts, leases, state directory.
// Each part tolerates being gone already, so a teardown interrupted halfway can run again.
// Call with the sandbox lock held.
func (p *Provider) teardown(ctx context.Context, rec *record) error {
	p.probed()
	id := rec.ID
	ctx = context.WithoutCancel(ctx)
	p.previews.CloseSandbox(id)
	var errs []error
	rt, haveRT := p.runtimes[rec.Runtime]
	if haveRT && rec.Paused && !rec.Cold {
		// runsc panics deleting a paused sandbox, and a frozen holder cannot die: thaw it
		// first. (A cold-paused sandbox has no frozen container: coldpause.go.)
		rt.run(ctx, runscNetwork(rec), "resume", id)
	}
	// The holder first: it is in the sandbox's cgroups, which the runtime's delete removes.
	// The container keeps its own copy of the mounts until it is gone; with the holder, the
	// sandbox's namespace and its mounts go.
	stopHolder(rec)(holderExitTimeout)
	stopEgress(rec, holderExitTimeout)
	if haveRT {
		if err := removeContainer(ctx, rt, rec); err != nil {
			errs = append(errs, err)
		}
	}
	if (rec.Network == string(provider.NetworkAll) || rec.Network == string(provider.NetworkAllow)) && p.net != nil {
		if err := p.net.Detach(ctx, id, leaseHolder(p.lay, id), rec.IP); err != nil {
			errs = append(errs, err)
		}
		if err := hostnet.RemoveNetns(p.lay.netns(id)); err != nil {
			errs = append(errs, err)
		}
	}
	// A sandbox from before holders has its mounts in the host's namespace; for the others
	// nothing is mounted at these paths here, which unmountRootfs accepts.
	if err := unmountRootfs(p.lay.disk(id), p.lay.rootfs(id)); err != nil {
		errs = append(errs, err)
	}
	if rec.UIDIndex >= 0 {
		if err := leasesIn(p.uidLeases()).Release(strconv.Itoa(rec.UIDIndex), leaseHolder(p.lay, id)); err != nil {
			errs = append(errs, err)
		}
	}
	removeCgroups(id)
	if len(errs) > 0 {
		return provider.Wrap(errors.Join(errs...), provider.CodeProvider, "destroy")
	}
	if err := os.RemoveAll(p.lay.dir(id)); err != nil {
		return provider.Wrap(err, provider.CodeProvider, "destroy")
	}
	os.Remove(filepath.Join(p.lay.sandboxes(), "."+id+".lock"))
	p.unindexKey(rec.Key, id)
	return nil
}

// removeCgroups removes a sandbox's cgroup directories if the runtime left them (runc can,
// when a container is deleted before it started, or while the processes it just killed are
// still exiting: after a fork bomb, hundreds of them). A directory still holding tasks
// refuses with EBUSY; it is retried for up to 5 s, then left.
//
// The parents every sandbox's cgroups sit under (/sys/fs/cgroup/<controller>/tupper) are shared
// by every sandbox of every process on the host and are never removed: the runtimes make them
// with mkdir -p while creating a container, so removing one that is empty for an instant
// fails a create running beside this teardown (another goroutine, another tupper process, a
// server beside a CLI). An empty cgroup directory costs nothing.
func removeCgroups(id string) {
	deadline := time.Now().Add(5 * time.Second)
	for _, d := range cgroupDirs(id) {
		for _, d := range withCommandCgroup(d) {
			for unix.Rmdir(d) == unix.EBUSY && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
		}
	}
}

// cgroupDirs are where a sandbox's cgroups are, if the runtime made them: cgroupsPath
// /tupper/ID under each v1 hierarchy (and the v2 one of a hybrid host), or under the v2
// root of a unified host.
func cgroupDirs(id string) []string {
	dirs := []string{filepath.Join("/sys/fs/cgroup/tupper", id)}
	ents, _ := os.ReadDir("/sys/fs/cgroup")
	for _, e := range ents {
		dirs = append(dirs, filepath.Join("/sys/fs/cgroup", e.Name(), "tupper", id))
	}
	return dirs
}

// Reap destroys sandboxes that stopped (their agent exited or was killed), passed their
// lifetime deadline, or were left half-made by a Create that died, and clears what a deleted
// Home left in the host-wide leases. It returns how many sandboxes it removed. Its work grows
// with the number of sandboxes: a long-lived process calls it on a timer (tupper serve does,
// through List), and List reaps the same way. Create and Destroy only check a few sandboxes
// each (reapSome), so that their cost does not grow with the sandboxes that exist.
func (p *Provider) Reap(ctx context.Context) (int, error) {
	n, err := p.reapAll(ctx, true)
	p.cleanLeases(ctx)
	return n, err
}

// cgroupSweepAge is how long an empty sandbox cgroup stays before sweepCgroups removes it:
// far longer than a create takes between the runtime's mkdir and its init joining it.
const cgroupSweepAge = 10 * time.Minute

// lastSweep is when this process last swept cgroups (UnixNano); sweeps are a minute apart.
var lastSweep atomic.Int64

// maybeSweepCgroups runs sweepCgroups unless this process did in the last minute: every List
// reaps, and a server lists every few seconds.
func maybeSweepCgroups(now time.Time) {
	last := lastSweep.Load()
	if now.UnixNano()-last < int64(time.Minute) || !lastSweep.CompareAndSwap(last, now.UnixNano()) {
		return
	}
	sweepCgroups(now.Add(-cgroupSweepAge))
}

// sweepCgroups removes the empty sandbox cgroups (tupper/ID under each hierarchy) made
// before cutoff. A teardown removes its sandbox's, but gives up after a few seconds while a
// process still dies in one, and a process killed mid-create or mid-teardown leaves them;
// no record names them any more, and they are host-wide (every Home's sandboxes share the
// tupper parents), so they are swept by age, not by record. The kernel refuses to remove a
// cgroup that has a process or a child (EBUSY), so a live sandbox's is never taken; the age
// keeps a sweep from racing a create that has just made one. The tupper parents themselves
// stay (see removeCgroups).
func sweepCgroups(cutoff time.Time) {
	for _, parent := range cgroupDirs("") {
		ents, err := os.ReadDir(parent)
		if err != nil {
			continue
		}
		for _, e := range ents {
			if !e.IsDir() || !validID(e.Name()) {
				continue
			}
			if fi, err := e.Info(); err == nil && fi.ModTime().Before(cutoff) {
				for _, d := range withCommandCgroup(filepath.Join(parent, e.Name())) {
					unix.Rmdir(d)
				}
			}
		}
	}
}

// reapAll checks every record and every snapshot; see Reap. With wait, it waits for sandbox
// locks held by others; without, it skips those sandboxes.
func (p *Provider) reapAll(ctx context.Context, wait bool) (int, error) {
	p.reapSnapshots()
	p.pruneEnded(time.Now())
	maybeSweepCgroups(time.Now())
	ids, err := p.lay.ids()
	if err != nil {
		return 0, err
	}
	return p.reapIDs(ctx, ids, wait)
}

// reapBatch is how many sandboxes a Create or Destroy checks on its way.
const reapBatch = 4

// reapSome checks up to reapBatch sandboxes, picked at random, and removes the dead among
// them. Listing the directory reads names only; the records and /proc are read for the few
// picked, so a process that only ever creates and destroys (the CLI) still finds a crashed
// sandbox's leftovers, after about n/reapBatch calls with n sandboxes, without paying for all
// n on every call.
func (p *Provider) reapSome(ctx context.Context) {
	ids, err := p.lay.ids()
	if err != nil || len(ids) == 0 {
		return
	}
	if len(ids) > reapBatch {
		mathrand.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
		ids = ids[:reapBatch]
	}
	p.reapIDs(ctx, ids, false)
}

// reapIDs removes the dead sandboxes among ids and returns how many it removed (pooled ones
// are not counted).
func (p *Provider) reapIDs(ctx context.Context, ids []string, wait bool) (int, error) {
	n := 0
	var errs []error
	for _, id := range ids {
		rec, err := p.lay.readRecord(id)
		if err != nil {
			continue
		}
		if !p.dead(rec, time.Now()) {
			continue
		}
		lctx, cancel := ctx, context.CancelFunc(func() {})
		if !wait {
			lctx, cancel = context.WithTimeout(ctx, 5*time.Millisecond)
		}
		lk, err := p.lockSandbox(lctx, id)
		cancel()
		if err != nil {
			continue
		}
		if rec, err = p.lay.readRecord(id); err == nil && p.dead(rec, time.Now()) {
			if why := p.revivable(rec, time.Now()); why != "" {
				// Booted again on its files, or left paused without memory if the boot
				// failed (revive.go): either way not removed.
				p.revive(ctx, rec, why)
				if rec, err = p.lay.readRecord(id); err != nil || !p.dead(rec, time.Now()) {
					lk.Unlock()
					continue
				}
			}
			p.recordEnd(rec)
			if err := p.teardown(ctx, rec); err != nil {
				errs = append(errs, err)
			} else if !rec.Pooled {
				n++
			}
		}
		lk.Unlock()
	}
	return n, errors.Join(errs...)
}

// cleanLeases removes the host-wide leases of sandboxes whose Home was deleted without a
// teardown, each directory under its lock. Allocation clears them too, but only once every
// lease is taken.
func (p *Provider) cleanLeases(ctx context.Context) {
	if lk, err := flock.Acquire(ctx, p.uidLeases()+".lock"); err == nil {
		leasesIn(p.uidLeases()).CleanStale()
		lk.Unlock()
	}
	if p.net != nil {
		if lk, err := p.net.Lock(ctx); err == nil {
			p.net.Leases().CleanStale()
			lk.Unlock()
		}
	}
}

// dead reports whether a sandbox should be removed: past its deadline, its init gone, or a
// Create that never finished.
func (p *Provider) dead(r *record, now time.Time) bool {
	if r.Pooled && !poolOwnerAlive(r) {
		return true
	}
	if !r.Deadline.IsZero() && now.After(r.Deadline) {
		return true
	}
	if r.Status == statusCreating {
		// Create is still running (in this or another process) unless it has taken far
		// longer than it may.
		return now.Sub(r.CreatedAt) > p.cfg.ReadyTimeout+time.Minute
	}
	return !p.live(r)
}

// List returns the live sandboxes whose labels match. Stopped and expired ones are removed
// first and not listed.
func (p *Provider) List(ctx context.Context, filter provider.ListFilter) ([]provider.Info, error) {
	if p.probed(); p.unavail != nil {
		return nil, p.unavail
	}
	p.reapAll(ctx, false)
	ids, err := p.lay.ids()
	if err != nil {
		return nil, provider.Wrap(err, provider.CodeProvider, "list")
	}
	out := []provider.Info{}
	now := time.Now()
	for _, id := range ids {
		rec, err := p.lay.readRecord(id)
		if err != nil || rec.Status != statusReady || rec.Pooled || p.dead(rec, now) || !filter.Matches(rec.Labels) {
			continue
		}
		out = append(out, info(rec))
	}
	return out, nil
}

func info(r *record) provider.Info {
	st := provider.StateRunning
	switch {
	case (r.Saved || r.Cold) && !alive(r) && holderAlive(r):
		st = provider.StatePaused
	case !alive(r):
		st = provider.StateStopped
	case r.Paused:
		st = provider.StatePaused
	}
	return provider.Info{
		ID: r.ID, Key: r.Key, Labels: r.Labels, State: st, CreatedAt: r.CreatedAt,
		Template: r.Template, Runtime: r.Runtime, Deadline: r.Deadline, Workdir: r.Workdir,
		Restarts: r.Restarts,
	}
}

// FindByKey returns the live sandbox created with key.
func (p *Provider) FindByKey(ctx context.Context, key string) (provider.Instance, error) {
	if key == "" {
		return nil, provider.Errorf(provider.CodeInvalidArgument, "empty key")
	}
	rec, err := p.findByKey(ctx, key)
	if err != nil {
		return nil, err
	}
	return p.instance(rec), nil
}

func (p *Provider) findByKey(ctx context.Context, key string) (*record, error) {
	if err := p.indexKeysOnce(ctx); err != nil {
		return nil, provider.Wrap(err, provider.CodeProvider, "find")
	}
	rec, err := p.keyedRecord(key)
	if err != nil {
		return nil, provider.Errorf(provider.CodeNotFound, "no sandbox with that key")
	}
	return rec, nil
}

// GetOrCreate finds the sandbox with spec.Key or creates it, atomically across goroutines
// and processes sharing Home (a file lock held over find and create).
func (p *Provider) GetOrCreate(ctx context.Context, spec provider.CreateSpec) (provider.Instance, bool, error) {
	if spec.Key == "" {
		return nil, false, provider.Errorf(provider.CodeInvalidArgument, "get-or-create needs a key")
	}
	p.probed()
	if p.unavail != nil {
		return nil, false, p.unavail
	}
	if err := os.MkdirAll(p.lay.locks(), 0o700); err != nil {
		return nil, false, provider.Wrap(err, provider.CodeProvider, "create")
	}
	lk, err := flock.Acquire(ctx, filepath.Join(p.lay.locks(), "keys.lock"))
	if err != nil {
		return nil, false, provider.Wrap(err, provider.CodeAborted, "create")
	}
	defer lk.Unlock()
	if rec, err := p.findByKey(ctx, spec.Key); err == nil {
		return p.instance(rec), false, nil
	}
	inst, err := p.Create(ctx, spec)
	if err != nil {
		return nil, false, err
	}
	return inst, true, nil
}

// Connect returns a handle to a live sandbox. A sandbox that stopped is removed and is
// CodeNotFound.
func (p *Provider) Connect(ctx context.Context, id string) (provider.Instance, error) {
	rec, err := p.lay.readRecord(id)
	if err != nil {
		// Say what this host lacks rather than only that the sandbox is not here.
		if p.probed(); p.unavail != nil {
			return nil, p.unavail
		}
		return nil, err
	}
	if rec.Status != statusReady || rec.Pooled {
		return nil, errNotFound(id)
	}
	if p.dead(rec, time.Now()) {
		// Booted again on its files, or left paused without memory if the boot failed
		// (revive.go): either way it is there.
		p.reviveDead(ctx, id)
		if rec, err = p.lay.readRecord(id); err == nil && !p.dead(rec, time.Now()) {
			return p.instance(rec), nil
		}
		if lk, err := p.lockSandbox(ctx, id); err == nil {
			if rec, err = p.lay.readRecord(id); err == nil && p.dead(rec, time.Now()) {
				p.recordEnd(rec)
				p.teardown(ctx, rec)
			}
			lk.Unlock()
		}
		return nil, errNotFound(id)
	}
	return p.instance(rec), nil
}
