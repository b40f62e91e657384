//go:build linux

package template

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/tupper-dev/tupper/internal/testenv"
)

// ent is one entry of a test layer.
type ent struct {
	name, body, link string
	typ              byte // tar.TypeReg when 0
	mode             int64
	uid, gid         int
	size             int64 // header size when body is not the content (huge files)
	major, minor     int64
	pax              map[string]string
}

var epoch = time.Date(2021, 3, 4, 5, 6, 7, 0, time.UTC)

// tarOf writes entries as a tar stream. An entry whose size exceeds its body ends the
// stream right after its header, as a hostile archive would.
func tarOf(t testing.TB, ents ...ent) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range ents {
		typ := e.typ
		if typ == 0 {
			typ = tar.TypeReg
		}
		mode := e.mode
		if mode == 0 {
			mode = 0o644
			if typ == tar.TypeDir {
				mode = 0o755
			}
		}
		size := int64(len(e.body))
		if typ != tar.TypeReg {
			size = 0
		}
		if e.size != 0 {
			size = e.size
		}
		hdr := &tar.Header{Name: e.name, Typeflag: typ, Mode: mode, Uid: e.uid, Gid: e.gid, Size: size, Linkname: e.link,
			ModTime: epoch, Devmajor: e.major, Devminor: e.minor, PAXRecords: e.pax, Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatalf("tar header %s: %v", e.name, err)
		}
		if e.size != 0 && e.size != int64(len(e.body)) {
			tw.Flush()
			return buf.Bytes()
		}
		if typ == tar.TypeReg {
			if _, err := io.WriteString(tw, e.body); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func gz(t testing.TB, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(b)
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func digestOf(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

// layerOf is a gzip layer of the tar stream b.
func layerOf(t testing.TB, b []byte) v1.Layer {
	t.Helper()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// imageOf is an image of the given layer tars with cfg for the platform os/arch.
func imageOf(t testing.TB, arch string, cfg v1.Config, tars ...[]byte) v1.Image {
	t.Helper()
	img := empty.Image
	for _, b := range tars {
		var err error
		if img, err = mutate.AppendLayers(img, layerOf(t, b)); err != nil {
			t.Fatal(err)
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Config = "linux", arch, cfg
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// newRegistry serves an in-process registry on loopback and returns its host:port.
func newRegistry(t testing.TB) string {
	t.Helper()
	srv := httptest.NewServer(registry.New(registry.Logger(nullLogger())))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

func push(t testing.TB, ref string, img v1.Image) {
	t.Helper()
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, img); err != nil {
		t.Fatalf("push %s: %v", ref, err)
	}
}

func pushIndex(t testing.TB, ref string, imgs map[string]v1.Image) v1.ImageIndex {
	t.Helper()
	var adds []mutate.IndexAddendum
	for arch, img := range imgs {
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: arch}}})
	}
	idx := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex), adds...)
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteIndex(r, idx); err != nil {
		t.Fatalf("push index %s: %v", ref, err)
	}
	return idx
}

func newStore(t testing.TB) *Store {
	t.Helper()
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// needRoot: unpacking keeps owners, makes whiteouts (character devices) and sets trusted.*
// attributes, which only root can.
func needRoot(t testing.TB) { testenv.RequireRoot(t) }

// rawLayout writes an OCI layout by hand, blobs named by whatever digest the test says.
type rawLayout struct {
	t   testing.TB
	dir string
}

func newRawLayout(t testing.TB) *rawLayout {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "blobs", "sha256"), 0o755)
	os.WriteFile(filepath.Join(dir, "oci-layout"), []byte(`{"imageLayoutVersion":"1.0.0"}`), 0o644)
	return &rawLayout{t, dir}
}

// put stores b under its own digest, or under as when set.
func (l *rawLayout) put(b []byte, as string) v1.Hash {
	d := digestOf(b)
	if as != "" {
		d = as
	}
	h, err := v1.NewHash(d)
	if err != nil {
		l.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(l.dir, "blobs", "sha256", h.Hex), b, 0o644); err != nil {
		l.t.Fatal(err)
	}
	return h
}

func (l *rawLayout) index(ds ...v1.Descriptor) {
	b, _ := json.Marshal(v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex, Manifests: ds})
	if err := os.WriteFile(filepath.Join(l.dir, "index.json"), b, 0o644); err != nil {
		l.t.Fatal(err)
	}
}

// image writes an image of gzip layers whose config claims diffIDs, and returns its
// manifest's descriptor.
func (l *rawLayout) image(layers [][]byte, diffIDs []string) v1.Descriptor {
	cfg := v1.ConfigFile{OS: "linux", Architecture: "amd64", RootFS: v1.RootFS{Type: "layers"}}
	m := v1.Manifest{SchemaVersion: 2, MediaType: types.OCIManifestSchema1}
	for i, b := range layers {
		h, _ := v1.NewHash(diffIDs[i])
		cfg.RootFS.DiffIDs = append(cfg.RootFS.DiffIDs, h)
		m.Layers = append(m.Layers, v1.Descriptor{MediaType: types.OCILayer, Size: int64(len(b)), Digest: l.put(b, "")})
	}
	cb, _ := json.Marshal(cfg)
	m.Config = v1.Descriptor{MediaType: types.OCIConfigJSON, Size: int64(len(cb)), Digest: l.put(cb, "")}
	mb, _ := json.Marshal(m)
	return v1.Descriptor{MediaType: types.OCIManifestSchema1, Size: int64(len(mb)), Digest: l.put(mb, "")}
}

// storeIsClean fails t unless the store holds no layer and nothing in tmp/.
func storeIsClean(t testing.TB, s *Store) {
	t.Helper()
	for _, d := range []string{filepath.Join(s.Root(), "layers", "sha256"), filepath.Join(s.Root(), "tmp")} {
		ents, err := os.ReadDir(d)
		if err != nil {
			t.Fatal(err)
		}
		if len(ents) != 0 {
			t.Fatalf("%s holds %d entries after a failed import (first %s)", d, len(ents), ents[0].Name())
		}
	}
}

var bg = context.Background()

func nullLogger() *log.Logger { return log.New(io.Discard, "", 0) }

func jsonUnmarshal(t testing.TB, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatal(err)
	}
}
