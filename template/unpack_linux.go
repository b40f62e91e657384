package template

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tupper-dev/tupper/provider"
)

// unpacker writes one layer's tar stream into the directory root, never following a
// symbolic link and never leaving root: every path is resolved by openat2 under root with
// symlinks refused (RESOLVE_IN_ROOT|RESOLVE_NO_SYMLINKS), and every change is made with a
// *at call relative to a directory opened that way, on a final component that is never
// followed.
type unpacker struct {
	root   int // O_PATH descriptor of the layer's fs/
	budget *budget
	// idShift is added to every owner: a user namespace's base when unpacking into a
	// sandbox's root (UnpackInto); 0 for a layer, which keeps the image's ids.
	idShift int
	// noWhiteouts refuses whiteout entries: outside a layer they mean nothing.
	noWhiteouts bool
	layer       Layer
	dirs        []dirTimes // directories whose times are set last (their entries change them)
	buf         []byte

	// The last parent directory opened, kept for the next entry in the same directory.
	cacheDir string
	cacheFD  int
}

type dirTimes struct {
	name         string
	atime, mtime unix.Timespec
}

func newUnpacker(root string, b *budget) (*unpacker, error) {
	fd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", root, err)
	}
	return &unpacker{root: fd, budget: b, cacheFD: -1, buf: make([]byte, 1<<20)}, nil
}

func (u *unpacker) close() {
	u.forget()
	unix.Close(u.root)
}

// forget drops the cached parent directory: after a removal it may be gone.
func (u *unpacker) forget() {
	if u.cacheFD >= 0 {
		unix.Close(u.cacheFD)
	}
	u.cacheDir, u.cacheFD = "", -1
}

// unpack reads a layer's tar stream to its end.
func (u *unpacker) unpack(tr *tar.Reader, abort func() error) error {
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			if provider.CodeOf(err) == provider.CodeResourceExhausted {
				return err
			}
			return provider.Errorf(provider.CodeInvalidArgument, "malformed layer tar: %w", err)
		}
		if err := abort(); err != nil {
			return err
		}
		if err := u.entry(hdr, tr); err != nil {
			return err
		}
	}
	return u.finish()
}

func (u *unpacker) entry(hdr *tar.Header, r io.Reader) error {
	switch hdr.Typeflag {
	case tar.TypeXGlobalHeader:
		return nil
	}
	name, err := cleanName(hdr.Name)
	if err != nil {
		return err
	}
	if u.budget.files--; u.budget.files < 0 {
		return provider.Errorf(provider.CodeResourceExhausted, "image has more than the import limit of %d files", u.budget.limits.MaxFiles)
	}
	if hdr.Uid < 0 || hdr.Gid < 0 || hdr.Uid > 1<<32-2 || hdr.Gid > 1<<32-2 ||
		u.idShift != 0 && (hdr.Uid >= 65536 || hdr.Gid >= 65536) {
		return bad(hdr.Name, "owner %d:%d out of range", hdr.Uid, hdr.Gid)
	}
	dir, base := path.Split(name)
	dir = strings.TrimSuffix(dir, "/")
	for _, c := range strings.Split(name, "/") {
		if strings.HasPrefix(c, whiteoutMeta) && c != whiteoutOpaque {
			return nil // AUFS's own bookkeeping, never part of the image
		}
	}
	if name == "" {
		if hdr.Typeflag != tar.TypeDir {
			return bad(hdr.Name, "the layer root is not a directory")
		}
		return u.attrs(u.root, ".", name, hdr, true)
	}
	if strings.HasPrefix(base, whiteoutPrefix) {
		if u.noWhiteouts {
			return bad(hdr.Name, "whiteout names are only for image layers")
		}
		return u.whiteout(name, dir, base)
	}
	pfd, err := u.parent(name, dir, true)
	if err != nil {
		return err
	}
	u.layer.Files++
	switch hdr.Typeflag {
	case tar.TypeReg, tar.TypeRegA: //nolint:staticcheck // old archives still say TypeRegA
		return u.file(pfd, name, base, hdr, r)
	case tar.TypeDir:
		isDir, err := u.clear(pfd, name, base, true)
		if err != nil {
			return err
		}
		if !isDir {
			if err := unix.Mkdirat(pfd, base, 0o700); err != nil {
				return u.fail(name, "mkdir", err)
			}
		}
		return u.attrs(pfd, base, name, hdr, true)
	case tar.TypeSymlink:
		if hdr.Linkname == "" || strings.IndexByte(hdr.Linkname, 0) >= 0 {
			return bad(hdr.Name, "bad symlink target %q", hdr.Linkname)
		}
		if _, err := u.clear(pfd, name, base, false); err != nil {
			return err
		}
		if err := unix.Symlinkat(hdr.Linkname, pfd, base); err != nil {
			return u.fail(name, "symlink", err)
		}
		return u.attrs(pfd, base, name, hdr, false)
	case tar.TypeLink:
		return u.hardlink(pfd, name, base, hdr)
	case tar.TypeChar, tar.TypeBlock:
		if hdr.Typeflag == tar.TypeChar && hdr.Devmajor == 0 && hdr.Devminor == 0 && !u.noWhiteouts {
			// Already an overlay whiteout, as layers exported from overlay directories have.
			if _, err := u.clear(pfd, name, base, false); err != nil {
				return err
			}
			if err := unix.Mknodat(pfd, base, unix.S_IFCHR, 0); err != nil {
				return u.fail(name, "mknod", err)
			}
			return nil
		}
		// A device node in a layer is never needed (a sandbox's /dev is its own) and would be
		// a door to a host device wherever a layer is mounted without nodev: skipped.
		u.layer.Files--
		u.layer.Skipped++
		return nil
	case tar.TypeFifo:
		if _, err := u.clear(pfd, name, base, false); err != nil {
			return err
		}
		if err := unix.Mknodat(pfd, base, unix.S_IFIFO|0o600, 0); err != nil {
			return u.fail(name, "mkfifo", err)
		}
		return u.attrs(pfd, base, name, hdr, false)
	}
	return bad(hdr.Name, "unsupported tar entry type %q", hdr.Typeflag)
}

// file writes a regular file's contents.
func (u *unpacker) file(pfd int, name, base string, hdr *tar.Header, r io.Reader) error {
	if hdr.Size < 0 {
		return bad(hdr.Name, "negative size")
	}
	if hdr.Size > u.budget.bytes {
		return u.budget.tooBig() // refused before a byte is written: huge and sparse files alike
	}
	u.budget.bytes -= hdr.Size
	if _, err := u.clear(pfd, name, base, false); err != nil {
		return err
	}
	fd, err := unix.Openat(pfd, base, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return u.fail(name, "create", err)
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	n, err := io.CopyBuffer(struct{ io.Writer }{f}, r, u.buf)
	if err != nil {
		return streamErr(fmt.Errorf("layer entry %q: %w", name, err))
	}
	if n != hdr.Size {
		return bad(hdr.Name, "%d bytes of %d", n, hdr.Size)
	}
	u.layer.Size += n
	if err := u.attrsFD(fd, name, hdr); err != nil {
		return err
	}
	return u.times(pfd, base, name, hdr)
}

func (u *unpacker) hardlink(pfd int, name, base string, hdr *tar.Header) error {
	target, err := cleanName(hdr.Linkname)
	if err != nil {
		return bad(hdr.Name, "hard link to %q: %v", hdr.Linkname, err)
	}
	if target == "" || target == name {
		return bad(hdr.Name, "hard link to %q", hdr.Linkname)
	}
	tdir, tbase := path.Split(target)
	// The target's directory is opened apart from the cache, which holds pfd.
	tfd, err := u.openDir(strings.TrimSuffix(tdir, "/"))
	if err != nil {
		return bad(hdr.Name, "hard link to %q: %v", hdr.Linkname, err)
	}
	defer func() {
		if tfd != u.root {
			unix.Close(tfd)
		}
	}()
	var st unix.Stat_t
	if err := unix.Fstatat(tfd, tbase, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return bad(hdr.Name, "hard link to %q, which is not in this layer", hdr.Linkname)
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return bad(hdr.Name, "hard link to directory %q", hdr.Linkname)
	}
	if _, err := u.clear(pfd, name, base, false); err != nil {
		return err
	}
	if err := unix.Linkat(tfd, tbase, pfd, base, 0); err != nil {
		return u.fail(name, "link", err)
	}
	return nil
}

// whiteout turns ".wh.NAME" into an overlay whiteout (a 0/0 character device) named NAME,
// and ".wh..wh..opq" into the opaque attribute of its directory.
func (u *unpacker) whiteout(name, dir, base string) error {
	pfd, err := u.parent(name, dir, true)
	if err != nil {
		return err
	}
	u.layer.Files++
	if base == whiteoutOpaque {
		fd, err := unix.Openat(pfd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return u.fail(name, "open", err)
		}
		defer unix.Close(fd)
		if err := unix.Fsetxattr(fd, opaqueXattr, []byte("y"), 0); err != nil {
			return u.fail(name, "set opaque", err)
		}
		return nil
	}
	hidden := strings.TrimPrefix(base, whiteoutPrefix)
	if hidden == "" || hidden == "." || hidden == ".." {
		return bad(name, "whiteout of nothing")
	}
	if _, err := u.clear(pfd, name, hidden, false); err != nil {
		return err
	}
	if err := unix.Mknodat(pfd, hidden, unix.S_IFCHR, 0); err != nil {
		return u.fail(name, "mknod", err)
	}
	return nil
}

// clear makes way for an entry named base in pfd: a later entry of a tar replaces an earlier
// one. A directory is kept when keepDir (a directory entry over a directory only updates
// it) and reported.
func (u *unpacker) clear(pfd int, name, base string, keepDir bool) (isDir bool, err error) {
	var st unix.Stat_t
	if err := unix.Fstatat(pfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return false, nil
		}
		return false, u.fail(name, "stat", err)
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		if keepDir {
			return true, nil
		}
		u.forget()
		if err := unix.Unlinkat(pfd, base, unix.AT_REMOVEDIR); err != nil {
			if errors.Is(err, unix.ENOTEMPTY) {
				return false, bad(name, "replaces a directory that is not empty")
			}
			return false, u.fail(name, "remove", err)
		}
		return false, nil
	}
	if err := unix.Unlinkat(pfd, base, 0); err != nil {
		return false, u.fail(name, "remove", err)
	}
	return false, nil
}

// resolveFlags resolve a path under the layer root and refuse any symbolic link on the way.
const resolveFlags = unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV

// openDir opens the directory dir ("" for the root) under the layer root without creating
// anything. The caller closes what it gets unless it is u.root.
func (u *unpacker) openDir(dir string) (int, error) {
	if dir == "" {
		return u.root, nil
	}
	return unix.Openat2(u.root, dir, &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: resolveFlags})
}

// parent returns a descriptor of directory dir for the entry name, creating missing
// directories (owned by root, mode 0755, as other unpackers make them) when create. The
// descriptor belongs to the cache: the caller does not close it.
func (u *unpacker) parent(name, dir string, create bool) (int, error) {
	if dir == "" {
		return u.root, nil
	}
	if u.cacheFD >= 0 && u.cacheDir == dir {
		return u.cacheFD, nil
	}
	u.forget()
	fd, err := u.openDir(dir)
	if errors.Is(err, unix.ENOENT) && create {
		fd, err = u.mkdirs(dir)
	}
	if err != nil {
		switch {
		case errors.Is(err, unix.ELOOP), errors.Is(err, unix.EXDEV):
			return -1, bad(name, "its path goes through a symbolic link")
		case errors.Is(err, unix.ENOTDIR):
			return -1, bad(name, "its parent is not a directory")
		case errors.Is(err, unix.ENAMETOOLONG):
			return -1, bad(name, "path too long")
		}
		return -1, u.fail(name, "open parent", err)
	}
	u.cacheDir, u.cacheFD = dir, fd
	return fd, nil
}

// mkdirs makes the missing directories of dir one component at a time, each opened like
// openDir, and returns a descriptor of the last.
func (u *unpacker) mkdirs(dir string) (int, error) {
	fd := u.root
	for _, c := range strings.Split(dir, "/") {
		next, err := unix.Openat2(fd, c, &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: resolveFlags})
		if errors.Is(err, unix.ENOENT) {
			if err = unix.Mkdirat(fd, c, 0o755); err == nil || errors.Is(err, unix.EEXIST) {
				next, err = unix.Openat2(fd, c, &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: resolveFlags})
			}
		}
		if fd != u.root {
			unix.Close(fd)
		}
		if err != nil {
			return -1, err
		}
		fd = next
	}
	return fd, nil
}

// attrs sets an entry's owner, mode, extended attributes and times (a directory's times
// later, once its entries are in).
func (u *unpacker) attrs(pfd int, base, name string, hdr *tar.Header, isDir bool) error {
	if err := unix.Fchownat(pfd, base, hdr.Uid+u.idShift, hdr.Gid+u.idShift, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return u.fail(name, "chown", err)
	}
	if hdr.Typeflag == tar.TypeSymlink {
		return u.times(pfd, base, name, hdr)
	}
	// Not a symlink (cleared or just made by us in our private directory): chmod cannot be
	// redirected. Mode after owner: chown clears the setuid and setgid bits.
	if err := unix.Fchmodat(pfd, base, uint32(hdr.Mode&0o7777), 0); err != nil {
		return u.fail(name, "chmod", err)
	}
	if xattrs := saneXattrs(hdr); len(xattrs) > 0 && isDir { // FIFOs take no user.* attributes
		fd, err := unix.Openat(pfd, base, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
		if err != nil {
			return u.fail(name, "open", err)
		}
		defer unix.Close(fd)
		for k, v := range xattrs {
			if err := unix.Fsetxattr(fd, k, []byte(v), 0); err != nil {
				return u.fail(name, "set "+k, err)
			}
		}
	}
	if isDir {
		u.dirs = append(u.dirs, dirTimes{name, timespec(hdr.AccessTime, hdr.ModTime), timespec(hdr.ModTime, hdr.ModTime)})
		return nil
	}
	return u.times(pfd, base, name, hdr)
}

// attrsFD is attrs for a regular file open as fd.
func (u *unpacker) attrsFD(fd int, name string, hdr *tar.Header) error {
	if err := unix.Fchown(fd, hdr.Uid+u.idShift, hdr.Gid+u.idShift); err != nil {
		return u.fail(name, "chown", err)
	}
	if err := unix.Fchmod(fd, uint32(hdr.Mode&0o7777)); err != nil {
		return u.fail(name, "chmod", err)
	}
	for k, v := range saneXattrs(hdr) {
		if err := unix.Fsetxattr(fd, k, []byte(v), 0); err != nil {
			return u.fail(name, "set "+k, err)
		}
	}
	return nil
}

func (u *unpacker) times(pfd int, base, name string, hdr *tar.Header) error {
	ts := []unix.Timespec{timespec(hdr.AccessTime, hdr.ModTime), timespec(hdr.ModTime, hdr.ModTime)}
	if err := unix.UtimesNanoAt(pfd, base, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return u.fail(name, "set times", err)
	}
	return nil
}

// finish sets the directories' times, deepest last-written first.
func (u *unpacker) finish() error {
	u.forget()
	for i := len(u.dirs) - 1; i >= 0; i-- {
		d := u.dirs[i]
		dir, base := path.Split(d.name)
		if d.name == "" {
			dir, base = "", "."
		}
		fd, err := u.openDir(strings.TrimSuffix(dir, "/"))
		if err != nil {
			continue // replaced by a later entry
		}
		err = unix.UtimesNanoAt(fd, base, []unix.Timespec{d.atime, d.mtime}, unix.AT_SYMLINK_NOFOLLOW)
		if fd != u.root {
			unix.Close(fd)
		}
		if err != nil && !errors.Is(err, unix.ENOENT) {
			return u.fail(d.name, "set times", err)
		}
	}
	return nil
}

func timespec(t, fallback time.Time) unix.Timespec {
	if t.IsZero() {
		t = fallback
	}
	if t.IsZero() {
		return unix.Timespec{Sec: 0}
	}
	return unix.Timespec{Sec: t.Unix(), Nsec: int64(t.Nanosecond())}
}

// fail wraps a system call's error on an entry: an error the entry provoked (a name too
// long, a bad argument) is invalid_argument; the store's own trouble (no space) is internal.
func (u *unpacker) fail(name, op string, err error) error {
	switch {
	case errors.Is(err, unix.ENOSPC), errors.Is(err, unix.EDQUOT):
		return provider.Errorf(provider.CodeResourceExhausted, "layer entry %q: %s: %w", name, op, err)
	case errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENAMETOOLONG), errors.Is(err, unix.ELOOP),
		errors.Is(err, unix.ENOTDIR), errors.Is(err, unix.EEXIST), errors.Is(err, unix.EXDEV), errors.Is(err, unix.EMLINK):
		return provider.Errorf(provider.CodeInvalidArgument, "layer entry %q: %s: %w", name, op, err)
	}
	return provider.Errorf(provider.CodeInternal, "layer entry %q: %s: %w", name, op, err)
}
