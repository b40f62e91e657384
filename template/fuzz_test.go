//go:build linux

package template

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// FuzzUnpack feeds arbitrary layers to the unpacker: it may refuse them, but must not panic
// or write beside the layer's root.
func FuzzUnpack(f *testing.F) {
	needRoot(f)
	f.Add(tarOf(f, ent{name: "a", typ: tar.TypeSymlink, link: "/"}, ent{name: "a/x", body: "x"}))
	f.Add(tarOf(f, ent{name: "../x", body: "x"}))
	f.Add(tarOf(f, ent{name: "h", typ: tar.TypeLink, link: "../x"}))
	f.Add(tarOf(f, ent{name: "d/", typ: tar.TypeDir}, ent{name: "d/.wh..wh..opq"}, ent{name: "d/.wh.y"}))
	f.Add(sparseTar())
	f.Add(gz(f, tarOf(f, ent{name: "z", body: "zz"})))
	f.Fuzz(func(t *testing.T, layer []byte) {
		dir := t.TempDir()
		root := filepath.Join(dir, "root")
		if err := os.Mkdir(root, 0o755); err != nil {
			t.Fatal(err)
		}
		l := layerSource{size: -1, open: func(context.Context) (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(layer)), nil }}
		unpackStream(bg, l, root, newBudget(Limits{MaxBytes: 1 << 20, MaxFiles: 1000}), func(int64) {})
		ents, err := os.ReadDir(dir)
		if err != nil || len(ents) != 1 {
			t.Fatalf("beside the root: %v, %v", ents, err)
		}
	})
}
