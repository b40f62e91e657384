//go:build linux

package copier

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/tupper-dev/tupper/provider"
)

// Stats is what a copy counted: the space its source's files take, and its entries.
type Stats struct{ Bytes, Inodes int64 }

// Options are a copy's options; the zero value copies everything, owners unchanged, data
// whole.
type Options struct {
	// Shift maps the source's owners (uids and gids, and the root uid of a namespaced file
	// capability) to the destination's; nil: unchanged.
	Shift func(uint32) uint32
	// Skip holds paths relative to the source that are left alone (not copied, and not
	// removed from the destination).
	Skip map[string]bool
	// Blocks, when not nil, moves the data of regular files it takes (package blocks'
	// Layer: large files stored as blocks, or filled from blocks).
	Blocks Blocks
}

// Blocks moves the data of some regular files instead of the copy.
type Blocks interface {
	// Transfer moves the data of the file rel (relative to the source), open as in, of
	// size bytes, to out (new and empty) or elsewhere, and reports whether it did; false:
	// the copier copies the data.
	Transfer(rel string, in, out *os.File, size int64) (bool, error)
	// Link tells that rel is a hard link to first, a file met earlier in the same copy.
	Link(rel, first string)
}

// Copy copies the tree at src to dst (see the package doc).
func Copy(ctx context.Context, src, dst string, o Options) (Stats, error) {
	c := &copier{ctx: ctx, shift: o.Shift, skip: o.Skip, links: map[[2]uint64]string{}, blocks: o.Blocks}
	sfd, err := unix.Open(src, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return c.st, fmt.Errorf("open %s: %w", src, err)
	}
	defer unix.Close(sfd)
	var st unix.Stat_t
	if err := unix.Fstat(sfd, &st); err != nil {
		return c.st, err
	}
	if err := unix.Mkdir(dst, 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
		return c.st, err
	}
	dfd, err := unix.Open(dst, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return c.st, err
	}
	defer unix.Close(dfd)
	c.dstRoot = dst
	if err := c.dir(sfd, dfd, ""); err != nil {
		return c.st, err
	}
	if err := c.meta(sfd, ".", dfd, ".", &st); err != nil {
		return c.st, err
	}
	return c.st, nil
}

// MaxDepth bounds how deep Copy descends (two descriptors per level).
const MaxDepth = 512

type copier struct {
	ctx     context.Context
	shift   func(uint32) uint32
	skip    map[string]bool
	links   map[[2]uint64]string // source dev, inode → path relative to the root, for hard links
	dstRoot string
	st      Stats
	blocks  Blocks // nil: files are copied whole
}

// xattrFile is entry name of the directory open as fd, or with name ".", that directory.
// The l*xattr calls have no *at form; /proc/self/fd/FD/NAME pins the directory, and the l
// variants do not follow NAME. The directory itself is reached through its descriptor (an
// l call on /proc/self/fd/FD would act on the magic link).
type xattrFile struct {
	fd   int
	name string
}

func (x xattrFile) path() string { return "/proc/self/fd/" + strconv.Itoa(x.fd) + "/" + x.name }

func (x xattrFile) list(buf []byte) (int, error) {
	if x.name == "." {
		return unix.Flistxattr(x.fd, buf)
	}
	return unix.Llistxattr(x.path(), buf)
}

func (x xattrFile) get(attr string, buf []byte) (int, error) {
	if x.name == "." {
		return unix.Fgetxattr(x.fd, attr, buf)
	}
	return unix.Lgetxattr(x.path(), attr, buf)
}

func (x xattrFile) set(attr string, val []byte) error {
	if x.name == "." {
		return unix.Fsetxattr(x.fd, attr, val, 0)
	}
	return unix.Lsetxattr(x.path(), attr, val, 0)
}

// dir copies the entries of the directory open as sfd into the one open as dfd.
func (c *copier) dir(sfd, dfd int, rel string) error {
	if err := c.ctx.Err(); err != nil {
		return err
	}
	// Read the names through a duplicate, so sfd's offset and lifetime stay ours.
	f := os.NewFile(uintptr(mustDup(sfd)), "dir")
	if f == nil {
		return errors.New("dup failed")
	}
	names, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		return err
	}
	for _, name := range names {
		r := filepath.Join(rel, name)
		if c.skip[r] {
			continue
		}
		if err := c.entry(sfd, dfd, name, r); err != nil {
			return fmt.Errorf("%s: %w", r, err)
		}
	}
	return nil
}

func mustDup(fd int) int {
	n, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return -1
	}
	return n
}

func (c *copier) entry(sfd, dfd int, name, rel string) error {
	var st unix.Stat_t
	if err := unix.Fstatat(sfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return err
	}
	c.st.Inodes++
	c.st.Bytes += st.Blocks * 512
	var dst unix.Stat_t
	exists := unix.Fstatat(dfd, name, &dst, unix.AT_SYMLINK_NOFOLLOW) == nil
	typ := st.Mode & unix.S_IFMT
	if exists && !(typ == unix.S_IFDIR && dst.Mode&unix.S_IFMT == unix.S_IFDIR) {
		flag := 0
		if dst.Mode&unix.S_IFMT == unix.S_IFDIR {
			// A directory of the new sandbox's skeleton that the snapshot replaced.
			if err := os.RemoveAll(filepath.Join(c.dstRoot, rel)); err != nil {
				return err
			}
		} else if err := unix.Unlinkat(dfd, name, flag); err != nil {
			return err
		}
		exists = false
	}
	switch typ {
	case unix.S_IFDIR:
		if depth := strings.Count(rel, "/") + 1; depth > MaxDepth {
			// Each level holds two descriptors and a frame until its subtree is done: a
			// tree sandbox code made arbitrarily deep must not exhaust the host's.
			return provider.Errorf(provider.CodeResourceExhausted, "directories nested deeper than %d levels", MaxDepth)
		}
		if !exists {
			if err := unix.Mkdirat(dfd, name, 0o700); err != nil {
				return err
			}
		}
		csfd, err := unix.Openat(sfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(csfd)
		cdfd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(cdfd)
		if err := c.dir(csfd, cdfd, rel); err != nil {
			return err
		}
		// Metadata last: a read-only directory still takes its entries, and the times stay.
		return c.meta(csfd, ".", cdfd, ".", &st)
	case unix.S_IFLNK:
		target := make([]byte, 4096)
		n, err := unix.Readlinkat(sfd, name, target)
		if err != nil {
			return err
		}
		if err := unix.Symlinkat(string(target[:n]), dfd, name); err != nil {
			return err
		}
		return c.meta(sfd, name, dfd, name, &st)
	case unix.S_IFREG:
		key := [2]uint64{st.Dev, st.Ino}
		if st.Nlink > 1 {
			if first, ok := c.links[key]; ok {
				if c.blocks != nil {
					c.blocks.Link(rel, first)
				}
				return unix.Linkat(unix.AT_FDCWD, filepath.Join(c.dstRoot, first), dfd, name, 0)
			}
		}
		if err := c.file(sfd, dfd, name, rel, &st); err != nil {
			return err
		}
		if st.Nlink > 1 {
			c.links[key] = rel
		}
		return nil
	case unix.S_IFCHR, unix.S_IFBLK, unix.S_IFIFO, unix.S_IFSOCK:
		if err := unix.Mknodat(dfd, name, st.Mode&unix.S_IFMT|0o600, int(st.Rdev)); err != nil {
			return err
		}
		return c.meta(sfd, name, dfd, name, &st)
	}
	return fmt.Errorf("unknown file type %#o", typ)
}

// file copies a regular file's data, keeping its holes, then its metadata. With c.blocks,
// the data is theirs to move when they take it (Blocks.Transfer).
func (c *copier) file(sfd, dfd int, name, rel string, st *unix.Stat_t) error {
	// O_NONBLOCK: had the entry become a fifo since the stat, opening it must not hang.
	in, err := unix.Openat(sfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	inf := os.NewFile(uintptr(in), name)
	defer inf.Close()
	var ist unix.Stat_t
	if err := unix.Fstat(in, &ist); err != nil {
		return err
	}
	if ist.Mode&unix.S_IFMT != unix.S_IFREG || ist.Ino != st.Ino {
		return errors.New("changed during the copy")
	}
	out, err := unix.Openat(dfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	outf := os.NewFile(uintptr(out), name)
	defer outf.Close()
	if c.blocks != nil {
		done, err := c.blocks.Transfer(rel, inf, outf, ist.Size)
		if err != nil {
			return err
		}
		if done {
			return c.meta(sfd, name, dfd, name, st)
		}
	}
	return c.copyData(in, inf, outf, ist.Size, sfd, dfd, name, st)
}

// copyData copies size bytes of in (open as inf too) to outf, keeping holes, then the
// metadata.
func (c *copier) copyData(in int, inf, outf *os.File, size int64, sfd, dfd int, name string, st *unix.Stat_t) error {
	for off := int64(0); off < size; {
		data, err := unix.Seek(in, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // only a hole is left
		}
		if err != nil {
			return err
		}
		hole, err := unix.Seek(in, data, unix.SEEK_HOLE)
		if err != nil {
			return err
		}
		if _, err := outf.Seek(data, io.SeekStart); err != nil {
			return err
		}
		if _, err := inf.Seek(data, io.SeekStart); err != nil {
			return err
		}
		if _, err := io.CopyN(outf, inf, hole-data); err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		off = hole
	}
	if err := outf.Truncate(size); err != nil {
		return err
	}
	return c.meta(sfd, name, dfd, name, st)
}

// meta gives the destination entry the source's owner, mode, xattrs and times.
func (c *copier) meta(sfd int, sname string, dfd int, dname string, st *unix.Stat_t) error {
	uid, gid := st.Uid, st.Gid
	if c.shift != nil {
		uid, gid = c.shift(uid), c.shift(gid)
	}
	// Owner before mode: chown clears set-id bits.
	flag := unix.AT_SYMLINK_NOFOLLOW
	if dname == "." {
		flag |= unix.AT_EMPTY_PATH
		dname = ""
	}
	if err := unix.Fchownat(dfd, dname, int(uid), int(gid), flag); err != nil {
		return err
	}
	if err := c.xattrs(xattrFile{sfd, orDot(sname)}, xattrFile{dfd, orDot(dname)}); err != nil {
		return err
	}
	isLink := st.Mode&unix.S_IFMT == unix.S_IFLNK
	if !isLink {
		// fchmodat cannot refuse to follow, but the entry is one this copier just made
		// and not a symlink.
		if err := unix.Fchmodat(dfd, orDot(dname), st.Mode&0o7777, 0); err != nil {
			return err
		}
	}
	ts := []unix.Timespec{st.Atim, st.Mtim}
	return unix.UtimesNanoAt(dfd, orDot(dname), ts, unix.AT_SYMLINK_NOFOLLOW)
}

func orDot(name string) string {
	if name == "" {
		return "."
	}
	return name
}

// xattrs copies the extended attributes of src to dst (neither followed). A file
// capability of the namespaced kind names the namespace's root uid; it is shifted along
// with the owners.
func (c *copier) xattrs(src, dst xattrFile) error {
	buf := make([]byte, 4096)
	n, err := src.list(buf)
	if errors.Is(err, unix.ERANGE) {
		if n, err = src.list(nil); err == nil {
			buf = make([]byte, n)
			n, err = src.list(buf)
		}
	}
	if errors.Is(err, unix.ENOTSUP) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, name := range strings.Split(string(buf[:n]), "\x00") {
		if name == "" || name == "trusted.overlay.origin" {
			continue
		}
		val := make([]byte, 64<<10)
		m, err := src.get(name, val)
		if errors.Is(err, unix.ENODATA) {
			continue
		}
		if err != nil {
			return fmt.Errorf("get %s: %w", name, err)
		}
		val = val[:m]
		if name == "security.capability" && c.shift != nil && len(val) == 24 {
			// VFS_CAP_REVISION_3: the last four bytes are the root uid of the namespace.
			root := binary.LittleEndian.Uint32(val[20:])
			binary.LittleEndian.PutUint32(val[20:], c.shift(root))
		}
		if err := dst.set(name, val); err != nil {
			return fmt.Errorf("set %s: %w", name, err)
		}
	}
	return nil
}
