//go:build linux

package blocks

import (
	"bytes"
	"context"
	"crypto/rand"
	mathrand "math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// blockFiles lists the blocks in a store by name.
func blockFiles(t *testing.T, s Store) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	subs, err := os.ReadDir(s.dir)
	if os.IsNotExist(err) {
		return out
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, sub := range subs {
		if !sub.IsDir() {
			continue
		}
		ents, err := os.ReadDir(filepath.Join(s.dir, sub.Name()))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			out[e.Name()] = true
		}
	}
	return out
}

func randomBytes(t testing.TB, n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// testStore is a store as the local provider lays it out in its Home: blocks/,
// locks/blocks.lock and snapshots/, whose committed snapshots are those whose name does
// not start with a dot (being written: .tmp-, being removed: .rm-).
func testStore(t *testing.T) Store {
	home := t.TempDir()
	return New(filepath.Join(home, "blocks"), filepath.Join(home, "locks", "blocks.lock"), filepath.Join(home, "snapshots"),
		func(name string) bool { return !strings.HasPrefix(name, ".") })
}

// dirBytes is the space the files below dir take.
func dirBytes(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Sys().(*syscall.Stat_t).Blocks * 512
			}
		}
		return nil
	})
	return n
}

// putBytes stores b as blocks through a file.
func putBytes(t *testing.T, l *Lease, b []byte) *File {
	t.Helper()
	path := filepath.Join(t.TempDir(), "in")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	bf, err := l.Put(f)
	if err != nil {
		t.Fatal(err)
	}
	return bf
}

// fillBytes is what bf restores to, or the fill's error.
func fillBytes(t *testing.T, l *Lease, bf *File) ([]byte, *unix.Stat_t, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "out")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := l.Fill(f, bf); err != nil {
		return nil, nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b, &st, nil
}

// Files of every shape around the block size come back byte for byte; blocks of zeros are
// not stored and come back as holes.
func TestBlockStoreRoundTrip(t *testing.T) {
	s := testStore(t)
	l, err := s.Use(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	zeros := make([]byte, 4*Size)
	mixed := append(append(randomBytes(t, Size), zeros...), randomBytes(t, 1000)...)
	for _, tc := range []struct {
		name  string
		data  []byte
		zeros int64 // bytes in blocks of zeros
	}{
		{"empty", nil, 0},
		{"one byte", []byte{7}, 0},
		{"short of a block", randomBytes(t, Size-1), 0},
		{"one block", randomBytes(t, Size), 0},
		{"a block and a byte", randomBytes(t, Size+1), 0},
		{"partial last block", randomBytes(t, 3*Size+12345), 0},
		{"zeros", zeros, int64(len(zeros))},
		{"zeros between data", mixed, int64(len(zeros))},
		{"partial zero block", make([]byte, Size+10), Size + 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bf := putBytes(t, l, tc.data)
			var sum, zero int64
			for i, h := range bf.Blocks {
				n := bf.Lengths[i]
				if n <= 0 || n > Size {
					t.Errorf("block %d: %d bytes", i, n)
				}
				sum += n
				if h == "" {
					zero += n
				} else if fi, err := os.Stat(s.path(h)); err != nil || fi.Size() != n {
					t.Errorf("block %s: %v in the store, want %d bytes", h, err, n)
				}
			}
			if bf.Size != int64(len(tc.data)) || sum != bf.Size || len(bf.Lengths) != len(bf.Blocks) {
				t.Fatalf("size %d, blocks of %d bytes for %d bytes", bf.Size, sum, len(tc.data))
			}
			if zero != tc.zeros {
				t.Errorf("%d bytes in blocks of zeros, want %d", zero, tc.zeros)
			}
			got, st, err := fillBytes(t, l, bf)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, tc.data) {
				t.Fatalf("restored %d bytes differ from the %d stored", len(got), len(tc.data))
			}
			// Zero blocks are holes: the file takes no more than its data.
			if max := int64(len(tc.data)) - tc.zeros + 64<<10; st.Blocks*512 > max {
				t.Errorf("restored file takes %d bytes on disk, more than its %d bytes of data", st.Blocks*512, max)
			}
		})
	}
}

// A sparse file's holes are not read, and stay holes.
func TestBlockStoreSparse(t *testing.T) {
	s := testStore(t)
	l, err := s.Use(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	path := filepath.Join(t.TempDir(), "sparse")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const at = 256 << 20
	tail := randomBytes(t, 100)
	if _, err := f.WriteAt(tail, at); err != nil {
		t.Fatal(err)
	}
	bf, err := l.Put(f)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(blockFiles(t, s)); n != 1 {
		t.Fatalf("%d blocks stored for a sparse file with one block of data", n)
	}
	out, err := os.Create(filepath.Join(t.TempDir(), "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	if err := l.Fill(out, bf); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(out.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 200)
	n, _ := out.ReadAt(got, at-100)
	if st.Size != at+100 || n != 200 || !bytes.Equal(got[100:], tail) || !bytes.Equal(got[:100], make([]byte, 100)) || st.Blocks*512 > 1<<20 {
		t.Fatalf("restored %d bytes taking %d on disk", st.Size, st.Blocks*512)
	}
}

// The same content is stored once, within a file and across files, and shifted by whole
// pages it still makes the same blocks after the first cut.
func TestBlockStoreDedupe(t *testing.T) {
	s := testStore(t)
	l, err := s.Use(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	stored := func() int64 { return dirBytes(s.dir) }
	// Fixed random data: where blocks are cut depends on it, and the bounds below must
	// not depend on luck.
	seeded := mathrand.New(mathrand.NewChaCha8([32]byte{'b', 'l', 'o', 'c', 'k', 's'}))
	a, b := make([]byte, 8*Size), make([]byte, 3*pageSize)
	for _, buf := range [][]byte{a, b} {
		for i := range buf {
			buf[i] = byte(seeded.Uint32())
		}
	}
	f1 := putBytes(t, l, a)
	one := stored()
	f3 := putBytes(t, l, a)
	if stored() != one || strings.Join(f1.Blocks, ",") != strings.Join(f3.Blocks, ",") {
		t.Fatalf("the same file stored twice takes %d bytes, once %d", stored(), one)
	}
	// b then a: a's content moved by three pages.
	shifted := append(append([]byte{}, b...), a...)
	f2 := putBytes(t, l, shifted)
	added := stored() - one
	t.Logf("%d bytes stored for %d; %d more for them shifted by %d bytes", one, len(a), added, len(b))
	if added > int64(len(b))+2*Size {
		t.Errorf("a's content shifted by three pages added %d bytes, more than its first blocks", added)
	}
	if got, _, err := fillBytes(t, l, f2); err != nil || !bytes.Equal(got, shifted) {
		t.Fatalf("f2: %v", err)
	}
	// Repeated content within a file.
	rep := bytes.Repeat(b[:pageSize], 256) // 1 MiB of one page
	before := stored()
	putBytes(t, l, rep)
	if added := stored() - before; added > 2*Size {
		t.Errorf("1 MiB of one repeated page took %d bytes", added)
	}
}

// A damaged or missing block is an error naming it, and its content is never written.
func TestBlockStoreCorruption(t *testing.T) {
	s := testStore(t)
	l, err := s.Use(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	data := randomBytes(t, 2*Size+10)
	bf := putBytes(t, l, data)
	damage := func(h string, how func(path string)) {
		t.Helper()
		path := s.path(h)
		good, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		defer os.WriteFile(path, good, 0o600)
		how(path)
		out := filepath.Join(t.TempDir(), "out")
		f, err := os.Create(out)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		err = l.Fill(f, bf)
		if err == nil || !strings.Contains(err.Error(), h) {
			t.Fatalf("fill of a damaged block: %v", err)
		}
		t.Logf("%v", err)
		// What was written is the data's start: the blocks before the damaged one, and
		// nothing of it. (Not a search for the bytes the damage wrote: random data holds any
		// three bytes somewhere in a MiB one time in sixteen.)
		got, _ := os.ReadFile(out)
		if !bytes.HasPrefix(data, got) {
			t.Fatalf("the damaged block's content was written")
		}
	}
	damage(bf.Blocks[1], func(path string) {
		b, _ := os.ReadFile(path)
		copy(b[100:], []byte{0xff, 0xfe, 0xfd}) // a few bytes changed
		os.WriteFile(path, b, 0o600)
	})
	damage(bf.Blocks[2], func(path string) { os.Truncate(path, 5) })           // short
	damage(bf.Blocks[0], func(path string) { os.Remove(path) })                // missing
	damage(bf.Blocks[0], func(path string) { os.WriteFile(path, nil, 0o600) }) // emptied
	// Undamaged again: the round trip works.
	if got, _, err := fillBytes(t, l, bf); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("after repair: %v", err)
	}
}

// The collector keeps what committed manifests name, removes the rest, and does not run
// while the store is in use: it runs when the last user leaves.
func TestBlockStoreGC(t *testing.T) {
	s := testStore(t)
	ctx := context.Background()
	l, err := s.Use(ctx)
	if err != nil {
		t.Fatal(err)
	}
	kept := putBytes(t, l, randomBytes(t, 2*Size))
	shared := randomBytes(t, Size)
	keptShared := putBytes(t, l, shared)
	orphan := putBytes(t, l, randomBytes(t, Size))
	// A committed snapshot names kept's and keptShared's blocks; one being written (not
	// committed) names orphan's; one being removed names keptShared's too.
	committed := "c0ffee"
	for dir, files := range map[string][]*File{committed: {kept, keptShared}, ".tmp-d00d-1": {orphan}, ".rm-beef-1": {keptShared, orphan}} {
		d := filepath.Join(s.snapshots, dir)
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
		m := NewManifest()
		for i, f := range files {
			m.Files["upper/f"+string(rune('0'+i))] = f
		}
		if err := m.Write(d); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(s.dir, ".tmp-crashed"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if n, err := s.GC(); n != 0 || err != nil {
		t.Fatalf("gc while in use: removed %d, %v", n, err)
	}
	if !s.Owed() || !fileExists(s.path(orphan.Blocks[0])) {
		t.Fatal("gc while in use: no collection owed, or it ran")
	}
	l.Release() // the last user: collects
	got := blockFiles(t, s)
	want := map[string]bool{}
	for _, h := range append(append([]string{}, kept.Blocks...), keptShared.Blocks...) {
		want[h] = true
	}
	if len(got) != len(want) {
		t.Fatalf("after gc: %d blocks, want %d", len(got), len(want))
	}
	for h := range want {
		if !got[h] {
			t.Errorf("referenced block %s removed", h)
		}
	}
	if s.Owed() || fileExists(filepath.Join(s.dir, ".tmp-crashed")) {
		t.Error("gc left its marker or a crashed writer's temporary file")
	}
	// A manifest that cannot be read stops the collection: nothing is removed.
	if err := os.WriteFile(filepath.Join(s.snapshots, committed, ManifestName), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(s.dir, "00"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(s.dir, "00", strings.Repeat("0", 64)), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if n, err := s.GC(); err == nil || n != 0 || len(blockFiles(t, s)) != len(want)+1 {
		t.Fatalf("gc with a bad manifest: removed %d, %v", n, err)
	}
	if !s.Owed() {
		t.Error("a failed gc owes no collection")
	}
}
