package template

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tupper-dev/tupper/internal/testenv"
)

// TestWriteTreeUpper turns an overlay upper directory as a sandbox leaves it (shifted owners,
// a whiteout, an opaque directory, hard links, a symlink pointing out) into a layer tar.
func TestWriteTreeUpper(t *testing.T) {
	testenv.RequireRoot(t)
	const shift = 0x70000000
	dir := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(dir, "usr/bin"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "usr/bin/tool"), []byte("#!/bin/sh\n"), 0o4755))
	must(os.Link(filepath.Join(dir, "usr/bin/tool"), filepath.Join(dir, "usr/bin/tool2")))
	must(os.Symlink("/etc/shadow", filepath.Join(dir, "usr/bin/out")))
	must(os.Mkdir(filepath.Join(dir, "home"), 0o755))
	must(os.Mkdir(filepath.Join(dir, "home/user"), 0o700))
	must(os.WriteFile(filepath.Join(dir, "home/user/f"), []byte("mine"), 0o600))
	must(unix.Mknod(filepath.Join(dir, "usr/bin/gone"), unix.S_IFCHR, 0))
	must(os.Mkdir(filepath.Join(dir, "opt"), 0o755))
	must(unix.Setxattr(filepath.Join(dir, "opt"), "trusted.overlay.opaque", []byte("y"), 0))
	must(os.Mkdir(filepath.Join(dir, ".tupper"), 0o755))
	must(os.WriteFile(filepath.Join(dir, ".tupper/x"), []byte("provider's"), 0o644))
	must(unix.Mkfifo(filepath.Join(dir, "fifo"), 0o644))
	for _, p := range []string{"usr", "usr/bin", "usr/bin/tool", "opt", "home"} {
		must(os.Lchown(filepath.Join(dir, p), shift, shift))
	}
	must(os.Lchown(filepath.Join(dir, "home/user"), shift+1000, shift+1000))
	must(os.Lchown(filepath.Join(dir, "home/user/f"), shift+1000, shift+1000))
	must(os.Lchown(filepath.Join(dir, "usr/bin/out"), 5, 5))                // outside the range: nobody
	must(os.Chmod(filepath.Join(dir, "usr/bin/tool"), os.ModeSetuid|0o755)) // chown cleared set-uid

	var buf bytes.Buffer
	err := WriteTree(context.Background(), &buf, dir, TreeOptions{IDShift: shift, Whiteouts: true,
		Skip: func(rel string) bool { return rel == ".tupper" }})
	must(err)
	type ent struct {
		typ      byte
		mode     int64
		uid, gid int
		link     string
		body     string
	}
	got := map[string]ent{}
	tr := tar.NewReader(&buf)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		must(err)
		b, _ := io.ReadAll(tr)
		got[h.Name] = ent{h.Typeflag, h.Mode, h.Uid, h.Gid, h.Linkname, string(b)}
	}
	want := map[string]ent{
		"usr/":             {tar.TypeDir, 0o755, 0, 0, "", ""},
		"usr/bin/":         {tar.TypeDir, 0o755, 0, 0, "", ""},
		"usr/bin/tool":     {tar.TypeReg, 0o4755, 0, 0, "", "#!/bin/sh\n"},
		"usr/bin/tool2":    {tar.TypeLink, 0o4755, 0, 0, "usr/bin/tool", ""},
		"usr/bin/out":      {tar.TypeSymlink, 0o777, 65534, 65534, "/etc/shadow", ""},
		"usr/bin/.wh.gone": {tar.TypeReg, 0o644, 0, 0, "", ""},
		"opt/":             {tar.TypeDir, 0o755, 0, 0, "", ""},
		"opt/.wh..wh..opq": {tar.TypeReg, 0o644, 0, 0, "", ""},
		"home/":            {tar.TypeDir, 0o755, 0, 0, "", ""},
		"home/user/":       {tar.TypeDir, 0o700, 1000, 1000, "", ""},
		"home/user/f":      {tar.TypeReg, 0o600, 1000, 1000, "", "mine"},
	}
	for name, w := range want {
		if g, ok := got[name]; !ok || g != w {
			t.Errorf("%s = %+v (present %v), want %+v", name, g, ok, w)
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("unexpected entry %s", name)
		}
	}
	if strings.Contains(buf.String(), "provider's") {
		t.Error("a skipped path was written")
	}
}
