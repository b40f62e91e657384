//go:build linux

package copier

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tupper-dev/tupper/internal/testenv"
)

// TestCopy checks the copy on a tree made on the host: whiteouts, opaque directories,
// xattrs, sparse files, hard links, symlinks never followed, and the uid shift.
func TestCopy(t *testing.T) {
	testenv.RequireRoot(t)
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "src"), filepath.Join(dir, "dst")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(src, "opaque"), 0o755))
	must(unix.Lsetxattr(filepath.Join(src, "opaque"), "trusted.overlay.opaque", []byte("y"), 0))
	must(unix.Lsetxattr(filepath.Join(src, "opaque"), "trusted.overlay.origin", []byte("handle"), 0))
	must(unix.Mknod(filepath.Join(src, "gone"), unix.S_IFCHR|0o600, 0))
	must(os.Symlink("/etc/shadow", filepath.Join(src, "shadow")))
	must(os.Symlink(dir, filepath.Join(src, "loop")))
	f, err := os.Create(filepath.Join(src, "sparse"))
	must(err)
	_, err = f.WriteAt([]byte("end"), 1<<30)
	must(err)
	f.Close()
	must(os.Link(filepath.Join(src, "sparse"), filepath.Join(src, "sparse2")))
	must(unix.Mkfifo(filepath.Join(src, "fifo"), 0o640))
	const oldBase, newBase = 100000, 200000
	must(filepath.Walk(src, func(p string, _ os.FileInfo, err error) error {
		must(err)
		return os.Lchown(p, oldBase+1000, oldBase+1000)
	}))
	must(os.Lchown(filepath.Join(src, "gone"), 5, 5)) // outside the range

	shift := func(id uint32) uint32 {
		if id >= oldBase && id < oldBase+65536 {
			return id - oldBase + newBase
		}
		return newBase + 65534
	}
	stats, err := Copy(context.Background(), src, dst, Options{Shift: shift})
	must(err)
	if stats.Bytes > 1<<20 {
		t.Errorf("counted %d bytes for a sparse file", stats.Bytes)
	}
	var st unix.Stat_t
	must(unix.Lstat(filepath.Join(dst, "gone"), &st))
	if st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev != 0 || st.Uid != newBase+65534 {
		t.Errorf("whiteout: mode %#o rdev %d uid %d", st.Mode, st.Rdev, st.Uid)
	}
	must(unix.Lstat(filepath.Join(dst, "sparse"), &st))
	if st.Size != 1<<30+3 || st.Blocks*512 > 1<<20 || st.Nlink != 2 || st.Uid != newBase+1000 {
		t.Errorf("sparse: size %d blocks %d links %d uid %d", st.Size, st.Blocks, st.Nlink, st.Uid)
	}
	must(unix.Lstat(filepath.Join(dst, "fifo"), &st))
	if st.Mode&unix.S_IFMT != unix.S_IFIFO || st.Mode&0o777 != 0o640 {
		t.Errorf("fifo: mode %#o", st.Mode)
	}
	for name, target := range map[string]string{"shadow": "/etc/shadow", "loop": dir} {
		got, err := os.Readlink(filepath.Join(dst, name))
		if err != nil || got != target {
			t.Errorf("symlink %s: %q, %v", name, got, err)
		}
	}
	buf := make([]byte, 16)
	n, err := unix.Lgetxattr(filepath.Join(dst, "opaque"), "trusted.overlay.opaque", buf)
	if err != nil || string(buf[:n]) != "y" {
		t.Errorf("opaque xattr: %q, %v", buf[:max(n, 0)], err)
	}
	if _, err := unix.Lgetxattr(filepath.Join(dst, "opaque"), "trusted.overlay.origin", buf); err == nil {
		t.Errorf("trusted.overlay.origin was copied")
	}
}
