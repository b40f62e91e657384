//go:build linux

package agent

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/tupper-dev/tupper/internal/osthread"
)

// spawner starts every command from one OS thread whose mount namespace
// hides Config.HidePaths and whose capabilities lack CAP_SYS_ADMIN, and
// which is in the pids cgroup of Config.CommandCgroup.
//
// Linux keeps the mount namespace (and the capability sets) per thread, and
// syscall.ForkExec clones the calling thread, so a child forked from that
// thread inherits both while the agent's other threads keep theirs. So it
// is with cgroup v1, which places threads one by one: a child is charged to
// its parent thread's pids cgroup. The
// thread (internal/osthread: locked for good, never the main thread, never
// the parent of the runtime's threads) is prepared once (newSpawner) instead
// of re-executing a helper for every command, which costs a Go runtime
// start-up each time.
type spawner struct {
	t *osthread.Thread

	// shared is set when the covers turned out to be visible to the agent's
	// other threads too: the runtime has no per-thread mount namespaces
	// (gVisor runsc up to at least 20221219 accepts unshare(CLONE_NEWNS) as
	// a no-op). The paths are then hidden sandbox-wide, the agent included.
	shared bool
}

var errSpawnerClosed = errors.New("agent is shutting down")

// newSpawner prepares the thread: moved into cgroup's pids cgroup when cgroup
// is not nil; and with hide, a new mount namespace where every mount is
// private (nothing propagates back to the agent), each existing path of hide
// covered, CAP_SYS_ADMIN dropped so commands cannot unmount the covers. It
// fails when any of that fails; the agent then refuses to start rather than
// run commands that see what they must not, or outside their limit.
func newSpawner(hide []string, cgroup *os.File) (*spawner, error) {
	// What each path is before the covers, to tell afterwards whether the
	// agent's own view changed (no per-thread namespaces).
	before := make([]os.FileInfo, len(hide))
	for i, p := range hide {
		before[i], _ = os.Lstat(p)
	}
	t, err := osthread.Start(func() error {
		if cgroup != nil {
			if err := joinCgroup(cgroup); err != nil {
				return err
			}
		}
		if len(hide) == 0 {
			return nil
		}
		return isolateThread(hide)
	})
	if err != nil {
		return nil, err
	}
	s := &spawner{t: t}
	for i, p := range hide {
		after, _ := os.Lstat(p)
		if !sameFile(before[i], after) {
			s.shared = true
		}
	}
	return s, nil
}

func sameFile(a, b os.FileInfo) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return os.SameFile(a, b)
}

// forkExec is syscall.ForkExec on the spawner's thread.
func (s *spawner) forkExec(prog string, argv []string, attr *syscall.ProcAttr) (pid int, err error) {
	if s.t.Do(func() { pid, err = syscall.ForkExec(prog, argv, attr) }) != nil {
		return 0, errSpawnerClosed
	}
	return pid, err
}

// close ends the thread.
func (s *spawner) close() { s.t.Close() }

// joinCgroup moves the calling thread into the cgroup v1 whose tasks file f is. f must be
// on a cgroup v1 file system: a descriptor that is something else (a config naming the wrong
// one) is refused, not written to.
func joinCgroup(f *os.File) error {
	var st unix.Statfs_t
	if err := unix.Fstatfs(int(f.Fd()), &st); err != nil {
		return fmt.Errorf("agent: command cgroup: %w", err)
	}
	if st.Type != unix.CGROUP_SUPER_MAGIC {
		return fmt.Errorf("agent: command cgroup: descriptor %d is not a cgroup v1 file", f.Fd())
	}
	if _, err := unix.Write(int(f.Fd()), []byte(strconv.Itoa(unix.Gettid()))); err != nil {
		return fmt.Errorf("agent: command cgroup: joining it: %w", err)
	}
	return nil
}

// isolateThread runs on the locked thread.
func isolateThread(hide []string) error {
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("agent: hide paths: unshare mount namespace: %w", err)
	}
	// gVisor answers EINVAL here (it has no mount propagation); newSpawner
	// notices if the covers leak and says so.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil && err != unix.EINVAL {
		return fmt.Errorf("agent: hide paths: make mounts private: %w", err)
	}
	for _, p := range hide {
		if err := hidePath(p); err != nil {
			return fmt.Errorf("agent: hide %s: %w", p, err)
		}
	}
	if err := dropCap(unix.CAP_SYS_ADMIN); err != nil {
		return fmt.Errorf("agent: hide paths: drop CAP_SYS_ADMIN for commands: %w", err)
	}
	return nil
}

// hidePath covers p with an empty read-only tmpfs (a directory) or a bind
// mount of /dev/null (anything else); a missing p is left alone.
func hidePath(p string) error {
	fi, err := os.Lstat(p)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.IsDir() {
		const flags = unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC
		err := unix.Mount("tmpfs", p, "tmpfs", flags, "size=4k,nr_inodes=1,mode=0555")
		if err == unix.EINVAL { // gVisor's tmpfs has no nr_inodes
			err = unix.Mount("tmpfs", p, "tmpfs", flags, "size=4k,mode=0555")
		}
		return err
	}
	if err := unix.Mount("/dev/null", p, "", unix.MS_BIND, ""); err != nil {
		return err
	}
	// gVisor cannot remount a bind mount (EINVAL); the cover is /dev/null
	// anyway, where writes go nowhere.
	err = unix.Mount("", p, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NOEXEC, "")
	if err == unix.EINVAL {
		err = nil
	}
	return err
}

// dropCap removes c from the calling thread's bounding, effective,
// permitted and inheritable sets (and so from its ambient set), so nothing
// this thread starts can ever hold it, root or not.
func dropCap(c uintptr) error {
	if in, err := unix.PrctlRetInt(unix.PR_CAPBSET_READ, c, 0, 0, 0); err == nil && in == 1 {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, c, 0, 0, 0); err != nil {
			return fmt.Errorf("bounding set (needs CAP_SETPCAP): %w", err)
		}
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3} // Pid 0: this thread
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	bit := uint32(1) << (c % 32)
	d := &data[c/32]
	d.Effective &^= bit
	d.Permitted &^= bit
	d.Inheritable &^= bit
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	return nil
}
