//go:build linux

package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/tupper-dev/tupper/internal/testenv"
)

// testImage is an image of two layers, the second sharing nothing with the first.
func testImage(t *testing.T, files ...string) v1.Image {
	t.Helper()
	img := empty.Image
	for _, f := range files {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		tw.WriteHeader(&tar.Header{Name: f, Mode: 0o644, Size: int64(len(f)), Typeflag: tar.TypeReg})
		io.WriteString(tw, f)
		tw.Close()
		l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf.Bytes())), nil })
		if err != nil {
			t.Fatal(err)
		}
		if img, err = mutate.AppendLayers(img, l); err != nil {
			t.Fatal(err)
		}
	}
	img, err := mutate.Config(img, v1.Config{Env: []string{"A=1"}, WorkingDir: "/w"})
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func TestTemplateCLI(t *testing.T) {
	testenv.RequireRoot(t) // layers keep their owners and hold whiteouts: root's to write
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	ref := strings.TrimPrefix(srv.URL, "http://") + "/cli/app:1"
	r, _ := name.ParseReference(ref)
	if err := remote.Write(r, testImage(t, "base", "app")); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(testImage(t, "base", "other")); err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()

	res := tupper(t, home, "", "template", "import", "app", ref, "--tag", "app:1")
	if res.code != 0 || res.stdout != "app\n" || !strings.Contains(res.stderr, "layer 2/2 sha256:") || !strings.Contains(res.stderr, "imported app (2 layers, 2 fetched") {
		t.Fatalf("import from a registry: %+v", res)
	}
	res = tupper(t, home, "", "template", "import", "other", dir)
	if res.code != 0 || !strings.Contains(res.stderr, "layer 1/2 sha256:") || !strings.Contains(res.stderr, ": in the store") {
		t.Fatalf("import of a layout sharing a layer: %+v", res)
	}

	res = tupper(t, home, "", "template", "ls", "--json")
	var ls struct {
		Templates []templateRow        `json:"templates"`
		Store     struct{ Layers int } `json:"store"`
	}
	if res.code != 0 || json.Unmarshal([]byte(res.stdout), &ls) != nil {
		t.Fatalf("ls --json: %+v", res)
	}
	// The provider's list: host, the store's, then debian, base and code-interpreter (built in,
	// not made yet).
	if len(ls.Templates) != 6 || ls.Templates[0].Name != "host" || !ls.Templates[0].Builtin ||
		ls.Templates[3].Name != "debian" || !ls.Templates[3].Builtin || ls.Templates[3].Layers != 0 ||
		ls.Templates[4].Name != "base" || !ls.Templates[4].Builtin ||
		ls.Templates[5].Name != "code-interpreter" || !ls.Templates[5].Builtin ||
		ls.Templates[1].Name != "app" || ls.Templates[1].Layers != 2 || ls.Templates[1].Size != int64(len("baseapp")) || ls.Templates[1].Tags[0] != "app:1" ||
		ls.Templates[2].Name != "other" || !strings.HasPrefix(ls.Templates[2].Source, "oci-layout:") || ls.Store.Layers != 3 {
		t.Fatalf("ls --json: %s", res.stdout)
	}
	res = tupper(t, home, "", "template", "ls")
	if res.code != 0 || !strings.Contains(res.stdout, "NAME") || !strings.Contains(res.stdout, "store: 3 layers") {
		t.Fatalf("ls: %+v", res)
	}

	res = tupper(t, home, "", "template", "inspect", "app:1")
	var in struct {
		Name      string
		Config    struct{ Env []string }
		LayerInfo []struct{ Files int }
	}
	if res.code != 0 || json.Unmarshal([]byte(res.stdout), &in) != nil || in.Name != "app" || in.Config.Env[0] != "A=1" || len(in.LayerInfo) != 2 || in.LayerInfo[0].Files != 1 {
		t.Fatalf("inspect: %+v", res)
	}

	res = tupper(t, home, "", "template", "rm", "app")
	if res.code != 0 || !strings.Contains(res.stderr, "in 1 layers") {
		t.Fatalf("rm: %+v", res)
	}
	res = tupper(t, home, "", "template", "inspect", "app")
	if res.code != exitTupperError || !strings.Contains(res.stderr, "tupper template ls") {
		t.Fatalf("inspect of a removed template: %+v", res)
	}
	if res = tupper(t, home, "", "template", "rm", "host"); res.code != exitTupperError {
		t.Fatalf("rm host: %+v", res)
	}
	if _, err := os.Stat(filepath.Join(home, "store", "templates", "other.json")); err != nil {
		t.Fatalf("the store is not under TUPPER_HOME: %v", err)
	}
}
