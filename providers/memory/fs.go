package memory

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tupper-dev/tupper/internal/filemode"
)

// errno is a file system error with the wording of the C library, so that utilities print
// what a Linux shell would ("No such file or directory").
type errno struct {
	msg string
	is  error // the io/fs sentinel it matches, if any
}

func (e *errno) Error() string { return e.msg }

func (e *errno) Is(target error) bool { return e.is != nil && target == e.is }

var (
	errNotExist = &errno{"No such file or directory", fs.ErrNotExist}
	errExist    = &errno{"File exists", fs.ErrExist}
	errNotDir   = &errno{"Not a directory", nil}
	errIsDir    = &errno{"Is a directory", nil}
	errNotEmpty = &errno{"Directory not empty", syscall.ENOTEMPTY}
	errLoop     = &errno{"Too many levels of symbolic links", nil}
	errInval    = &errno{"Invalid argument", fs.ErrInvalid}
	errBusy     = &errno{"Device or resource busy", nil}
	errBadFD    = &errno{"Bad file descriptor", fs.ErrClosed}
	errPerm     = &errno{"Permission denied", fs.ErrPermission}
)

// maxSymlinks is how many symbolic links one path resolution follows, as on Linux.
const maxSymlinks = 40

type nodeKind uint8

const (
	kindDir nodeKind = iota
	kindFile
	kindSymlink
	kindDevice
)

type devKind uint8

const (
	devNull devKind = iota
	devZero
	devRandom
)

// node is one file system object (an inode). Directory entries point at nodes, so a hard link
// is two entries pointing at one node, and an open handle keeps working after a rename or an
// unlink, as on POSIX systems.
type node struct {
	kind  nodeKind
	perm  uint32 // permission bits, 0..0o7777
	mtime time.Time

	// data is a regular file's content. Slices of it are handed to readers without copying;
	// shared says so, and a write that would change bytes a reader may hold copies first.
	// Appending never changes bytes below len(data), so it needs no copy.
	data   []byte
	shared bool

	children map[string]*node // directories
	target   string           // symbolic links
	dev      devKind          // devices
}

// memFS is a POSIX-like file system held in memory. One RWMutex guards the whole tree,
// contents included; no method holds it while doing I/O on anything else.
type memFS struct {
	mu   sync.RWMutex
	root *node
}

func now() time.Time { return time.Now() }

func newDir(perm uint32) *node {
	return &node{kind: kindDir, perm: perm, mtime: now(), children: map[string]*node{}}
}

// newMemFS returns a file system with the standard layout of a sandbox.
func newMemFS() *memFS {
	f := &memFS{root: newDir(0o755)}
	for _, d := range []struct {
		path string
		perm uint32
	}{
		{"/bin", 0o755}, {"/dev", 0o755}, {"/etc", 0o755}, {"/home", 0o755}, {"/home/user", 0o755},
		{"/root", 0o700}, {"/tmp", 0o1777}, {"/usr", 0o755}, {"/usr/bin", 0o755},
		{"/usr/local", 0o755}, {"/usr/local/bin", 0o755}, {"/var", 0o755}, {"/var/tmp", 0o1777},
		{"/workspace", 0o755},
	} {
		if err := f.Mkdir(d.path, d.perm); err != nil {
			panic(err)
		}
	}
	for name, dev := range map[string]devKind{"null": devNull, "zero": devZero, "random": devRandom, "urandom": devRandom} {
		f.root.children["dev"].children[name] = &node{kind: kindDevice, perm: 0o666, mtime: now(), dev: dev}
	}
	etc := map[string]string{
		"hostname":    "sandbox\n",
		"hosts":       "127.0.0.1\tlocalhost\n::1\tlocalhost\n",
		"passwd":      "root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000::/home/user:/bin/sh\n",
		"group":       "root:x:0:\nuser:x:1000:\n",
		"os-release":  "NAME=\"Tupper memory sandbox\"\nID=tupper-memory\nPRETTY_NAME=\"Tupper in-memory sandbox (no isolation)\"\n",
		"resolv.conf": "",
	}
	for name, content := range etc {
		f.root.children["etc"].children[name] = &node{kind: kindFile, perm: 0o644, mtime: now(), data: []byte(content)}
	}
	return f
}

// splitPath splits an absolute or relative slash-separated path into its non-empty
// components other than ".".
func splitPath(p string) []string {
	parts := strings.Split(p, "/")
	out := parts[:0]
	for _, c := range parts {
		if c != "" && c != "." {
			out = append(out, c)
		}
	}
	return out
}

type frame struct {
	n    *node
	name string
}

// resolved is the result of a path lookup.
type resolved struct {
	parent *node  // the directory that holds the final entry; nil for the root
	name   string // the final entry's name in parent
	n      *node  // the entry; nil when it does not exist (parent is then valid)
	path   string // the physical absolute path, symbolic links resolved
}

// existing resolves p (resolve) and requires that it exists; a failure is op's error on p.
// The lock must be held.
func (f *memFS) existing(op, p string, follow bool) (resolved, error) {
	r, err := f.resolve(p, follow)
	if err != nil {
		return resolved{}, pathErr(op, p, err)
	}
	if r.n == nil {
		return resolved{}, pathErr(op, p, errNotExist)
	}
	return r, nil
}

// resolve looks p up, following symbolic links in every component and, when follow is set,
// in the final one. ".." is resolved physically, after the links before it. A missing final
// component is not an error: the result then has n == nil and a valid parent. A path ending
// in "/" must name a directory (following a final link). The lock must be held.
func (f *memFS) resolve(p string, follow bool) (resolved, error) {
	if p == "" {
		return resolved{}, errNotExist
	}
	trailing := len(p) > 1 && strings.HasSuffix(p, "/")
	if trailing {
		follow = true
	}
	comps := splitPath(p)
	stack := []frame{{f.root, ""}}
	links := 0
	lastDotDot := false
	for i := 0; i < len(comps); i++ {
		c := comps[i]
		cur := stack[len(stack)-1].n
		last := i == len(comps)-1
		if cur.kind != kindDir {
			return resolved{}, errNotDir
		}
		if c == ".." {
			if len(stack) > 1 {
				stack = stack[:len(stack)-1]
			}
			lastDotDot = last
			continue
		}
		lastDotDot = false
		child := cur.children[c]
		if child == nil {
			if !last {
				return resolved{}, errNotExist
			}
			return resolved{parent: cur, name: c, path: joinFrames(stack, c)}, nil
		}
		if child.kind == kindSymlink && (!last || follow) {
			links++
			if links > maxSymlinks {
				return resolved{}, errLoop
			}
			if strings.HasPrefix(child.target, "/") {
				stack = stack[:1]
			}
			rest := append(splitPath(child.target), comps[i+1:]...)
			if len(rest) == 0 {
				// a link to "/" or "."; the result is the directory on top of the stack
				comps, i = nil, -1
				continue
			}
			comps, i = rest, -1
			continue
		}
		stack = append(stack, frame{child, c})
	}
	_ = lastDotDot
	top := stack[len(stack)-1]
	res := resolved{n: top.n, name: top.name, path: joinFrames(stack, "")}
	if len(stack) > 1 {
		res.parent = stack[len(stack)-2].n
	}
	if trailing && top.n.kind != kindDir {
		return resolved{}, errNotDir
	}
	return res, nil
}

func joinFrames(stack []frame, extra string) string {
	var b strings.Builder
	for _, fr := range stack[1:] {
		b.WriteByte('/')
		b.WriteString(fr.name)
	}
	if extra != "" {
		b.WriteByte('/')
		b.WriteString(extra)
	}
	if b.Len() == 0 {
		return "/"
	}
	return b.String()
}

func pathErr(op, p string, err error) error {
	return &fs.PathError{Op: op, Path: p, Err: err}
}

// fileInfo implements fs.FileInfo and fs.DirEntry for a node.
type fileInfo struct {
	name   string
	size   int64
	mode   fs.FileMode
	mtime  time.Time
	target string
	kind   nodeKind
	nlink  int
}

func (fi *fileInfo) Name() string               { return fi.name }
func (fi *fileInfo) Size() int64                { return fi.size }
func (fi *fileInfo) Mode() fs.FileMode          { return fi.mode }
func (fi *fileInfo) ModTime() time.Time         { return fi.mtime }
func (fi *fileInfo) IsDir() bool                { return fi.kind == kindDir }
func (fi *fileInfo) Sys() any                   { return nil }
func (fi *fileInfo) Type() fs.FileMode          { return fi.mode.Type() }
func (fi *fileInfo) Info() (fs.FileInfo, error) { return fi, nil }

// perm returns the permission bits in the 0o7777 form.
func (fi *fileInfo) perm() uint32 { return filemode.Unix(fi.mode) }

func (n *node) info(name string) *fileInfo {
	fi := &fileInfo{name: name, mtime: n.mtime, target: n.target, kind: n.kind, nlink: 1}
	mode := filemode.FromUnix(n.perm)
	switch n.kind {
	case kindDir:
		mode |= fs.ModeDir
		fi.size = 4096
		fi.nlink = 2
		for _, c := range n.children {
			if c.kind == kindDir {
				fi.nlink++
			}
		}
	case kindFile:
		fi.size = int64(len(n.data))
	case kindSymlink:
		mode |= fs.ModeSymlink
		fi.size = int64(len(n.target))
	case kindDevice:
		mode |= fs.ModeDevice | fs.ModeCharDevice
	}
	fi.mode = mode
	return fi
}

// Stat describes p, following a final symbolic link when follow is set.
func (f *memFS) Stat(p string, follow bool) (*fileInfo, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	r, err := f.existing("stat", p, follow)
	if err != nil {
		return nil, err
	}
	name := r.name
	if name == "" {
		name = "/"
	}
	return r.n.info(name), nil
}

// RealPath returns the physical absolute path of p. With mustExist unset, only the parent
// must exist.
func (f *memFS) RealPath(p string, mustExist bool) (string, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	r, err := f.resolve(p, true)
	if err != nil {
		return "", pathErr("realpath", p, err)
	}
	if r.n == nil && mustExist {
		return "", pathErr("realpath", p, errNotExist)
	}
	return r.path, nil
}

// ReadDir lists the directory p (following links), sorted by name.
func (f *memFS) ReadDir(p string) ([]*fileInfo, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	r, err := f.existing("open", p, true)
	if err != nil {
		return nil, err
	}
	if r.n.kind != kindDir {
		return nil, pathErr("open", p, errNotDir)
	}
	out := make([]*fileInfo, 0, len(r.n.children))
	for name, c := range r.n.children {
		out = append(out, c.info(name))
	}
	slices.SortFunc(out, func(a, b *fileInfo) int { return strings.Compare(a.name, b.name) })
	return out, nil
}

// walkEntry is one entry found by Walk.
type walkEntry struct {
	path  string // root joined with the entry's relative path
	rel   string // relative to root; "" for root itself
	depth int
	info  *fileInfo
}

// Walk lists root and, depth-first in name order, everything below it without following
// symbolic links below root. It follows a link at root itself when followRoot is set. The
// list is taken under the lock and returned, so callers do their I/O without it.
func (f *memFS) Walk(root string, followRoot bool) ([]walkEntry, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	r, err := f.existing("stat", root, followRoot)
	if err != nil {
		return nil, err
	}
	name := r.name
	if name == "" {
		name = "/"
	}
	var out []walkEntry
	var walk func(n *node, p, rel string, depth int, name string)
	walk = func(n *node, p, rel string, depth int, name string) {
		out = append(out, walkEntry{path: p, rel: rel, depth: depth, info: n.info(name)})
		if n.kind != kindDir {
			return
		}
		names := make([]string, 0, len(n.children))
		for c := range n.children {
			names = append(names, c)
		}
		slices.Sort(names)
		for _, c := range names {
			cp := p + "/" + c
			if strings.HasSuffix(p, "/") {
				cp = p + c
			}
			crel := c
			if rel != "" {
				crel = rel + "/" + c
			}
			walk(n.children[c], cp, crel, depth+1, c)
		}
	}
	walk(r.n, root, "", 0, name)
	return out, nil
}

// Mkdir creates one directory.
func (f *memFS) Mkdir(p string, perm uint32) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, err := f.resolve(p, false)
	if err != nil {
		return pathErr("mkdir", p, err)
	}
	if r.n != nil {
		return pathErr("mkdir", p, errExist)
	}
	r.parent.children[r.name] = newDir(perm)
	r.parent.mtime = now()
	return nil
}

// MkdirAll creates p and its missing parents. An existing directory (or a link to one) is
// not an error.
func (f *memFS) MkdirAll(p string, perm uint32) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mkdirAllLocked(p, perm)
}

func (f *memFS) mkdirAllLocked(p string, perm uint32) error {
	comps := splitPath(p)
	prefix := ""
	for _, c := range comps {
		prefix += "/" + c
		r, err := f.resolve(prefix, true)
		if err != nil {
			return pathErr("mkdir", prefix, err)
		}
		if r.n == nil {
			r.parent.children[r.name] = newDir(perm)
			r.parent.mtime = now()
			continue
		}
		if r.n.kind != kindDir {
			return pathErr("mkdir", prefix, errNotDir)
		}
	}
	return nil
}

// Remove removes a file, a link or an empty directory.
func (f *memFS) Remove(p string) error {
	return f.remove(p, false)
}

// RemoveAll removes p and everything below it.
func (f *memFS) RemoveAll(p string) error {
	return f.remove(p, true)
}

func (f *memFS) remove(p string, all bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, err := f.existing("remove", p, false)
	if err != nil {
		return err
	}
	if r.parent == nil {
		return pathErr("remove", p, errBusy)
	}
	if r.n.kind == kindDir && !all && len(r.n.children) > 0 {
		return pathErr("remove", p, errNotEmpty)
	}
	delete(r.parent.children, r.name)
	r.parent.mtime = now()
	return nil
}

// Rename moves oldp to newp with rename(2)'s rules: a file replaces a file, a directory
// replaces an empty directory, and a directory cannot move below itself.
func (f *memFS) Rename(oldp, newp string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	src, err := f.existing("rename", oldp, false)
	if err != nil {
		return err
	}
	if src.parent == nil {
		return pathErr("rename", oldp, errBusy)
	}
	dst, err := f.resolve(newp, false)
	if err != nil {
		return pathErr("rename", newp, err)
	}
	if dst.n == src.n {
		return nil
	}
	if src.n.kind == kindDir && (dst.path == src.path || strings.HasPrefix(dst.path, src.path+"/")) {
		return pathErr("rename", newp, errInval)
	}
	if dst.n != nil {
		switch {
		case dst.parent == nil:
			return pathErr("rename", newp, errBusy)
		case src.n.kind == kindDir && dst.n.kind != kindDir:
			return pathErr("rename", newp, errNotDir)
		case src.n.kind != kindDir && dst.n.kind == kindDir:
			return pathErr("rename", newp, errIsDir)
		case dst.n.kind == kindDir && len(dst.n.children) > 0:
			return pathErr("rename", newp, errNotEmpty)
		}
	}
	delete(src.parent.children, src.name)
	dst.parent.children[dst.name] = src.n
	t := now()
	src.parent.mtime, dst.parent.mtime = t, t
	return nil
}

// Symlink creates a symbolic link at p pointing at target.
func (f *memFS) Symlink(target, p string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, err := f.resolve(p, false)
	if err != nil {
		return pathErr("symlink", p, err)
	}
	if r.n != nil {
		return pathErr("symlink", p, errExist)
	}
	r.parent.children[r.name] = &node{kind: kindSymlink, perm: 0o777, mtime: now(), target: target}
	r.parent.mtime = now()
	return nil
}

// Link makes newp another name of the file oldp (a hard link). Directories cannot be linked.
func (f *memFS) Link(oldp, newp string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	src, err := f.existing("link", oldp, false)
	if err != nil {
		return err
	}
	if src.n.kind == kindDir {
		return pathErr("link", oldp, errPerm)
	}
	dst, err := f.resolve(newp, false)
	if err != nil {
		return pathErr("link", newp, err)
	}
	if dst.n != nil {
		return pathErr("link", newp, errExist)
	}
	dst.parent.children[dst.name] = src.n
	dst.parent.mtime = now()
	return nil
}

// Chmod sets the permission bits of p (following links).
func (f *memFS) Chmod(p string, perm uint32) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, err := f.existing("chmod", p, true)
	if err != nil {
		return err
	}
	r.n.perm = perm & 0o7777
	return nil
}

// Chtimes sets the modification time of p (following links).
func (f *memFS) Chtimes(p string, t time.Time) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, err := f.existing("utime", p, true)
	if err != nil {
		return err
	}
	r.n.mtime = t
	return nil
}

// ReadFile returns the content of the regular file p. The slice must not be modified.
func (f *memFS) ReadFile(p string) ([]byte, error) {
	f.mu.Lock() // marks the data shared
	defer f.mu.Unlock()
	r, err := f.existing("open", p, true)
	if err != nil {
		return nil, err
	}
	switch r.n.kind {
	case kindDir:
		return nil, pathErr("read", p, errIsDir)
	case kindDevice:
		return nil, nil
	}
	r.n.shared = true
	return r.n.data[:len(r.n.data):len(r.n.data)], nil
}

// WriteFile replaces the content of p, creating it (and, with mkParents, its parents). A
// nil perm keeps an existing file's mode; a new file gets 0o644.
func (f *memFS) WriteFile(p string, data []byte, perm *uint32, mkParents bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, err := f.resolve(p, true)
	if errors.Is(err, errNotExist) && mkParents {
		if i := strings.LastIndex(p, "/"); i > 0 {
			if err := f.mkdirAllLocked(p[:i], 0o755); err != nil {
				return err
			}
		}
		r, err = f.resolve(p, true)
	}
	if err != nil {
		return pathErr("open", p, err)
	}
	n := r.n
	switch {
	case n == nil:
		n = &node{kind: kindFile, perm: 0o644}
		r.parent.children[r.name] = n
		r.parent.mtime = now()
	case n.kind == kindDir:
		return pathErr("open", p, errIsDir)
	case n.kind == kindDevice:
		return nil
	}
	if perm != nil {
		n.perm = *perm & 0o7777
	}
	n.data, n.shared = data, true
	n.mtime = now()
	return nil
}

// Open opens p with os.OpenFile's flags.
func (f *memFS) Open(p string, flag int, perm uint32) (*handle, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, err := f.resolve(p, flag&os.O_EXCL == 0 || flag&os.O_CREATE == 0)
	if err != nil {
		return nil, pathErr("open", p, err)
	}
	n := r.n
	acc := flag & (os.O_RDONLY | os.O_WRONLY | os.O_RDWR)
	writable := acc == os.O_WRONLY || acc == os.O_RDWR
	switch {
	case n == nil:
		if flag&os.O_CREATE == 0 {
			return nil, pathErr("open", p, errNotExist)
		}
		n = &node{kind: kindFile, perm: perm & 0o7777, mtime: now()}
		r.parent.children[r.name] = n
		r.parent.mtime = now()
	case flag&os.O_CREATE != 0 && flag&os.O_EXCL != 0:
		return nil, pathErr("open", p, errExist)
	case n.kind == kindDir:
		if writable {
			return nil, pathErr("open", p, errIsDir)
		}
	case n.kind == kindSymlink:
		return nil, pathErr("open", p, errLoop)
	case n.kind == kindFile && flag&os.O_TRUNC != 0 && writable:
		n.data, n.shared = nil, false
		n.mtime = now()
	}
	return &handle{fs: f, n: n, path: p, read: !writable || acc == os.O_RDWR, write: writable, append: flag&os.O_APPEND != 0}, nil
}

// handle is an open file. It keeps its node, so it survives renames and unlinks.
type handle struct {
	fs     *memFS
	n      *node
	path   string
	read   bool
	write  bool
	append bool

	mu     sync.Mutex
	off    int64
	closed bool
}

func (h *handle) Read(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed || !h.read {
		return 0, pathErr("read", h.path, errBadFD)
	}
	switch h.n.kind {
	case kindDir:
		return 0, pathErr("read", h.path, errIsDir)
	case kindDevice:
		switch h.n.dev {
		case devZero:
			clear(p)
			return len(p), nil
		case devRandom:
			return cryptoRead(p)
		}
		return 0, io.EOF
	}
	h.fs.mu.RLock()
	defer h.fs.mu.RUnlock()
	if h.off >= int64(len(h.n.data)) {
		return 0, io.EOF
	}
	n := copy(p, h.n.data[h.off:])
	h.off += int64(n)
	return n, nil
}

func (h *handle) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed || !h.write {
		return 0, pathErr("write", h.path, errBadFD)
	}
	if h.n.kind == kindDevice {
		return len(p), nil
	}
	h.fs.mu.Lock()
	defer h.fs.mu.Unlock()
	n := h.n
	if h.append {
		h.off = int64(len(n.data))
	}
	end := h.off + int64(len(p))
	if h.off < int64(len(n.data)) && n.shared {
		// bytes a reader may hold would change: copy first
		n.data = slices.Clone(n.data)
		n.shared = false
	}
	if end > int64(len(n.data)) {
		if end > int64(cap(n.data)) && n.shared {
			n.shared = false // the new array belongs to us alone
		}
		n.data = growTo(n.data, int(end))
	}
	copy(n.data[h.off:end], p)
	h.off = end
	n.mtime = now()
	return len(p), nil
}

// growTo extends b to length n, zero-filling, reusing capacity when there is some.
func growTo(b []byte, n int) []byte {
	if n <= cap(b) {
		old := len(b)
		b = b[:n]
		clear(b[old:])
		return b
	}
	nb := make([]byte, n, max(n, 2*cap(b)))
	copy(nb, b)
	return nb
}

func (h *handle) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	return nil
}

// clone deep-copies a tree. File contents are shared copy-on-write; hard links within the
// tree stay links.
func clone(n *node, seen map[*node]*node) *node {
	if c, ok := seen[n]; ok {
		return c
	}
	c := &node{kind: n.kind, perm: n.perm, mtime: n.mtime, target: n.target, dev: n.dev}
	seen[n] = c
	switch n.kind {
	case kindFile:
		n.shared = true
		c.data, c.shared = n.data[:len(n.data):len(n.data)], true
	case kindDir:
		c.children = make(map[string]*node, len(n.children))
		for name, child := range n.children {
			c.children[name] = clone(child, seen)
		}
	}
	return c
}

// Clone returns a deep copy of the whole file system.
func (f *memFS) Clone() *memFS {
	f.mu.Lock() // clone marks data shared
	defer f.mu.Unlock()
	return &memFS{root: clone(f.root, map[*node]*node{})}
}
