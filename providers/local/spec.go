//go:build linux

package local

import (
	"path/filepath"
	"slices"
	"strconv"
	"sync"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Paths inside the sandbox.
const (
	agentDir        = "/.tupper"
	agentBinary     = "/.tupper/bin/tupper"
	agentRunDir     = "/.tupper/run"
	agentSocket     = "/.tupper/run/agent.sock"
	agentConfigPath = "/.tupper/run/config.json"
	defaultWorkdir  = "/workspace"
	sandboxHostname = "sandbox"
)

// idMapSize is the number of ids in a sandbox's user namespace: 0..65535 inside.
const idMapSize = 65536

// bundleSpec is what buildSpec needs about one sandbox.
type bundleSpec struct {
	id        string
	runtime   string
	rootfs    string
	agentPath string // the host binary bound at agentBinary
	runDir    string // the host directory bound at agentRunDir
	tmpDir    string // runsc: the host-made directory bound at /tmp
	userns    bool
	uidBase   uint32
	netnsPath string // "": a new network namespace with loopback only
	cpu       float64
	memoryMB  int
	limitSwap bool // swapAccounted: limit memory+swap to the memory limit
	pids      int64
	// commandCgroup: commands run in a pids cgroup of their own limited to pids, the
	// sandbox's has agentPidsReserve more, and the agent gets the cgroup's tasks file
	// (commandcgroup.go).
	commandCgroup bool
	volumes       []specs.Mount // binds of the sandbox's volumes' views, last
}

// defaultCaps is the capability set of the sandbox's root: Docker's default set without
// CAP_MKNOD, CAP_NET_RAW (no raw sockets), CAP_AUDIT_WRITE and CAP_SETFCAP, plus
// CAP_SYS_ADMIN, which the agent needs to run each command in a child mount namespace that
// hides its own binary and socket. The agent's exec path drops it for commands.
var defaultCaps = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_SETGID", "CAP_SETUID",
	"CAP_SETPCAP", "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_KILL", "CAP_SYS_ADMIN",
}

// maskedPaths and readonlyPaths are runc's and Docker's defaults.
var (
	maskedPaths = []string{
		"/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
		"/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi",
		"/sys/firmware", "/sys/devices/virtual/powercap",
	}
	readonlyPaths = []string{
		"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger",
	}
)

// ociVersion is the runtime spec version a bundle says it is: runc 1.1, crun 1.8 and runsc
// 2022 speak 1.0.2; the types are a superset.
const ociVersion = "1.0.2"

// buildSpec returns the OCI runtime spec of a sandbox whose PID 1 is the agent.
func buildSpec(b bundleSpec) *specs.Spec {
	caps := append([]string(nil), defaultCaps...)
	if !hideAgent(b.runtime) {
		caps = slices.DeleteFunc(caps, func(c string) bool { return c == "CAP_SYS_ADMIN" })
	}
	process := &specs.Process{
		User: specs.User{UID: 0, GID: 0},
		Args: []string{agentBinary, "agent", "--listen", "unix:" + agentSocket, "--config", agentConfigPath},
		Env: []string{
			"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
			"HOME=/root",
			"LANG=C.UTF-8",
		},
		Cwd: "/",
		// Under runc and crun with a user namespace, set-uid programs work inside (sudo), as
		// in a Docker container: they raise a process to the sandbox's own root at most, an
		// unprivileged uid of the host (mountRootfs mounts the root without nosuid there).
		// Without a user namespace (Config.NoUserNS) root inside is the host's, and nothing
		// may raise a process to it; under runsc the root is nosuid on the host (files made
		// inside are host root's), so no_new_privs costs nothing.
		NoNewPrivileges: !b.userns || b.runtime == RuntimeRunsc,
		Capabilities: &specs.LinuxCapabilities{
			Bounding:  caps,
			Effective: caps,
			Permitted: caps,
		},
		// RLIMIT_NOFILE is inherited from the host (a user namespace cannot raise it).
	}
	if b.commandCgroup {
		process.Args = append(process.Args, "--command-cgroup-fd", strconv.Itoa(commandCgroupFD))
	}

	mounts := []specs.Mount{
		{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}},
		{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
		{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"}},
		{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
		{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue", Options: []string{"nosuid", "noexec", "nodev"}},
		{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
		{Destination: "/sys/fs/cgroup", Type: "cgroup", Source: "cgroup", Options: []string{"nosuid", "noexec", "nodev", "relatime", "ro"}},
	}
	if b.runtime == RuntimeRunsc {
		// runsc puts a tmpfs in sentry memory on an empty /tmp unless /tmp is a mount of
		// the spec; keep /tmp on the bounded writable layer, as under runc.
		mounts = append(mounts, specs.Mount{Destination: "/tmp", Type: "bind", Source: b.tmpDir, Options: []string{"rbind", "rw", "nosuid", "nodev"}})
	}
	mounts = append(mounts,
		specs.Mount{Destination: agentBinary, Type: "bind", Source: b.agentPath, Options: []string{"bind", "ro", "nosuid", "nodev"}},
		specs.Mount{Destination: agentRunDir, Type: "bind", Source: b.runDir, Options: []string{"bind", "rw", "nosuid", "nodev", "noexec"}},
	)
	mounts = append(mounts, b.volumes...)

	namespaces := []specs.LinuxNamespace{
		{Type: specs.PIDNamespace}, {Type: specs.IPCNamespace}, {Type: specs.UTSNamespace},
		{Type: specs.MountNamespace}, {Type: specs.NetworkNamespace, Path: b.netnsPath},
	}
	linux := &specs.Linux{
		Namespaces:    namespaces,
		CgroupsPath:   "/tupper/" + b.id,
		MaskedPaths:   maskedPaths,
		ReadonlyPaths: readonlyPaths,
		Seccomp:       seccompProfile(b.runtime),
		Resources:     resources(b),
	}
	if b.userns {
		linux.Namespaces = append(linux.Namespaces, specs.LinuxNamespace{Type: specs.UserNamespace})
		linux.UIDMappings = []specs.LinuxIDMapping{{ContainerID: 0, HostID: b.uidBase, Size: idMapSize}}
		linux.GIDMappings = []specs.LinuxIDMapping{{ContainerID: 0, HostID: b.uidBase, Size: idMapSize}}
	}
	return &specs.Spec{
		Version:  ociVersion,
		Process:  process,
		Root:     &specs.Root{Path: b.rootfs},
		Hostname: sandboxHostname,
		Mounts:   mounts,
		Linux:    linux,
	}
}

// resources are the sandbox's cgroup limits. runc writes them to cgroup v1 controllers on a
// v1 or hybrid host and to cgroup v2 on a unified one; runsc applies them to its sandbox.
//
// Where the host accounts swap, memory plus swap is limited to the memory limit: no swap at
// all. Otherwise a sandbox's anonymous memory, and its disk (a tmpfs, charged to the
// sandbox's memory cgroup), would spill into the host's swap past the limit. The OCI value
// is v1's memory+swap total; runc writes memory.swap.max = Swap - Limit = 0 on cgroup v2.
func resources(b bundleSpec) *specs.LinuxResources {
	mem := int64(b.memoryMB) << 20
	period := uint64(100000)
	quota := int64(b.cpu * float64(period))
	pids := b.pids
	if b.commandCgroup && pids > 0 {
		pids += agentPidsReserve
	}
	memory := &specs.LinuxMemory{Limit: &mem}
	if b.limitSwap {
		memory.Swap = &mem
	}
	return &specs.LinuxResources{
		Devices: []specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}},
		Memory:  memory,
		CPU:     &specs.LinuxCPU{Quota: &quota, Period: &period},
		Pids:    &specs.LinuxPids{Limit: &pids},
	}
}

// swapAccounted reports whether the host's memory cgroup accounts swap, so that a swap limit
// can be set: memory.memsw.* on cgroup v1 (absent with swapaccount=0, or a kernel without
// swap accounting), memory.swap.max on cgroup v2. runc fails to create a container whose
// swap limit it cannot write, so without accounting none is asked for (and then the kernel
// cannot tell a sandbox's swap from anyone's).
var swapAccounted = sync.OnceValue(func() bool {
	if fileExists("/sys/fs/cgroup/memory/memory.limit_in_bytes") {
		return fileExists("/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes")
	}
	// cgroup v2: the root has no memory.swap.max, its children do.
	m, _ := filepath.Glob("/sys/fs/cgroup/*/memory.swap.max")
	return len(m) > 0
})

func bundleConfigPath(dir string) string { return filepath.Join(dir, "config.json") }
