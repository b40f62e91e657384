//go:build linux

package local

import (
	"context"
	"errors"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tupper-dev/tupper/provider"
)

// Cold pause (provider.ColdPauser, under every runtime; E2B's pause with keepMemory false).
// PauseCold ends the sandbox's container — its agent, PID 1, and every process under it — and
// so releases their memory, but keeps the sandbox: its id, record, token, labels, deadline,
// disk (the writable layer, /tmp), volumes' mounts and leases, and its address. Resume boots
// a new container on the same bundle and root file system, in the same place, and waits for
// its agent as Create does: no process from before runs, the files are as they were.
//
// It is the saved pause (pausesaved.go) without a checkpoint: the holder (holder.go) keeps the sandbox's
// mount namespace, and with it the disk, the rootfs overlay, the volumes' mounts and, under
// runsc with network "all" or "allow", the network namespace bound there with its veth. The
// holder and the egress proxy leave the sandbox's cgroups before the runtime deletes the
// container (which removes them) and rejoin those the new container makes. Under runc and
// crun with network "all" or "allow" the network namespace is the container's own (see
// creation.plumbAfterCreate) and ends with it: the address stays leased and the firewall's
// and the proxy's rules (which name the address) stay, and the resume gives the new
// container's namespace a new pair with the same names and address, between the runtime's
// create and start, as Create does. What lived in memory is lost: every process, /dev/shm,
// open connections (the sandbox's peers see them reset or time out).
//
// The record says so: Paused and Cold. They are written before the container is killed, so
// a crash leaves the sandbox either running (before the write) or cold-paused: there is no
// moment at which the container is gone and the record says it runs. A record that says
// cold-paused while the recorded init still runs (a crash between the write and the kill)
// is cold-paused: Info says paused and calls are refused, PauseCold or Pause finish the kill,
// and Resume finishes it before it boots, so a resume after a cold pause is always a boot.
// The same holds for a container that a crashed resume had started before it recorded the
// sandbox running: Resume, PauseCold and Destroy end it (the runtime knows it by the
// sandbox's id). A boot that fails leaves the sandbox cold-paused, nothing of it running, and
// Resume may be tried again.

// PauseCold ends every process of the sandbox and releases their memory, keeping its files,
// id, network and leases (see above). A sandbox paused already, either way, stays as it is.
func (i *Instance) PauseCold(ctx context.Context) error {
	if err := i.Refuse(provider.CapPauseCold); err != nil {
		return err
	}
	lk, rec, err := i.p.lockRecord(ctx, i.id)
	if err != nil {
		return err
	}
	defer lk.Unlock()
	defer func() {
		i.mu.Lock()
		i.rec = rec
		i.mu.Unlock()
	}()
	if !i.p.live(rec) {
		return provider.Errorf(provider.CodeNotFound, "sandbox %s has stopped", i.id)
	}
	if rec.Paused && !rec.Cold {
		return nil // paused with its memory
	}
	if !holderAlive(rec) {
		// Its disk is only in its container's mount namespace: killing it would lose it.
		return provider.Errorf(provider.CodeUnsupported,
			"sandbox %s cannot pause without its memory: nothing but its container holds its disk (a sandbox made before holders, or whose holder died)", i.id)
	}
	rt, err := i.p.runtimeOf(rec)
	if err != nil {
		return err
	}
	if rec.Cold {
		// Paused so already; a crash may have left a container running (the one being
		// paused, or one a resume was booting).
		if err := i.p.coldStop(ctx, rt, rec); err != nil {
			return provider.Wrap(err, provider.CodeProvider, "pause")
		}
		return nil
	}
	// The intent first: from here on a crash leaves the sandbox cold-paused.
	rec.Paused, rec.Cold = true, true
	if err := i.p.lay.writeRecord(rec); err != nil {
		rec.Paused, rec.Cold = false, false
		return provider.Wrap(err, provider.CodeProvider, "pause")
	}
	if h := testHookCold; h != nil {
		h(i.id)
	}
	if err := i.p.coldStop(ctx, rt, rec); err != nil {
		if alive(rec) {
			// Its init survived the runtime's delete: it runs on as before.
			rejoinCgroups(rec)
			rec.Paused, rec.Cold = false, false
			err = errors.Join(err, i.p.lay.writeRecord(rec))
		}
		return provider.Wrap(err, provider.CodeProvider, "pause")
	}
	return nil
}

// coldStop ends what is left of sandbox rec's container (nothing is not an error) and
// records its init gone. The holder and the egress proxy leave the sandbox's cgroups first:
// the runtime's delete removes them. Under runc and crun with a veth, the host end of the
// pair goes now, with its namespace, rather than whenever the kernel gets to it, so that a
// boot can make the pair again. Call with the sandbox lock held and rec saying Cold.
func (p *Provider) coldStop(ctx context.Context, rt ociRuntime, rec *record) error {
	if err := leaveCgroups(rec); err != nil {
		return err
	}
	if err := removeContainer(ctx, rt, rec); err != nil && !initGone(rec, initExitWait) {
		return err
	}
	// The runtime's delete may fail with the container's init killed all the same (its
	// cgroups still busy with processes that are exiting, on a loaded host): what counts is
	// that the init is gone. The sandbox is then stopped, and the next boot deletes what is
	// left of the container first (coldBoot). Taking it for running again would record a
	// sandbox whose init is dying, which the next reap would remove with its files.
	removeCgroups(rec.ID)
	var errs []error
	if rec.Runtime != RuntimeRunsc && rec.IP != "" && p.net != nil {
		errs = append(errs, p.net.Unplug(ctx, rec.ID))
	}
	// A socket nothing listens on: the next agent makes its own, and waitAgent must not
	// knock on this one meanwhile.
	if err := os.Remove(p.lay.socket(rec.ID)); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	rec.InitPID, rec.InitStart = 0, 0
	errs = append(errs, p.lay.writeRecord(rec))
	return errors.Join(errs...)
}

// initExitWait is how long coldStop waits for a killed init to be gone.
const initExitWait = 3 * time.Second

// initGone reports whether sandbox rec's init has exited, waiting up to timeout for it.
func initGone(rec *record, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for alive(rec) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

// removeContainer force-deletes sandbox rec's container; should the runtime fail, it kills
// the recorded init itself and lets the runtime clean up after a dead one.
func removeContainer(ctx context.Context, rt ociRuntime, rec *record) error {
	err := rt.remove(ctx, runscNetwork(rec), rec.ID)
	if err == nil {
		return nil
	}
	if alive(rec) {
		unix.Kill(rec.InitPID, unix.SIGKILL)
	}
	return rt.remove(ctx, runscNetwork(rec), rec.ID)
}

// coldBoot resumes a cold-paused sandbox: it ends whatever a crash left of a container,
// boots a new one on the sandbox's bundle in its mount namespace, brings the holder and
// the egress proxy back into its cgroups, waits for the agent and gives it the record's
// deadline and idle timeout. Call with the sandbox lock held, rec read under it. A boot that
// fails leaves the sandbox cold-paused.
func (i *Instance) coldBoot(ctx context.Context, rt ociRuntime, rec *record) (err error) {
	p := i.p
	id := rec.ID
	if err := p.coldStop(ctx, rt, rec); err != nil {
		return err
	}
	plumb := rec.Runtime != RuntimeRunsc && rec.IP != "" // the container makes its network namespace
	if plumb && p.net == nil {
		return provider.Errorf(provider.CodeUnavailable, "sandbox %s has network %s, unavailable here: %v", id, rec.Network, p.netErr)
	}
	w, err := joinNSWorker(rec)
	if err != nil {
		return err
	}
	defer w.close()
	defer func() {
		if err != nil {
			rec.Paused, rec.Cold = true, true
			err = errors.Join(err, p.coldStop(context.WithoutCancel(ctx), rt, rec))
		}
	}()
	os.Remove(p.lay.pidFile(id))
	if err := p.setAgentDeadline(rec); err != nil {
		return err
	}
	if err := p.runContainer(ctx, rt, rec, w, plumb, nil); err != nil {
		return err
	}
	if err := rejoinCgroups(rec); err != nil {
		return err
	}
	if err := p.waitAgent(ctx, rec); err != nil {
		return err
	}
	// The new agent knows the deadline it was created with (its config file); the record's
	// may have moved since, and its idle clock starts now.
	if err := p.giveAgentLimits(ctx, rec); err != nil {
		return err
	}
	rec.Paused, rec.Cold = false, false
	return p.lay.writeRecord(rec)
}

// runtimeOf returns the runtime of sandbox rec.
func (p *Provider) runtimeOf(rec *record) (ociRuntime, error) {
	p.probed()
	rt, ok := p.runtimes[rec.Runtime]
	if !ok {
		return rt, provider.Errorf(provider.CodeUnavailable, "runtime %s not found", rec.Runtime)
	}
	return rt, nil
}

// testHookCold, when set by a test, runs in PauseCold once the record says cold-paused,
// before the container is killed.
var testHookCold func(id string)
