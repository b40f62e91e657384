//go:build linux

package local

import (
	"slices"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// These run anywhere: no root, no runtime.

func TestNewID(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		id := newID()
		if !validID(id) || seen[id] {
			t.Fatalf("bad or repeated id %q", id)
		}
		seen[id] = true
	}
	for _, bad := range []string{"", "ABCDEFGHIJKLMNOPQRST", "../../../../etc/pass", "abc", "abcdefghij/klmnopqrs", "abcdefghij-klmnopqrs", "abcdefghijklmnopqrst0", "abcdefghijklmnopqrs\x00", "abcdefghijklmnopqrs\xe9"} {
		if validID(bad) {
			t.Errorf("validID(%q)", bad)
		}
	}
}

func TestSpecRunc(t *testing.T) {
	s := buildSpec(bundleSpec{id: "a", runtime: RuntimeRunc, rootfs: "/r", agentPath: "/bin/tupper", runDir: "/run",
		userns: true, uidBase: 0x70000000, cpu: 1.5, memoryMB: 512, pids: 100})
	// Set-uid programs (sudo) work only where a user namespace bounds them.
	if s.Process.NoNewPrivileges {
		t.Error("no_new_privs set with a user namespace: sudo would not work inside")
	}
	for _, b := range []bundleSpec{{runtime: RuntimeRunc}, {runtime: RuntimeCrun}, {runtime: RuntimeRunsc, userns: true}, {runtime: RuntimeRunsc}} {
		if !buildSpec(b).Process.NoNewPrivileges {
			t.Errorf("no_new_privs unset for %s with userns %v", b.runtime, b.userns)
		}
	}
	if slices.Contains(s.Process.Capabilities.Bounding, "CAP_NET_RAW") || slices.Contains(s.Process.Capabilities.Bounding, "CAP_SYS_PTRACE") {
		t.Errorf("capabilities %v", s.Process.Capabilities.Bounding)
	}
	if len(s.Linux.UIDMappings) != 1 || s.Linux.UIDMappings[0].HostID != 0x70000000 || s.Linux.UIDMappings[0].ContainerID != 0 {
		t.Errorf("uid mappings %+v", s.Linux.UIDMappings)
	}
	r := s.Linux.Resources
	if *r.Memory.Limit != 512<<20 || *r.CPU.Quota != 150000 || *r.Pids.Limit != 100 {
		t.Errorf("resources %+v", r)
	}
	// Swap is limited (memory+swap = memory) only where the host accounts it.
	if r.Memory.Swap != nil {
		t.Errorf("a swap limit without limitSwap: %d", *r.Memory.Swap)
	}
	if sw := resources(bundleSpec{memoryMB: 512, limitSwap: true}).Memory.Swap; sw == nil || *sw != 512<<20 {
		t.Errorf("swap limit with limitSwap: %v, want %d", sw, 512<<20)
	}
	for _, m := range s.Mounts {
		if m.Destination == agentBinary && !slices.Contains(m.Options, "ro") {
			t.Errorf("agent binary mount is writable: %v", m.Options)
		}
		if m.Destination == "/usr" && !slices.Contains(m.Options, "ro") {
			t.Errorf("/usr mount is writable: %v", m.Options)
		}
	}
	if !slices.Contains(s.Linux.MaskedPaths, "/proc/kcore") || !slices.Contains(s.Linux.ReadonlyPaths, "/proc/sys") {
		t.Error("masked or read-only paths missing")
	}
	if !denies(s.Linux.Seccomp, "ptrace") || !denies(s.Linux.Seccomp, "bpf") || !denies(s.Linux.Seccomp, "init_module") || !denies(s.Linux.Seccomp, "clone3") {
		t.Error("seccomp profile misses a denied call")
	}
}

func TestSpecRunsc(t *testing.T) {
	s := buildSpec(bundleSpec{id: "a", runtime: RuntimeRunsc, rootfs: "/r", agentPath: "/bin/tupper", runDir: "/run", tmpDir: "/d/tmp", cpu: 1, memoryMB: 512, pids: 100})
	// The agent (PID 1) keeps CAP_SYS_ADMIN to cover its socket and binary, and drops it for
	// every command it starts; the security suite checks commands cannot mount.
	if !slices.Contains(s.Process.Capabilities.Bounding, "CAP_SYS_ADMIN") {
		t.Error("the runsc agent lacks CAP_SYS_ADMIN, which hiding its socket needs")
	}
	if denies(s.Linux.Seccomp, "clone3") {
		t.Error("clone3 denied under runsc (gVisor would answer EPERM and break threads)")
	}
	// /tmp is the host-made directory, never a path inside the rootfs (sandbox code could
	// have made that a symlink).
	if !slices.ContainsFunc(s.Mounts, func(m specs.Mount) bool { return m.Destination == "/tmp" && m.Source == "/d/tmp" }) {
		t.Error("/tmp is not bound from the host-made directory under runsc")
	}
}

func denies(s *specs.LinuxSeccomp, name string) bool {
	for _, r := range s.Syscalls {
		if r.Action == specs.ActErrno && len(r.Args) == 0 && slices.Contains(r.Names, name) {
			return true
		}
	}
	return false
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []Config{{Runtime: "kata"}, {Home: "relative"}, {PidsLimit: -1}} {
		if c.Validate() == nil {
			t.Errorf("%+v validated", c)
		}
	}
	if err := (Config{}).Validate(); err != nil {
		t.Error(err)
	}
}
