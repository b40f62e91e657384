//go:build linux

package template

import (
	"archive/tar"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/sys/unix"

	"github.com/tupper-dev/tupper/provider"
)

// sparseTar is a PAX 1.0 sparse file of 1 TiB (512 bytes of data) in a 3 KB tar, written by
// hand: archive/tar does not write sparse files.
func sparseTar() []byte {
	header := func(name string, typ byte, size int) []byte {
		b := make([]byte, 512)
		copy(b, name)
		copy(b[100:], "0000644\x00")
		copy(b[108:], "0000000\x00")
		copy(b[116:], "0000000\x00")
		copy(b[124:], fmt.Sprintf("%011o\x00", size))
		copy(b[136:], "00000000000\x00")
		b[156] = typ
		copy(b[257:], "ustar\x0000")
		copy(b[148:], "        ")
		sum := 0
		for _, c := range b {
			sum += int(c)
		}
		copy(b[148:], fmt.Sprintf("%06o\x00 ", sum))
		return b
	}
	record := func(k, v string) string {
		n := len(k) + len(v) + 3
		l := len(fmt.Sprint(n))
		if len(fmt.Sprint(n+l)) > l {
			l++
		}
		return fmt.Sprintf("%d %s=%s\n", n+l, k, v)
	}
	pad := func(b []byte) []byte { return append(b, make([]byte, (512-len(b)%512)%512)...) }
	recs := record("GNU.sparse.major", "1") + record("GNU.sparse.minor", "0") + record("GNU.sparse.name", "sparse") + record("GNU.sparse.realsize", "1099511627776")
	data := append(pad([]byte("1\n0\n512\n")), make([]byte, 512)...)
	out := append(header("pax", 'x', len(recs)), pad([]byte(recs))...)
	out = append(out, header("GNUSparseFile.0/sparse", '0', len(data))...)
	out = append(out, data...)
	return append(out, make([]byte, 1024)...)
}

// TestHostileLayers imports attacker-made layers as root filesystem tarballs: each is
// refused with its code (or, for what is skipped, imported without it), nothing is written
// outside the store, and a refused import leaves no layer and nothing in tmp/.
func TestHostileLayers(t *testing.T) {
	needRoot(t)
	outside := t.TempDir() // what an escape would write into
	victim := filepath.Join(outside, "victim")
	if err := os.WriteFile(victim, []byte("untouched"), 0o644); err != nil {
		t.Fatal(err)
	}
	many := make([]ent, 200)
	for i := range many {
		many[i] = ent{name: fmt.Sprintf("f%d", i), body: "x"}
	}
	bomb := tarOf(t, ent{name: "zeros", body: strings.Repeat("\x00", 64<<20)})
	cases := []struct {
		name   string
		layer  []byte
		limits Limits
		code   provider.Code // "" for an import that succeeds
		check  func(t *testing.T, fs string)
	}{
		{name: "dotdot", layer: tarOf(t, ent{name: "../escape", body: "x"}), code: provider.CodeInvalidArgument},
		{name: "dotdot inside", layer: tarOf(t, ent{name: "a/../../escape", body: "x"}), code: provider.CodeInvalidArgument},
		{name: "absolute", layer: tarOf(t, ent{name: filepath.Join(outside, "escape"), body: "x"}), code: provider.CodeInvalidArgument},
		{name: "write through an absolute symlink", code: provider.CodeInvalidArgument, layer: tarOf(t,
			ent{name: "a", typ: tar.TypeSymlink, link: outside}, ent{name: "a/pwned", body: "x"})},
		{name: "write through a relative symlink", code: provider.CodeInvalidArgument, layer: tarOf(t,
			ent{name: "b", typ: tar.TypeSymlink, link: strings.Repeat("../", 20) + strings.TrimPrefix(outside, "/")}, ent{name: "b/pwned", body: "x"})},
		{name: "symlink replaced by a directory through it", code: provider.CodeInvalidArgument, layer: tarOf(t,
			ent{name: "c", typ: tar.TypeSymlink, link: outside}, ent{name: "c/sub/", typ: tar.TypeDir})},
		{name: "symlink inside the layer is not followed either", code: provider.CodeInvalidArgument, layer: tarOf(t,
			ent{name: "d/", typ: tar.TypeDir}, ent{name: "l", typ: tar.TypeSymlink, link: "d"}, ent{name: "l/f", body: "x"})},
		{name: "whiteout through a symlink", code: provider.CodeInvalidArgument, layer: tarOf(t,
			ent{name: "w", typ: tar.TypeSymlink, link: outside}, ent{name: "w/.wh.victim"})},
		{name: "opaque through a symlink", code: provider.CodeInvalidArgument, layer: tarOf(t,
			ent{name: "o", typ: tar.TypeSymlink, link: outside}, ent{name: "o/.wh..wh..opq"})},
		{name: "hard link out by dotdot", layer: tarOf(t, ent{name: "h", typ: tar.TypeLink, link: "../../../../../../" + victim}), code: provider.CodeInvalidArgument},
		{name: "hard link to an absolute path", layer: tarOf(t, ent{name: "h", typ: tar.TypeLink, link: victim}), code: provider.CodeInvalidArgument},
		{name: "hard link to a missing file", layer: tarOf(t, ent{name: "h", typ: tar.TypeLink, link: "etc/passwd"}), code: provider.CodeInvalidArgument},
		{name: "hard link through a symlink", code: provider.CodeInvalidArgument, layer: tarOf(t,
			ent{name: "s", typ: tar.TypeSymlink, link: outside}, ent{name: "h", typ: tar.TypeLink, link: "s/victim"})},
		{name: "hard link to a symlink links the symlink", layer: tarOf(t,
			ent{name: "s", typ: tar.TypeSymlink, link: victim}, ent{name: "h", typ: tar.TypeLink, link: "s"}),
			check: func(t *testing.T, fs string) {
				if l, err := os.Readlink(filepath.Join(fs, "h")); err != nil || l != victim {
					t.Fatalf("h: %q, %v", l, err)
				}
			}},
		{name: "whiteout of dotdot", layer: tarOf(t, ent{name: "x/.wh..."}), code: provider.CodeInvalidArgument},
		{name: "parent is a file", layer: tarOf(t, ent{name: "f", body: "x"}, ent{name: "f/x", body: "y"}), code: provider.CodeInvalidArgument},
		{name: "device nodes are skipped", layer: tarOf(t,
			ent{name: "null", typ: tar.TypeChar, major: 1, minor: 3}, ent{name: "sda", typ: tar.TypeBlock, major: 8}, ent{name: "ok", body: "ok"}),
			check: func(t *testing.T, fs string) {
				for _, n := range []string{"null", "sda"} {
					if _, err := os.Lstat(filepath.Join(fs, n)); !os.IsNotExist(err) {
						t.Fatalf("device %s unpacked: %v", n, err)
					}
				}
			}},
		{name: "setuid is kept", layer: tarOf(t, ent{name: "suid", body: "x", mode: 0o6755}),
			check: func(t *testing.T, fs string) {
				if fi, err := os.Lstat(filepath.Join(fs, "suid")); err != nil || fi.Mode()&(os.ModeSetuid|os.ModeSetgid) != os.ModeSetuid|os.ModeSetgid {
					t.Fatalf("suid: %v, %v", fi.Mode(), err)
				}
			}},
		{name: "huge file", layer: tarOf(t, ent{name: "huge", size: 1 << 40}), code: provider.CodeResourceExhausted},
		{name: "sparse file", layer: sparseTar(), code: provider.CodeResourceExhausted},
		{name: "decompression bomb", layer: gz(t, bomb), limits: Limits{MaxBytes: 8 << 20}, code: provider.CodeResourceExhausted},
		{name: "decompression bomb of padding", layer: gz(t, make([]byte, 64<<20)), limits: Limits{MaxBytes: 8 << 20}, code: provider.CodeResourceExhausted},
		{name: "too many files", layer: tarOf(t, many...), limits: Limits{MaxFiles: 100}, code: provider.CodeResourceExhausted},
		{name: "bytes over the limit", layer: tarOf(t, ent{name: "a", body: strings.Repeat("a", 6<<20)}, ent{name: "b", body: strings.Repeat("b", 6<<20)}), limits: Limits{MaxBytes: 8 << 20}, code: provider.CodeResourceExhausted},
		{name: "not a tar", layer: bytes.Repeat([]byte("garbage!"), 1000), code: provider.CodeInvalidArgument},
		{name: "truncated", layer: tarOf(t, ent{name: "a", body: strings.Repeat("a", 10000)})[:4096], code: provider.CodeInvalidArgument},
		{name: "owner out of range", layer: tarOf(t, ent{name: "a", body: "a", uid: 1 << 32}), code: provider.CodeInvalidArgument},
		{name: "trusted xattrs are dropped", layer: tarOf(t, ent{name: "d/", typ: tar.TypeDir, pax: map[string]string{
			"SCHILY.xattr.trusted.overlay.redirect": "/etc", "SCHILY.xattr.trusted.overlay.metacopy": "", "SCHILY.xattr.security.selinux": "x"}}),
			check: func(t *testing.T, fs string) {
				buf := make([]byte, 1024)
				if n, _ := unix.Llistxattr(filepath.Join(fs, "d"), buf); n != 0 {
					t.Fatalf("xattrs kept: %q", buf[:n])
				}
			}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newStore(t)
			path := filepath.Join(t.TempDir(), "layer")
			if err := os.WriteFile(path, c.layer, 0o644); err != nil {
				t.Fatal(err)
			}
			tp, err := s.Import(bg, "hostile", Source{Path: path, Format: FormatRootFS}, ImportOptions{Limits: c.limits})
			if provider.CodeOf(err) != c.code {
				t.Fatalf("import: %v, want code %q", err, c.code)
			}
			ents, _ := os.ReadDir(outside)
			if len(ents) != 1 {
				t.Fatalf("%s holds %d entries: something escaped", outside, len(ents))
			}
			if b, _ := os.ReadFile(victim); string(b) != "untouched" {
				t.Fatalf("victim now %q", b)
			}
			var st unix.Stat_t
			if unix.Stat(victim, &st) != nil || st.Nlink != 1 {
				t.Fatalf("victim has %d links", st.Nlink)
			}
			if c.code != "" {
				storeIsClean(t, s)
				return
			}
			storeIsCleanTmp(t, s)
			if c.check != nil {
				c.check(t, s.LayerFS(tp.Layers[0]))
			}
		})
	}
}

const abababShort = "sha256:abababab"

// TestHostileImages: what an image's manifests and digests can do wrong, in OCI layouts
// written by hand.
func TestHostileImages(t *testing.T) {
	needRoot(t)
	good := tarOf(t, ent{name: "f", body: "content"})
	other := tarOf(t, ent{name: "f", body: "other!!"})

	t.Run("layer digest mismatch", func(t *testing.T) {
		l := newRawLayout(t)
		m := l.image([][]byte{good}, []string{digestOf(good)})
		// Replace the layer blob with other bytes of the same length under the same name.
		var man v1.Manifest
		b, _ := os.ReadFile(filepath.Join(l.dir, "blobs", "sha256", m.Digest.Hex))
		jsonUnmarshal(t, b, &man)
		l.put(other, man.Layers[0].Digest.String())
		l.index(m)
		s := newStore(t)
		_, err := s.Import(bg, "x", Source{Path: l.dir}, ImportOptions{})
		if provider.CodeOf(err) != provider.CodeInvalidArgument || !strings.Contains(err.Error(), "does not match") {
			t.Fatalf("import: %v", err)
		}
		storeIsClean(t, s)
	})
	t.Run("diff id mismatch", func(t *testing.T) {
		l := newRawLayout(t)
		l.index(l.image([][]byte{gz(t, good)}, []string{digestOf(other)}))
		s := newStore(t)
		_, err := s.Import(bg, "x", Source{Path: l.dir}, ImportOptions{})
		if provider.CodeOf(err) != provider.CodeInvalidArgument || !strings.Contains(err.Error(), "diff id") {
			t.Fatalf("import: %v", err)
		}
		storeIsClean(t, s)
	})
	t.Run("manifest digest mismatch", func(t *testing.T) {
		l := newRawLayout(t)
		m := l.image([][]byte{gz(t, good)}, []string{digestOf(good)})
		os.WriteFile(filepath.Join(l.dir, "blobs", "sha256", m.Digest.Hex), []byte(`{"schemaVersion":2,"layers":[]}`), 0o644)
		m.Size = 0
		l.index(m)
		_, err := newStore(t).Import(bg, "x", Source{Path: l.dir}, ImportOptions{})
		if provider.CodeOf(err) != provider.CodeInvalidArgument || !strings.Contains(err.Error(), "does not match") {
			t.Fatalf("import: %v", err)
		}
	})
	// An index that names itself: content addressing makes it a digest mismatch, caught
	// before the walk would come back to it.
	t.Run("manifest loop", func(t *testing.T) {
		l := newRawLayout(t)
		self := "sha256:" + strings.Repeat("ab", 32)
		h, _ := v1.NewHash(self)
		loop := v1.Descriptor{MediaType: types.OCIImageIndex, Digest: h, Size: 200}
		b := []byte(fmt.Sprintf(`{"schemaVersion":2,"mediaType":%q,"manifests":[{"mediaType":%q,"digest":%q,"size":200}]}`, types.OCIImageIndex, types.OCIImageIndex, self))
		l.put(b, self)
		l.index(loop)
		_, err := newStore(t).Import(bg, "x", Source{Path: l.dir}, ImportOptions{})
		if provider.CodeOf(err) != provider.CodeInvalidArgument || !strings.Contains(err.Error(), abababShort) {
			t.Fatalf("import: %v", err)
		}
	})
	t.Run("indexes nested too deep", func(t *testing.T) {
		l := newRawLayout(t)
		d := l.image([][]byte{gz(t, good)}, []string{digestOf(good)})
		for range maxIndexDepth + 1 {
			b := []byte(fmt.Sprintf(`{"schemaVersion":2,"mediaType":%q,"manifests":[{"mediaType":%q,"digest":%q,"size":%d}]}`, types.OCIImageIndex, d.MediaType, d.Digest, d.Size))
			d = v1.Descriptor{MediaType: types.OCIImageIndex, Digest: l.put(b, ""), Size: int64(len(b))}
		}
		l.index(d)
		_, err := newStore(t).Import(bg, "x", Source{Path: l.dir}, ImportOptions{})
		if provider.CodeOf(err) != provider.CodeInvalidArgument || !strings.Contains(err.Error(), "nest") {
			t.Fatalf("import: %v", err)
		}
	})
	t.Run("layer larger than its descriptor", func(t *testing.T) {
		l := newRawLayout(t)
		m := l.image([][]byte{gz(t, good)}, []string{digestOf(good)})
		var man v1.Manifest
		b, _ := os.ReadFile(filepath.Join(l.dir, "blobs", "sha256", m.Digest.Hex))
		jsonUnmarshal(t, b, &man)
		blob := filepath.Join(l.dir, "blobs", "sha256", man.Layers[0].Digest.Hex)
		f, _ := os.OpenFile(blob, os.O_APPEND|os.O_WRONLY, 0)
		f.Write(make([]byte, 4096))
		f.Close()
		l.index(m)
		s := newStore(t)
		if _, err := s.Import(bg, "x", Source{Path: l.dir}, ImportOptions{}); provider.CodeOf(err) != provider.CodeInvalidArgument {
			t.Fatalf("import: %v", err)
		}
		storeIsClean(t, s)
	})
}

// TestHalfLayersAreNotLayers: what a crash leaves (a layer directory without meta.json, a
// dead import's tmp/ entry) is not taken for a layer, is replaced by the next import, and is
// swept by Prune.
func TestHalfLayersAreNotLayers(t *testing.T) {
	needRoot(t)
	layer := tarOf(t, ent{name: "f", body: "whole"})
	s := newStore(t)
	diff := digestOf(layer)
	if err := os.MkdirAll(filepath.Join(s.LayerFS(diff), "junk"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(s.Root(), "tmp", "layer-dead", "fs"), 0o755); err != nil {
		t.Fatal(err)
	}
	if s.HasLayer(diff) {
		t.Fatal("a layer without meta.json is taken for whole")
	}
	path := filepath.Join(t.TempDir(), "root.tar")
	os.WriteFile(path, layer, 0o644)
	if _, err := s.Import(bg, "x", Source{Path: path, Format: FormatRootFS}, ImportOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(s.LayerFS(diff), "junk")); !os.IsNotExist(err) || !s.HasLayer(diff) {
		t.Fatalf("the half layer was not replaced: %v", err)
	}
	if _, err := s.Prune(bg); err != nil {
		t.Fatal(err)
	}
	storeIsCleanTmp(t, s)
	if !s.HasLayer(diff) {
		t.Fatal("prune removed a layer in use")
	}
}

func TestTooManyLayers(t *testing.T) {
	l := newRawLayout(t)
	layer := tarOf(t, ent{name: "f", body: "x"})
	var layers [][]byte
	var diffs []string
	for range maxLayers + 1 {
		layers = append(layers, layer)
		diffs = append(diffs, digestOf(layer))
	}
	l.index(l.image(layers, diffs))
	s := newStore(t)
	if _, err := s.Import(bg, "x", Source{Path: l.dir}, ImportOptions{}); provider.CodeOf(err) != provider.CodeInvalidArgument || !strings.Contains(err.Error(), "layers") {
		t.Fatalf("import: %v", err)
	}
	storeIsClean(t, s)
}
