package memory

import (
	"path"
	"strings"
	"testing"
)

// FuzzPaths feeds arbitrary paths to every path-taking file system operation: none may panic,
// and every resolved path must be absolute and clean, inside the one tree there is.
func FuzzPaths(f *testing.F) {
	for _, s := range []string{"/", "/workspace/../..", "/l/../x", "/loop", "a/b/", "//x//y/.", "/etc/hostname/", "/l/l/l", ""} {
		f.Add(s, "/workspace/new")
	}
	f.Fuzz(func(t *testing.T, p, q string) {
		fs := newMemFS()
		_ = fs.Symlink("/workspace", "/l")
		_ = fs.Symlink("/loop", "/loop")
		_ = fs.Symlink("../../..", "/workspace/up")
		for _, x := range []string{p, "/" + p, "/workspace/up/" + p} {
			if rp, err := fs.RealPath(x, false); err == nil && (!strings.HasPrefix(rp, "/") || path.Clean(rp) != rp) {
				t.Fatalf("RealPath(%q) = %q", x, rp)
			}
			_, _ = fs.Stat(x, true)
			_, _ = fs.Stat(x, false)
			_ = fs.MkdirAll(x, 0o755)
			_ = fs.WriteFile(x+"/f", []byte("x"), nil, true)
			_, _ = fs.ReadFile(x)
			_, _ = fs.Walk(x, true)
			_ = fs.Rename(x, q)
			_ = fs.Symlink(q, x)
			_ = fs.RemoveAll(x)
		}
		if _, err := fs.Stat("/", true); err != nil {
			t.Fatalf("the root is gone: %v", err)
		}
	})
}
