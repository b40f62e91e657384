//go:build linux

package local

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
)

// Snapshot contents are stored by content, so that ten snapshots (or the snapshots that
// carry ten forks) of one sandbox cost about one copy on disk. Under Home:
//
//	blocks/<h[:2]>/<h>       a block: up to 512 KiB of a file, named by its SHA-256 (hex);
//	                         where blocks are cut is chosen by content (see put)
//	blocks/.tmp-*            a block being written (renamed to its name once on disk)
//	blocks/.gc-wanted        a collection is owed (see below)
//	locks/blocks.lock        shared by whoever writes or reads blocks, exclusive for the
//	                         collector (flock)
//	snapshots/<id>/blocks.json  the snapshot's manifest: for each of its files stored as
//	                         blocks, the file's size and its blocks' hashes and lengths
//
// What goes into blocks: every regular file of at least blockMinFile bytes of a snapshot's
// writable layer and of its checkpoint image (runsc's memory and state files). The snapshot's
// tree keeps an empty placeholder for it with its owner, mode, xattrs and times, so that
// everything else (directories, symlinks, hard links, whiteouts, small files) keeps the one
// copy path of copyLayer. Smaller files are copied: below 64 KiB a block file saves little
// (an inode and a 4 KiB page either way) and a tree of many small files would cost a
// manifest entry each.
//
// Blocks end at page boundaries chosen by the content (put), not every 512 KiB: the same
// data at another offset, as runsc's memory image is from one checkpoint to the next, then
// makes the same blocks. A run of zero pages is not stored: the manifest names it "", and
// a restore leaves a hole there (memory images and sparse files are mostly zeros). A block
// is written once: to a temporary file, synced, renamed to its hash; a block already there
// is not written again (nor read to check it). Reading a block checks its hash: a damaged
// block is an error, never wrong data.
//
// Nothing counts references: what a block is used by is derived from the committed
// manifests each time the collector runs, so no count can drift. The rules that make this
// safe against a crash at any moment:
//
//   - A snapshot is written under snapshots/.tmp-<id>-<pid> while its writer holds the
//     blocks lock shared; its manifest is written and synced after all its blocks are, and
//     the directory is renamed to <id> (committed) before the lock is released. A crash
//     before the rename leaves blocks no committed manifest names: garbage.
//   - A restore holds the lock shared while it reads blocks.
//   - Deleting a snapshot renames it out of sight (.rm-<id>-<pid>) and then removes it; its
//     blocks become garbage at the rename. A crash before the rename leaves the snapshot
//     whole; after it, gone.
//   - The collector takes the lock exclusively, so no snapshot is being written or read;
//     it reads every committed manifest (and collects nothing if one cannot be read), then
//     removes the blocks none names and the temporary files writers left. A crash in the
//     middle leaves garbage for the next run, never a missing block.
//
// The collector runs when a snapshot is deleted or expires, and when a reap (at every
// Snapshot, listing and provider reap) removed what a crash left or finds blocks/.gc-wanted.
// That marker is made before a snapshot is unlinked or a failed write abandoned, and when a
// collection starts, and removed when one completes: if the store is in use the collector
// does not wait, and whoever releases the lock next runs it; if a crash stops it (or the
// delete before it), the next reap runs it.

const (
	blockSize    = 512 << 10
	blockMinFile = 64 << 10 // files smaller than this are copied, not stored as blocks
	manifestName = "blocks.json"
)

// blockFile is one file stored as blocks (see put for where blocks are cut).
type blockFile struct {
	Size    int64    `json:"size"`
	Blocks  []string `json:"blocks"`  // SHA-256 in hex of each block in order; "": all zeros
	Lengths []int64  `json:"lengths"` // each block's length
}

// blockManifest is a snapshot's blocks.json: its files stored as blocks, by path relative
// to the snapshot's directory ("upper/workspace/data.bin", "image/pages.img").
type blockManifest struct {
	BlockSize int                   `json:"blockSize"`
	Files     map[string]*blockFile `json:"files"`
}

func newManifest() *blockManifest {
	return &blockManifest{BlockSize: blockSize, Files: map[string]*blockFile{}}
}

// readManifest reads a snapshot's manifest; nil, nil for a snapshot without one (stored
// before blocks existed: its files are all plain copies).
func readManifest(dir string) (*blockManifest, error) {
	b, err := os.ReadFile(filepath.Join(dir, manifestName))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var m blockManifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, manifestName), err)
	}
	if m.BlockSize != blockSize {
		return nil, fmt.Errorf("%s: block size %d, not %d", filepath.Join(dir, manifestName), m.BlockSize, blockSize)
	}
	for name, f := range m.Files {
		if f == nil {
			return nil, fmt.Errorf("%s: %s: no blocks", filepath.Join(dir, manifestName), name)
		}
		var sum int64
		for _, n := range f.Lengths {
			if n <= 0 || n > blockSize {
				sum = -1
				break
			}
			sum += n
		}
		if len(f.Lengths) != len(f.Blocks) || sum != f.Size {
			return nil, fmt.Errorf("%s: %s: blocks do not make its %d bytes", filepath.Join(dir, manifestName), name, f.Size)
		}
		for _, h := range f.Blocks {
			if h != "" && !validHash(h) {
				return nil, fmt.Errorf("%s: %s: bad block name %q", filepath.Join(dir, manifestName), name, h)
			}
		}
	}
	return &m, nil
}

// writeManifest writes m into dir and syncs it.
func writeManifest(dir string, m *blockManifest) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return writeSynced(filepath.Join(dir, manifestName), b)
}

// writeSynced writes a new file and syncs it before closing it.
func writeSynced(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	return errors.Join(err, f.Close())
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

// blockStore is Home's block store.
type blockStore struct{ dir, lock, snapshots string }

func (l layout) blocks() blockStore {
	return blockStore{dir: filepath.Join(l.home, "blocks"), lock: filepath.Join(l.locks(), "blocks.lock"), snapshots: l.snapshots()}
}

func (s blockStore) path(h string) string { return filepath.Join(s.dir, h[:2], h) }

// testHookBlocks, when set by a test, is called at each step that a crash could interrupt:
// "block" (a block is on disk), "commit" (a snapshot is complete, not yet renamed into
// place), "removed" (a snapshot was renamed out of sight, not yet removed), "unlinked" (it
// was removed, its blocks not yet collected), "sweep" (the collector removed a block).
var testHookBlocks func(step string)

func blockStep(step string) {
	if h := testHookBlocks; h != nil {
		h(step)
	}
}

// blockLease is a hold on the store (the lock, shared) for writing or reading blocks.
type blockLease struct {
	s     blockStore
	lk    *flock.Lock
	dirty map[string]bool // directories with new entries, synced by sync
	zero  []byte
	buf   []byte
}

// use takes the store for writing or reading blocks until release.
func (s blockStore) use(ctx context.Context) (*blockLease, error) {
	if err := os.MkdirAll(filepath.Dir(s.lock), 0o700); err != nil {
		return nil, err
	}
	lk, err := flock.AcquireShared(ctx, s.lock)
	if err != nil {
		return nil, err
	}
	return &blockLease{s: s, lk: lk, dirty: map[string]bool{}}, nil
}

// release gives the store back and collects garbage if a collection is wanted and the
// store is now free.
func (l *blockLease) release() {
	if l == nil || l.lk == nil {
		return
	}
	l.lk.Unlock()
	l.lk = nil
	if fileExists(l.s.wanted()) {
		l.s.gc()
	}
}

// put stores the file's content as blocks and returns the file they make; a hole of a
// sparse file is not read. The blocks are on disk (each synced) but their directories'
// entries are durable only after sync.
//
// Blocks are cut at page (4 KiB) boundaries chosen by content, not at fixed offsets, so
// that the same data shifted by whole pages makes the same blocks: runsc's memory image
// (pages.img) of one sandbox moves most of its pages by a few pages from one checkpoint
// to the next. A block ends after a page whose checksum has its low six bits zero (one page
// in 64, once the block has blockMinCut bytes), at blockSize bytes, or where a run of zero
// pages starts; a run of zero pages is a block of its own (up to blockSize), stored as a
// hole.
func (l *blockLease) put(f *os.File) (*blockFile, error) {
	if l.buf == nil {
		l.buf, l.zero = make([]byte, blockSize), make([]byte, blockSize)
	}
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	size := fi.Size()
	out := &blockFile{Size: size, Blocks: []string{}, Lengths: []int64{}}
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
			n := min(zeros, blockSize)
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
		if cur+pageSize > blockSize || cur >= blockMinCut && crc32.Checksum(l.buf[cur-n:cur], castagnoli)&63 == 0 {
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

func (l *blockLease) putBlock(b []byte) (string, error) {
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
	blockStep("block")
	return h, nil
}

// sync makes the names of the blocks written so far durable.
func (l *blockLease) sync() error {
	for d := range l.dirty {
		if err := syncDir(d); err != nil {
			return err
		}
		delete(l.dirty, d)
	}
	return nil
}

// fill writes f's content into dst, a new empty file, leaving holes for blocks of zeros. A
// block missing or damaged (its content does not hash to its name) is an error.
func (l *blockLease) fill(dst *os.File, f *blockFile) error {
	if l.buf == nil {
		l.buf, l.zero = make([]byte, blockSize), make([]byte, blockSize)
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
func (l *blockLease) readBlock(h string, buf []byte) ([]byte, error) {
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
			return nil, fmt.Errorf("block %s is damaged: longer than %d bytes", h, blockSize)
		}
	}
	sum := sha256.Sum256(buf[:n])
	if got := hex.EncodeToString(sum[:]); got != h {
		return nil, fmt.Errorf("block %s is damaged: its content hashes to %s", h, got)
	}
	return buf[:n], nil
}

// gc removes the blocks no committed snapshot's manifest names, now if the store is free,
// else when it next is (see above). It reports how many blocks it removed.
func (s blockStore) gc() (int, error) {
	if _, err := os.Stat(s.dir); errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err := os.MkdirAll(filepath.Dir(s.lock), 0o700); err != nil {
		return 0, err
	}
	// The marker says a collection is owed until one completes: one that cannot run now
	// (the store is in use) runs when the last lease is released, and one a crash
	// interrupted runs at the next reap.
	if err := s.owe(); err != nil {
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
			blockStep("sweep")
		}
	}
	return removed, os.Remove(wanted)
}

// wanted is the marker of a collection owed.
func (s blockStore) wanted() string { return filepath.Join(s.dir, ".gc-wanted") }

// owe records that a collection is owed: made before anything turns blocks into garbage
// (a snapshot unlinked, a write abandoned), so that a crash right after leaves the marker
// for the next reap.
func (s blockStore) owe() error {
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
func (s blockStore) live() (map[string]bool, error) {
	live := map[string]bool{}
	ents, err := os.ReadDir(s.snapshots)
	if errors.Is(err, os.ErrNotExist) {
		return live, nil
	}
	if err != nil {
		return nil, err
	}
	for _, e := range ents {
		if !validID(e.Name()) {
			continue // being written (.tmp-) or removed (.rm-): not committed
		}
		m, err := readManifest(filepath.Join(s.snapshots, e.Name()))
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

// layerBlocks makes copyLayer store regular files of at least blockMinFile bytes as blocks
// (store: a snapshot being written) or fill the placeholders of such files from blocks (a
// restore). Paths in man are prefix + the path relative to copyLayer's source.
type layerBlocks struct {
	lease  *blockLease
	man    *blockManifest
	prefix string
	store  bool
}

// storeFile stores the open file in as blocks, under rel.
func (b *layerBlocks) storeFile(in *os.File, rel string) (*blockFile, error) {
	f, err := b.lease.put(in)
	if err != nil {
		return nil, err
	}
	b.man.Files[b.prefix+rel] = f
	return f, nil
}

// restoreFile is the stored file rel, if it was stored as blocks.
func (b *layerBlocks) restoreFile(rel string) *blockFile {
	return b.man.Files[b.prefix+rel]
}
