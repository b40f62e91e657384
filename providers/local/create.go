//go:build linux

package local

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
	"github.com/tupper-dev/tupper/internal/steps"
	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/providers/local/internal/hostnet"
	"github.com/tupper-dev/tupper/providers/local/internal/lease"
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
	c, err := p.newCreation(ctx, spec, pooled, given, bootOK)
	if err != nil {
		return nil, err
	}
	defer c.close()
	if err := runSteps(ctx, c.steps()); err != nil {
		if c.bootFailed && ctx.Err() == nil {
			p.discardBootImage(c.boot.key)
			return nil, &errBootRestore{err}
		}
		if ctx.Err() != nil {
			return nil, provider.Wrap(fmt.Errorf("create: %w", errors.Join(ctx.Err(), err)), provider.CodeAborted, "create")
		}
		return nil, provider.Wrap(err, provider.CodeProvider, "create")
	}
	return p.instance(c.rec), nil
}

// creation is one Create under way: what its spec resolved to (newCreation), and what its
// steps made so far, which the later steps and the undos read.
type creation struct {
	p         *Provider
	spec      provider.CreateSpec // its Env with the bound secrets' placeholders
	rec       *record             // written at every step that adds to it
	id        string
	rt        ociRuntime
	rtName    string
	tmpl      string // the template's name
	tp        *sandboxTemplate
	tc        template.Config // the template image's, if any
	snap      *snapMeta       // the snapshot restored (From), if any
	full      bool            // snap is a full snapshot: memory and processes
	netMode   provider.NetworkMode
	pol       *egress.Policy // network "allow"
	polFile   egress.File    // pol's file
	bound     *boundSecrets
	size      provider.Size
	agentPath string
	boot      *bootImage // restore from it, or save it (bootimage.go)
	// runc and crun share the host kernel: a user namespace maps the sandbox's root to an
	// unprivileged uid. gVisor's sentry is its own boundary.
	userns bool
	// veth: the sandbox has an interface on the bridge (network all or allow). runc or crun
	// with a user namespace cannot mount sysfs in a network namespace it does not own, so
	// its namespace is the one the runtime creates, plumbed between create and start
	// (plumbAfterCreate). runsc wants its interfaces in place before it starts, in a
	// namespace we make.
	veth, plumbAfterCreate bool

	// Made by the steps.
	bootFailed  bool             // restoring boot failed: the image is removed, the create made cold
	egressSocks *hostnet.Sockets // network "allow": the proxy's, until it has them
	netnsPath   string
	madeDir     bool
	agentUser   string // the default user of commands: the template's, else root
	// The sandbox's mounts are made in a mount namespace of its own (nsworker.go); ns runs
	// a step's work there.
	w *nsWorker
}

// newCreation resolves a create's spec (runtime, template, snapshot, network, size, boot
// image) and makes its record, still unwritten. Each resolution is a method that fills in
// the creation for the ones after it; nothing is made on the host yet, so none has an undo.
func (p *Provider) newCreation(ctx context.Context, spec provider.CreateSpec, pooled bool, given *sandboxTemplate, bootOK bool) (*creation, error) {
	c := &creation{p: p, spec: spec, rtName: spec.Runtime, tp: given, agentUser: "root"}
	for _, resolve := range []func(context.Context) error{
		c.checkVolumeMounts,
		c.resolveSnapshot,
		c.resolveVolumes,
		c.resolveRuntime,
		c.resolveTemplate,
		c.resolveNetwork,
		c.resolveSecrets,
		c.resolveSize,
		c.resolveAgent,
	} {
		if err := resolve(ctx); err != nil {
			return nil, err
		}
	}
	if bootOK && p.bootEligible(c.spec, c.rtName, c.netMode, pooled, given) {
		c.boot = p.bootImageFor(ctx, c.rt, c.tp, c.size, c.agentPath)
	}
	c.newRecord(pooled)
	return c, nil
}

// checkVolumeMounts checks the spec's volume mounts before anything reads them.
func (c *creation) checkVolumeMounts(context.Context) error {
	return provider.ValidateVolumeMounts(c.spec.Volumes)
}

// resolveSnapshot reads the snapshot a create from one (spec.From) starts from: the volumes
// its sandbox mounted, unless the create names its own (volume.go), its egress proxy's
// password, and, for a full snapshot, the runtime that saved its memory and processes.
func (c *creation) resolveSnapshot(ctx context.Context) error {
	if c.spec.From == "" {
		return nil
	}
	snap, err := c.p.readSnapshot(c.spec.From)
	if err != nil {
		return err
	}
	c.snap, c.full = snap, snap.kind() == provider.SnapshotFull
	if c.spec.Volumes, err = snapshotVolumes(snap, c.spec.Volumes); err != nil {
		return err
	}
	if c.spec.Network, err = c.p.snapshotProxyPassword(snap, c.spec.Network); err != nil {
		return err
	}
	if c.full {
		// Memory and processes restore only into the runtime that saved them.
		if c.rtName != "" && c.rtName != snap.Runtime {
			return provider.Errorf(provider.CodeUnsupported,
				"snapshot %s is a full snapshot (memory and processes) of a %s sandbox: runtime %s cannot restore it", snap.ID, snap.Runtime, c.rtName)
		}
		c.rtName = snap.Runtime
	}
	return nil
}

// resolveVolumes checks the volumes: a volume that is gone fails the create before
// anything is made; the volumes step checks again under the volumes' locks, for a delete
// meanwhile.
func (c *creation) resolveVolumes(ctx context.Context) error {
	if len(c.spec.Volumes) > 0 && !c.p.caps.Has(provider.CapVolumes) {
		return c.p.volumer()
	}
	return c.p.volumesExist(c.spec.Volumes, c.snap)
}

// resolveRuntime picks the runtime: the spec's, the snapshot's, else Config.Runtime.
func (c *creation) resolveRuntime(ctx context.Context) error {
	if c.rtName == "" {
		c.rtName = c.p.cfg.Runtime
	}
	rt, ok := c.p.runtimes[c.rtName]
	if err := c.p.unusable[c.rtName]; err != nil {
		return provider.Errorf(provider.CodeUnavailable, "%v", err)
	}
	if !ok {
		if c.rtName == RuntimeRunc || c.rtName == RuntimeRunsc || c.rtName == RuntimeCrun {
			return provider.Errorf(provider.CodeUnavailable, "runtime %s not found: apt-get install %s", c.rtName, c.rtName)
		}
		return provider.Errorf(provider.CodeInvalidArgument, "unknown runtime %q (runc, runsc or crun)", c.rtName)
	}
	c.rt = rt
	c.userns = c.p.userns && c.rtName != RuntimeRunsc
	return nil
}

// resolveTemplate finds the template: the one given (a build step's), the snapshot's, the
// spec's, else TemplateHost.
func (c *creation) resolveTemplate(ctx context.Context) error {
	c.tmpl = c.spec.Template
	if c.tmpl == "" {
		c.tmpl = TemplateHost
	}
	if c.snap != nil {
		if c.spec.Template != "" && c.spec.Template != c.snap.Template {
			return provider.Errorf(provider.CodeInvalidArgument, "snapshot %s is of template %q, not %q", c.snap.ID, c.snap.Template, c.spec.Template)
		}
		c.tmpl = c.snap.Template
	}
	if c.tp != nil {
		c.tmpl = c.tp.name
	} else {
		tp, err := c.p.resolveTemplate(ctx, c.tmpl)
		if err != nil {
			return err
		}
		c.tp = tp
	}
	if c.tp.image != nil {
		c.tc = c.tp.image.Config
	}
	return nil
}

// resolveNetwork settles the network mode and, for "allow", the policy. A full snapshot
// restores with the network stack it was saved with.
func (c *creation) resolveNetwork(ctx context.Context) error {
	p, snap := c.p, c.snap
	netMode := c.spec.Network.Normalized().Mode
	if c.full {
		// The saved kernel's network stack is the one it had: netstack for none, the host's
		// (in a namespace of the sandbox's own) for all.
		if netMode == provider.NetworkNone && snap.Network != string(provider.NetworkNone) {
			return provider.Errorf(provider.CodeInvalidArgument,
				"snapshot %s is a full snapshot of a sandbox with network %s: it cannot restore with network none", snap.ID, snap.Network)
		}
		if snap.Network == string(provider.NetworkAllow) {
			// Its proxy and firewall rules were the parent's, tied to the parent's address.
			return provider.Errorf(provider.CodeUnsupported,
				"snapshot %s is a full snapshot of a sandbox with a network policy, which cannot be restored yet: take a filesystem snapshot", snap.ID)
		}
		netMode = provider.NetworkMode(snap.Network)
		if netMode == provider.NetworkAll && p.net == nil {
			return provider.Errorf(provider.CodeUnsupported, "network all is unavailable here: %v", p.netErr)
		}
	}
	switch netMode {
	case "", provider.NetworkAll:
		netMode = provider.NetworkAll
		if p.net == nil {
			return provider.Errorf(provider.CodeUnsupported, "network all is unavailable here: %v", p.netErr)
		}
	case provider.NetworkNone:
	case provider.NetworkAllow:
		if p.net == nil {
			return provider.Errorf(provider.CodeUnsupported, "a network policy needs network all, unavailable here: %v", p.netErr)
		}
		var err error
		if c.pol, c.polFile, err = policyFile(c.spec.Network); err != nil {
			return err
		}
		if err := p.checkProxy(ctx, c.spec.Network.Proxy); err != nil {
			return err
		}
	default:
		return provider.Errorf(provider.CodeInvalidArgument, "unknown network mode %q", netMode)
	}
	c.netMode = netMode
	return nil
}

// resolveSecrets makes the bound secrets' placeholders (egress.go), or keeps those of the
// snapshot's sandbox; bound secrets ride on an egress proxy, so network "all" becomes
// "allow" with an open policy.
func (c *creation) resolveSecrets(ctx context.Context) error {
	bound, err := newBoundSecrets(c.spec)
	if err != nil {
		return err
	}
	if bound == nil && c.snap != nil && !c.full {
		// Given none, a sandbox from a snapshot of one with bound secrets keeps them.
		if bound, err = c.p.snapshotBoundSecrets(c.snap); err != nil {
			return provider.Wrap(err, provider.CodeProvider, "create")
		}
	}
	if bound == nil {
		return nil
	}
	switch {
	case c.netMode == provider.NetworkNone:
		return provider.Errorf(provider.CodeInvalidArgument, "bound secrets need a network: their proxy is the sandbox's way out, and network none has none")
	case c.full:
		return provider.Errorf(provider.CodeUnsupported, "bound secrets on a full snapshot's restore: its processes hold the parent's environment")
	case c.netMode == provider.NetworkAll:
		c.netMode, c.pol = provider.NetworkAllow, &egress.Policy{} // the proxy, refusing nothing
	}
	c.spec.Env = bound.env(c.spec.Env)
	c.bound = bound
	return nil
}

// resolveSize settles the sandbox's size: the spec's, or a full snapshot's (the saved
// kernel was booted with it); a snapshot must fit its disk.
func (c *creation) resolveSize(ctx context.Context) error {
	size, err := c.p.size(c.spec.Size)
	if err != nil {
		return err
	}
	if c.full {
		size = provider.Size{CPU: c.snap.CPU, MemoryMB: c.snap.MemoryMB, DiskGB: c.snap.DiskGB}
	}
	if c.snap != nil {
		if err := snapshotFits(c.snap, size.DiskGB); err != nil {
			return err
		}
	}
	c.size = size
	return nil
}

// resolveAgent finds the agent binary bound into the sandbox.
func (c *creation) resolveAgent(ctx context.Context) error {
	agentPath, err := c.p.agentPath()
	if err != nil {
		return provider.Errorf(provider.CodeUnavailable, "agent binary: %v", err)
	}
	c.agentPath = agentPath
	return nil
}

// newRecord makes the sandbox's record from what was resolved, and settles how its
// interface is plumbed.
func (c *creation) newRecord(pooled bool) {
	p := c.p
	now := time.Now()
	rec := &record{
		ID: newID(), Key: c.spec.Key, Labels: c.spec.Labels, Status: statusCreating,
		CreatedAt: now.UTC().Truncate(time.Millisecond), IdleTimeout: c.spec.IdleTimeout,
		Runtime: c.rtName, Template: c.tmpl, Network: string(c.netMode), UIDIndex: -1,
		CPU: c.size.CPU, MemoryMB: c.size.MemoryMB, DiskGB: c.size.DiskGB, Pids: p.cfg.PidsLimit,
		Caps: withoutCheckpoint(p.capsFor(c.rtName, c.tp), c.rtName, c.netMode), Volumes: c.spec.Volumes,
		Workdir: templateWorkdir(c.tc),
	}
	if c.boot.restoring() {
		rec.BootImage = c.boot.key
	}
	if pooled {
		rec.Pooled, rec.PoolOwner, rec.PoolOwnerStart = true, os.Getpid(), procStart(os.Getpid())
	}
	if c.spec.Timeout > 0 {
		// The lifetime counts from when the sandbox is ready (the "record" step); until
		// then the deadline leaves room for a slow start, so the agent cannot reach it
		// before it has answered.
		rec.Deadline = now.Add(c.spec.Timeout + p.cfg.ReadyTimeout).UTC().Truncate(time.Millisecond)
	}
	c.veth = c.netMode == provider.NetworkAll || c.netMode == provider.NetworkAllow
	c.plumbAfterCreate = c.veth && c.rtName != RuntimeRunsc
	if c.veth {
		rec.Mirror = p.mirrorAllowances(c.tp)
	}
	c.rec, c.id = rec, rec.ID
}

// close lets go of what the creation holds, whether it made a sandbox or not: its mount
// namespace, the proxy's sockets if the proxy never took them, the boot image's lock.
func (c *creation) close() {
	if c.w != nil {
		c.w.close()
	}
	c.egressSocks.Close()
	c.boot.release()
}

// ns runs fn in the sandbox's mount namespace.
func (c *creation) ns(fn func() error) error {
	if c.w == nil {
		return errors.New("no mount namespace")
	}
	return c.w.do(fn)
}

// steps are the creation's steps, in order, each with its undo.
func (c *creation) steps() []steps.Step {
	return []steps.Step{
		{Name: "state directory", Do: c.stateDir, Undo: c.undoStateDir},
		{Name: "user namespace", Do: c.userNamespace, Undo: c.undoUserNamespace},
		{Name: "mount namespace", Do: c.mountNamespace},
		{Name: "root file system", Do: c.rootFS, Undo: c.undoRootFS},
		{Name: "volumes", Do: c.volumes},
		{Name: "agent directory", Do: c.agentDir},
		{Name: "network", Do: c.network, Undo: c.undoNetwork},
		{Name: "bundle", Do: c.bundle},
		{Name: "runtime", Do: c.runtime, Undo: c.undoRuntime},
		{Name: "holder", Do: c.holder, Undo: c.undoHolder},
		{Name: "egress proxy", Do: c.egressProxy, Undo: c.undoEgressProxy},
		{Name: "agent", Do: c.agent},
		{Name: "boot image", Do: c.saveBoot},
		{Name: "start command", Do: c.startCommand},
		{Name: "record", Do: c.record},
	}
}

// stepHook, when set (by tests and benchmarks), is told how long each step of a create or
// of a network change took.
var stepHook func(name string, d time.Duration)

// runSteps runs a procedure's steps (package steps), timed for stepHook.
func runSteps(ctx context.Context, list []steps.Step) error {
	return steps.Runner{Timed: stepHook}.Run(ctx, list)
}

func (c *creation) stateDir(ctx context.Context) error {
	for _, d := range []string{c.p.lay.locks(), c.p.lay.runtimeRoot(c.rtName)} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	// sandboxes/ lets every user through (a sandbox's root, an unprivileged uid with a
	// user namespace, must reach its own directory); a sandbox's directory is host
	// root's alone (0700) until the user-namespace step lets the sandbox's root group
	// through. No other host user can list, read or run anything in it.
	if err := os.MkdirAll(c.p.lay.sandboxes(), 0o711); err != nil {
		return err
	}
	if err := os.Mkdir(c.p.lay.dir(c.id), 0o700); err != nil {
		return err
	}
	c.madeDir = true
	if err := os.Chmod(c.p.lay.dir(c.id), 0o700); err != nil {
		return err
	}
	return c.p.lay.writeRecord(c.rec)
}

func (c *creation) undoStateDir() error {
	if !c.madeDir {
		return nil
	}
	return os.RemoveAll(c.p.lay.dir(c.id))
}

func (c *creation) userNamespace(ctx context.Context) error {
	if !c.userns {
		return nil
	}
	idx, err := c.p.allocUIDs(ctx, c.id)
	if err != nil {
		return err
	}
	c.rec.UIDIndex, c.rec.UIDBase = idx, c.p.cfg.UIDBase+uint32(idx)*idMapSize
	if err := c.p.lay.writeRecord(c.rec); err != nil {
		return err
	}
	// runc's and crun's init run as the sandbox's root (host uid and gid UIDBase) when
	// they mount the rootfs and the socket directory: its group may pass (0710), no
	// one else.
	if err := os.Chown(c.p.lay.dir(c.id), 0, int(c.rec.UIDBase)); err != nil {
		return err
	}
	return os.Chmod(c.p.lay.dir(c.id), 0o710)
}

func (c *creation) undoUserNamespace() error {
	if c.rec.UIDIndex < 0 {
		return nil
	}
	return leasesIn(c.p.uidLeases()).Release(strconv.Itoa(c.rec.UIDIndex), leaseHolder(c.p.lay, c.id))
}

func (c *creation) mountNamespace(ctx context.Context) error {
	var err error
	c.w, err = newNSWorker()
	return err
}

func (c *creation) rootFS(ctx context.Context) error {
	var err error
	var nameservers []netip.Addr
	switch c.netMode {
	case provider.NetworkAll:
		nameservers = hostnet.Nameservers()
	case provider.NetworkAllow:
		// Any server will do: the firewall sends every query to the proxy.
		nameservers = []netip.Addr{c.p.net.Gateway()}
	}
	plan := rootfsPlan{
		usernsFD: -1, uidBase: c.rec.UIDBase, diskGB: c.size.DiskGB, hostTmp: c.rtName == RuntimeRunsc,
		trust: c.bound.bundle(),
	}
	if c.tp.image == nil {
		lower, err := buildTemplate(ctx, c.p.lay.templates(), TemplateHost)
		if err != nil {
			return err
		}
		plan.lowers, plan.hostDirs = []string{lower}, realHostDirs()
		plan.etc = etcFiles(sandboxHostname, nameservers)
	} else {
		plan.lowers, plan.image, plan.workdir, plan.build = c.tp.lowers, true, c.tc.WorkingDir, c.tp.build
		if plan.etc, err = imageEtc(c.tp.lowers, sandboxHostname, nameservers, !c.tp.build); err != nil {
			return err
		}
		if c.tc.User != "" {
			if c.agentUser, err = userName(c.tc.User, plan.etc["passwd"]); err != nil {
				return err
			}
		}
	}
	if c.userns {
		// The layers are idmapped into the sandbox's range (idmap.go).
		fd, err := c.p.idmapNS.fd(c.rec.UIDBase)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		plan.usernsFD = fd
	}
	if c.snap != nil {
		plan.fill = func(upper string) error {
			tmp := ""
			if plan.hostTmp {
				tmp = c.p.lay.tmp(c.id)
			}
			return restoreSnapshot(ctx, c.p.lay.blocks(), c.p.lay.snapshot(c.snap.ID), c.snap, upper, tmp, c.rec.UIDBase)
		}
	}
	return c.ns(func() error { return mountRootfs(c.p.lay.disk(c.id), c.p.lay.rootfs(c.id), plan) })
}

func (c *creation) undoRootFS() error {
	return c.ns(func() error { return unmountRootfs(c.p.lay.disk(c.id), c.p.lay.rootfs(c.id)) })
}

func (c *creation) volumes(ctx context.Context) error {
	if len(c.spec.Volumes) == 0 {
		return nil
	}
	// The record names the volumes already: once their locks are taken and they
	// exist, a delete waits for the lock and then sees this sandbox.
	locks, err := c.p.lockVolumes(ctx, c.spec.Volumes)
	defer func() {
		for _, lk := range locks {
			lk.Unlock()
		}
	}()
	if err != nil {
		return err
	}
	fd := -1
	if c.userns {
		if fd, err = c.p.idmapNS.fd(c.rec.UIDBase); err != nil {
			return err
		}
		defer unix.Close(fd)
	}
	return c.ns(func() error { return mountSandboxVolumes(c.p.lay, c.p.lay.dir(c.id), c.spec.Volumes, fd) })
}

func (c *creation) agentDir(ctx context.Context) error {
	return c.p.writeAgentDir(c.rec, c.spec, c.tc, c.agentUser)
}

func (c *creation) network(ctx context.Context) error {
	if !c.veth {
		return nil
	}
	lk, err := c.p.net.Lock(ctx)
	if err != nil {
		return err
	}
	defer lk.Unlock()
	a, err := c.p.net.Allocate(leaseHolder(c.p.lay, c.id), c.rec.Mirror)
	if err != nil {
		return err
	}
	c.rec.IP = a.String()
	c.rec.HostVeth, _ = hostnet.VethNames(c.id)
	if err := c.p.lay.writeRecord(c.rec); err != nil {
		return err
	}
	if err := c.p.net.EnsureBridge(ctx); err != nil {
		return err
	}
	if c.pol != nil {
		// The policy's rules before the interface: the sandbox never has a
		// moment of network "all".
		if err := c.p.writeEgressPolicy(c.id, c.polFile); err != nil {
			return err
		}
		if c.egressSocks, err = c.p.bindEgress(ctx, c.rec, c.pol); err != nil {
			return err
		}
	}
	if c.plumbAfterCreate {
		return nil
	}
	// The namespace is bound at netnsPath in the sandbox's mount namespace, where
	// runsc, started there, opens it.
	c.netnsPath = c.p.lay.netns(c.id)
	return c.ns(func() error {
		if err := hostnet.NewNetns(ctx, c.netnsPath); err != nil {
			return err
		}
		return c.p.net.Attach(ctx, c.id, c.netnsPath, a)
	})
}

func (c *creation) undoNetwork() error {
	var errs []error
	if c.rec.IP != "" {
		errs = append(errs, c.p.net.Detach(context.Background(), c.id, leaseHolder(c.p.lay, c.id), c.rec.IP))
	}
	if c.netnsPath != "" {
		errs = append(errs, c.ns(func() error { return hostnet.RemoveNetns(c.netnsPath) }))
	}
	return errors.Join(errs...)
}

func (c *creation) bundle(ctx context.Context) error {
	s := buildSpec(bundleSpec{
		id: c.id, runtime: c.rtName, rootfs: c.p.lay.rootfs(c.id), agentPath: c.agentPath,
		runDir: c.p.lay.run(c.id), tmpDir: c.p.lay.tmp(c.id), userns: c.userns, uidBase: c.rec.UIDBase, netnsPath: c.netnsPath,
		cpu: c.size.CPU, memoryMB: c.size.MemoryMB, limitSwap: swapAccounted(), pids: c.p.cfg.PidsLimit,
		commandCgroup: commandCgroup(c.rtName), volumes: volumeBinds(c.p.lay.dir(c.id), c.spec.Volumes),
	})
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	return os.WriteFile(bundleConfigPath(c.p.lay.dir(c.id)), b, 0o600)
}

func (c *creation) runtime(ctx context.Context) error {
	var restore func() error // instead of booting
	switch {
	case c.full:
		restore = func() error {
			// The image is assembled from the snapshot's blocks for this restore only
			// (snapshot.go).
			into := filepath.Join(c.p.lay.dir(c.id), "image")
			defer os.RemoveAll(into)
			img, err := snapshotImage(ctx, c.p.lay.blocks(), c.p.lay.snapshot(c.snap.ID), into)
			if err != nil {
				return err
			}
			return c.rt.restore(ctx, runscNetwork(c.rec), c.id, c.p.lay.dir(c.id), c.p.lay.pidFile(c.id), c.p.lay.log(c.id), img)
		}
	case c.boot.restoring():
		restore = func() error {
			err := c.rt.restore(ctx, runscNetwork(c.rec), c.id, c.p.lay.dir(c.id), c.p.lay.pidFile(c.id), c.p.lay.log(c.id), filepath.Join(c.p.lay.bootImage(c.boot.key), "image"))
			c.bootFailed = err != nil
			return err
		}
	}
	if c.w == nil {
		return errors.New("no mount namespace")
	}
	return c.p.runContainer(ctx, c.rt, c.rec, c.w, c.plumbAfterCreate, restore)
}

// runContainer starts sandbox rec's container on its bundle, in its mount namespace (w, on
// whose thread the container copies the namespace, runsc's gofer opens the rootfs, and the
// log is on the sandbox's disk), and records its init. It boots the bundle (the runtime's
// run), or with plumb (runc and crun with network all or allow) creates it, gives the
// network namespace the runtime made its interface, then starts it; restore, when not nil,
// starts it from a checkpoint image instead of booting. Create's runtime step and the resume
// of a cold pause (coldpause.go) both start containers through it.
func (p *Provider) runContainer(ctx context.Context, rt ociRuntime, rec *record, w *nsWorker, plumb bool, restore func() error) error {
	id := rec.ID
	if err := w.do(func() error {
		if restore != nil {
			return restore()
		}
		var files []*os.File
		if commandCgroup(rt.name) {
			f, err := openCommandCgroup(id, rec.Pids)
			if err != nil {
				return fmt.Errorf("the commands' cgroup: %w", err)
			}
			defer f.Close()
			files = append(files, f)
		}
		return rt.start(ctx, runscNetwork(rec), id, p.lay.dir(id), p.lay.pidFile(id), p.lay.log(id), plumb, files...)
	}); err != nil {
		return err
	}
	if h := testHookCreated; h != nil {
		if err := h(id); err != nil {
			return err
		}
	}
	if plumb {
		pid, err := readPidFile(p.lay.pidFile(id))
		if err != nil {
			return err
		}
		a, err := netip.ParseAddr(rec.IP)
		if err != nil {
			return err
		}
		if err := p.net.Attach(ctx, id, fmt.Sprintf("/proc/%d/ns/net", pid), a); err != nil {
			return err
		}
		if err := w.do(func() error { return rt.run(ctx, "", "start", id) }); err != nil {
			return err
		}
	}
	pid, err := readPidFile(p.lay.pidFile(id))
	if err != nil {
		return err
	}
	if rt.name != RuntimeRunsc {
		if err := protectFromOOM(pid); err != nil {
			return err
		}
	}
	rec.InitPID, rec.InitStart = pid, procStart(pid)
	return p.lay.writeRecord(rec)
}

func (c *creation) undoRuntime() error {
	// A cancelled ctx must not stop the undo.
	err := c.rt.remove(context.Background(), runscNetwork(c.rec), c.id)
	removeCgroups(c.id)
	return err
}

func (c *creation) holder(ctx context.Context) error {
	// Keeps the namespace after Create (holder.go); in the sandbox's cgroups, which
	// the runtime has made by now.
	var pid int
	var start uint64
	var hold func() error
	var done func()
	if err := c.ns(func() (err error) {
		pid, start, hold, done, err = startHolder(ctx)
		return err
	}); err != nil {
		return err
	}
	defer done()
	if h := testHookHolder; h != nil {
		h(c.id, "started", pid)
	}
	// Recorded before it holds: a Create killed before this point leaves a holder
	// that exits by itself, one killed after it a holder that teardown finds.
	c.rec.HolderPID, c.rec.HolderStart = pid, start
	if err := c.p.lay.writeRecord(c.rec); err != nil {
		return err
	}
	if err := hold(); err != nil {
		return err
	}
	if h := testHookHolder; h != nil {
		h(c.id, "held", pid)
	}
	if err := protectFromOOM(pid); err != nil {
		return err
	}
	return joinCgroups(c.id, pid)
}

func (c *creation) undoHolder() error {
	stopHolder(c.rec)(holderExitTimeout)
	return nil
}

func (c *creation) egressProxy(ctx context.Context) error {
	if c.pol == nil {
		return nil
	}
	err := c.p.runEgress(ctx, c.rec, c.egressSocks, c.agentPath, c.bound)
	c.egressSocks.Close()
	c.egressSocks = nil
	return err
}

func (c *creation) undoEgressProxy() error {
	stopEgress(c.rec, holderExitTimeout)
	return nil
}

func (c *creation) agent(ctx context.Context) error {
	if c.full || c.boot.restoring() {
		// The restored agent waits, its listener closed, for the word to listen
		// again: in this sandbox's socket directory.
		if err := c.rt.kill(ctx, runscNetwork(c.rec), c.id, "USR2"); err != nil {
			return err
		}
	}
	err := c.p.waitAgent(ctx, c.rec)
	c.bootFailed = err != nil && c.boot.restoring()
	return err
}

func (c *creation) saveBoot(ctx context.Context) error {
	if !c.boot.saving() {
		return nil
	}
	return c.p.saveBootImage(ctx, c.rt, c.rec, c.boot)
}

func (c *creation) startCommand(ctx context.Context) error {
	if c.full {
		return nil // its processes are running already
	}
	return c.p.startTemplate(ctx, c.rec, c.tc)
}

func (c *creation) record(ctx context.Context) error {
	if c.full || c.boot != nil {
		// The restored agent remembers the deadlines of the sandbox it was saved
		// in (a boot image's: none); this sandbox's are its own.
		if c.spec.Timeout > 0 {
			c.rec.Deadline = time.Now().Add(c.spec.Timeout).UTC().Truncate(time.Millisecond)
		}
		if err := c.p.giveAgentLimits(ctx, c.rec); err != nil {
			return err
		}
	} else if c.spec.Timeout > 0 {
		c.rec.Deadline = time.Now().Add(c.spec.Timeout).UTC().Truncate(time.Millisecond)
		ac := agentClient(c.p.lay.socket(c.id))
		err := ac.SetDeadline(ctx, agentDeadline(c.rec.Deadline))
		ac.Close()
		if err != nil {
			return err
		}
	}
	// A sandbox's age counts from when it is ready too.
	c.rec.CreatedAt = time.Now().UTC().Truncate(time.Millisecond)
	c.rec.Status = statusReady
	if err := c.p.lay.writeRecord(c.rec); err != nil {
		return err
	}
	return c.p.indexKey(c.rec)
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

// testHookCreated, when set by a test, runs right after the runtime made the container (at a
// create, and at the resume of a cold pause); an error fails the create, or the resume, there.
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
	i, err := leasesIn(dir).Any(n, strconv.Itoa, leaseHolder(p.lay, id))
	if errors.Is(err, lease.ErrExhausted) {
		return 0, errors.New("no free user-namespace range")
	}
	return i, err
}

// templateWorkdir is the template's working directory, absolute and clean; "" when it names
// none.
func templateWorkdir(tc template.Config) string {
	if tc.WorkingDir == "" {
		return ""
	}
	return path.Clean("/" + tc.WorkingDir)
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
		DefaultWorkdir:     cmp.Or(templateWorkdir(tc), defaultWorkdir),
		IdleTimeoutSeconds: int64((spec.IdleTimeout + time.Second - 1) / time.Second),
		Protocol:           agentspec.Version,
	}
	if hideAgent(rec.Runtime) {
		// From commands, and from the agent's own file API once it serves: a symlink a
		// command plants must not lead a file operation into the host directory behind it.
		cfg.HidePaths = []string{agentDir}
		cfg.HideFromAgent = true
	}
	// Why the agent ended, if it ended as told (revive.go).
	cfg.EndFile = agentRunDir + "/" + endFileName
	if rec.Runtime != RuntimeRunsc {
		// A boot id of its own at each boot (runc and crun show the host's, which never
		// changes); gVisor's kernel makes one at each boot itself. runc refuses a bind
		// inside /proc in the spec, so the agent makes it.
		cfg.BootIDFile = agentRunDir + "/boot_id"
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
	// The end file exists before the agent starts: the agent holds it open from its start,
	// and gVisor restores an open file by walking to it again, so the run directory of a
	// sandbox restored from a checkpoint (a fork's child, a full snapshot's) must have it.
	end := filepath.Join(dir, endFileName)
	if err := os.WriteFile(end, nil, 0o644); err != nil {
		return err
	}
	for _, f := range []string{dir, path, end} {
		if err := os.Chown(f, int(rec.UIDBase), int(rec.UIDBase)); err != nil {
			return err
		}
	}
	return nil
}

// setAgentDeadline writes the record's deadline into the agent's config file, which a new
// agent reads when it starts: the one a cold pause's resume boots (coldpause.go) must not
// start with the deadline of the create, which SetTimeout may have moved since (an agent
// whose deadline has passed ends the sandbox at once). The file is in a directory the
// sandbox's root owns: it is opened without following a final symlink.
func (p *Provider) setAgentDeadline(rec *record) error {
	f, err := os.OpenFile(p.lay.agentConfig(rec.ID), os.O_RDWR|unix.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 1<<20))
	if err != nil {
		return err
	}
	var cfg agentConfig
	if err := json.Unmarshal(b, &cfg); err != nil {
		return fmt.Errorf("the agent's config: %w", err)
	}
	cfg.DeadlineUnix = 0
	if !rec.Deadline.IsZero() {
		cfg.DeadlineUnix = (rec.Deadline.UnixMilli() + 999) / 1000
	}
	if b, err = json.Marshal(cfg); err != nil {
		return err
	}
	if err := f.Truncate(0); err != nil {
		return err
	}
	_, err = f.WriteAt(b, 0)
	return err
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
	BootIDFile         string            `json:"bootIDFile,omitempty"`
	EndFile            string            `json:"endFile,omitempty"`
	Protocol           int               `json:"protocol,omitempty"`
}
