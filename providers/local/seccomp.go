//go:build linux

package local

import (
	"runtime"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// deniedSyscalls fail with EPERM in every sandbox. The profile is a deny list over an allow
// default: what a sandboxed program needs is open-ended, what it must never reach is a short
// list of kernel attack surface and host-wide controls.
var deniedSyscalls = []string{
	// loading code into the kernel, and rebooting it
	"kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
	"create_module", "query_module", "get_kernel_syms", "reboot",
	// eBPF, perf and io_uring: large kernel attack surfaces
	"bpf", "perf_event_open", "io_uring_setup", "io_uring_enter", "io_uring_register",
	// the kernel keyring is not namespaced
	"keyctl", "add_key", "request_key",
	// inspecting or changing other processes
	"ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
	// host file handles bypass the mount tree
	"open_by_handle_at", "name_to_handle_at",
	// host-wide clocks, accounting, swap, quotas, the kernel log, raw I/O ports
	"settimeofday", "stime", "clock_settime", "clock_adjtime", "adjtimex", "acct",
	"swapon", "swapoff", "quotactl", "quotactl_fd", "syslog", "iopl", "ioperm",
	"lookup_dcookie", "uselib", "nfsservctl", "vm86", "vm86old", "_sysctl",
	// userfaultfd makes kernel races easy to win
	"userfaultfd",
	// changing the root or the mount tree from inside (the agent's own hiding of its files
	// happens through unshare(CLONE_NEWNS) and mount, which stay allowed for it; commands
	// run without CAP_SYS_ADMIN, so those calls fail for them)
	"pivot_root", "fsopen", "fsconfig", "fsmount", "fspick", "open_tree", "move_mount",
	"mount_setattr",
}

// seccompProfile returns the default profile: deniedSyscalls, no new user namespaces
// (unshare or clone with CLONE_NEWUSER), no vsock sockets, and clone3 answered with ENOSYS
// so libc falls back to clone, whose flags a filter can inspect.
//
// vsock (AF_VSOCK) talks to the hypervisor and to other VMs on it, and is not scoped by the
// network namespace: without this rule a sandbox with network "none" could still reach
// whatever listens on the host's or the hypervisor's vsock ports. On the 32-bit x86 ABI,
// sockets are also made through socketcall(2), whose arguments sit in memory a filter cannot
// read; libseccomp turns this rule into a refusal of every socketcall(SYS_SOCKET) there, so
// a 32-bit program must use the direct socket(2) call (Linux 4.3 on) to make any socket.
//
// runsc applies the profile inside its sentry (--oci-seccomp) but answers every denied call
// with EPERM, whatever errnoRet says; its clone3 is ENOSYS anyway, so the clone3 rule is
// left out there (EPERM would stop libc creating threads).
func seccompProfile(runtime string) *specs.LinuxSeccomp {
	eperm := uint(unix.EPERM)
	enosys := uint(unix.ENOSYS)
	s := &specs.LinuxSeccomp{
		DefaultAction: specs.ActAllow,
		Architectures: seccompArches(),
		Syscalls: []specs.LinuxSyscall{
			{Names: deniedSyscalls, Action: specs.ActErrno, ErrnoRet: &eperm},
			{
				Names:    []string{"unshare"},
				Action:   specs.ActErrno,
				ErrnoRet: &eperm,
				Args:     []specs.LinuxSeccompArg{{Index: 0, Value: unix.CLONE_NEWUSER, ValueTwo: unix.CLONE_NEWUSER, Op: specs.OpMaskedEqual}},
			},
			{
				Names:    []string{"socket"},
				Action:   specs.ActErrno,
				ErrnoRet: &eperm,
				Args:     []specs.LinuxSeccompArg{{Index: 0, Value: unix.AF_VSOCK, Op: specs.OpEqualTo}},
			},
			{
				// On x86-64 clone's flags are the first argument.
				Names:    []string{"clone"},
				Action:   specs.ActErrno,
				ErrnoRet: &eperm,
				Args:     []specs.LinuxSeccompArg{{Index: 0, Value: unix.CLONE_NEWUSER, ValueTwo: unix.CLONE_NEWUSER, Op: specs.OpMaskedEqual}},
			},
		},
	}
	if runtime != RuntimeRunsc {
		s.Syscalls = append(s.Syscalls, specs.LinuxSyscall{Names: []string{"clone3"}, Action: specs.ActErrno, ErrnoRet: &enosys})
	}
	return s
}

// seccompArches are the native architecture and its compatibility modes, so the filter
// cannot be sidestepped with 32-bit system calls.
func seccompArches() []specs.Arch {
	switch runtime.GOARCH {
	case "amd64":
		return []specs.Arch{specs.ArchX86_64, specs.ArchX86, specs.ArchX32}
	case "arm64":
		return []specs.Arch{specs.ArchAARCH64, specs.ArchARM}
	}
	return nil
}
