// Package coreutils is the memory provider's utilities (cat, ls, find, grep, sort, …),
// written in Go over a file system the caller gives them.
//
// The memory provider's shell (package memory) runs a utility with Run when a script names
// one: a Cmd says where it runs (its directory, streams and context), on which FS, and how
// it starts other commands (find -exec). The set is frozen to what the SDK's shell
// fallbacks and the conformance suite run (see package memory); Names lists it.
package coreutils

import (
	"context"
	"io"
	"io/fs"
	"maps"
	"slices"
	"time"
)

// FS is the file system the utilities read and change. Paths are absolute, with "/" as
// separator; errors are *fs.PathError whose Err has the C library's wording ("No such file
// or directory"), and match fs.ErrNotExist when nothing is there and syscall.ENOTEMPTY
// when a directory to remove is not empty.
type FS interface {
	// Stat describes p, following a final symbolic link when follow is set.
	Stat(p string, follow bool) (*FileInfo, error)
	// RealPath is p's physical absolute path; with mustExist unset, only its parent must
	// exist.
	RealPath(p string, mustExist bool) (string, error)
	// ReadDir lists the directory p, sorted by name.
	ReadDir(p string) ([]*FileInfo, error)
	// Walk lists root and, depth-first in name order, everything below it, without
	// following symbolic links below root (one at root when followRoot is set).
	Walk(root string, followRoot bool) ([]WalkEntry, error)
	Mkdir(p string, perm uint32) error
	MkdirAll(p string, perm uint32) error
	Remove(p string) error
	RemoveAll(p string) error
	Rename(oldp, newp string) error
	Symlink(target, p string) error
	Link(oldp, newp string) error
	Chmod(p string, perm uint32) error
	Chtimes(p string, t time.Time) error
	ReadFile(p string) ([]byte, error)
	// WriteFile writes p whole; perm, when not nil, is the mode of a file it creates, and
	// mkParents makes the missing directories above it.
	WriteFile(p string, data []byte, perm *uint32, mkParents bool) error
	// Open opens p (a device, for the utilities) with os.Open's flags.
	Open(p string, flag int, perm uint32) (io.ReadWriteCloser, error)
}

// FileInfo describes a file of an FS.
type FileInfo struct {
	Name    string
	Size    int64
	Mode    fs.FileMode // the type (dir, symlink, device, else a regular file) and permissions
	Perm    uint32      // the permission bits as 0o7777 (setuid, setgid, sticky included)
	ModTime time.Time
	Target  string // a symbolic link's
	Nlink   int
}

// IsDir reports whether fi is a directory.
func (fi *FileInfo) IsDir() bool { return fi.Mode.IsDir() }

// kind is fi's type: kindDir, kindSymlink, kindDevice or kindFile.
func (fi *FileInfo) kind() fs.FileMode {
	return fi.Mode & (fs.ModeDir | fs.ModeSymlink | fs.ModeDevice)
}

const (
	kindFile    fs.FileMode = 0
	kindDir                 = fs.ModeDir
	kindSymlink             = fs.ModeSymlink
	kindDevice              = fs.ModeDevice
)

// WalkEntry is one entry found by FS.Walk.
type WalkEntry struct {
	Path  string // root joined with the entry's relative path
	Rel   string // relative to root; "" for root itself
	Depth int
	Info  *FileInfo
}

// Cmd is one run of a utility: where it runs and with what. Its methods are the helpers
// utilities share, which the shell's own builtins use too.
type Cmd struct {
	Ctx    context.Context
	FS     FS
	Name   string    // the utility's, for messages
	Dir    string    // absolute
	Stdin  io.Reader // nil: empty
	Stdout io.Writer
	Stderr io.Writer
	// Exec runs argv as a command of the shell, in dir, with the caller's environment and
	// streams, and returns its exit status (find -exec).
	Exec func(argv []string, dir string) int
}

// utilFunc is a utility: it gets the arguments after the name and returns the exit status.
type utilFunc func(c *Cmd, args []string) int

// utilities are the utilities, by name.
var utilities = map[string]utilFunc{
	// system information and time
	"sleep": utilSleep, "uname": utilUname, "hostname": utilHostname, "seq": utilSeq,
	// files
	"cat": utilCat, "ls": utilLs, "mkdir": utilMkdir, "rm": utilRm, "rmdir": utilRmdir,
	"mv": utilMv, "touch": utilTouch, "chmod": utilChmod, "stat": utilStat, "ln": utilLn,
	"find": utilFind,
	// text
	"head": utilHead, "wc": utilWc, "grep": utilGrep, "sort": utilSort, "tr": utilTr,
}

// Has reports whether name is a utility.
func Has(name string) bool { return utilities[name] != nil }

// Names are the utilities' names, sorted.
func Names() []string { return slices.Sorted(maps.Keys(utilities)) }

// Run runs the utility name with args (those after the name) and returns its exit status;
// ok is false, and nothing runs, when there is no such utility.
func Run(c *Cmd, name string, args []string) (status int, ok bool) {
	u := utilities[name]
	if u == nil {
		return 0, false
	}
	c.Name = name
	return u(c, args), true
}
