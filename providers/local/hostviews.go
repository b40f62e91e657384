package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// The host directories a template binds into every sandbox (/usr, /bin, …) are bound from
// read-only views of them, made once per boot under hostViewsDir: a recursive bind of each,
// made read-only, nosuid and nodev on the host with mount_setattr(AT_RECURSIVE). The spec's
// own "ro" option is then not the only thing between a sandbox and the host's files. It was
// not enough under gVisor: runsc's gofer, which opens host files on the sentry's behalf, took
// open(O_TRUNC) of a file on the read-only /usr from sandbox code and truncated the host's
// file, and it held files open for writing that the host then could not execute (ETXTBSY).
// On a read-only mount the host kernel refuses every such open, whoever asks.
const hostViewsDir = "/run/tupper/host-ro"

// hostViews makes the read-only views (once; later calls check and return) and returns the
// directory holding them, each under the host directory's name. Concurrent callers in other
// processes wait on a lock.
func hostViews(ctx context.Context) (string, error) {
	if hostViewsReady() {
		return hostViewsDir, nil
	}
	// A user namespace's root (runc and crun bind the views from inside it) must get
	// through /run/tupper to them; it lists nothing there.
	if err := os.MkdirAll(hostViewsDir, 0o711); err != nil {
		return "", err
	}
	for _, d := range []string{filepath.Dir(hostViewsDir), hostViewsDir} {
		if err := os.Chmod(d, 0o711); err != nil {
			return "", err
		}
	}
	lk, err := lockFile(ctx, hostViewsDir+".lock")
	if err != nil {
		return "", err
	}
	defer lk.unlock()
	for _, d := range hostDirs {
		src := "/" + d
		if fi, err := os.Lstat(src); err != nil || !fi.IsDir() {
			continue
		}
		view := filepath.Join(hostViewsDir, d)
		if sameDir(view, src) {
			continue
		}
		if err := os.MkdirAll(view, 0o755); err != nil {
			return "", err
		}
		if err := unix.Mount(src, view, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return "", fmt.Errorf("bind %s read-only: %w", src, err)
		}
		attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}
		if err := unix.MountSetattr(unix.AT_FDCWD, view, unix.AT_RECURSIVE, attr); err != nil {
			unix.Unmount(view, unix.MNT_DETACH)
			return "", fmt.Errorf("make the view of %s read-only (mount_setattr needs Linux 5.12): %w", src, err)
		}
	}
	if !hostViewsReady() {
		return "", errors.New("the read-only views of the host directories did not appear")
	}
	return hostViewsDir, nil
}

// hostViewsReady reports whether every host directory has its view mounted: the view's root
// is the host directory's own (same device and inode) and its mount is read-only.
func hostViewsReady() bool {
	for _, d := range hostDirs {
		src := "/" + d
		if fi, err := os.Lstat(src); err != nil || !fi.IsDir() {
			continue
		}
		view := filepath.Join(hostViewsDir, d)
		if !sameDir(view, src) {
			return false
		}
		var st unix.Statfs_t
		if unix.Statfs(view, &st) != nil || st.Flags&unix.ST_RDONLY == 0 {
			return false
		}
	}
	return true
}

func sameDir(a, b string) bool {
	fa, err := os.Stat(a)
	if err != nil {
		return false
	}
	fb, err := os.Stat(b)
	return err == nil && os.SameFile(fa, fb)
}
