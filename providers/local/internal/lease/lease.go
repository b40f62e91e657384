// Package lease hands out names host-wide, one holder each, through a directory shared by
// every process that leases from it: a name is leased by creating its file there
// exclusively, the file holding its holder; it is released by removing the file. The local
// provider leases sandboxes' uid ranges and bridge addresses so, across processes and Homes.
//
// Callers serialize the leases of one directory with a lock of their own (flock): Any and
// CleanStale read, judge and write in several steps.
package lease

import (
	"errors"
	"io"
	mathrand "math/rand/v2"
	"os"
	"path/filepath"
	"strings"
)

// ErrExhausted is Any's error when every name is leased.
var ErrExhausted = errors.New("every one is leased")

// Dir is a directory of leases.
type Dir struct {
	path  string
	stale func(holder string) bool
}

// New is the leases in path; stale reports whether a holder is gone for good (its lease
// may be taken back): nil, never.
func New(path string, stale func(holder string) bool) Dir {
	return Dir{path: path, stale: stale}
}

// Path is the directory.
func (d Dir) Path() string { return d.path }

// Take claims name for holder by creating its file exclusively. It reports false when
// another holds it.
func (d Dir) Take(name, holder string) (bool, error) {
	f, err := os.OpenFile(filepath.Join(d.path, name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	_, werr := f.WriteString(holder)
	cerr := f.Close()
	if err := errors.Join(werr, cerr); err != nil {
		os.Remove(f.Name())
		return false, err
	}
	return true, nil
}

// Any leases one of count names (name(0) … name(count-1)) for holder and returns its index.
// It probes from a random index, so the work does not grow with the leases already held (a
// few probes while the space is mostly free); only when every name is taken does it clear
// stale leases and look once more.
func (d Dir) Any(count int, name func(int) string, holder string) (int, error) {
	if count <= 0 {
		return 0, errors.New("no names to lease")
	}
	for attempt := 0; attempt < 2; attempt++ {
		if attempt == 1 {
			d.CleanStale()
		}
		start := mathrand.IntN(count)
		for i := range count {
			idx := (start + i) % count
			ok, err := d.Take(name(idx), holder)
			if err != nil {
				return 0, err
			}
			if ok {
				return idx, nil
			}
		}
	}
	return 0, ErrExhausted
}

// Holder is who holds name ("" when no one does).
func (d Dir) Holder(name string) string {
	b, _ := os.ReadFile(filepath.Join(d.path, name))
	return strings.TrimSpace(string(b))
}

// Release removes the lease of name if holder holds it.
func (d Dir) Release(name, holder string) error {
	if d.Holder(name) != holder {
		return nil
	}
	err := os.Remove(filepath.Join(d.path, name))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

// CleanStale removes the leases whose holder is stale. A lease is read, judged and removed
// in three steps: call with the directory's lock held, so that no other process releases
// it and leases the name again in between.
func (d Dir) CleanStale() {
	if d.stale == nil {
		return
	}
	ents, _ := os.ReadDir(d.path)
	for _, e := range ents {
		if d.stale(d.Holder(e.Name())) {
			os.Remove(filepath.Join(d.path, e.Name()))
		}
	}
}

// Empty reports whether no name is leased, reading at most one entry: the work does not
// grow with the number of leases.
func (d Dir) Empty() (bool, error) {
	f, err := os.Open(d.path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	names, err := f.Readdirnames(1)
	if errors.Is(err, io.EOF) {
		return true, nil
	}
	return len(names) == 0, err
}
