//go:build linux

package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/providers/local/internal/hostbin"
	"github.com/tupper-dev/tupper/providers/local/internal/hostnet"
)

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
			if path, err = hostbin.Find(name); err != nil {
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
	if n, err := hostnet.New(hostnet.Config{Subnet: p.cfg.Subnet, Bridge: p.cfg.Bridge, AllowPrivate: p.cfg.AllowPrivate, Stale: staleHolder}); err != nil {
		p.netErr = err
	} else if haveCache {
		// The tools are looked up again (cheap); the veth and nat checks are not.
		if err := n.FindTools(); err != nil {
			p.netErr = err
		} else if cached.NetErr != "" {
			p.netErr = errors.New(cached.NetErr)
		} else {
			p.net = n
		}
	} else if err := n.Probe(ctx); err != nil {
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
		caps = append(caps, provider.CapNetworkAll, provider.CapNetworkPolicy, provider.CapBoundSecrets, provider.CapEgressProxy)
	}
	// gVisor from before 2023 (Debian bookworm's runsc 20221219) fails
	// statx(AT_NO_AUTOMOUNT) with EINVAL, which breaks GNU ls and stat of most paths: not a
	// full shell there (see the package doc); scripts/setup.sh builds a current runsc.
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
		// Under every runtime: the holder keeps a sandbox's files while it has no
		// container (coldpause.go).
		caps = append(caps, provider.CapPauseCold)
	}
	if volumesAvailable() {
		caps = append(caps, provider.CapVolumes)
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
	if rt == RuntimeRunsc && p.caps.Has(provider.CapSnapshot) {
		out = append(out, provider.CapSnapshotFull)
		if p.caps.Has(provider.CapPause) {
			out = append(out, provider.CapPauseFreesMemory)
		}
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
	truePath, err := hostbin.Find("true")
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

// Capabilities are those probed by New that a provider declares. The probe also finds which
// optional interfaces work here (a freezer for pause and snapshots, loop devices for
// volumes): Refuse answers for those, and provider.CapabilitiesOf lists them.
func (p *Provider) Capabilities() provider.Capabilities { p.probed(); return p.caps.Declared() }

// Prototype is an *Instance, for provider.CapabilitiesOf.
func (p *Provider) Prototype() provider.Instance { return (*Instance)(nil) }

// Refuse refuses the optional interfaces this host lacks what they need for: pause, the cold
// pause and snapshots without the cgroup freezer, volumes without loop devices and
// mkfs.ext4. Each of their calls refuses the same way.
func (p *Provider) Refuse(c provider.Capability) error {
	p.probed()
	if !provider.NamesInterface(c) || p.caps.Has(c) {
		return nil
	}
	return refusal(c)
}

// refusal is why this host cannot do what c names.
func refusal(c provider.Capability) error {
	if c == provider.CapVolumes {
		return provider.Errorf(provider.CodeUnsupported, "volumes need loop devices and mkfs.ext4 (apt-get install e2fsprogs)")
	}
	return provider.Errorf(provider.CodeUnsupported, "this host has no cgroup freezer (cgroup v2, or the v1 freezer hierarchy), which %s needs", c)
}

// Available returns nil when sandboxes can be created here.
func (p *Provider) Available(ctx context.Context) error { p.probed(); return p.unavail }
