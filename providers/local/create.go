//go:build linux

package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	agentspec "github.com/tupper-dev/tupper/agent/spec"
	"github.com/tupper-dev/tupper/egress"
	"github.com/tupper-dev/tupper/internal/flock"
	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/template"
)

// size resolves the sandbox's size and its limits.
func (p *Provider) size(s provider.Size) (provider.Size, error) {
	if s.IsZero() {
		return p.cfg.DefaultSize, nil
	}
	if s.Name != "" {
		r, ok := provider.Sizes[s.Name]
		if !ok {
			return s, provider.Errorf(provider.CodeInvalidArgument, "unknown size %q", s.Name)
		}
		return r, nil
	}
	if s.CPU < 0 || s.MemoryMB < 0 || s.DiskGB < 0 {
		return s, provider.Errorf(provider.CodeInvalidArgument, "negative size")
	}
	if s.CPU == 0 {
		s.CPU = p.cfg.DefaultSize.CPU
	}
	if s.MemoryMB == 0 {
		s.MemoryMB = p.cfg.DefaultSize.MemoryMB
	}
	if s.DiskGB == 0 {
		s.DiskGB = p.cfg.DefaultSize.DiskGB
	}
	if s.MemoryMB < 32 {
		return s, provider.Errorf(provider.CodeInvalidArgument, "memory %d MB is below the 32 MB minimum", s.MemoryMB)
	}
	return s, nil
}

// Create makes a sandbox: state directory → user-namespace range → root file system →
// network → bundle → runtime → agent ready. A failure at any step undoes the earlier ones.
// With Config.Pool, a spec the pool can serve takes a pooled sandbox instead.
func (p *Provider) Create(ctx context.Context, spec provider.CreateSpec) (provider.Instance, error) {
	p.probed()
	if p.unavail != nil {
		return nil, p.unavail
	}
	p.reapSome(ctx)
	if inst := p.fromPool(ctx, spec); inst != nil {
		return inst, nil
	}
	return p.create(ctx, spec, false)
}

// create makes a sandbox (see Create); a pooled one is marked so in its record from the
// start.
func (p *Provider) create(ctx context.Context, spec provider.CreateSpec, pooled bool) (provider.Instance, error) {
	return p.createFrom(ctx, spec, pooled, nil)
}

// createFrom is create with the template given (a build step's layers, build.go) rather
// than named by spec.Template, when tp is not nil. A create that fails restoring a boot
// image (bootimage.go) is made again, cold.
func (p *Provider) createFrom(ctx context.Context, spec provider.CreateSpec, pooled bool, given *sandboxTemplate) (provider.Instance, error) {
	inst, err := p.createOnce(ctx, spec, pooled, given, true)
	if be := (*errBootRestore)(nil); errors.As(err, &be) {
		return p.createOnce(ctx, spec, pooled, given, false)
	}
	return inst, err
}

// createOnce is createFrom, with a boot image when bootOK and the spec allows one.
func (p *Provider) createOnce(ctx context.Context, spec provider.CreateSpec, pooled bool, given *sandboxTemplate, bootOK bool) (provider.Instance, error) {
	rtName := spec.Runtime
	if err := provider.ValidateVolumeMounts(spec.Volumes); err != nil {
		return nil, err
	}
	if len(spec.Volumes) > 0 && !p.caps.Has(provider.CapVolumes) {
		return nil, p.volumer()
	}
	var snap *snapMeta
	if spec.From != "" {
		var err error
		if snap, err = p.readSnapshot(spec.From); err != nil {
			return nil, err
		}
		if snap.kind() == provider.SnapshotFull {
			// Memory and processes restore only into the runtime that saved them.
			if rtName != "" && rtName != snap.Runtime {
				return nil, provider.Errorf(provider.CodeUnsupported,
					"snapshot %s is a full snapshot (memory and processes) of a %s sandbox: runtime %s cannot restore it", snap.ID, snap.Runtime, rtName)
			}
			rtName = snap.Runtime
		}
	}
	if rtName == "" {
		rtName = p.cfg.Runtime
	}
	rt, ok := p.runtimes[rtName]
	if err := p.unusable[rtName]; err != nil {
		return nil, provider.Errorf(provider.CodeUnavailable, "%v", err)
	}
	if !ok {
		if rtName == RuntimeRunc || rtName == RuntimeRunsc || rtName == RuntimeCrun {
			return nil, provider.Errorf(provider.CodeUnavailable, "runtime %s not found: apt-get install %s", rtName, rtName)
		}
		return nil, provider.Errorf(provider.CodeInvalidArgument, "unknown runtime %q (runc, runsc or crun)", rtName)
	}
	tmpl := spec.Template
	if tmpl == "" {
		tmpl = TemplateHost
	}
	if snap != nil {
		if spec.Template != "" && spec.Template != snap.Template {
			return nil, provider.Errorf(provider.CodeInvalidArgument, "snapshot %s is of template %q, not %q", snap.ID, snap.Template, spec.Template)
		}
		tmpl = snap.Template
	}
	tp := given
	if tp == nil {
		var err error
		if tp, err = p.resolveTemplate(ctx, tmpl); err != nil {
			return nil, err
		}
	} else {
		tmpl = tp.name
	}
	netMode := spec.Network.Normalized().Mode
	var pol *egress.Policy  // network "allow"
	var polFile egress.File // pol's file
	full := snap != nil && snap.kind() == provider.SnapshotFull
	if full {
		// The saved kernel's network stack is the one it had: netstack for none, the host's
		// (in a namespace of the sandbox's own) for all.
		if netMode == provider.NetworkNone && snap.Network != string(provider.NetworkNone) {
			return nil, provider.Errorf(provider.CodeInvalidArgument,
				"snapshot %s is a full snapshot of a sandbox with network %s: it cannot restore with network none", snap.ID, snap.Network)
		}
		if snap.Network == string(provider.NetworkAllow) {
			// Its proxy and firewall rules were the parent's, tied to the parent's address.
			return nil, provider.Errorf(provider.CodeUnsupported,
				"snapshot %s is a full snapshot of a sandbox with a network policy, which cannot be restored yet: take a filesystem snapshot", snap.ID)
		}
		netMode = provider.NetworkMode(snap.Network)
		if netMode == provider.NetworkAll && p.net == nil {
			return nil, provider.Errorf(provider.CodeUnsupported, "network all is unavailable here: %v", p.netErr)
		}
	}
	switch netMode {
	case "", provider.NetworkAll:
		netMode = provider.NetworkAll
		if p.net == nil {
			return nil, provider.Errorf(provider.CodeUnsupported, "network all is unavailable here: %v", p.netErr)
		}
	case provider.NetworkNone:
	case provider.NetworkAllow:
		if p.net == nil {
			return nil, provider.Errorf(provider.CodeUnsupported, "a network policy needs network all, unavailable here: %v", p.netErr)
		}
		var err error
		if pol, polFile, err = policyFile(spec.Network); err != nil {
			return nil, err
		}
	default:
		return nil, provider.Errorf(provider.CodeInvalidArgument, "unknown network mode %q", netMode)
	}
	bound, err := newBoundSecrets(spec) // egress.go
	if err != nil {
		return nil, err
	}
	if bound == nil && snap != nil && !full {
		// Given none, a sandbox from a snapshot of one with bound secrets keeps them.
		if bound, err = p.snapshotBoundSecrets(snap); err != nil {
			return nil, provider.Wrap(err, provider.CodeProvider, "create")
		}
	}
	if bound != nil {
		switch {
		case netMode == provider.NetworkNone:
			return nil, provider.Errorf(provider.CodeInvalidArgument, "bound secrets need a network: their proxy is the sandbox's way out, and network none has none")
		case full:
			return nil, provider.Errorf(provider.CodeUnsupported, "bound secrets on a full snapshot's restore: its processes hold the parent's environment")
		case netMode == provider.NetworkAll:
			netMode, pol = provider.NetworkAllow, &egress.Policy{} // the proxy, refusing nothing
		}
		spec.Env = bound.env(spec.Env)
	}
	size, err := p.size(spec.Size)
	if err != nil {
		return nil, err
	}
	if full {
		// The saved kernel was booted with its size.
		size = provider.Size{CPU: snap.CPU, MemoryMB: snap.MemoryMB, DiskGB: snap.DiskGB}
	}
	var tc template.Config
	if tp.image != nil {
		tc = tp.image.Config
	}
	if snap != nil {
		if err := snapshotFits(snap, size.DiskGB); err != nil {
			return nil, err
		}
	}
	agentPath, err := p.agentPath()
	if err != nil {
		return nil, provider.Errorf(provider.CodeUnavailable, "agent binary: %v", err)
	}
	var boot *bootImage // restore from it, or save it (bootimage.go)
	bootFailed := false // restoring it failed: the image is removed and the create made cold
	if bootOK && p.bootEligible(spec, rtName, netMode, pooled, given) {
		boot = p.bootImageFor(ctx, rt, tp, size, agentPath)
		defer boot.release()
	}

	now := time.Now()
	rec := &record{
		ID: newID(), Key: spec.Key, Labels: spec.Labels, Status: statusCreating,
		CreatedAt: now.UTC().Truncate(time.Millisecond), IdleTimeout: spec.IdleTimeout,
		Runtime: rtName, Template: tmpl, Network: string(netMode), UIDIndex: -1,
		CPU: size.CPU, MemoryMB: size.MemoryMB, DiskGB: size.DiskGB, Pids: p.cfg.PidsLimit,
		Caps: withoutCheckpoint(p.capsFor(rtName, tp), rtName, netMode), Volumes: spec.Volumes,
	}
	if boot.restoring() {
		rec.BootImage = boot.key
	}
	if pooled {
		rec.Pooled, rec.PoolOwner, rec.PoolOwnerStart = true, os.Getpid(), procStart(os.Getpid())
	}
	if spec.Timeout > 0 {
		// The lifetime counts from when the sandbox is ready (the "record" step); until
		// then the deadline leaves room for a slow start, so the agent cannot reach it
		// before it has answered.
		rec.Deadline = now.Add(spec.Timeout + p.cfg.ReadyTimeout).UTC().Truncate(time.Millisecond)
	}
	id := rec.ID
	// runc and crun share the host kernel: a user namespace maps the sandbox's root to an
	// unprivileged uid. gVisor's sentry is its own boundary.
	userns := p.userns && rtName != RuntimeRunsc
	// runc or crun with a user namespace cannot mount sysfs in a network namespace it does
	// not own, so its namespace is the one the runtime creates, plumbed between create and
	// start. runsc wants its interfaces in place before it starts, in a namespace we make.
	veth := netMode == provider.NetworkAll || netMode == provider.NetworkAllow
	plumbAfterCreate := veth && rtName != RuntimeRunsc
	var egressSocks *egressSockets // network "allow": the proxy's, until it has them
	defer func() { egressSocks.close() }()
	netnsPath := ""
	madeDir := false
	agentUser := "root" // the default user of commands: the template's, else root
	// The sandbox's mounts are made in a mount namespace of its own (nsworker.go); ns runs
	// a step's work there.
	var w *nsWorker
	defer func() {
		if w != nil {
			w.close()
		}
	}()
	ns := func(fn func() error) error {
		if w == nil {
			return errors.New("no mount namespace")
		}
		return w.do(fn)
	}

	steps := []step{
		{name: "state directory", do: func(ctx context.Context) error {
			for _, d := range []string{p.lay.locks(), p.lay.runtimeRoot(rtName)} {
				if err := os.MkdirAll(d, 0o700); err != nil {
					return err
				}
			}
			// sandboxes/ lets every user through (a sandbox's root, an unprivileged uid with a
			// user namespace, must reach its own directory); a sandbox's directory is host
			// root's alone (0700) until the user-namespace step lets the sandbox's root group
			// through. No other host user can list, read or run anything in it.
			if err := os.MkdirAll(p.lay.sandboxes(), 0o711); err != nil {
				return err
			}
			if err := os.Mkdir(p.lay.dir(id), 0o700); err != nil {
				return err
			}
			madeDir = true
			if err := os.Chmod(p.lay.dir(id), 0o700); err != nil {
				return err
			}
			return p.lay.writeRecord(rec)
		}, undo: func() error {
			if !madeDir {
				return nil
			}
			return os.RemoveAll(p.lay.dir(id))
		}},
		{name: "user namespace", do: func(ctx context.Context) error {
			if !userns {
				return nil
			}
			idx, err := p.allocUIDs(ctx, id)
			if err != nil {
				return err
			}
			rec.UIDIndex, rec.UIDBase = idx, p.cfg.UIDBase+uint32(idx)*idMapSize
			if err := p.lay.writeRecord(rec); err != nil {
				return err
			}
			// runc's and crun's init run as the sandbox's root (host uid and gid UIDBase) when
			// they mount the rootfs and the socket directory: its group may pass (0710), no
			// one else.
			if err := os.Chown(p.lay.dir(id), 0, int(rec.UIDBase)); err != nil {
				return err
			}
			return os.Chmod(p.lay.dir(id), 0o710)
		}, undo: func() error {
			if rec.UIDIndex < 0 {
				return nil
			}
			return release(p.uidLeases(), strconv.Itoa(rec.UIDIndex), leaseHolder(p.lay, id))
		}},
		{name: "mount namespace", do: func(ctx context.Context) error {
			var err error
			w, err = newNSWorker()
			return err
		}},
		{name: "root file system", do: func(ctx context.Context) error {
			var err error
			var nameservers []netip.Addr
			switch netMode {
			case provider.NetworkAll:
				nameservers = hostNameservers()
			case provider.NetworkAllow:
				// Any server will do: the firewall sends every query to the proxy.
				nameservers = []netip.Addr{p.net.gateway}
			}
			plan := rootfsPlan{
				usernsFD: -1, uidBase: rec.UIDBase, diskGB: size.DiskGB, hostTmp: rtName == RuntimeRunsc,
				trust: bound.bundle(),
			}
			if tp.image == nil {
				lower, err := buildTemplate(ctx, p.lay.templates(), TemplateHost)
				if err != nil {
					return err
				}
				plan.lowers, plan.hostDirs = []string{lower}, realHostDirs()
				plan.etc = etcFiles(sandboxHostname, nameservers)
			} else {
				plan.lowers, plan.image, plan.workdir, plan.build = tp.lowers, true, tc.WorkingDir, tp.build
				if plan.etc, err = imageEtc(tp.lowers, sandboxHostname, nameservers, !tp.build); err != nil {
					return err
				}
				if tc.User != "" {
					if agentUser, err = userName(tc.User, plan.etc["passwd"]); err != nil {
						return err
					}
				}
			}
			if userns {
				// The layers are idmapped into the sandbox's range (idmap.go).
				fd, err := p.idmapNS.fd(rec.UIDBase)
				if err != nil {
					return err
				}
				defer unix.Close(fd)
				plan.usernsFD = fd
			}
			if snap != nil {
				plan.fill = func(upper string) error {
					tmp := ""
					if plan.hostTmp {
						tmp = p.lay.tmp(id)
					}
					return restoreSnapshot(ctx, p.lay.blocks(), p.lay.snapshot(snap.ID), snap, upper, tmp, rec.UIDBase)
				}
			}
			return ns(func() error { return mountRootfs(p.lay.disk(id), p.lay.rootfs(id), plan) })
		}, undo: func() error {
			return ns(func() error { return unmountRootfs(p.lay.disk(id), p.lay.rootfs(id)) })
		}},
		{name: "volumes", do: func(ctx context.Context) error {
			if len(spec.Volumes) == 0 {
				return nil
			}
			// The record names the volumes already: once their locks are taken and they
			// exist, a delete waits for the lock and then sees this sandbox.
			locks, err := p.lockVolumes(ctx, spec.Volumes)
			defer func() {
				for _, lk := range locks {
					lk.Unlock()
				}
			}()
			if err != nil {
				return err
			}
			fd := -1
			if userns {
				if fd, err = p.idmapNS.fd(rec.UIDBase); err != nil {
					return err
				}
				defer unix.Close(fd)
			}
			return ns(func() error { return mountSandboxVolumes(p.lay, p.lay.dir(id), spec.Volumes, fd) })
		}},
		{name: "agent directory", do: func(ctx context.Context) error {
			return p.writeAgentDir(rec, spec, tc, agentUser)
		}},
		{name: "network", do: func(ctx context.Context) error {
			if !veth {
				return nil
			}
			lk, err := p.net.lock(ctx)
			if err != nil {
				return err
			}
			defer lk.Unlock()
			a, err := p.net.allocate(id)
			if err != nil {
				return err
			}
			rec.IP = a.String()
			rec.HostVeth, _ = vethNames(id)
			if err := p.lay.writeRecord(rec); err != nil {
				return err
			}
			if err := p.net.ensureBridge(ctx); err != nil {
				return err
			}
			if pol != nil {
				// The policy's rules before the interface: the sandbox never has a
				// moment of network "all".
				if err := p.writeEgressPolicy(id, polFile); err != nil {
					return err
				}
				if egressSocks, err = p.bindEgress(ctx, rec, pol); err != nil {
					return err
				}
			}
			if plumbAfterCreate {
				return nil
			}
			// The namespace is bound at netnsPath in the sandbox's mount namespace, where
			// runsc, started there, opens it.
			netnsPath = p.lay.netns(id)
			return ns(func() error {
				if err := newNetns(ctx, netnsPath); err != nil {
					return err
				}
				return p.net.attach(ctx, id, netnsPath, a)
			})
		}, undo: func() error {
			var errs []error
			if rec.IP != "" {
				errs = append(errs, p.net.detach(context.Background(), id, rec.IP))
			}
			if netnsPath != "" {
				errs = append(errs, ns(func() error { return removeNetns(netnsPath) }))
			}
			return errors.Join(errs...)
		}},
		{name: "bundle", do: func(ctx context.Context) error {
			s := buildSpec(bundleSpec{
				id: id, runtime: rtName, rootfs: p.lay.rootfs(id), agentPath: agentPath,
				runDir: p.lay.run(id), tmpDir: p.lay.tmp(id), userns: userns, uidBase: rec.UIDBase, netnsPath: netnsPath,
				cpu: size.CPU, memoryMB: size.MemoryMB, limitSwap: swapAccounted(), pids: p.cfg.PidsLimit,
				volumes: volumeBinds(p.lay.dir(id), spec.Volumes),
			})
			b, err := json.Marshal(s)
			if err != nil {
				return err
			}
			return os.WriteFile(bundleConfigPath(p.lay.dir(id)), b, 0o600)
		}},
		{name: "runtime", do: func(ctx context.Context) error {
			// In the sandbox's namespace: the container copies it (and runsc's gofer
			// opens the rootfs there), and the log is on the sandbox's disk.
			if err := ns(func() error {
				if full {
					// The image is assembled from the snapshot's blocks for this restore
					// only (snapshot.go).
					into := filepath.Join(p.lay.dir(id), "image")
					defer os.RemoveAll(into)
					img, err := snapshotImage(ctx, p.lay.blocks(), p.lay.snapshot(snap.ID), into)
					if err != nil {
						return err
					}
					return rt.restore(ctx, runscNetwork(rec), id, p.lay.dir(id), p.lay.pidFile(id), p.lay.log(id), img)
				}
				if boot.restoring() {
					err := rt.restore(ctx, runscNetwork(rec), id, p.lay.dir(id), p.lay.pidFile(id), p.lay.log(id), filepath.Join(p.lay.bootImage(boot.key), "image"))
					bootFailed = err != nil
					return err
				}
				return rt.start(ctx, runscNetwork(rec), id, p.lay.dir(id), p.lay.pidFile(id), p.lay.log(id), plumbAfterCreate)
			}); err != nil {
				return err
			}
			if h := testHookCreated; h != nil {
				if err := h(id); err != nil {
					return err
				}
			}
			if plumbAfterCreate {
				pid, err := readPidFile(p.lay.pidFile(id))
				if err != nil {
					return err
				}
				a, err := netip.ParseAddr(rec.IP)
				if err != nil {
					return err
				}
				if err := p.net.attach(ctx, id, fmt.Sprintf("/proc/%d/ns/net", pid), a); err != nil {
					return err
				}
				if err := ns(func() error { return rt.run(ctx, "", "start", id) }); err != nil {
					return err
				}
			}
			pid, err := readPidFile(p.lay.pidFile(id))
			if err != nil {
				return err
			}
			if rtName != RuntimeRunsc {
				if err := protectFromOOM(pid); err != nil {
					return err
				}
			}
			rec.InitPID, rec.InitStart = pid, procStart(pid)
			return p.lay.writeRecord(rec)
		}, undo: func() error {
			// A cancelled ctx must not stop the undo.
			err := rt.remove(context.Background(), runscNetwork(rec), id)
			removeCgroups(id)
			return err
		}},
		{name: "holder", do: func(ctx context.Context) error {
			// Keeps the namespace after Create (holder.go); in the sandbox's cgroups, which
			// the runtime has made by now.
			var pid int
			var start uint64
			var hold func() error
			var done func()
			if err := ns(func() (err error) {
				pid, start, hold, done, err = startHolder(ctx)
				return err
			}); err != nil {
				return err
			}
			defer done()
			if h := testHookHolder; h != nil {
				h(id, "started", pid)
			}
			// Recorded before it holds: a Create killed before this point leaves a holder
			// that exits by itself, one killed after it a holder that teardown finds.
			rec.HolderPID, rec.HolderStart = pid, start
			if err := p.lay.writeRecord(rec); err != nil {
				return err
			}
			if err := hold(); err != nil {
				return err
			}
			if h := testHookHolder; h != nil {
				h(id, "held", pid)
			}
			if err := protectFromOOM(pid); err != nil {
				return err
			}
			return joinCgroups(id, pid)
		}, undo: func() error {
			stopHolder(rec)(holderExitTimeout)
			return nil
		}},
		{name: "egress proxy", do: func(ctx context.Context) error {
			if pol == nil {
				return nil
			}
			err := p.runEgress(ctx, rec, egressSocks, agentPath, bound)
			egressSocks.close()
			egressSocks = nil
			return err
		}, undo: func() error {
			stopEgress(rec, holderExitTimeout)
			return nil
		}},
		{name: "agent", do: func(ctx context.Context) error {
			if full || boot.restoring() {
				// The restored agent waits, its listener closed, for the word to listen
				// again: in this sandbox's socket directory.
				if err := rt.kill(ctx, runscNetwork(rec), id, "USR2"); err != nil {
					return err
				}
			}
			err := p.waitAgent(ctx, rec)
			bootFailed = err != nil && boot.restoring()
			return err
		}},
		{name: "boot image", do: func(ctx context.Context) error {
			if !boot.saving() {
				return nil
			}
			return p.saveBootImage(ctx, rt, rec, boot)
		}},
		{name: "start command", do: func(ctx context.Context) error {
			if full {
				return nil // its processes are running already
			}
			return p.startTemplate(ctx, rec, tc)
		}},
		{name: "record", do: func(ctx context.Context) error {
			if full || boot != nil {
				// The restored agent remembers the deadlines of the sandbox it was saved
				// in (a boot image's: none); this sandbox's are its own.
				var deadline time.Time
				if spec.Timeout > 0 {
					rec.Deadline = time.Now().Add(spec.Timeout).UTC().Truncate(time.Millisecond)
					deadline = rec.Deadline.Add(999 * time.Millisecond)
				}
				c := agentClient(p.lay.socket(id))
				err := c.SetLimits(ctx, deadline, spec.IdleTimeout)
				c.Close()
				if err != nil {
					return err
				}
			} else if spec.Timeout > 0 {
				rec.Deadline = time.Now().Add(spec.Timeout).UTC().Truncate(time.Millisecond)
				c := agentClient(p.lay.socket(id))
				err := c.SetDeadline(ctx, rec.Deadline.Add(999*time.Millisecond))
				c.Close()
				if err != nil {
					return err
				}
			}
			// A sandbox's age counts from when it is ready too.
			rec.CreatedAt = time.Now().UTC().Truncate(time.Millisecond)
			rec.Status = statusReady
			if err := p.lay.writeRecord(rec); err != nil {
				return err
			}
			return p.indexKey(rec)
		}},
	}
	if err := runSteps(ctx, steps); err != nil {
		if bootFailed && ctx.Err() == nil {
			p.discardBootImage(boot.key)
			return nil, &errBootRestore{err}
		}
		if ctx.Err() != nil {
			return nil, provider.Wrap(fmt.Errorf("create: %w", errors.Join(ctx.Err(), err)), provider.CodeAborted, "create")
		}
		return nil, provider.Wrap(err, provider.CodeProvider, "create")
	}
	return p.instance(rec), nil
}

// readyPoll is how often a template's ready command is run until it succeeds.
const readyPoll = 100 * time.Millisecond

// startTemplate runs the template's start command in the background, once the agent
// answers, then its ready command until it exits 0, for as long as ctx allows (E2B's start
// and ready commands).
func (p *Provider) startTemplate(ctx context.Context, rec *record, tc template.Config) error {
	if tc.StartCmd == "" && tc.ReadyCmd == "" {
		return nil
	}
	inst := p.instance(rec)
	defer inst.Close()
	if tc.StartCmd != "" {
		if _, err := inst.Exec(ctx, provider.ExecRequest{Command: tc.StartCmd, Detach: true}); err != nil {
			return fmt.Errorf("the template's start command: %w", err)
		}
	}
	for tc.ReadyCmd != "" {
		res, err := inst.Exec(ctx, provider.ExecRequest{Command: tc.ReadyCmd})
		if err == nil && res.ExitCode == 0 {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("the template's ready command %q never succeeded: %w", tc.ReadyCmd, ctx.Err())
		}
		if err != nil {
			return fmt.Errorf("the template's ready command: %w", err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the template's ready command %q never succeeded: %w", tc.ReadyCmd, ctx.Err())
		case <-time.After(readyPoll):
		}
	}
	return nil
}

// testHookCreated, when set by a test, runs right after the runtime made the container; an
// error fails the create there.
var testHookCreated func(id string) error

// testHookHolder, when set by a test, runs in the holder step: with "started" once the holder
// (pid) runs but before the record names it, with "held" once it holds the namespace.
var testHookHolder func(id, stage string, pid int)

// runscNetwork is the runsc --network value of a sandbox.
func runscNetwork(r *record) string {
	if r.Network == string(provider.NetworkAll) || r.Network == string(provider.NetworkAllow) {
		return "host"
	}
	return "none"
}

// protectFromOOM lowers the agent's oom_score_adj to -1000, so the OOM killer never picks
// it: a command that exhausts the sandbox's memory is what gets killed, not the sandbox. It
// needs CAP_SYS_RESOURCE, which the host may lack (a container's root often does; inside
// its user namespace the agent never has it): then the agent keeps the score it inherited
// and the protection rests on the agent starting every command at the highest score, 1000
// (raising needs no privilege), which the OOM killer picks before any process at 0. Not
// under runsc: its init is the sentry, the one host process of the sandbox, and an
// unkillable one would leave its memory cgroup stuck at the limit.
func protectFromOOM(pid int) error {
	err := os.WriteFile("/proc/"+strconv.Itoa(pid)+"/oom_score_adj", []byte("-1000"), 0)
	if errors.Is(err, os.ErrPermission) {
		return nil
	}
	return err
}

func readPidFile(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// uidLeases is the host-wide directory of user-namespace range leases for UIDBase.
func (p *Provider) uidLeases() string {
	return filepath.Join("/run/tupper", fmt.Sprintf("uids-%d", p.cfg.UIDBase))
}

// allocUIDs leases a free user-namespace range, host-wide, under the leases' lock (beside
// the directory, so the lock file is not taken for a lease).
func (p *Provider) allocUIDs(ctx context.Context, id string) (int, error) {
	dir := p.uidLeases()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return 0, err
	}
	lk, err := flock.Acquire(ctx, dir+".lock")
	if err != nil {
		return 0, err
	}
	defer lk.Unlock()
	n := int((uint64(1)<<32 - 2 - uint64(p.cfg.UIDBase)) / idMapSize)
	i, err := leaseAny(dir, n, strconv.Itoa, leaseHolder(p.lay, id))
	if errors.Is(err, errLeasesExhausted) {
		return 0, errors.New("no free user-namespace range")
	}
	return i, err
}

// writeAgentDir prepares the directory bound at /.tupper/run: the agent's config, owned so
// that the sandbox's root can create the socket there.
func (p *Provider) writeAgentDir(rec *record, spec provider.CreateSpec, tc template.Config, user string) error {
	dir := p.lay.run(rec.ID)
	if err := os.Mkdir(dir, 0o700); err != nil {
		return err
	}
	// The template's environment is the base; the spec's and its secrets win over it.
	env := map[string]string{}
	for _, kv := range tc.Env {
		if k, v, ok := strings.Cut(kv, "="); ok && k != "" {
			env[k] = v
		}
	}
	for k, v := range spec.Env {
		env[k] = v
	}
	for k, v := range spec.Secrets {
		env[k] = v
	}
	cfg := agentConfig{
		Env:                env,
		DefaultUser:        user,
		DefaultWorkdir:     defaultWorkdir,
		IdleTimeoutSeconds: int64((spec.IdleTimeout + time.Second - 1) / time.Second),
		Protocol:           agentspec.Version,
	}
	if tc.WorkingDir != "" {
		cfg.DefaultWorkdir = path.Clean("/" + tc.WorkingDir)
	}
	if hideAgent(rec.Runtime) {
		// From commands, and from the agent's own file API once it serves: a symlink a
		// command plants must not lead a file operation into the host directory behind it.
		cfg.HidePaths = []string{agentDir}
		cfg.HideFromAgent = true
	}
	if !rec.Deadline.IsZero() {
		cfg.DeadlineUnix = (rec.Deadline.UnixMilli() + 999) / 1000
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	path := filepath.Join(dir, "config.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return err
	}
	for _, f := range []string{dir, path} {
		if err := os.Chown(f, int(rec.UIDBase), int(rec.UIDBase)); err != nil {
			return err
		}
	}
	return nil
}

// hideAgent reports whether the agent covers /.tupper (its socket directory and binary) from
// the commands it runs. It does under every runtime: under runc and crun commands get a mount
// namespace of their own with the covers; gVisor 20221219 has one mount namespace, so there
// the covers apply sandbox-wide once the agent is serving (see package agent). Either way the
// agent keeps CAP_SYS_ADMIN only for itself and drops it for every command.
func hideAgent(runtime string) bool {
	return runtime == RuntimeRunc || runtime == RuntimeRunsc || runtime == RuntimeCrun
}

// agentConfig is the agent's --config file (package agent's Config).
type agentConfig struct {
	Env                map[string]string `json:"env,omitempty"`
	DefaultUser        string            `json:"defaultUser,omitempty"`
	DefaultWorkdir     string            `json:"defaultWorkdir,omitempty"`
	DeadlineUnix       int64             `json:"deadlineUnix,omitempty"`
	IdleTimeoutSeconds int64             `json:"idleTimeoutSeconds,omitempty"`
	HidePaths          []string          `json:"hidePaths,omitempty"`
	HideFromAgent      bool              `json:"hideFromAgent,omitempty"`
	Protocol           int               `json:"protocol,omitempty"`
}
