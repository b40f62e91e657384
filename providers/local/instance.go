//go:build linux

package local

import (
	"context"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tupper-dev/tupper/agent/client"
	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/provider/agentinst"
)

// Instance is one local sandbox. The embedded agentinst.Agent talks to the sandbox's agent
// over the unix socket in the sandbox's state directory (exec, files, file-system
// operations, activity, ranged reads, port tunnels, terminals); the methods here read or
// write the record and drive the runtime: Info, Capabilities, Pause, Resume, SetTimeout,
// PreviewURL, Snapshot. Every method may be called concurrently.
type Instance struct {
	*agentinst.Agent
	p   *Provider
	id  string
	mu  sync.Mutex
	rec *record // as read when the handle was made; refreshed by Info
	// pooled: the warm pool served the create that returned this handle (Info.Pooled).
	pooled bool
}

var (
	_ provider.Instance           = (*Instance)(nil)
	_ provider.FileSystem         = (*Instance)(nil)
	_ provider.ActivityReporter   = (*Instance)(nil)
	_ provider.Pauser             = (*Instance)(nil)
	_ provider.ColdPauser         = (*Instance)(nil)
	_ provider.TimeoutSetter      = (*Instance)(nil)
	_ provider.RangeReader        = (*Instance)(nil)
	_ provider.CapabilityReporter = (*Instance)(nil)
	_ provider.Refuser            = (*Instance)(nil)
	_ provider.PortDialer         = (*Instance)(nil)
	_ provider.Terminaler         = (*Instance)(nil)
	_ provider.CommandTerminaler  = (*Instance)(nil)
)

// Capabilities are the sandbox's own, kept in its record at creation (they depend on its
// runtime), so connecting to a sandbox does not probe the host; for a sandbox recorded
// before they were kept, the provider's. The names of optional interfaces the record holds
// are left to provider.CapabilitiesOfInstance.
func (i *Instance) Capabilities() provider.Capabilities {
	i.mu.Lock()
	rec := i.rec
	i.mu.Unlock()
	if rec != nil && len(rec.Caps) > 0 {
		return provider.NewCapabilities(rec.Caps...).Declared()
	}
	return i.p.Capabilities()
}

// Refuse refuses what the host lacked when the sandbox was made, as its record says
// (Provider.Refuse, without probing the host); for a record from before they were kept,
// what the provider refuses.
func (i *Instance) Refuse(c provider.Capability) error {
	i.mu.Lock()
	rec := i.rec
	i.mu.Unlock()
	if rec == nil || len(rec.Caps) == 0 {
		return i.p.Refuse(c)
	}
	if !provider.NamesInterface(c) || slices.Contains(rec.Caps, c) {
		return nil
	}
	return refusal(c)
}

func (p *Provider) instance(rec *record) *Instance {
	i := &Instance{p: p, id: rec.ID, rec: rec}
	i.Agent = agentinst.NewAgent(agentinst.Config{
		ID: rec.ID, Client: agentClient(p.lay.socket(rec.ID)), Check: i.check, Gone: i.gone,
	})
	return i
}

// agentClient returns a client of the agent whose socket is at path, dialled with
// dialAgent.
func agentClient(path string) *client.Client {
	return client.NewWithDialer(func(ctx context.Context) (net.Conn, error) { return dialAgent(ctx, path) })
}

// dialAgent connects to the agent's socket at path. The socket lives in a directory the
// sandbox can write, so the sandbox could put a symlink there to make the host connect
// elsewhere (another sandbox's agent, a host daemon). It therefore opens the final
// component without following it, checks that it is a socket, and connects through
// /proc/self/fd to exactly that inode. Every connection the host makes to an agent goes
// through here.
func dialAgent(ctx context.Context, path string) (net.Conn, error) {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: "unix", Err: err}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, &net.OpError{Op: "dial", Net: "unix", Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return nil, &net.OpError{Op: "dial", Net: "unix", Err: fmt.Errorf("%s is not a socket", path)}
	}
	var d net.Dialer
	return d.DialContext(ctx, "unix", fmt.Sprintf("/proc/self/fd/%d", fd))
}

// waitAgent polls the agent's socket until it answers /health, the init dies, or the ready
// timeout passes.
func (p *Provider) waitAgent(ctx context.Context, rec *record) error {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.ReadyTimeout)
	defer cancel()
	c := agentClient(p.lay.socket(rec.ID))
	defer c.Close()
	delay := 200 * time.Microsecond
	for {
		if _, err := os.Stat(p.lay.socket(rec.ID)); err == nil {
			hctx, hcancel := context.WithTimeout(ctx, 2*time.Second)
			err := c.Health(hctx)
			hcancel()
			if err == nil {
				return nil
			}
		}
		if !alive(rec) {
			return fmt.Errorf("the agent exited: %s", p.logTail(rec))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the agent did not answer: %w (log: %s)", ctx.Err(), p.logTail(rec))
		case <-time.After(delay):
		}
		delay = min(2*delay, 5*time.Millisecond)
	}
}

// logTail returns the end of a sandbox's runtime and agent log, for error messages. The log
// is on the sandbox's disk, reached through its holder.
func (p *Provider) logTail(rec *record) string {
	path, err := p.nsPath(rec, p.lay.log(rec.ID))
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	b, _ := os.ReadFile(path)
	if rec.HolderPID != 0 && !holderAlive(rec) {
		return "(no log: its holder is gone)"
	}
	s := strings.TrimSpace(string(b))
	if len(s) > 600 {
		s = s[len(s)-600:]
	}
	if s == "" {
		return "(empty)"
	}
	return lastLines(s, 4)
}

// check refuses calls to a sandbox that is paused (its agent cannot answer) or gone.
func (i *Instance) check(ctx context.Context) error {
	rec, err := i.p.lay.readRecord(i.id)
	if err != nil {
		return err
	}
	if rec.Paused {
		return provider.Errorf(provider.CodeConflict, "sandbox %s is paused", i.id)
	}
	if rec.Runtime == RuntimeRunsc && !alive(rec) {
		// Stopped by a limit under gVisor: booted again on its files first (revive.go).
		i.p.reviveDead(ctx, i.id)
	}
	return nil
}

// gone reports whether the sandbox has stopped: its record is gone, or its init has died
// and it is not dormant (a resume gives it a new init).
func (i *Instance) gone(ctx context.Context) bool {
	rec, err := i.p.lay.readRecord(i.id)
	if err != nil {
		return true
	}
	i.mu.Lock()
	i.rec = rec
	i.mu.Unlock()
	if i.p.live(rec) {
		return false
	}
	// Stopped by a limit under gVisor: booted again on its files (revive.go); the call that
	// failed stays failed.
	return !i.p.reviveDead(ctx, i.id)
}

// Info returns the sandbox's record and whether its init still runs.
func (i *Instance) Info(ctx context.Context) (provider.Info, error) {
	rec, err := i.p.lay.readRecord(i.id)
	if err != nil {
		return provider.Info{}, err
	}
	i.mu.Lock()
	i.rec = rec
	i.mu.Unlock()
	in := info(rec)
	in.Pooled = i.pooled
	return in, nil
}

// SetTimeout moves the lifetime deadline to now+d: in the record, which the host enforces,
// and in the agent, which enforces it from inside.
func (i *Instance) SetTimeout(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return provider.Errorf(provider.CodeInvalidArgument, "timeout must be positive")
	}
	lk, rec, err := i.p.lockRecord(ctx, i.id)
	if err != nil {
		return err
	}
	defer lk.Unlock()
	rec.Deadline = time.Now().Add(d).UTC().Truncate(time.Millisecond)
	if err := i.p.lay.writeRecord(rec); err != nil {
		return provider.Wrap(err, provider.CodeProvider, "set_timeout")
	}
	if rec.Paused {
		return nil // the record rules; the agent learns it on resume
	}
	return i.SetDeadline(ctx, rec.Deadline)
}

// Pause pauses every process of the sandbox, memory kept: frozen under runc and crun with
// the runtime's pause (the cgroup freezer); saved under runsc with network none
// (provider.CapPauseFreesMemory): written to disk and its runtime ended, which releases its
// memory (pausesaved.go). Refused on a host without the freezer (Provider.Refuse).
func (i *Instance) Pause(ctx context.Context) error {
	if err := i.Refuse(provider.CapPause); err != nil {
		return err
	}
	return i.setPaused(ctx, true)
}

// Resume thaws a paused sandbox, restores in place one whose memory was saved, or boots
// again one paused without its memory (PauseCold, coldpause.go).
func (i *Instance) Resume(ctx context.Context) error { return i.setPaused(ctx, false) }

func (i *Instance) setPaused(ctx context.Context, pause bool) error {
	lk, rec, err := i.p.lockRecord(ctx, i.id)
	if err != nil {
		return err
	}
	defer lk.Unlock()
	if !i.p.live(rec) {
		return provider.Errorf(provider.CodeNotFound, "sandbox %s has stopped", i.id)
	}
	verb := "pause"
	if !pause {
		verb = "resume"
	}
	defer func() {
		i.mu.Lock()
		i.rec = rec
		i.mu.Unlock()
	}()
	if rec.Cold {
		// Paused without its memory: a pause ends what a crash may have left running, a
		// resume boots it (coldpause.go).
		rt, err := i.p.runtimeOf(rec)
		if err != nil {
			return err
		}
		if pause {
			err = i.p.coldStop(ctx, rt, rec)
		} else {
			err = i.coldBoot(ctx, rt, rec)
		}
		if err != nil {
			return provider.Wrap(err, provider.CodeProvider, verb)
		}
		return nil
	}
	dormant := !alive(rec) // and its image is complete: live
	if rec.Paused == pause && !dormant {
		return nil
	}
	rt, err := i.p.runtimeOf(rec)
	if err != nil {
		return err
	}
	switch {
	case pause && dormant:
		if !rec.Saved {
			// A pause that a crash interrupted once its image was complete.
			rec.Paused, rec.Saved = true, true
			if err := i.p.lay.writeRecord(rec); err != nil {
				return provider.Wrap(err, provider.CodeProvider, verb)
			}
		}
		return nil
	case dormant:
		if err := i.resumeSaved(ctx, rt, rec); err != nil {
			return provider.Wrap(err, provider.CodeProvider, verb)
		}
		return nil
	case pause && freesMemory(rec):
		if err := i.pauseSaved(ctx, rt, rec); err != nil {
			return provider.Wrap(err, provider.CodeProvider, verb)
		}
		return nil
	}
	if err := rt.run(ctx, runscNetwork(rec), verb, i.id); err != nil {
		return provider.Wrap(err, provider.CodeProvider, verb)
	}
	rec.Paused = pause
	if err := i.p.lay.writeRecord(rec); err != nil {
		return provider.Wrap(err, provider.CodeProvider, verb)
	}
	if !pause && !rec.Deadline.IsZero() {
		// The deadline may have moved while the agent was frozen.
		_ = i.SetDeadline(ctx, rec.Deadline)
	}
	return nil
}

// PreviewURL returns http://127.0.0.1:PORT/ where a host listener forwards each connection
// through the agent's tunnel to port inside the sandbox. It works with any network mode. The
// listener belongs to the Provider: it lasts until the sandbox is destroyed or the Provider
// is closed.
func (i *Instance) PreviewURL(ctx context.Context, port int) (string, error) {
	if port < 1 || port > 65535 {
		return "", provider.Errorf(provider.CodeInvalidArgument, "port %d out of range", port)
	}
	if err := i.check(ctx); err != nil {
		return "", err
	}
	c := agentClient(i.p.lay.socket(i.id))
	addr, err := i.p.previews.Open(i.id, port, func(ctx context.Context) (net.Conn, error) { return c.DialPort(ctx, port) }, func() { c.Close() })
	if err != nil {
		return "", err
	}
	return "http://" + addr + "/", nil
}
