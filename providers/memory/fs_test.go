package memory

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/tupper-dev/tupper/provider"
)

func mustNil(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestFSResolve(t *testing.T) {
	f := newMemFS()
	mustNil(t, f.MkdirAll("/a/b/c", 0o755))
	mustNil(t, f.Symlink("/a/b", "/l"))
	mustNil(t, f.Symlink("c", "/a/b/rel"))
	for p, want := range map[string]string{
		"/l/c":         "/a/b/c",
		"/l/..":        "/a", // .. after a link is physical
		"/l/rel/../..": "/a", // through two links
		"/../../a":     "/a", // above the root stays at the root
		"/a/./b//c/":   "/a/b/c",
		"/":            "/",
	} {
		got, err := f.RealPath(p, true)
		if err != nil || got != want {
			t.Errorf("RealPath(%q) = %q, %v; want %q", p, got, err, want)
		}
	}
	mustNil(t, f.WriteFile("/a/file", []byte("x"), nil, false))
	if _, err := f.Stat("/a/file/x", true); !errors.Is(err, errNotDir) {
		t.Errorf("a path through a file: %v", err)
	}
	if _, err := f.Stat("/a/file/", true); !errors.Is(err, errNotDir) {
		t.Errorf("a trailing slash on a file: %v", err)
	}
	mustNil(t, f.Symlink("/loop", "/loop"))
	if _, err := f.Stat("/loop", true); !errors.Is(err, errLoop) {
		t.Errorf("a self loop: %v", err)
	}
	if fi, err := f.Stat("/loop", false); err != nil || fi.kind != kindSymlink {
		t.Errorf("lstat of a loop: %v", err)
	}
}

func TestFSRenameRules(t *testing.T) {
	f := newMemFS()
	mustNil(t, f.MkdirAll("/d1/sub", 0o755))
	mustNil(t, f.MkdirAll("/d2", 0o755))
	mustNil(t, f.MkdirAll("/full/x", 0o755))
	mustNil(t, f.WriteFile("/f1", []byte("1"), nil, false))
	mustNil(t, f.WriteFile("/f2", []byte("2"), nil, false))
	for _, c := range []struct {
		from, to string
		err      error
	}{
		{"/d1", "/d1/sub/in", errInval},
		{"/d1", "/f1", errNotDir},
		{"/f1", "/d2", errIsDir},
		{"/d1", "/full", errNotEmpty},
		{"/nope", "/x", errNotExist},
		{"/f1", "/nodir/x", errNotExist},
	} {
		if err := f.Rename(c.from, c.to); !errors.Is(err, c.err) {
			t.Errorf("rename %s %s: %v, want %v", c.from, c.to, err, c.err)
		}
	}
	mustNil(t, f.Rename("/f1", "/f2")) // a file replaces a file
	if b, _ := f.ReadFile("/f2"); string(b) != "1" {
		t.Errorf("replaced file holds %q", b)
	}
	mustNil(t, f.Rename("/d1", "/d2")) // a directory replaces an empty one
	if _, err := f.Stat("/d2/sub", true); err != nil {
		t.Error(err)
	}
	if err := f.Remove("/"); !errors.Is(err, errBusy) {
		t.Errorf("remove /: %v", err)
	}
}

func TestFSHandles(t *testing.T) {
	f := newMemFS()
	h, err := f.Open("/tmp/log", os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	mustNil(t, err)
	_, _ = h.Write([]byte("one\n"))
	snap, _ := f.ReadFile("/tmp/log")
	mustNil(t, f.Rename("/tmp/log", "/tmp/moved"))
	_, _ = h.Write([]byte("two\n")) // the handle follows the file
	if b, _ := f.ReadFile("/tmp/moved"); string(b) != "one\ntwo\n" {
		t.Errorf("after rename: %q", b)
	}
	if string(snap) != "one\n" {
		t.Errorf("an earlier read changed: %q", snap)
	}
	mustNil(t, f.Remove("/tmp/moved"))
	if _, err := h.Write([]byte("three\n")); err != nil {
		t.Errorf("writing an unlinked file: %v", err)
	}
	mustNil(t, h.Close())
	if _, err := h.Write([]byte("x")); err == nil {
		t.Error("write after close succeeded")
	}

	// An overwrite in place does not change what an earlier reader holds.
	mustNil(t, f.WriteFile("/tmp/cow", []byte("abcdef"), nil, false))
	before, _ := f.ReadFile("/tmp/cow")
	w, _ := f.Open("/tmp/cow", os.O_RDWR, 0)
	_, _ = w.Write([]byte("XY"))
	after, _ := f.ReadFile("/tmp/cow")
	if string(before) != "abcdef" || string(after) != "XYcdef" {
		t.Errorf("copy on write: before %q after %q", before, after)
	}
	r, _ := f.Open("/tmp/cow", os.O_RDONLY, 0)
	b, _ := io.ReadAll(r)
	if string(b) != "XYcdef" {
		t.Errorf("read handle: %q", b)
	}
	if _, err := f.Open("/tmp/cow", os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600); !errors.Is(err, errExist) {
		t.Errorf("O_EXCL on an existing file: %v", err)
	}
	if _, err := f.Open("/tmp", os.O_WRONLY, 0); !errors.Is(err, errIsDir) {
		t.Errorf("opening a directory for writing: %v", err)
	}
}

func TestFSCloneIsDeep(t *testing.T) {
	f := newMemFS()
	mustNil(t, f.WriteFile("/workspace/a", []byte("1"), nil, false))
	mustNil(t, f.Link("/workspace/a", "/workspace/hard"))
	c := f.Clone()
	mustNil(t, f.WriteFile("/workspace/a", []byte("2"), nil, false))
	mustNil(t, f.MkdirAll("/workspace/new", 0o755))
	if b, _ := c.ReadFile("/workspace/a"); string(b) != "1" {
		t.Errorf("clone changed with its source: %q", b)
	}
	if _, err := c.Stat("/workspace/new", true); err == nil {
		t.Error("a directory made after the clone is in it")
	}
	// Hard links stay links inside the copy.
	h, _ := c.Open("/workspace/hard", os.O_WRONLY|os.O_TRUNC, 0)
	_, _ = h.Write([]byte("linked"))
	if b, _ := c.ReadFile("/workspace/a"); string(b) != "linked" {
		t.Errorf("hard link in the clone: %q", b)
	}
}

func TestDevices(t *testing.T) {
	in := newInstance(t, provider.CreateSpec{})
	expect(t, in, "head -c 4 /dev/zero | wc -c; head -c 16 /dev/urandom | wc -c; cat /dev/null; echo x > /dev/null", "4\n16\n", 0)
}

// TestUtilFS checks the file system package coreutils gets against the contract of its FS
// interface: the errors it matches and the descriptions it converts.
func TestUtilFS(t *testing.T) {
	f := utilFS{newMemFS()}
	mustNil(t, f.MkdirAll("/full/x", 0o755))
	if err := f.Remove("/full"); !errors.Is(err, syscall.ENOTEMPTY) {
		t.Errorf("removing a directory that is not empty: %v, want one matching ENOTEMPTY", err)
	}
	if _, err := f.Stat("/nope", true); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("stat of nothing: %v", err)
	}
	mustNil(t, f.WriteFile("/full/f", []byte("abc"), nil, false))
	mustNil(t, f.Chmod("/full/f", 0o4750))
	mustNil(t, f.Symlink("f", "/full/l"))
	fi, err := f.Stat("/full/f", true)
	mustNil(t, err)
	if fi.Name != "f" || fi.Size != 3 || fi.Perm != 0o4750 || !fi.Mode.IsRegular() || fi.Nlink != 1 {
		t.Errorf("stat of a file: %+v", fi)
	}
	walk, err := f.Walk("/full", false)
	mustNil(t, err)
	var got []string
	for _, e := range walk {
		got = append(got, fmt.Sprintf("%s %s %d %s %v %s", e.Path, e.Rel, e.Depth, e.Info.Name, e.Info.Mode.Type(), e.Info.Target))
	}
	want := []string{
		"/full  0 full d--------- ",
		"/full/f f 1 f ---------- ",
		"/full/l l 1 l L--------- f",
		"/full/x x 1 x d--------- ",
	}
	if !slices.Equal(got, want) {
		t.Errorf("walk:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	list, err := f.ReadDir("/full")
	mustNil(t, err)
	if len(list) != 3 || list[2].Name != "x" || !list[2].IsDir() || list[2].Nlink != 2 {
		t.Errorf("read dir: %d entries, last %+v", len(list), list[len(list)-1])
	}
}
