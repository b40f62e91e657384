//go:build linux

package template

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tupper-dev/tupper/provider"
)

func TestStoreRecords(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	diff := "sha256:" + strings.Repeat("ab", 32)
	tp := &Template{Name: "py", Tags: []string{"py:3.12"}, Layers: []string{diff}, Config: Config{Env: []string{"A=1"}}}
	if err := s.Put(tp); provider.CodeOf(err) != provider.CodeInvalidArgument {
		t.Fatalf("Put with a missing layer: %v, want invalid", err)
	}
	if err := os.MkdirAll(filepath.Join(s.LayerDir(diff), "fs"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(s.LayerDir(diff), "meta.json"), []byte(`{}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(tp); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"py", "py:3.12"} {
		got, err := s.Get(name)
		if err != nil {
			t.Fatalf("Get(%q): %v", name, err)
		}
		if got.Name != "py" || got.Layers[0] != diff || got.Config.Env[0] != "A=1" || got.Created.IsZero() {
			t.Fatalf("Get(%q) = %+v", name, got)
		}
	}
	if _, err := s.Get("nope"); provider.CodeOf(err) != provider.CodeNotFound {
		t.Fatalf("Get(nope): %v", err)
	}
	all, err := s.List()
	if err != nil || len(all) != 1 {
		t.Fatalf("List = %v, %v", all, err)
	}
	if err := s.Delete("py"); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete("py"); provider.CodeOf(err) != provider.CodeNotFound {
		t.Fatalf("second Delete: %v", err)
	}
}

func TestStoreRefusesBadNames(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"", "../x", "A", "a/b", ".hidden", "a..b", strings.Repeat("a", 129)} {
		if err := s.Put(&Template{Name: name}); provider.CodeOf(err) != provider.CodeInvalidArgument {
			t.Errorf("Put(%q): %v, want invalid", name, err)
		}
	}
	for _, d := range []string{"sha256:../../etc", "md5:00", "sha256:" + strings.Repeat("A", 64)} {
		if s.LayerDir(d) != "" || s.HasLayer(d) {
			t.Errorf("LayerDir(%q) accepted", d)
		}
	}
}

// TestStoreHidesLayers: layers keep an image's setuid-root files, so no host user but root
// may reach them.
func TestStoreHidesLayers(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"layers", "tmp"} {
		fi, err := os.Stat(filepath.Join(s.Root(), d))
		if err != nil || fi.Mode().Perm() != 0o700 {
			t.Fatalf("%s: %v, %v; want 0700", d, fi.Mode(), err)
		}
	}
}
