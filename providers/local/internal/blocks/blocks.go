//go:build linux

package blocks

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/tupper-dev/tupper/internal/flock"
	"github.com/tupper-dev/tupper/providers/local/internal/durable"
)

const (
	// Size is the most a block holds.
	Size = 512 << 10
	// MinFile is the size from which a file is stored as blocks: below it a block file saves
	// little (an inode and a 4 KiB page either way), and a tree of many small files would
	// cost a manifest entry each.
	MinFile = 64 << 10
	// ManifestName is a snapshot's manifest, in its directory.
	ManifestName = "blocks.json"
)

// File is one file stored as blocks (see put for where blocks are cut).
type File struct {
	Size    int64    `json:"size"`
	Blocks  []string `json:"blocks"`  // SHA-256 in hex of each block in order; "": all zeros
	Lengths []int64  `json:"lengths"` // each block's length
}

// Manifest is a snapshot's blocks.json: its files stored as blocks, by path relative
// to the snapshot's directory ("upper/workspace/data.bin", "image/pages.img").
type Manifest struct {
	BlockSize int              `json:"blockSize"`
	Files     map[string]*File `json:"files"`
}

func NewManifest() *Manifest {
	return &Manifest{BlockSize: Size, Files: map[string]*File{}}
}

// ReadManifest reads a snapshot's manifest; nil, nil for a snapshot without one (stored
// before blocks existed: its files are all plain copies).
func ReadManifest(dir string) (*Manifest, error) {
	b, err := os.ReadFile(filepath.Join(dir, ManifestName))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, ManifestName), err)
	}
	if m.BlockSize != Size {
		return nil, fmt.Errorf("%s: block size %d, not %d", filepath.Join(dir, ManifestName), m.BlockSize, Size)
	}
	for name, f := range m.Files {
		if f == nil {
			return nil, fmt.Errorf("%s: %s: no blocks", filepath.Join(dir, ManifestName), name)
		}
		var sum int64
		for _, n := range f.Lengths {
			if n <= 0 || n > Size {
				sum = -1
				break
			}
			sum += n
		}
		if len(f.Lengths) != len(f.Blocks) || sum != f.Size {
			return nil, fmt.Errorf("%s: %s: blocks do not make its %d bytes", filepath.Join(dir, ManifestName), name, f.Size)
		}
		for _, h := range f.Blocks {
			if h != "" && !validHash(h) {
				return nil, fmt.Errorf("%s: %s: bad block name %q", filepath.Join(dir, ManifestName), name, h)
			}
		}
	}
	return &m, nil
}

// Write writes m into dir (a new file) and syncs it.
func (m *Manifest) Write(dir string) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return durable.WriteFile(filepath.Join(dir, ManifestName), b)
}

func validHash(h string) bool {
	if len(h) != 2*sha256.Size {
		return false
	}
	for _, c := range []byte(h) {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// Store is a block store. Its value is only paths: copies of it are the same store.
type Store struct {
	dir, lock, snapshots string
	committed            func(name string) bool
}

// New is the store of blocks in dir, locked through the file lock, whose roots are the
// manifests of the directories of snapshots whose name committed accepts (the others are
// being written or removed).
func New(dir, lock, snapshots string, committed func(name string) bool) Store {
	return Store{dir: dir, lock: lock, snapshots: snapshots, committed: committed}
}

// Dir is the directory the blocks are in.
func (s Store) Dir() string { return s.dir }

// Owed reports whether a collection is owed (see GC).
func (s Store) Owed() bool { return fileExists(s.wanted()) }

func (s Store) path(h string) string { return filepath.Join(s.dir, h[:2], h) }

// CrashHook, when set by a test, is called at each step that a crash could interrupt:
// "block" (a block is on disk), "commit" (a snapshot is complete, not yet renamed into
// place), "removed" (a snapshot was renamed out of sight, not yet removed), "unlinked" (it
// was removed, its blocks not yet collected), "sweep" (the collector removed a block).
var CrashHook func(step string)

// CrashPoint calls CrashHook, if set, at step (its callers' steps included: a snapshot's
// commit, removal and unlink are the snapshot writer's).
func CrashPoint(step string) {
	if h := CrashHook; h != nil {
		h(step)
	}
}

// Lease is a hold on the store (the lock, shared) for writing or reading blocks.
type Lease struct {
	s     Store
	lk    *flock.Lock
	dirty map[string]bool // directories with new entries, synced by Sync
	zero  []byte
	buf   []byte
}

// Use takes the store for writing or reading blocks until Release.
func (s Store) Use(ctx context.Context) (*Lease, error) {
	if err := os.MkdirAll(filepath.Dir(s.lock), 0o700); err != nil {
		return nil, err
	}
	lk, err := flock.AcquireShared(ctx, s.lock)
	if err != nil {
		return nil, err
	}
	return &Lease{s: s, lk: lk, dirty: map[string]bool{}}, nil
}

// Release gives the store back and collects garbage if a collection is wanted and the
// store is now free.
func (l *Lease) Release() {
	if l == nil || l.lk == nil {
		return
	}
	l.lk.Unlock()
	l.lk = nil
	if fileExists(l.s.wanted()) {
		l.s.GC()
	}
}

// Put stores the file's content as blocks and returns the file they make; a hole of a
// sparse file is not read. The blocks are on disk (each synced) but their directories'
// entries are durable only after Sync.
//
// Blocks are cut at page (4 KiB) boundaries chosen by content, not at fixed offsets, so
// that the same data shifted by whole pages makes the same blocks: runsc's memory image
// (pages.img) of one sandbox moves most of its pages by a few pages from one checkpoint
// to the next. A block ends after a page whose checksum has its low six bits zero (one page
// in 64, once the block has blockMinCut bytes), at Size bytes, or where a run of zero
// pages starts; a run of zero pages is a block of its own (up to Size), stored as a
// hole.
func (l *Lease) Put(f *os.File) (*File, error) {
	if l.buf == nil {
		l.buf, l.zero = make([]byte, Size), make([]byte, Size)
	}
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	size := fi.Size()
	out := &File{Size: size, Blocks: []string{}, Lengths: []int64{}}
	cur, zeros := 0, int64(0) // bytes of data in l.buf; bytes of zeros pending
	flush := func() error {
		if cur > 0 {
			h, err := l.putBlock(l.buf[:cur])
			if err != nil {
				return err
			}
			out.Blocks, out.Lengths = append(out.Blocks, h), append(out.Lengths, int64(cur))
			cur = 0
		}
		for zeros > 0 {
			n := min(zeros, Size)
			out.Blocks, out.Lengths = append(out.Blocks, ""), append(out.Lengths, n)
			zeros -= n
		}
		return nil
	}
	addZeros := func(n int64) error {
		if cur > 0 {
			if err := flush(); err != nil {
				return err
			}
		}
		zeros += n
		return nil
	}
	data := int64(-1) // the next offset with data at or after off, once known
	for off := int64(0); off < size; {
		if data < off {
			d, err := unix.Seek(int(f.Fd()), off, unix.SEEK_DATA)
			switch {
			case errors.Is(err, unix.ENXIO):
				d = size // only a hole is left
			case err != nil:
				d = off // no telling: read
			}
			data = d
		}
		if data > off {
			// A hole: zeros, not read.
			if err := addZeros(min(data, size) - off); err != nil {
				return nil, err
			}
			off = min(data, size)
			continue
		}
		n := int(min(pageSize, size-off))
		page := l.buf[cur : cur+n]
		if _, err := f.ReadAt(page, off); err != nil {
			if err == io.EOF {
				return nil, errors.New("changed during the copy")
			}
			return nil, err
		}
		off += int64(n)
		if bytes.Equal(page, l.zero[:n]) {
			if err := addZeros(int64(n)); err != nil {
				return nil, err
			}
			continue
		}
		if zeros > 0 {
			// The zeros before it are a block (cur is 0: they ended the one before).
			if err := flush(); err != nil {
				return nil, err
			}
		}
		cur += n
		if cur+pageSize > Size || cur >= blockMinCut && crc32.Checksum(l.buf[cur-n:cur], castagnoli)&63 == 0 {
			if err := flush(); err != nil {
				return nil, err
			}
		}
	}
	if err := flush(); err != nil {
		return nil, err
	}
	return out, nil
}

const (
	pageSize    = 4096
	blockMinCut = 64 << 10 // a block cut by content has at least this many bytes
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func (l *Lease) putBlock(b []byte) (string, error) {
	if bytes.Equal(b, l.zero[:len(b)]) {
		return "", nil
	}
	sum := sha256.Sum256(b)
	h := hex.EncodeToString(sum[:])
	dst := l.s.path(h)
	if _, err := os.Lstat(dst); err == nil {
		return h, nil // stored already: the name is the content
	}
	sub := filepath.Dir(dst)
	if _, err := os.Stat(sub); errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(sub, 0o700); err != nil {
			return "", err
		}
		l.dirty[l.s.dir] = true
	}
	t, err := os.CreateTemp(l.s.dir, ".tmp-")
	if err != nil {
		return "", err
	}
	_, err = t.Write(b)
	if err == nil {
		err = t.Sync()
	}
	if err = errors.Join(err, t.Close()); err == nil {
		err = os.Rename(t.Name(), dst)
	}
	if err != nil {
		os.Remove(t.Name())
		return "", err
	}
	l.dirty[sub] = true
	CrashPoint("block")
	return h, nil
}

// Sync makes the names of the blocks written so far durable.
func (l *Lease) Sync() error {
	for d := range l.dirty {
		if err := durable.SyncDir(d); err != nil {
			return err
		}
		delete(l.dirty, d)
	}
	return nil
}

// Fill writes f's content into dst, a new empty file, leaving holes for blocks of zeros. A
// block missing or damaged (its content does not hash to its name) is an error.
func (l *Lease) Fill(dst *os.File, f *File) error {
	if l.buf == nil {
		l.buf, l.zero = make([]byte, Size), make([]byte, Size)
	}
	var off int64
	for i, h := range f.Blocks {
		want := f.Lengths[i]
		off += want
		if h == "" {
			continue
		}
		off := off - want
		b, err := l.readBlock(h, l.buf)
		if err != nil {
			return err
		}
		if int64(len(b)) != want {
			return fmt.Errorf("block %s: %d bytes where the file needs %d", h, len(b), want)
		}
		if _, err := dst.WriteAt(b, off); err != nil {
			return err
		}
	}
	return dst.Truncate(f.Size)
}

// readBlock reads block h into buf and checks it.
func (l *Lease) readBlock(h string, buf []byte) ([]byte, error) {
	bf, err := os.Open(l.s.path(h))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("block %s is missing from %s", h, l.s.dir)
	}
	if err != nil {
		return nil, err
	}
	defer bf.Close()
	n, err := io.ReadFull(bf, buf)
	if err != nil && err != io.ErrUnexpectedEOF && err != io.EOF {
		return nil, fmt.Errorf("block %s: %w", h, err)
	}
	if err == nil {
		// A full buffer: the block must end here.
		if m, _ := bf.Read(make([]byte, 1)); m > 0 {
			return nil, fmt.Errorf("block %s is damaged: longer than %d bytes", h, Size)
		}
	}
	sum := sha256.Sum256(buf[:n])
	if got := hex.EncodeToString(sum[:]); got != h {
		return nil, fmt.Errorf("block %s is damaged: its content hashes to %s", h, got)
	}
	return buf[:n], nil
}

// GC removes the blocks no committed snapshot's manifest names, now if the store is free,
// else when it next is (see the package doc). It reports how many blocks it removed.
func (s Store) GC() (int, error) {
	if _, err := os.Stat(s.dir); errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err := os.MkdirAll(filepath.Dir(s.lock), 0o700); err != nil {
		return 0, err
	}
	// The marker says a collection is owed until one completes: one that cannot run now
	// (the store is in use) runs when the last lease is released, and one a crash
	// interrupted runs at the next reap.
	if err := s.Owe(); err != nil {
		return 0, err
	}
	wanted := s.wanted()
	lk, err := flock.TryAcquire(s.lock)
	if err != nil || lk == nil {
		return 0, err
	}
	defer lk.Unlock()
	live, err := s.live()
	if err != nil {
		return 0, fmt.Errorf("blocks: nothing collected: %w", err)
	}
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return 0, err
	}
	removed := 0
	for _, e := range ents {
		name := e.Name()
		if strings.HasPrefix(name, ".tmp-") {
			// No one writes: a crashed writer's.
			os.Remove(filepath.Join(s.dir, name))
			continue
		}
		if len(name) != 2 || !e.IsDir() {
			continue
		}
		sub := filepath.Join(s.dir, name)
		blocks, err := os.ReadDir(sub)
		if err != nil {
			return removed, err
		}
		for _, b := range blocks {
			if live[b.Name()] {
				continue
			}
			if err := os.Remove(filepath.Join(sub, b.Name())); err != nil {
				return removed, err
			}
			removed++
			CrashPoint("sweep")
		}
	}
	return removed, os.Remove(wanted)
}

// wanted is the marker of a collection owed.
func (s Store) wanted() string { return filepath.Join(s.dir, ".gc-wanted") }

// Owe records that a collection is owed: made before anything turns blocks into garbage
// (a snapshot unlinked, a write abandoned), so that a crash right after leaves the marker
// for the next reap.
func (s Store) Owe() error {
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(s.wanted(), os.O_WRONLY|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	return f.Close()
}

// live is the set of blocks the committed snapshots' manifests name.
func (s Store) live() (map[string]bool, error) {
	live := map[string]bool{}
	ents, err := os.ReadDir(s.snapshots)
	if errors.Is(err, os.ErrNotExist) {
		return live, nil
	}
	if err != nil {
		return nil, err
	}
	for _, e := range ents {
		if !s.committed(e.Name()) {
			continue // being written (.tmp-) or removed (.rm-): not committed
		}
		m, err := ReadManifest(filepath.Join(s.snapshots, e.Name()))
		if err != nil {
			return nil, err
		}
		if m == nil {
			continue
		}
		for _, f := range m.Files {
			for _, h := range f.Blocks {
				if h != "" {
					live[h] = true
				}
			}
		}
	}
	return live, nil
}

// Layer is what a tree copy (package copier) stores as blocks, or fills from blocks: the
// regular files of at least MinFile bytes of one tree, named in the manifest by prefix +
// their path relative to the tree ("upper/", "image/").
type Layer struct {
	lease  *Lease
	man    *Manifest
	prefix string
	store  bool
}

// Storing is a Layer that stores the tree's large files as blocks into man.
func (l *Lease) Storing(man *Manifest, prefix string) *Layer {
	return &Layer{lease: l, man: man, prefix: prefix, store: true}
}

// Restoring is a Layer that fills the placeholders of the tree's files that man names
// from their blocks.
func (l *Lease) Restoring(man *Manifest, prefix string) *Layer {
	return &Layer{lease: l, man: man, prefix: prefix}
}

// Transfer moves the data of the regular file rel, open as in, of size bytes: storing, a
// file of at least MinFile bytes becomes blocks and out stays empty (a placeholder);
// restoring, a placeholder the manifest names is filled into out from its blocks. It
// reports whether it did; if not, the caller copies the data itself.
func (b *Layer) Transfer(rel string, in, out *os.File, size int64) (bool, error) {
	if b.store {
		if size < MinFile {
			return false, nil
		}
		f, err := b.lease.Put(in)
		if err != nil {
			return false, err
		}
		b.man.Files[b.prefix+rel] = f
		return true, nil
	}
	f := b.man.Files[b.prefix+rel]
	if f == nil {
		return false, nil
	}
	return true, b.lease.Fill(out, f)
}

// Link records that rel is a hard link to first, whose data Transfer took: every name of
// a stored file is in the manifest, as a restore may meet any of them first.
func (b *Layer) Link(rel, first string) {
	if f := b.man.Files[b.prefix+first]; f != nil && b.store {
		b.man.Files[b.prefix+rel] = f
	}
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }
