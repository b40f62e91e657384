//go:build linux

package local

import (
	"bufio"
	"bytes"
	"context"
	crand "crypto/rand"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tupper-dev/tupper/providers/local/internal/blocks"
)

// blocksCrashEnv names the Home of a child process that TestBlocksCrash kills (SIGKILL)
// while it writes or deletes a snapshot. blocksOpEnv is "write ID SRC" or "delete ID";
// blocksStopEnv is "STEP:N" (a blocks.CrashHook step and how many to let pass): there the
// child prints "at" and waits to be killed. Without it the child prints "started" before
// the operation and "done" after.
const (
	blocksCrashEnv = "TUPPER_TEST_BLOCKS_HOME"
	blocksOpEnv    = "TUPPER_TEST_BLOCKS_OP"
	blocksStopEnv  = "TUPPER_TEST_BLOCKS_STOP"
)

// blocksCrashChild is the child's side of TestBlocksCrash, run from TestMain: the same
// writeSnapshot and removeSnapshot that Snapshot and DeleteSnapshot use, on a directory
// standing for a sandbox's writable layer.
func blocksCrashChild(home string) int {
	lay := layout{home: home}
	if stop := os.Getenv(blocksStopEnv); stop != "" {
		step, n, _ := strings.Cut(stop, ":")
		left, _ := strconv.Atoi(n)
		blocks.CrashHook = func(s string) {
			if s != step {
				return
			}
			if left--; left <= 0 {
				fmt.Println("at")
				select {} // until the parent's SIGKILL
			}
		}
	}
	op := strings.Fields(os.Getenv(blocksOpEnv))
	fmt.Println("started")
	var err error
	switch op[0] {
	case "write":
		meta := snapMeta{ID: op[1], Template: "test", CreatedAt: time.Now().UTC()}
		err = lay.writeSnapshot(context.Background(), &meta, false, func(tmp string, layer func(string) *blocks.Layer) error {
			st, err := copyLayerBlocks(context.Background(), op[2], filepath.Join(tmp, "upper"), nil, nil, layer("upper/"))
			meta.Size, meta.Inodes = st.Bytes, st.Inodes
			return err
		})
	case "delete":
		lay.removeSnapshot(op[1])
	}
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	fmt.Println("done")
	return 0
}

// runBlocksChild runs the child with op, stopped at stop ("" for none) and killed there,
// or killed after killAfter once it started (0: never), and reports what it said last.
func runBlocksChild(t *testing.T, home, op, stop string, killAfter time.Duration) string {
	t.Helper()
	child, stdout := startChild(t, blocksCrashEnv+"="+home, blocksOpEnv+"="+op, blocksStopEnv+"="+stop)
	defer child.Wait()
	defer child.Process.Signal(syscall.SIGKILL)
	r := bufio.NewReader(stdout)
	last := ""
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			break
		}
		last = strings.TrimSpace(line)
		switch {
		case last == "at":
			child.Process.Signal(syscall.SIGKILL)
		case last == "started" && killAfter > 0:
			time.AfterFunc(killAfter, func() { child.Process.Signal(syscall.SIGKILL) })
		case strings.HasPrefix(last, "error"):
			t.Fatalf("child %q: %s", op, last)
		}
	}
	if stop != "" && last != "at" {
		t.Fatalf("child %q never reached %s (said %q)", op, stop, last)
	}
	return last
}

// writeTree makes a directory standing for a writable layer: files are name → content;
// "a=>b" makes a a hard link to b.
func writeTree(t *testing.T, files map[string][]byte, links map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, b := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o640); err != nil {
			t.Fatal(err)
		}
	}
	for name, target := range links {
		if err := os.Link(filepath.Join(dir, target), filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// checkBlocks reaps as a provider does, then checks that exactly the snapshots in want are
// committed, each restores to its tree (contents, modes, hard links), and the store holds
// exactly the blocks their manifests name: none missing, none leaked, no leftovers.
func checkBlocks(t *testing.T, lay layout, want map[string]string) {
	t.Helper()
	p := &Provider{lay: lay}
	p.reapSnapshots()
	ents, err := os.ReadDir(lay.snapshots())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
		if _, ok := want[e.Name()]; !ok {
			t.Errorf("snapshots/%s: not expected after the reap", e.Name())
		}
	}
	refs := map[string]bool{}
	for id, src := range want {
		m, err := p.readSnapshot(id)
		if err != nil {
			t.Errorf("snapshot %s: %v (have %v)", id, err, names)
			continue
		}
		man, err := blocks.ReadManifest(lay.snapshot(id))
		if err != nil {
			t.Fatalf("snapshot %s: manifest: %v", id, err)
		}
		if man == nil {
			man = blocks.NewManifest() // from before blocks
		}
		for _, f := range man.Files {
			for _, h := range f.Blocks {
				if h != "" {
					refs[h] = true
				}
			}
		}
		dst := filepath.Join(t.TempDir(), "upper")
		if err := restoreSnapshot(context.Background(), lay.blocks(), lay.snapshot(id), m, dst, "", 0); err != nil {
			t.Errorf("restore %s: %v", id, err)
			continue
		}
		sameTree(t, src, dst)
	}
	got := blockFiles(t, lay.blocks())
	for h := range refs {
		if !got[h] {
			t.Errorf("block %s is named by a committed manifest and missing", h)
		}
	}
	for h := range got {
		if !refs[h] {
			t.Errorf("block %s leaked: no committed manifest names it", h)
		}
	}
	left, _ := filepath.Glob(filepath.Join(lay.blocks().Dir(), ".*"))
	if len(left) > 0 {
		t.Errorf("left in the block store: %v", left)
	}
}

// sameTree compares two trees' regular files (content, mode, hard links).
func sameTree(t *testing.T, a, b string) {
	t.Helper()
	inodes := map[uint64]uint64{}
	err := filepath.WalkDir(a, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		rel, _ := filepath.Rel(a, path)
		want, _ := os.ReadFile(path)
		got, err := os.ReadFile(filepath.Join(b, rel))
		if err != nil {
			return err
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s: %d bytes restored differ from the %d taken", rel, len(got), len(want))
		}
		ai, _ := os.Stat(path)
		bi, _ := os.Stat(filepath.Join(b, rel))
		if ai.Mode() != bi.Mode() {
			t.Errorf("%s: mode %v, want %v", rel, bi.Mode(), ai.Mode())
		}
		an, bn := ai.Sys().(*syscall.Stat_t).Ino, bi.Sys().(*syscall.Stat_t).Ino
		if prev, ok := inodes[an]; ok && prev != bn {
			t.Errorf("%s: a hard link is a copy after the restore", rel)
		}
		inodes[an] = bn
		return nil
	})
	if err != nil {
		t.Error(err)
	}
}

// TestBlocksCrash kills (SIGKILL) a process writing a snapshot and one deleting one, at
// each step a crash could interrupt and at random moments, and checks after each that the
// committed snapshots restore whole, the half-written ones are gone with their blocks, and
// no block a committed snapshot names was removed.
func TestBlocksCrash(t *testing.T) {
	home := t.TempDir()
	lay := layout{home: home}
	big1 := randomBytes(t, 3*blocks.Size+100)
	big2 := append(randomBytes(t, blocks.Size), make([]byte, 2*blocks.Size)...) // and zeros
	t1 := writeTree(t, map[string][]byte{"workspace/big1": big1, "workspace/big2": big2, "etc/small": []byte("small\n")},
		map[string]string{"workspace/big1.link": "workspace/big1"})
	t2 := writeTree(t, map[string][]byte{"data/big1.copy": big1, "data/big3": randomBytes(t, 4*blocks.Size)}, nil)
	want := map[string]string{}
	write := func(src, stop string) string {
		t.Helper()
		id := newID()
		runBlocksChild(t, home, "write "+id+" "+src, stop, 0)
		return id
	}

	s1 := write(t1, "")
	want[s1] = t1
	checkBlocks(t, lay, want)

	t.Run("killed mid-write", func(t *testing.T) {
		write(t2, "block:2")
		checkBlocks(t, lay, want)
	})
	t.Run("killed before the commit", func(t *testing.T) {
		// Every block is on disk, the manifest too; the rename is not done.
		write(t2, "commit:1")
		checkBlocks(t, lay, want)
	})
	s4 := write(t2, "")
	want[s4] = t2
	checkBlocks(t, lay, want)
	t.Run("killed mid-delete", func(t *testing.T) {
		// Renamed out of sight, not yet removed: gone, and so are the blocks only it used.
		runBlocksChild(t, home, "delete "+s1, "removed:1", 0)
		delete(want, s1)
		checkBlocks(t, lay, want)
	})
	t.Run("killed before the collection", func(t *testing.T) {
		// Removed entirely, its blocks not yet collected: the collection is owed.
		s := write(t1, "")
		runBlocksChild(t, home, "delete "+s, "unlinked:1", 0)
		checkBlocks(t, lay, want)
	})
	t.Run("killed mid-collection", func(t *testing.T) {
		// Two snapshots share blocks; the collection after one's delete is killed after
		// removing a block: the other keeps all of its own.
		t3 := writeTree(t, map[string][]byte{"workspace/big1": big1, "own": randomBytes(t, 3*blocks.Size)}, nil)
		s5, s6 := write(t3, ""), write(t1, "")
		runBlocksChild(t, home, "delete "+s5, "sweep:1", 0)
		if !lay.blocks().Owed() {
			t.Error("a collection killed midway is not owed")
		}
		want[s6] = t1
		checkBlocks(t, lay, want)
	})
	t.Run("killed at random moments", func(t *testing.T) {
		big := writeTree(t, map[string][]byte{"a": randomBytes(t, 24<<20), "b": big1}, nil)
		for i := range 4 {
			id := newID()
			last := runBlocksChild(t, home, "write "+id+" "+big, "", time.Duration(rand.IntN(500)+700*i)*time.Millisecond)
			if last == "done" {
				want[id] = big
			}
			t.Logf("write %d: %s", i, last)
			checkBlocks(t, lay, want)
			if len(want) > 1 {
				for other := range want {
					if other != id {
						last := runBlocksChild(t, home, "delete "+other, "", time.Duration(rand.IntN(20))*time.Millisecond)
						if last == "done" || !fileExists(lay.snapshot(other)) {
							delete(want, other)
						}
						t.Logf("delete: %s", last)
						checkBlocks(t, lay, want)
						break
					}
				}
			}
		}
	})
}

// A snapshot written before blocks (plain copies, no blocks.json) restores as it did, and
// the collector keeps the blocks of the newer ones beside it.
func TestSnapshotOldFormat(t *testing.T) {
	lay := layout{home: t.TempDir()}
	src := writeTree(t, map[string][]byte{"workspace/big": randomBytes(t, 2*blocks.Size), "small": []byte("x")},
		map[string]string{"workspace/big.link": "workspace/big"})
	old := newID()
	dir := lay.snapshot(old)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := copyLayer(context.Background(), src, filepath.Join(dir, "upper"), nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "image"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "meta.json"), []byte(`{"id":"`+old+`","template":"test"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	newer := newID()
	runBlocksChild(t, lay.home, "write "+newer+" "+src, "", 0)
	checkOld := func() {
		t.Helper()
		m, err := (&Provider{lay: lay}).readSnapshot(old)
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(t.TempDir(), "upper")
		if err := restoreSnapshot(context.Background(), lay.blocks(), dir, m, dst, "", 0); err != nil {
			t.Fatal(err)
		}
		sameTree(t, src, dst)
		img, err := snapshotImage(context.Background(), lay.blocks(), dir, filepath.Join(t.TempDir(), "image"))
		if err != nil || img != filepath.Join(dir, "image") {
			t.Fatalf("image of an old snapshot: %s, %v", img, err)
		}
	}
	checkOld()
	if _, err := lay.blocks().GC(); err != nil {
		t.Fatal(err)
	}
	checkOld()
	checkBlocks(t, lay, map[string]string{newer: src, old: src})
}

// A snapshot whose write fails after storing blocks leaves none behind once it gives the
// store back.
func TestBlocksFailedWrite(t *testing.T) {
	lay := layout{home: t.TempDir()}
	src := writeTree(t, map[string][]byte{"big": randomBytes(t, 3*blocks.Size)}, nil)
	meta := snapMeta{ID: newID(), Template: "test"}
	err := lay.writeSnapshot(context.Background(), &meta, false, func(tmp string, layer func(string) *blocks.Layer) error {
		if _, err := copyLayerBlocks(context.Background(), src, filepath.Join(tmp, "upper"), nil, nil, layer("upper/")); err != nil {
			return err
		}
		if n := len(blockFiles(t, lay.blocks())); n == 0 {
			t.Error("no block stored")
		}
		return fmt.Errorf("the disk is full")
	})
	if err == nil {
		t.Fatal("the write did not fail")
	}
	if n := len(blockFiles(t, lay.blocks())); n != 0 || lay.blocks().Owed() {
		t.Errorf("a failed write left %d blocks (collection owed: %v)", n, lay.blocks().Owed())
	}
	checkBlocks(t, lay, map[string]string{})
}

// blockFiles lists the blocks in a store by name.
func blockFiles(t *testing.T, s blocks.Store) map[string]bool {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(s.Dir(), "??", "*"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, p := range paths {
		out[filepath.Base(p)] = true
	}
	return out
}

func randomBytes(t testing.TB, n int) []byte {
	b := make([]byte, n)
	if _, err := crand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}
