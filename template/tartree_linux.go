package template

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// TreeOptions configure WriteTree.
type TreeOptions struct {
	// IDShift is subtracted from every owner: a user namespace's host ids become the ids
	// inside it (0 when the tree's ids are the image's). Owners outside [0, 65536) after
	// the shift are written as 65534 (nobody).
	IDShift int
	// Whiteouts turns an overlay upper directory's whiteouts (0/0 character devices) into
	// OCI whiteout entries (.wh.NAME) and its opaque directories (trusted.overlay.opaque=y)
	// into .wh..wh..opq entries: the upper directory becomes a layer.
	Whiteouts bool
	// Skip reports whether a path (slash-separated, relative to the tree's root, no leading
	// "./") is left out, with everything below it.
	Skip func(rel string) bool
	// Unchanged reports whether an entry is as it was when the tree was last written out
	// (a build step's upper layer before the step): it is left out, but a directory's
	// contents are still walked.
	Unchanged func(rel string, st *unix.Stat_t) bool
	// Prefix is prepended to every entry's name ("" for none).
	Prefix string
}

// WriteTree writes the tree at dir as a tar to w: directories, regular files (hard links
// kept as links), symlinks, and with Whiteouts the overlay whiteouts; sockets, fifos and
// device nodes are left out. The tree may be written by a sandbox, even while this runs:
// every entry is opened relative to its parent directory's descriptor without following
// symlinks, so a path swapped for a symlink midway cannot lead outside dir.
func WriteTree(ctx context.Context, w io.Writer, dir string, opts TreeOptions) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", dir, err)
	}
	defer unix.Close(fd)
	return WriteTreeFD(ctx, w, fd, opts)
}

// WriteTreeFD is WriteTree of the directory open at fd (which it does not close).
func WriteTreeFD(ctx context.Context, w io.Writer, fd int, opts TreeOptions) error {
	tw := tar.NewWriter(w)
	t := &treeWriter{ctx: ctx, tw: tw, opts: opts, links: map[[2]uint64]string{}}
	if err := t.dir(fd, ""); err != nil {
		return err
	}
	return tw.Close()
}

type treeWriter struct {
	ctx   context.Context
	tw    *tar.Writer
	opts  TreeOptions
	links map[[2]uint64]string // (dev, inode) of a regular file with several links → first name
}

func (t *treeWriter) id(n uint32) int {
	v := int(n) - t.opts.IDShift
	if v < 0 || v >= 65536 {
		return 65534
	}
	return v
}

func (t *treeWriter) name(rel string) string { return t.opts.Prefix + rel }

func (t *treeWriter) header(rel string, st *unix.Stat_t) *tar.Header {
	return &tar.Header{
		Name:    t.name(rel),
		Mode:    int64(st.Mode & 0o7777),
		Uid:     t.id(st.Uid),
		Gid:     t.id(st.Gid),
		ModTime: time.Unix(st.Mtim.Sec, st.Mtim.Nsec),
		Format:  tar.FormatPAX,
	}
}

// dir writes the entries of the directory open at fd, whose path is rel ("" for the root).
func (t *treeWriter) dir(fd int, rel string) error {
	if err := t.ctx.Err(); err != nil {
		return err
	}
	names, err := readNames(fd)
	if err != nil {
		return err
	}
	sort.Strings(names)
	if t.opts.Whiteouts && rel != "" {
		if v, err := fgetxattr(fd, "trusted.overlay.opaque"); err == nil && v == "y" {
			if err := t.tw.WriteHeader(&tar.Header{Name: t.name(path.Join(rel, ".wh..wh..opq")), Typeflag: tar.TypeReg, Mode: 0o644, Format: tar.FormatPAX}); err != nil {
				return err
			}
		}
	}
	for _, n := range names {
		child := n
		if rel != "" {
			child = rel + "/" + n
		}
		if t.opts.Skip != nil && t.opts.Skip(child) {
			continue
		}
		var st unix.Stat_t
		if err := unix.Fstatat(fd, n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue // removed meanwhile
			}
			return fmt.Errorf("stat %s: %w", child, err)
		}
		if err := t.entry(fd, n, child, &st); err != nil {
			return err
		}
	}
	return nil
}

func (t *treeWriter) entry(parent int, n, rel string, st *unix.Stat_t) error {
	hdr := t.header(rel, st)
	same := t.opts.Unchanged != nil && t.opts.Unchanged(rel, st)
	if same && st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return nil
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		hdr.Typeflag, hdr.Name = tar.TypeDir, hdr.Name+"/"
		fd, err := unix.Openat(parent, n, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
				return nil // replaced meanwhile
			}
			return fmt.Errorf("open %s: %w", rel, err)
		}
		defer unix.Close(fd)
		if !same {
			t.xattrs(fd, hdr)
			if err := t.tw.WriteHeader(hdr); err != nil {
				return err
			}
		}
		return t.dir(fd, rel)
	case unix.S_IFLNK:
		buf := make([]byte, 4096)
		k, err := unix.Readlinkat(parent, n, buf)
		if err != nil {
			return nil
		}
		hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, string(buf[:k])
		return t.tw.WriteHeader(hdr)
	case unix.S_IFCHR:
		if t.opts.Whiteouts && st.Rdev == 0 {
			return t.tw.WriteHeader(&tar.Header{Name: t.name(path.Join(path.Dir(rel), ".wh."+n)), Typeflag: tar.TypeReg, Mode: 0o644, Format: tar.FormatPAX})
		}
		return nil
	case unix.S_IFREG:
		if st.Nlink > 1 {
			k := [2]uint64{st.Dev, st.Ino}
			if first, ok := t.links[k]; ok {
				hdr.Typeflag, hdr.Linkname = tar.TypeLink, t.name(first)
				return t.tw.WriteHeader(hdr)
			}
			t.links[k] = rel
		}
		fd, err := unix.Openat(parent, n, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != nil {
			if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ELOOP) {
				return nil
			}
			return fmt.Errorf("open %s: %w", rel, err)
		}
		f := os.NewFile(uintptr(fd), rel)
		defer f.Close()
		var now unix.Stat_t
		if err := unix.Fstat(fd, &now); err != nil || now.Mode&unix.S_IFMT != unix.S_IFREG {
			return nil // replaced by something else meanwhile
		}
		hdr = t.header(rel, &now)
		hdr.Typeflag, hdr.Size = tar.TypeReg, now.Size
		t.xattrs(fd, hdr)
		if err := t.tw.WriteHeader(hdr); err != nil {
			return err
		}
		// The file may change while it is copied: exactly Size bytes go out, padded with
		// zeros if it shrank.
		m, err := io.Copy(t.tw, io.LimitReader(f, now.Size))
		if err != nil {
			return fmt.Errorf("read %s: %w", rel, err)
		}
		if m < now.Size {
			if _, err := io.CopyN(t.tw, zeros{}, now.Size-m); err != nil {
				return err
			}
		}
		return nil
	}
	return nil // sockets, fifos, devices
}

// xattrs copies the extended attributes a layer keeps: user.* and file capabilities.
func (t *treeWriter) xattrs(fd int, hdr *tar.Header) {
	buf := make([]byte, 4096)
	n, err := unix.Flistxattr(fd, buf)
	if err != nil || n <= 0 {
		return
	}
	for _, name := range strings.Split(strings.TrimRight(string(buf[:n]), "\x00"), "\x00") {
		if !strings.HasPrefix(name, "user.") && name != "security.capability" {
			continue
		}
		v, err := fgetxattr(fd, name)
		if err != nil {
			continue
		}
		if hdr.PAXRecords == nil {
			hdr.PAXRecords = map[string]string{}
		}
		hdr.PAXRecords["SCHILY.xattr."+name] = v
	}
}

func fgetxattr(fd int, name string) (string, error) {
	buf := make([]byte, 256)
	for {
		n, err := unix.Fgetxattr(fd, name, buf)
		if errors.Is(err, unix.ERANGE) && len(buf) < 1<<16 {
			buf = make([]byte, 4*len(buf))
			continue
		}
		if err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	}
}

// readNames lists the directory open at fd without moving the caller's descriptor.
func readNames(fd int) ([]string, error) {
	dup, err := unix.Openat(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	d := os.NewFile(uintptr(dup), ".")
	defer d.Close()
	return d.Readdirnames(-1)
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
