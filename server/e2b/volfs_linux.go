package e2b

import (
	"errors"
	"io"
	"os"
	"path"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tupper-dev/tupper/provider"
)

// A volume's files are hostile input: sandboxes write them. Every path of E2B's volume
// content API is resolved below the volume's root with openat2 and RESOLVE_IN_ROOT,
// RESOLVE_NO_SYMLINKS, RESOLVE_NO_MAGICLINKS and RESOLVE_NO_XDEV: a symbolic link anywhere in
// a path is refused (never followed, whatever it points to), ".." stops at the root, and
// nothing below another mount is reached. A symbolic link itself is listed and described
// (its target as text), never opened.

const volResolve = unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV

// Bounds of what one request may make the server do.
const (
	volMaxEntries = 10000 // entries of one listing
	volMaxDepth   = 64    // depth of a listing or a removal
)

// volErr gives a file system error its code.
func volErr(p string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENOTDIR):
		return provider.Errorf(provider.CodeNotFound, "path %s not found", p)
	case errors.Is(err, unix.EEXIST), errors.Is(err, unix.ENOTEMPTY):
		return provider.Errorf(provider.CodeConflict, "path %s exists", p)
	case errors.Is(err, unix.ELOOP), errors.Is(err, unix.EXDEV):
		return provider.Errorf(provider.CodeInvalidArgument, "path %s: a symbolic link is not followed", p)
	case errors.Is(err, unix.ENOSPC), errors.Is(err, unix.EDQUOT):
		return provider.Errorf(provider.CodeResourceExhausted, "the volume is full")
	case errors.Is(err, unix.EISDIR):
		return provider.Errorf(provider.CodeInvalidArgument, "path %s is a directory", p)
	}
	return provider.Wrap(err, provider.CodeInternal, "volume")
}

// volOpen opens rel below root (openat2, see above).
func volOpen(root *os.File, rel string, flags int, mode uint32) (int, error) {
	return unix.Openat2(int(root.Fd()), rel, &unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC), Mode: uint64(mode), Resolve: volResolve})
}

// volParent opens the directory holding rel and returns it with rel's last name.
func volParent(root *os.File, rel string) (int, string, error) {
	if rel == "." {
		return -1, "", unix.EINVAL
	}
	fd, err := volOpen(root, path.Dir(rel), unix.O_PATH|unix.O_DIRECTORY, 0)
	return fd, path.Base(rel), err
}

// volStatAt describes name in directory dirfd without following it; rel is its path in
// the volume.
func volStatAt(dirfd int, name, rel string) (volEntry, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW|unix.AT_EMPTY_PATH); err != nil {
		return volEntry{}, err
	}
	e := volEntry{
		Name: path.Base("/" + rel), Path: "/" + strings.TrimPrefix(rel, "."), Size: st.Size,
		Mode: st.Mode & 0o7777, UID: st.Uid, GID: st.Gid,
		Atime: time.Unix(st.Atim.Unix()).UTC(), Mtime: time.Unix(st.Mtim.Unix()).UTC(), Ctime: time.Unix(st.Ctim.Unix()).UTC(),
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		e.Type = "file"
	case unix.S_IFDIR:
		e.Type = "directory"
	case unix.S_IFLNK:
		e.Type = "symlink"
		buf := make([]byte, 4096)
		if n, err := unix.Readlinkat(dirfd, name, buf); err == nil {
			e.Target = string(buf[:n])
		}
	default:
		e.Type = "unknown"
	}
	return e, nil
}

// volStat describes rel without following it.
func volStat(root *os.File, rel string) (volEntry, error) {
	if rel == "." {
		return volStatAt(int(root.Fd()), "", rel)
	}
	dfd, name, err := volParent(root, rel)
	if err != nil {
		return volEntry{}, err
	}
	defer unix.Close(dfd)
	return volStatAt(dfd, name, rel)
}

// volList lists directory rel to depth levels (1: its entries).
func volList(root *os.File, rel string, depth int) ([]volEntry, error) {
	if depth < 1 {
		depth = 1
	}
	depth = min(depth, volMaxDepth)
	fd, err := volOpen(root, rel, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, err
	}
	out := []volEntry{}
	err = volListAt(fd, rel, depth, &out)
	return out, err
}

func volListAt(fd int, rel string, depth int, out *[]volEntry) error {
	d := os.NewFile(uintptr(fd), rel)
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return err
	}
	for _, n := range names {
		if len(*out) >= volMaxEntries {
			return provider.Errorf(provider.CodeResourceExhausted, "more than %d entries: list a deeper directory", volMaxEntries)
		}
		child := path.Join(rel, n)
		e, err := volStatAt(fd, n, child)
		if err != nil {
			continue // gone meanwhile
		}
		*out = append(*out, e)
		if e.Type == "directory" && depth > 1 {
			cfd, err := unix.Openat2(fd, n, &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: volResolve})
			if err != nil {
				continue
			}
			if err := volListAt(cfd, child, depth-1, out); err != nil {
				return err
			}
		}
	}
	return nil
}

// volOwn sets the owner and mode of fd (an O_PATH descriptor is not enough for the mode: the
// caller opens what it changes).
func volOwn(fd int, uid, gid *uint32, mode *uint32) error {
	if uid != nil || gid != nil {
		u, g := -1, -1
		if uid != nil {
			u = int(*uid)
		}
		if gid != nil {
			g = int(*gid)
		}
		if err := unix.Fchownat(fd, "", u, g, unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return err
		}
	}
	if mode != nil {
		return unix.Fchmod(fd, *mode&0o7777)
	}
	return nil
}

// volMkdir makes directory rel (and, with parents, every missing directory above it).
func volMkdir(root *os.File, rel string, parents bool, uid, gid, mode *uint32) error {
	if rel == "." {
		return unix.EEXIST
	}
	if parents && path.Dir(rel) != "." {
		if _, err := volStat(root, path.Dir(rel)); errors.Is(err, unix.ENOENT) {
			if err := volMkdir(root, path.Dir(rel), true, uid, gid, mode); err != nil && !errors.Is(err, unix.EEXIST) {
				return err
			}
		}
	}
	dfd, name, err := volParent(root, rel)
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	perm := uint32(0o755)
	if mode != nil {
		perm = *mode & 0o7777
	}
	if err := unix.Mkdirat(dfd, name, perm); err != nil {
		return err
	}
	fd, err := unix.Openat2(dfd, name, &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: volResolve})
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return volOwn(fd, uid, gid, mode)
}

// volWrite writes r to file rel: a new file, or with overwrite also an existing one.
func volWrite(root *os.File, rel string, r io.Reader, overwrite bool, uid, gid, mode *uint32) error {
	dfd, name, err := volParent(root, rel)
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	flags := unix.O_WRONLY | unix.O_CREAT | unix.O_NOFOLLOW | unix.O_CLOEXEC
	if overwrite {
		flags |= unix.O_TRUNC
	} else {
		flags |= unix.O_EXCL
	}
	perm := uint32(0o644)
	if mode != nil {
		perm = *mode & 0o7777
	}
	fd, err := unix.Openat(dfd, name, flags, perm)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return unix.EISDIR
	}
	if _, err := io.Copy(f, r); err != nil {
		return err
	}
	if err := volOwn(fd, uid, gid, mode); err != nil {
		return err
	}
	return f.Sync()
}

// volRemove removes rel, a directory with everything in it; never following a link.
func volRemove(root *os.File, rel string) error {
	dfd, name, err := volParent(root, rel)
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	return volRemoveAt(dfd, name, 0)
}

func volRemoveAt(dfd int, name string, depth int) error {
	err := unix.Unlinkat(dfd, name, 0)
	if !errors.Is(err, unix.EISDIR) && !errors.Is(err, unix.EPERM) {
		return err
	}
	if depth >= volMaxDepth {
		return provider.Errorf(provider.CodeResourceExhausted, "a tree deeper than %d levels: remove it in parts", volMaxDepth)
	}
	fd, err := unix.Openat2(dfd, name, &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: volResolve})
	if err != nil {
		return err
	}
	d := os.NewFile(uintptr(fd), name)
	names, err := d.Readdirnames(-1)
	if err == nil {
		for _, n := range names {
			if err = volRemoveAt(fd, n, depth+1); err != nil && !errors.Is(err, unix.ENOENT) {
				break
			}
			err = nil
		}
	}
	d.Close()
	if err != nil {
		return err
	}
	return unix.Unlinkat(dfd, name, unix.AT_REMOVEDIR)
}

// volNoFollow makes an open refuse a symbolic link in the last component.
const volNoFollow = unix.O_NOFOLLOW

func volClose(fd int) { unix.Close(fd) }
