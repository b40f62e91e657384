//go:build linux

package local

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/tupper-dev/tupper/providers/local/internal/hostbin"
)

// A template's layers hold files with the image's own owners (root-owned /usr is host uid
// 0), shared by every sandbox. A runc or crun sandbox runs in a user namespace that maps
// 0..65535 inside to UIDBase.. on the host, where host uid 0 has no name: bound as they
// are, its /usr would be nobody's and apt-get, as root inside, could not replace a file in
// it. So each lower layer is mounted idmapped (open_tree(OPEN_TREE_CLONE) and
// mount_setattr(MOUNT_ATTR_IDMAP)) with the sandbox's own mapping: through that mount, a
// file of host uid N is UIDBase+N's, which the sandbox sees as N. The layer on disk is
// never changed and serves every sandbox, whatever its range. An idmapped mount takes its
// mapping from a user namespace: the provider's usernsCache makes one per range (a short-lived process in a
// new user namespace with the mapping; its /proc/PID/ns/user, opened, keeps the namespace
// after the process is gone) and keeps a few open, since ranges are leased again.

// usernsCacheSize bounds the user namespaces kept open, one file descriptor each.
const usernsCacheSize = 64

// usernsCache holds open user-namespace descriptors by the host uid of root inside; each
// Provider has one, which Close empties.
type usernsCache struct {
	mu    sync.Mutex
	fds   map[uint32]int
	order []uint32 // oldest first
}

func newUsernsCache() *usernsCache { return &usernsCache{fds: map[uint32]int{}} }

// close closes every descriptor the cache holds; it stays usable.
func (c *usernsCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for base, fd := range c.fds {
		unix.Close(fd)
		delete(c.fds, base)
	}
	c.order = nil
}

// fd returns a descriptor of a user namespace mapping 0..idMapSize-1 to base.. (uids and
// gids), the caller's to close.
func (c *usernsCache) fd(base uint32) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if fd, ok := c.fds[base]; ok {
		return unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	}
	fd, err := newUserns(base)
	if err != nil {
		return -1, err
	}
	if len(c.order) >= usernsCacheSize {
		old := c.order[0]
		c.order = c.order[1:]
		unix.Close(c.fds[old])
		delete(c.fds, old)
	}
	c.fds[base] = fd
	c.order = append(c.order, base)
	return unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
}

// newUserns makes a user namespace with the mapping and returns a descriptor of it: the
// host's unshare(1) makes the namespace and runs sh there, which says it is ready and waits;
// the provider writes the mappings (as host root it may), opens the namespace and lets sh
// end. Not a Go child cloned with CLONE_NEWUSER: Go cannot vfork such a child, and copying
// the page tables of a large process (a server, a test binary) took 15-20 ms a create.
func newUserns(base uint32) (int, error) {
	unshare, err := hostbin.Find("unshare")
	if err != nil {
		return -1, fmt.Errorf("a user namespace for the idmapped layers: %w (util-linux)", err)
	}
	sh, err := hostbin.Find("sh")
	if err != nil {
		return -1, err
	}
	cmd := exec.Command(unshare, "--user", "--", sh, "-c", "echo; read -r x")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return -1, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return -1, err
	}
	if err := cmd.Start(); err != nil {
		return -1, fmt.Errorf("a user namespace for the idmapped layers: %w", err)
	}
	defer func() {
		stdin.Close()
		cmd.Process.Kill()
		cmd.Wait()
	}()
	if _, err := stdout.Read(make([]byte, 1)); err != nil {
		return -1, fmt.Errorf("a user namespace for the idmapped layers: unshare --user failed: %w", err)
	}
	proc := "/proc/" + strconv.Itoa(cmd.Process.Pid)
	m := fmt.Sprintf("0 %d %d\n", base, idMapSize)
	for _, f := range []string{"uid_map", "gid_map"} {
		if err := os.WriteFile(proc+"/"+f, []byte(m), 0); err != nil {
			return -1, fmt.Errorf("map the idmap user namespace: %w", err)
		}
	}
	fd, err := unix.Open(proc+"/ns/user", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open the idmap user namespace: %w", err)
	}
	return fd, nil
}

// mountIdmapped mounts a read-only, nosuid, nodev view of the directory src at target
// (which must exist), idmapped through the user namespace usernsFD, or plain when
// usernsFD is negative. It is made detached and attached only once complete, so nothing
// ever sees it writable or unmapped.
func mountIdmapped(src, target string, usernsFD int) error {
	return mountView(src, target, usernsFD, true)
}

// mountView is mountIdmapped, writable unless readOnly (a volume's view).
func mountView(src, target string, usernsFD int, readOnly bool) error {
	tree, err := unix.OpenTree(unix.AT_FDCWD, src, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return fmt.Errorf("clone the mount of %s: %w", src, err)
	}
	defer unix.Close(tree)
	attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}
	if readOnly {
		attr.Attr_set |= unix.MOUNT_ATTR_RDONLY
	}
	if usernsFD >= 0 {
		attr.Attr_set |= unix.MOUNT_ATTR_IDMAP
		attr.Userns_fd = uint64(usernsFD)
	}
	if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH, attr); err != nil {
		if errors.Is(err, unix.EINVAL) && usernsFD >= 0 {
			return fmt.Errorf("idmap %s (its file system must support idmapped mounts, Linux 5.12 or later): %w", src, err)
		}
		return fmt.Errorf("set the attributes of %s: %w", src, err)
	}
	if err := unix.MoveMount(tree, "", unix.AT_FDCWD, target, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("attach the view of %s: %w", src, err)
	}
	return nil
}
