package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	mathrand "math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	agentspec "github.com/tupper-dev/tupper/agent/spec"
	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/template"
)

// Config configures the local provider. The zero value is the default.
type Config struct {
	// Home is the state root. "" means $TUPPER_HOME, else /var/lib/tupper.
	Home string
	// Runtime is the default OCI runtime: "runc", "crun" (a C runtime that starts faster,
	// same isolation) or "runsc" (gVisor). "" (the default) picks the fastest runtime with
	// runc's isolation that works on this host: crun when it is installed and usable here,
	// else runc; DefaultRuntime says which and why. CreateSpec.Runtime picks another per
	// sandbox.
	Runtime string
	// RuncPath, RunscPath and CrunPath are the runtime binaries; "" looks them up on PATH
	// and in the sbin directories.
	RuncPath, RunscPath, CrunPath string
	// AgentPath is the tupper binary run as every sandbox's PID 1 ("tupper agent"). ""
	// means $TUPPER_AGENT, else the running program when it is tupper, else tupper beside
	// the running program or on PATH (see agent.go). The binary is copied into Home.
	AgentPath string
	// Subnet is the IPv4 network of sandboxes with network "all"; "" means 10.213.0.0/16.
	// Its first address is the host bridge's.
	Subnet string
	// Bridge is the host bridge of network "all"; "" means "tupper0".
	Bridge string
	// AllowPrivate are IPv4 ranges that sandboxes with network "all" may reach although
	// they are not public: by default such a sandbox reaches the public internet only, never
	// private (RFC 1918), carrier-grade NAT, link-local (cloud metadata), loopback,
	// documentation, benchmarking, multicast or reserved addresses (see docs/security.md).
	// For example 10.1.2.0/24 for a package mirror on the company network. The host itself
	// stays out of reach whatever is listed. Each sandbox keeps its own provider's list, also
	// when providers with different lists share a bridge.
	AllowPrivate []netip.Prefix
	// UIDBase is the first host uid (and gid) of the sandboxes' user namespaces: sandbox n
	// maps 0..65535 inside to UIDBase+n*65536 on. 0 means 0x70000000. Nothing else on the
	// host should own ids in that range.
	UIDBase uint32
	// NoUserNS runs runc and crun sandboxes without a user namespace (root inside is root
	// outside, still confined by capabilities, seccomp and namespaces). For hosts that
	// forbid them.
	NoUserNS bool
	// DefaultSize is the size of a sandbox created without one; its zero fields mean 1 CPU,
	// 1024 MB of memory and 5 GB of disk.
	DefaultSize provider.Size
	// PidsLimit bounds the number of processes and threads in a sandbox; 0 means 1024.
	PidsLimit int64
	// ReadyTimeout bounds how long Create waits for the agent to answer; 0 means 30 s.
	ReadyTimeout time.Duration
	// Pool is how many ready sandboxes of the default shape (default runtime, template and
	// size, network "none") the provider keeps started in the background, from New until
	// Close, for Create to hand out; 0 (the default) keeps none. For long-lived users
	// (tupper serve --pool); see pool.go.
	Pool int
}

// Validate reports a configuration New cannot use.
func (c Config) Validate() error {
	switch c.Runtime {
	case "", RuntimeRunc, RuntimeRunsc, RuntimeCrun:
	default:
		return provider.Errorf(provider.CodeInvalidArgument, "local: runtime %q: want runc, runsc or crun", c.Runtime)
	}
	if c.Home != "" && !filepath.IsAbs(c.Home) {
		return provider.Errorf(provider.CodeInvalidArgument, "local: home %q is not absolute", c.Home)
	}
	if c.UIDBase != 0 && uint64(c.UIDBase)+1<<30 > 1<<32-1 {
		return provider.Errorf(provider.CodeInvalidArgument, "local: uid base %d leaves too few ids", c.UIDBase)
	}
	if c.PidsLimit < 0 || c.ReadyTimeout < 0 || c.Pool < 0 {
		return provider.Errorf(provider.CodeInvalidArgument, "local: negative limit")
	}
	for _, r := range c.AllowPrivate {
		if !r.IsValid() || !r.Addr().Is4() {
			return provider.Errorf(provider.CodeInvalidArgument, "local: allow-private range %v: want an IPv4 prefix (sandboxes have no IPv6)", r)
		}
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.Home == "" {
		c.Home = os.Getenv("TUPPER_HOME")
	}
	if c.Home == "" {
		c.Home = "/var/lib/tupper"
	}
	if c.Subnet == "" {
		c.Subnet = "10.213.0.0/16"
	}
	if c.Bridge == "" {
		c.Bridge = "tupper0"
	}
	if c.UIDBase == 0 {
		c.UIDBase = 0x70000000
	}
	if c.DefaultSize.CPU == 0 {
		c.DefaultSize.CPU = 1
	}
	if c.DefaultSize.MemoryMB == 0 {
		c.DefaultSize.MemoryMB = 1024
	}
	if c.DefaultSize.DiskGB == 0 {
		c.DefaultSize.DiskGB = 5
	}
	if c.PidsLimit == 0 {
		c.PidsLimit = 1024
	}
	if c.ReadyTimeout == 0 {
		c.ReadyTimeout = 30 * time.Second
	}
	return c
}

// Provider runs sandboxes on this machine with an OCI runtime. See the package doc.
type Provider struct {
	idmapNS  *usernsCache // user namespaces for idmapped layers (idmap.go)
	cfg      Config
	lay      layout
	runtimes map[string]ociRuntime // the runtimes found
	net      *network              // nil: network "all" is unavailable
	netErr   error
	userns   bool
	// runscDate is the runsc release date (YYYYMMDD), 0 when unknown.
	runscDate int
	caps      provider.Capabilities
	unavail   error // why Available fails, or nil
	// unusable says why a runtime that was found cannot make sandboxes on this host.
	unusable map[string]error
	// runtimeWhy says why cfg.Runtime is the default runtime.
	runtimeWhy string

	// probeOnce guards the fields above from runtimes on: they are filled on first need,
	// so a process that only connects to a sandbox (tupper exec) does not probe the host.
	probeOnce sync.Once

	mu       sync.Mutex
	previews map[previewKey]*preview
	closed   bool

	pool *pool // nil: Config.Pool is 0

	agent agentState // the agent binary, found on first need (agent.go)
}

var (
	_ provider.Provider     = (*Provider)(nil)
	_ provider.KeyedCreator = (*Provider)(nil)
)

func init() {
	provider.Register(provider.Registration{
		Name:     "local",
		Factory:  func() (provider.Provider, error) { return New(Config{}) },
		Install:  installRuntimes,
		Implicit: true,
	})
}

// New returns a provider. It fails only on a bad configuration; a host that cannot run
// sandboxes gives a provider whose Available says why. The host is probed on first need
// (Available, Capabilities, Create, a teardown), so a process that only connects to an
// existing sandbox does not pay for it.
func New(cfg Config) (*Provider, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	p := &Provider{
		cfg:      cfg,
		lay:      layout{home: cfg.Home},
		runtimes: map[string]ociRuntime{},
		unusable: map[string]error{},
		previews: map[previewKey]*preview{},
		idmapNS:  newUsernsCache(),
	}
	if len(p.lay.socket(strings.Repeat("a", idLen))) > 100 {
		return nil, provider.Errorf(provider.CodeInvalidArgument, "local: home %q is too long for a unix socket path below it", cfg.Home)
	}
	if cfg.Pool > 0 {
		p.startPool(cfg.Pool)
	}
	return p, nil
}

// probed fills runtimes, userns, net, caps and unavail, once.
func (p *Provider) probed() { p.probeOnce.Do(p.probe) }

// runscDate is the release date of a runsc binary as YYYYMMDD (Debian versions it
// 0.0~YYYYMMDD.N), or 0 when it cannot tell.
func runscDate(path string) int {
	if path == "" {
		return 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "--version").Output()
	if err != nil {
		return 0
	}
	m := regexp.MustCompile(`(?:0\.0~|release-)(\d{8})`).FindSubmatch(out)
	if m == nil {
		return 0
	}
	d, _ := strconv.Atoi(string(m[1]))
	return d
}

// probe fills runtimes, userns, net and caps from what this host can do.
func (p *Provider) probe() {
	for name, path := range map[string]string{RuntimeRunc: p.cfg.RuncPath, RuntimeRunsc: p.cfg.RunscPath, RuntimeCrun: p.cfg.CrunPath} {
		if path == "" {
			var err error
			if path, err = findBinary(name); err != nil {
				continue
			}
		}
		p.runtimes[name] = ociRuntime{name: name, path: path, root: p.lay.runtimeRoot(name)}
	}
	if _, ok := p.runtimes[RuntimeCrun]; ok {
		if err := crunCgroups(); err != nil {
			p.unusable[RuntimeCrun] = err
		}
	}
	if p.cfg.Runtime == "" {
		p.cfg.Runtime, p.runtimeWhy = defaultRuntime(p.runtimes, p.unusable)
	} else {
		p.runtimeWhy = "chosen by the configuration"
	}
	agent, agentErr := p.agentPath()
	switch {
	case os.Geteuid() != 0:
		// Rootless runc needs delegated cgroups and cannot plumb network "all"; not supported.
		p.unavail = provider.Errorf(provider.CodeUnavailable, "local: needs root (run as root, or use the docker provider)")
	case p.unusable[p.cfg.Runtime] != nil:
		p.unavail = provider.Errorf(provider.CodeUnavailable, "local: %v", p.unusable[p.cfg.Runtime])
	case p.runtimes[p.cfg.Runtime].path == "":
		p.unavail = provider.Missingf("local: %s not found: %s", p.cfg.Runtime, installRuntimes)
	case agentErr != nil:
		p.unavail = provider.Wrap(agentErr, provider.CodeUnavailable, "")
	case !overlaySupported():
		p.unavail = provider.Errorf(provider.CodeUnavailable, "local: the kernel has no overlay file system (modprobe overlay)")
	}
	if p.unavail != nil {
		p.caps = provider.NewCapabilities()
		return
	}
	key := p.probeKey()
	cached, haveCache := p.loadProbe(key)
	if haveCache && !cached.UserNS && !p.cfg.NoUserNS {
		// Only a working user namespace is ever cached (see below); a cache that says
		// otherwise is not this code's and is not trusted.
		haveCache = false
	}
	if haveCache {
		p.userns = cached.UserNS
	} else {
		cached = probeCache{Key: key}
		cached.UserNS = !p.cfg.NoUserNS && usernsProbe()
		cached.RunscDate = runscDate(p.runtimes[RuntimeRunsc].path)
		p.userns = cached.UserNS
	}
	// runc and crun share the host's kernel: without a user namespace root inside would
	// be root on the host. That takes the operator's explicit NoUserNS; a probe that fails
	// (a transient error, a sysctl turned off) makes them unusable instead, and is not
	// cached, so the next process probes again. runsc does not use one (its sentry is the
	// boundary).
	usernsFailed := !p.userns && !p.cfg.NoUserNS
	if usernsFailed {
		for _, rt := range []string{RuntimeRunc, RuntimeCrun} {
			if _, ok := p.runtimes[rt]; ok && p.unusable[rt] == nil {
				p.unusable[rt] = fmt.Errorf("%s needs a user namespace and this host refused one (check /proc/sys/user/max_user_namespaces and kernel.unprivileged_userns_clone), or set NoUserNS to run its sandboxes' root as host root", rt)
			}
		}
		if err := p.unusable[p.cfg.Runtime]; err != nil {
			p.unavail = provider.Errorf(provider.CodeUnavailable, "local: %v", err)
			p.caps = provider.NewCapabilities()
			return
		}
	}
	if p.userns {
		// runc mounts the rootfs, the agent binary and the socket directory as the sandbox's
		// root, an unprivileged host uid: their paths must be traversable by others.
		if err := os.MkdirAll(p.cfg.Home, 0o711); err != nil {
			p.unavail = provider.Errorf(provider.CodeUnavailable, "local: home: %v", err)
			p.caps = provider.NewCapabilities()
			return
		}
		for _, path := range []string{p.cfg.Home, agent} {
			if err := traversable(path); err != nil {
				p.unavail = provider.Errorf(provider.CodeUnavailable, "local: %v (or set NoUserNS)", err)
				p.caps = provider.NewCapabilities()
				return
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if n, err := newNetwork(p.lay, p.cfg.Subnet, p.cfg.Bridge, p.cfg.AllowPrivate); err != nil {
		p.netErr = err
	} else if haveCache {
		// The tools are looked up again (cheap); the veth and nat checks are not.
		if err := n.findTools(); err != nil {
			p.netErr = err
		} else if cached.NetErr != "" {
			p.netErr = errors.New(cached.NetErr)
		} else {
			p.net = n
		}
	} else if err := n.probe(ctx); err != nil {
		p.netErr = err
		cached.NetErr = err.Error()
	} else {
		p.net = n
	}
	if !haveCache && !usernsFailed {
		p.saveProbe(cached)
	}
	caps := []provider.Capability{
		provider.CapNetworkNone, provider.CapTimeout, provider.CapIdleTimeout,
		provider.CapExactKey, provider.CapPreview, provider.CapUsers, provider.CapPersistent,
		provider.CapResourceLimit, provider.CapSize, provider.CapTerminal,
	}
	if p.net != nil {
		caps = append(caps, provider.CapNetworkAll)
	}
	// gVisor from before 2023 (Debian bookworm's runsc 20221219) fails
	// statx(AT_NO_AUTOMOUNT) with EINVAL, which breaks GNU ls and stat of most paths: not a
	// full shell there (see the package doc); bookworm-backports has a current runsc.
	p.runscDate = cached.RunscDate
	if p.shellWorks(p.cfg.Runtime) {
		caps = append(caps, provider.CapShell)
	}
	if fileExists("/usr/bin/git") {
		caps = append(caps, provider.CapGit)
	}
	if freezerAvailable() {
		// A snapshot is copied with the sandbox frozen.
		caps = append(caps, provider.CapPause, provider.CapSnapshot)
	}
	p.caps = provider.NewCapabilities(caps...)
}

// shellWorks reports whether the host's shell tools work in a sandbox on runtime rt: always
// on the host kernel (runc, crun), under gVisor only from 2023 on.
func (p *Provider) shellWorks(rt string) bool {
	return fileExists("/bin/sh") && (rt != RuntimeRunsc || p.runscDate >= 20230101)
}

// capsFor returns the capabilities of a sandbox on runtime rt and template tp: the
// provider's, with the shell as that runtime and the template allow, and git where the
// template has it. Call after probed.
func (p *Provider) capsFor(rt string, tp *sandboxTemplate) []provider.Capability {
	var out []provider.Capability
	for _, c := range p.caps.List() {
		if c != provider.CapShell && c != provider.CapGit {
			out = append(out, c)
		}
	}
	if p.shellWorks(rt) && (tp.image == nil || tp.has("bin/sh") || tp.has("usr/bin/sh")) {
		out = append(out, provider.CapShell)
	}
	if p.caps.Has(provider.CapGit) && tp.image == nil || tp.image != nil && tp.has("usr/bin/git") {
		out = append(out, provider.CapGit)
	}
	return out
}

// traversable reports an error unless every directory above path (and path itself, when it
// is a directory) lets other users through.
func traversable(path string) error {
	path = filepath.Clean(path)
	for p := path; ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil {
			return err
		}
		if fi.IsDir() && fi.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("%s is not searchable by other users (chmod o+x %s), which a user namespace needs", p, p)
		}
		if !fi.IsDir() && fi.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("%s is not executable by other users (chmod o+x %s)", p, p)
		}
		if p == "/" {
			return nil
		}
	}
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

func overlaySupported() bool {
	b, err := os.ReadFile("/proc/filesystems")
	return err == nil && strings.Contains(string(b), "\toverlay\n")
}

func freezerAvailable() bool {
	return fileExists("/sys/fs/cgroup/freezer/freezer.state") || fileExists("/sys/fs/cgroup/freezer") ||
		fileExists("/sys/fs/cgroup/cgroup.controllers")
}

// crunCgroups reports why crun cannot put sandboxes in cgroups here, or nil. crun uses the v1
// controllers on a hybrid host (v1 controllers under a tmpfs /sys/fs/cgroup, cgroup v2 at
// /sys/fs/cgroup/unified), but refuses to start anything while the v2 hierarchy has a
// controller of its own ("cgroups in hybrid mode not supported"); a kernel controller no v1
// hierarchy mounts, often hugetlb, is such a controller.
func crunCgroups() error {
	var st unix.Statfs_t
	if unix.Statfs("/sys/fs/cgroup", &st) != nil || st.Type != unix.TMPFS_MAGIC {
		return nil // unified or legacy
	}
	if unix.Statfs("/sys/fs/cgroup/unified", &st) != nil || st.Type != unix.CGROUP2_SUPER_MAGIC {
		return nil
	}
	b, err := os.ReadFile("/sys/fs/cgroup/unified/cgroup.controllers")
	if err != nil {
		return nil
	}
	if ctl := strings.Fields(string(b)); len(ctl) > 0 {
		return fmt.Errorf("crun refuses this hybrid cgroup host while cgroup v2 holds controllers (%s): mount each as cgroup v1, e.g. mkdir /sys/fs/cgroup/%s && mount -t cgroup -o %s cgroup /sys/fs/cgroup/%s (scripts/setup.sh does), or use runc",
			strings.Join(ctl, " "), ctl[0], ctl[0], ctl[0])
	}
	return nil
}

// usernsProbe is usernsWorks; a test replaces it to make the probe fail.
var usernsProbe = usernsWorks

// usernsWorks starts a process in a new user namespace with a mapping, as runc will.
func usernsWorks() bool {
	b, err := os.ReadFile("/proc/sys/user/max_user_namespaces")
	if err == nil && strings.TrimSpace(string(b)) == "0" {
		return false
	}
	truePath, err := findBinary("true")
	if err != nil {
		return false
	}
	attr := &syscall.ProcAttr{Sys: &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0x7fff0000, Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0x7fff0000, Size: 1}},
	}}
	pid, err := syscall.ForkExec(truePath, []string{"true"}, attr)
	if err != nil {
		return false
	}
	var ws syscall.WaitStatus
	_, err = syscall.Wait4(pid, &ws, 0, nil)
	return err == nil && ws.Exited() && ws.ExitStatus() == 0
}

// defaultRuntime picks the runtime of a provider configured without one, from the runtimes
// found and those that cannot run here, and says why: crun when it can run (runc's isolation
// from the same bundle, a faster start), else runc. Never runsc: it is the stronger boundary
// but the slower one, so it is chosen, not defaulted to.
func defaultRuntime(found map[string]ociRuntime, unusable map[string]error) (name, why string) {
	_, crun := found[RuntimeCrun]
	_, runc := found[RuntimeRunc]
	switch {
	case crun && unusable[RuntimeCrun] == nil:
		return RuntimeCrun, "crun is installed and usable here, and it starts sandboxes faster than runc with the same isolation"
	case crun:
		return RuntimeRunc, fmt.Sprintf("crun, which starts faster, cannot run here: %v", unusable[RuntimeCrun])
	case runc:
		return RuntimeRunc, "crun, which starts faster with the same isolation, is not installed: apt-get install crun"
	}
	return RuntimeRunc, "neither crun nor runc is installed"
}

// DefaultRuntime is the runtime of a sandbox created without one, and why it is that one.
// It probes the host on first use.
func (p *Provider) DefaultRuntime() (name, why string) {
	p.probed()
	return p.cfg.Runtime, p.runtimeWhy
}

// Name is "local".
func (p *Provider) Name() string { return "local" }

// Capabilities are those probed by New.
func (p *Provider) Capabilities() provider.Capabilities { p.probed(); return p.caps.Clone() }

// Available returns nil when sandboxes can be created here.
func (p *Provider) Available(ctx context.Context) error { p.probed(); return p.unavail }

// Home is the state root in use.
func (p *Provider) Home() string { return p.cfg.Home }

// Close closes the preview listeners this provider opened, destroys its pool of unused
// sandboxes (Config.Pool) and closes the user namespaces it kept for idmapped layers. The
// sandboxes it handed out live on. It is idempotent.
func (p *Provider) Close() error {
	poolErr := p.closePool()
	p.idmapNS.close()
	p.mu.Lock()
	p.closed = true
	pv := p.previews
	p.previews = map[previewKey]*preview{}
	p.mu.Unlock()
	for _, v := range pv {
		v.close()
	}
	return poolErr
}

func errNotFound(id string) error {
	return provider.Errorf(provider.CodeNotFound, "sandbox %s not found", id)
}

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
// than named by spec.Template, when tp is not nil.
func (p *Provider) createFrom(ctx context.Context, spec provider.CreateSpec, pooled bool, given *sandboxTemplate) (provider.Instance, error) {
	rtName := spec.Runtime
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
	var snap *snapMeta
	if spec.From != "" {
		var err error
		if snap, err = p.readSnapshot(spec.From); err != nil {
			return nil, err
		}
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
	netMode := spec.Network.Mode
	switch netMode {
	case "", provider.NetworkAll:
		netMode = provider.NetworkAll
		if p.net == nil {
			return nil, provider.Errorf(provider.CodeUnsupported, "network all is unavailable here: %v", p.netErr)
		}
	case provider.NetworkNone:
	case provider.NetworkAllow:
		return nil, provider.Errorf(provider.CodeUnsupported, "the local provider cannot enforce an egress allow list yet")
	default:
		return nil, provider.Errorf(provider.CodeInvalidArgument, "unknown network mode %q", netMode)
	}
	size, err := p.size(spec.Size)
	if err != nil {
		return nil, err
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

	now := time.Now()
	rec := &record{
		ID: newID(), Key: spec.Key, Labels: spec.Labels, Status: statusCreating,
		CreatedAt: now.UTC().Truncate(time.Millisecond), IdleTimeout: spec.IdleTimeout,
		Runtime: rtName, Template: tmpl, Network: string(netMode), UIDIndex: -1,
		CPU: size.CPU, MemoryMB: size.MemoryMB, DiskGB: size.DiskGB, Pids: p.cfg.PidsLimit,
		Caps: p.capsFor(rtName, tp),
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
	plumbAfterCreate := netMode == provider.NetworkAll && rtName != RuntimeRunsc
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
			if netMode == provider.NetworkAll {
				nameservers = hostNameservers()
			}
			plan := rootfsPlan{
				usernsFD: -1, uidBase: rec.UIDBase, diskGB: size.DiskGB, hostTmp: rtName == RuntimeRunsc,
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
					return restoreSnapshot(ctx, p.lay.snapshot(snap.ID), snap, upper, tmp, rec.UIDBase)
				}
			}
			return ns(func() error { return mountRootfs(p.lay.disk(id), p.lay.rootfs(id), plan) })
		}, undo: func() error {
			return ns(func() error { return unmountRootfs(p.lay.disk(id), p.lay.rootfs(id)) })
		}},
		{name: "agent directory", do: func(ctx context.Context) error {
			return p.writeAgentDir(rec, spec, tc, agentUser)
		}},
		{name: "network", do: func(ctx context.Context) error {
			if netMode != provider.NetworkAll {
				return nil
			}
			lk, err := p.net.lock(ctx)
			if err != nil {
				return err
			}
			defer lk.unlock()
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
		{name: "agent", do: func(ctx context.Context) error {
			return p.waitAgent(ctx, rec)
		}},
		{name: "start command", do: func(ctx context.Context) error {
			return p.startTemplate(ctx, rec, tc)
		}},
		{name: "record", do: func(ctx context.Context) error {
			if spec.Timeout > 0 {
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
	if r.Network == string(provider.NetworkAll) {
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
	lk, err := lockFile(ctx, dir+".lock")
	if err != nil {
		return 0, err
	}
	defer lk.unlock()
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

// alive reports whether the sandbox's init is still the process recorded at create.
func alive(r *record) bool {
	return r.InitPID > 0 && procStart(r.InitPID) == r.InitStart
}

// lockSandbox serialises Destroy, Pause and friends on one sandbox across processes.
func (p *Provider) lockSandbox(ctx context.Context, id string) (*flock, error) {
	if !validID(id) {
		return nil, errNotFound(id)
	}
	lk, err := lockFile(ctx, filepath.Join(p.lay.sandboxes(), "."+id+".lock"))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, errNotFound(id)
		}
		return nil, err
	}
	return lk, nil
}

// Destroy stops the sandbox and removes everything it left.
func (p *Provider) Destroy(ctx context.Context, id string) error {
	defer p.reapSome(ctx)
	lk, err := p.lockSandbox(ctx, id)
	if err != nil {
		return err
	}
	defer lk.unlock()
	rec, err := p.lay.readRecord(id)
	if err != nil {
		return err
	}
	return p.teardown(ctx, rec)
}

// teardown removes a sandbox: holder, container, network, mounts, leases, state directory.
// Each part tolerates being gone already, so a teardown interrupted halfway can run again.
// Call with the sandbox lock held.
func (p *Provider) teardown(ctx context.Context, rec *record) error {
	p.probed()
	id := rec.ID
	ctx = context.WithoutCancel(ctx)
	p.closePreviews(id)
	var errs []error
	rt, haveRT := p.runtimes[rec.Runtime]
	if haveRT && rec.Paused {
		// runsc panics deleting a paused sandbox, and a frozen holder cannot die: thaw it
		// first.
		rt.run(ctx, runscNetwork(rec), "resume", id)
	}
	// The holder first: it is in the sandbox's cgroups, which the runtime's delete removes.
	// The container keeps its own copy of the mounts until it is gone; with the holder, the
	// sandbox's namespace and its mounts go.
	stopHolder(rec)(holderExitTimeout)
	if haveRT {
		if err := rt.remove(ctx, runscNetwork(rec), id); err != nil {
			// Kill the init ourselves and let the runtime clean up after a dead one.
			if alive(rec) {
				unix.Kill(rec.InitPID, unix.SIGKILL)
			}
			if err := rt.remove(ctx, runscNetwork(rec), id); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if rec.Network == string(provider.NetworkAll) && p.net != nil {
		if err := p.net.detach(ctx, id, rec.IP); err != nil {
			errs = append(errs, err)
		}
		if err := removeNetns(p.lay.netns(id)); err != nil {
			errs = append(errs, err)
		}
	}
	// A sandbox from before holders has its mounts in the host's namespace; for the others
	// nothing is mounted at these paths here, which unmountRootfs accepts.
	if err := unmountRootfs(p.lay.disk(id), p.lay.rootfs(id)); err != nil {
		errs = append(errs, err)
	}
	if rec.UIDIndex >= 0 {
		if err := release(p.uidLeases(), strconv.Itoa(rec.UIDIndex), leaseHolder(p.lay, id)); err != nil {
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
		for unix.Rmdir(d) == unix.EBUSY && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
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

// reapAll checks every record and every snapshot; see Reap. With wait, it waits for sandbox
// locks held by others; without, it skips those sandboxes.
func (p *Provider) reapAll(ctx context.Context, wait bool) (int, error) {
	p.reapSnapshots()
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
			if err := p.teardown(ctx, rec); err != nil {
				errs = append(errs, err)
			} else if !rec.Pooled {
				n++
			}
		}
		lk.unlock()
	}
	return n, errors.Join(errs...)
}

// cleanLeases removes the host-wide leases of sandboxes whose Home was deleted without a
// teardown, each directory under its lock. Allocation clears them too, but only once every
// lease is taken.
func (p *Provider) cleanLeases(ctx context.Context) {
	if lk, err := lockFile(ctx, p.uidLeases()+".lock"); err == nil {
		cleanStaleLeases(p.uidLeases())
		lk.unlock()
	}
	if p.net != nil {
		if lk, err := p.net.lock(ctx); err == nil {
			cleanStaleLeases(p.net.leases())
			lk.unlock()
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
	return !alive(r)
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
	case !alive(r):
		st = provider.StateStopped
	case r.Paused:
		st = provider.StatePaused
	}
	return provider.Info{
		ID: r.ID, Key: r.Key, Labels: r.Labels, State: st, CreatedAt: r.CreatedAt,
		Template: r.Template, Runtime: r.Runtime, Deadline: r.Deadline,
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
	lk, err := lockFile(ctx, filepath.Join(p.lay.locks(), "keys.lock"))
	if err != nil {
		return nil, false, provider.Wrap(err, provider.CodeAborted, "create")
	}
	defer lk.unlock()
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
		if lk, err := p.lockSandbox(ctx, id); err == nil {
			p.teardown(ctx, rec)
			lk.unlock()
		}
		return nil, errNotFound(id)
	}
	return p.instance(rec), nil
}
