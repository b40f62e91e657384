//go:build linux

package template

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/klauspost/compress/zstd"
	"golang.org/x/sys/unix"

	"github.com/tupper-dev/tupper/provider"
)

// baseTar is a layer with one of every kind of entry an image has.
func baseTar(t testing.TB) []byte {
	return tarOf(t,
		ent{name: "etc/", typ: tar.TypeDir},
		ent{name: "etc/os-release", body: "ID=test\n"},
		ent{name: "usr/bin/", typ: tar.TypeDir},
		ent{name: "usr/bin/su", body: "#!su\n", mode: 0o4755},
		ent{name: "usr/bin/su2", typ: tar.TypeLink, link: "usr/bin/su"},
		ent{name: "usr/bin/sh-link", typ: tar.TypeSymlink, link: "/bin/sh"},
		ent{name: "home/user/", typ: tar.TypeDir, uid: 1000, gid: 1000, mode: 0o700},
		ent{name: "home/user/notes", body: "hi", uid: 1000, gid: 1000, mode: 0o600},
		ent{name: "etc/x", body: "x", pax: map[string]string{"SCHILY.xattr.user.note": "kept", "SCHILY.xattr.trusted.overlay.redirect": "/etc"}},
		ent{name: "dev/sda", typ: tar.TypeBlock, major: 8},
		ent{name: "run/fifo", typ: tar.TypeFifo},
		ent{name: "opt/old/", typ: tar.TypeDir},
		ent{name: "opt/old/a", body: "a"},
		ent{name: "var/gone", body: "g"},
	)
}

// topTar hides what baseTar has in opt/old and var/gone.
func topTar(t testing.TB) []byte {
	return tarOf(t,
		ent{name: "opt/old/", typ: tar.TypeDir},
		ent{name: "opt/old/.wh..wh..opq"},
		ent{name: "opt/old/b", body: "b"},
		ent{name: "var/.wh.gone"},
	)
}

var testConfig = v1.Config{
	Env: []string{"PATH=/usr/bin", "LANG=C.UTF-8"}, WorkingDir: "/srv", User: "1000:1000",
	Entrypoint: []string{"/bin/sh", "-c"}, Cmd: []string{"echo hi"}, Labels: map[string]string{"a": "b"},
	ExposedPorts: map[string]struct{}{"8080/tcp": {}, "53/udp": {}},
}

func lstat(t *testing.T, p string) *unix.Stat_t {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	return &st
}

// checkBase checks that baseTar and topTar were unpacked as an overlay wants them.
func checkBase(t *testing.T, s *Store, tp *Template) {
	t.Helper()
	if len(tp.Layers) != 2 || !s.HasLayer(tp.Layers[0]) || !s.HasLayer(tp.Layers[1]) {
		t.Fatalf("layers %v", tp.Layers)
	}
	if want := digestOf(baseTar(t)); tp.Layers[0] != want {
		t.Fatalf("base layer %s, want the digest of its tar %s", tp.Layers[0], want)
	}
	base, top := s.LayerFS(tp.Layers[0]), s.LayerFS(tp.Layers[1])
	if b, err := os.ReadFile(filepath.Join(base, "etc/os-release")); err != nil || string(b) != "ID=test\n" {
		t.Fatalf("os-release: %q, %v", b, err)
	}
	su := lstat(t, filepath.Join(base, "usr/bin/su"))
	if su.Mode&0o7777 != 0o4755 || su.Uid != 0 {
		t.Fatalf("su mode %o uid %d: want setuid 4755 root", su.Mode&0o7777, su.Uid)
	}
	if su2 := lstat(t, filepath.Join(base, "usr/bin/su2")); su2.Ino != su.Ino {
		t.Fatal("hard link su2 is not su")
	}
	if l, err := os.Readlink(filepath.Join(base, "usr/bin/sh-link")); err != nil || l != "/bin/sh" {
		t.Fatalf("symlink: %q, %v", l, err)
	}
	home := lstat(t, filepath.Join(base, "home/user"))
	if home.Uid != 1000 || home.Gid != 1000 || home.Mode&0o777 != 0o700 || home.Mtim.Sec != epoch.Unix() {
		t.Fatalf("home/user: uid %d gid %d mode %o mtime %d", home.Uid, home.Gid, home.Mode&0o777, home.Mtim.Sec)
	}
	if n := lstat(t, filepath.Join(base, "home/user/notes")); n.Uid != 1000 || n.Mtim.Sec != epoch.Unix() {
		t.Fatalf("notes: uid %d mtime %d", n.Uid, n.Mtim.Sec)
	}
	buf := make([]byte, 64)
	if n, err := unix.Lgetxattr(filepath.Join(base, "etc/x"), "user.note", buf); err != nil || string(buf[:n]) != "kept" {
		t.Fatalf("user.note: %q, %v", buf[:n], err)
	}
	if _, err := unix.Lgetxattr(filepath.Join(base, "etc/x"), "trusted.overlay.redirect", buf); err == nil {
		t.Fatal("an image's trusted.overlay.redirect was kept")
	}
	if _, err := os.Lstat(filepath.Join(base, "dev/sda")); !os.IsNotExist(err) {
		t.Fatalf("block device unpacked: %v", err)
	}
	if fi := lstat(t, filepath.Join(base, "run/fifo")); fi.Mode&unix.S_IFMT != unix.S_IFIFO {
		t.Fatalf("fifo is %o", fi.Mode)
	}
	if l, err := s.Layer(tp.Layers[0]); err != nil || l.Skipped != 1 || l.Size != int64(len("ID=test\n#!su\nhixag")) {
		t.Fatalf("base layer meta %+v, %v", l, err)
	}
	if n, err := unix.Lgetxattr(filepath.Join(top, "opt/old"), "trusted.overlay.opaque", buf); err != nil || string(buf[:n]) != "y" {
		t.Fatalf("opaque: %q, %v", buf[:n], err)
	}
	wh := lstat(t, filepath.Join(top, "var/gone"))
	if wh.Mode&unix.S_IFMT != unix.S_IFCHR || wh.Rdev != 0 {
		t.Fatalf("whiteout: mode %o rdev %d", wh.Mode, wh.Rdev)
	}
	if _, err := os.Lstat(filepath.Join(top, "var/.wh.gone")); !os.IsNotExist(err) {
		t.Fatal("the .wh. file itself was unpacked")
	}
}

func TestImportFromRegistry(t *testing.T) {
	needRoot(t)
	reg := newRegistry(t)
	amd := imageOf(t, "amd64", testConfig, baseTar(t), topTar(t))
	arm := imageOf(t, "arm64", v1.Config{Cmd: []string{"arm"}}, tarOf(t, ent{name: "arm", body: "64"}))
	pushIndex(t, reg+"/team/app:1", map[string]v1.Image{"amd64": amd, "arm64": arm})
	amdDigest, _ := amd.Digest()

	s := newStore(t)
	var reports []Progress
	tp, err := s.Import(bg, "app", Source{Ref: reg + "/team/app:1"}, ImportOptions{Platform: "linux/amd64", Tags: []string{"app:1"}, Progress: func(p Progress) { reports = append(reports, p) }})
	if err != nil {
		t.Fatal(err)
	}
	checkBase(t, s, tp)
	want := Config{Env: testConfig.Env, WorkingDir: "/srv", User: "1000:1000", Entrypoint: testConfig.Entrypoint, Cmd: testConfig.Cmd, Labels: testConfig.Labels, ExposedPorts: []string{"53/udp", "8080/tcp"}}
	if !reflect.DeepEqual(tp.Config, want) {
		t.Fatalf("config %+v, want %+v", tp.Config, want)
	}
	if tp.Digest != amdDigest.String() || tp.Source != reg+"/team/app@"+amdDigest.String() {
		t.Fatalf("digest %s source %s; want %s", tp.Digest, tp.Source, amdDigest)
	}
	if got, err := s.Get("app:1"); err != nil || got.Name != "app" {
		t.Fatalf("Get by tag: %v, %v", got, err)
	}
	var done int
	for _, p := range reports {
		if p.Layers != 2 || p.Cached {
			t.Fatalf("progress %+v", p)
		}
		if p.Done {
			done++
		}
	}
	if done != 2 {
		t.Fatalf("%d layers reported done: %+v", done, reports)
	}

	// By digest, the layers are in the store already: nothing is fetched.
	reports = nil
	again, err := s.Import(bg, "again", Source{Ref: reg + "/team/app@" + amdDigest.String()}, ImportOptions{Progress: func(p Progress) { reports = append(reports, p) }})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(again.Layers, tp.Layers) || len(reports) != 2 || !reports[0].Cached || !reports[1].Cached {
		t.Fatalf("layers %v, progress %+v", again.Layers, reports)
	}

	armT, err := s.Import(bg, "arm", Source{Ref: reg + "/team/app:1"}, ImportOptions{Platform: "linux/arm64"})
	if err != nil {
		t.Fatal(err)
	}
	if len(armT.Layers) != 1 || armT.Config.Cmd[0] != "arm" {
		t.Fatalf("arm64 template %+v", armT)
	}
	if _, err := s.Import(bg, "none", Source{Ref: reg + "/team/app:1"}, ImportOptions{Platform: "linux/s390x"}); provider.CodeOf(err) != provider.CodeNotFound || !strings.Contains(err.Error(), "linux/amd64, linux/arm64") {
		t.Fatalf("a platform the index lacks: %v", err)
	}
	if _, err := s.Import(bg, "none", Source{Ref: reg + "/team/nothing:1"}, ImportOptions{}); provider.CodeOf(err) != provider.CodeNotFound {
		t.Fatalf("a missing image: %v", err)
	}

	// Two templates share two layers: stored, and counted, once.
	u, err := s.Usage()
	if err != nil {
		t.Fatal(err)
	}
	amdSize := u.Templates["app"]
	if amdSize == 0 || u.Templates["again"] != amdSize || u.Layers != 3 || u.Bytes != amdSize+u.Templates["arm"] || u.Unreferenced != 0 {
		t.Fatalf("usage %+v", u)
	}
	if _, err := s.Remove(bg, "again", RemoveOptions{}); err != nil {
		t.Fatal(err)
	}
	if p, err := s.Prune(bg); err != nil || p.Layers != 0 {
		t.Fatalf("prune with every layer in use: %+v, %v", p, err)
	}
	inUse := func(_ context.Context, name string) ([]string, error) { return []string{"sb-1"}, nil }
	if _, err := s.Remove(bg, "app:1", RemoveOptions{InUse: inUse}); provider.CodeOf(err) != provider.CodeConflict {
		t.Fatalf("removing a template in use: %v", err)
	}
	if _, err := s.Remove(bg, "app:1", RemoveOptions{InUse: inUse, Force: true}); err != nil {
		t.Fatal(err)
	}
	p, err := s.Prune(bg)
	if err != nil || p.Layers != 2 || p.Bytes != amdSize {
		t.Fatalf("prune: %+v, %v", p, err)
	}
	if s.HasLayer(tp.Layers[0]) || !s.HasLayer(armT.Layers[0]) {
		t.Fatal("prune removed the wrong layers")
	}
}

// TestImportConcurrently: two imports of one image share its layers, unpacked once.
func TestImportConcurrently(t *testing.T) {
	needRoot(t)
	reg := newRegistry(t)
	push(t, reg+"/x:1", imageOf(t, "amd64", testConfig, baseTar(t), topTar(t)))
	s := newStore(t)
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = s.Import(bg, "t"+string(rune('a'+i)), Source{Ref: reg + "/x:1"}, ImportOptions{})
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	u, err := s.Usage()
	if err != nil || u.Layers != 2 || len(u.Templates) != 4 {
		t.Fatalf("usage %+v, %v", u, err)
	}
	storeIsCleanTmp(t, s)
}

func storeIsCleanTmp(t *testing.T, s *Store) {
	t.Helper()
	ents, _ := os.ReadDir(filepath.Join(s.Root(), "tmp"))
	if len(ents) != 0 {
		t.Fatalf("tmp/ holds %d entries", len(ents))
	}
}

func TestImportRegistryCredentials(t *testing.T) {
	needRoot(t)
	h := registry.New(registry.Logger(nullLogger()))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != "alice" || p != "s3cret" {
			w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	ref, _ := name.ParseReference(host + "/private:1")
	img := imageOf(t, "amd64", v1.Config{}, tarOf(t, ent{name: "secret", body: "s"}))
	if err := remote.Write(ref, img, remote.WithAuth(&authn.Basic{Username: "alice", Password: "s3cret"})); err != nil {
		t.Fatal(err)
	}
	s := newStore(t)
	t.Setenv("DOCKER_CONFIG", t.TempDir())
	if _, err := s.Import(bg, "p", Source{Ref: host + "/private:1"}, ImportOptions{}); provider.CodeOf(err) != provider.CodeUnauthorized {
		t.Fatalf("without credentials: %v", err)
	}
	cfg := map[string]any{"auths": map[string]any{host: map[string]string{"auth": base64.StdEncoding.EncodeToString([]byte("alice:s3cret"))}}}
	b, _ := json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(os.Getenv("DOCKER_CONFIG"), "config.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Import(bg, "p", Source{Ref: host + "/private:1"}, ImportOptions{}); err != nil {
		t.Fatalf("with the Docker config's credentials: %v", err)
	}
}

func TestHTTPOnlyToLoopback(t *testing.T) {
	g := httpGuard{base: roundTripFunc(func(*http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: 200, Body: http.NoBody}, nil
	})}
	for url, ok := range map[string]bool{
		"http://127.0.0.1:5000/v2/": true, "http://localhost:5000/v2/": true, "http://[::1]:5000/v2/": true,
		"http://10.1.2.3:5000/v2/": false, "http://registry.local/v2/": false, "https://10.1.2.3/v2/": true,
	} {
		req, _ := http.NewRequest("GET", url, nil)
		_, err := g.RoundTrip(req)
		if (err == nil) != ok {
			t.Errorf("%s: %v, want allowed=%v", url, err, ok)
		}
	}
	g.insecure = true
	req, _ := http.NewRequest("GET", "http://10.1.2.3:5000/v2/", nil)
	if _, err := g.RoundTrip(req); err != nil {
		t.Errorf("insecure: %v", err)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestImportDockerArchive(t *testing.T) {
	needRoot(t)
	img := imageOf(t, "amd64", testConfig, baseTar(t), topTar(t))
	tag, _ := name.NewTag("example/app:1")
	path := filepath.Join(t.TempDir(), "app.tar")
	if err := tarball.WriteToFile(path, tag, img); err != nil {
		t.Fatal(err)
	}
	s := newStore(t)
	tp, err := s.Import(bg, "app", SourceOf(path), ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	checkBase(t, s, tp)
	if tp.Config.WorkingDir != "/srv" || !strings.HasPrefix(tp.Source, "docker-archive:") {
		t.Fatalf("%+v", tp)
	}
}

func TestImportOCILayout(t *testing.T) {
	needRoot(t)
	img := imageOf(t, "amd64", testConfig, baseTar(t), topTar(t))
	dir := t.TempDir()
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(img); err != nil {
		t.Fatal(err)
	}
	s := newStore(t)
	tp, err := s.Import(bg, "dir", SourceOf(dir), ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	checkBase(t, s, tp)
	d, _ := img.Digest()
	if tp.Digest != d.String() {
		t.Fatalf("digest %s, want %s", tp.Digest, d)
	}

	// The same layout as a tar, into a fresh store.
	archive := filepath.Join(t.TempDir(), "layout.tar")
	if out, err := exec.Command("tar", "-C", dir, "-cf", archive, ".").CombinedOutput(); err != nil {
		t.Fatalf("tar: %v\n%s", err, out)
	}
	s2 := newStore(t)
	tp2, err := s2.Import(bg, "tar", SourceOf(archive), ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	checkBase(t, s2, tp2)
	if !strings.HasPrefix(tp2.Source, "oci-archive:") {
		t.Fatalf("source %s", tp2.Source)
	}
	storeIsCleanTmp(t, s2)
}

func TestImportRootFS(t *testing.T) {
	needRoot(t)
	plain := tarOf(t, ent{name: "./", typ: tar.TypeDir, mode: 0o755}, ent{name: "./bin/", typ: tar.TypeDir}, ent{name: "./bin/hello", body: "#!/bin/sh\necho hello\n", mode: 0o755})
	var zs bytes.Buffer
	zw, _ := zstd.NewWriter(&zs)
	zw.Write(plain)
	zw.Close()
	dir := t.TempDir()
	s := newStore(t)
	var first string
	for ext, b := range map[string][]byte{"tar": plain, "tar.gz": gz(t, plain), "tar.zst": zs.Bytes()} {
		path := filepath.Join(dir, "root."+ext)
		os.WriteFile(path, b, 0o644)
		tp, err := s.Import(bg, "root-"+strings.ReplaceAll(ext, ".", "-"), SourceOf(path), ImportOptions{})
		if err != nil {
			t.Fatalf("%s: %v", ext, err)
		}
		if len(tp.Layers) != 1 || tp.Layers[0] != digestOf(plain) {
			t.Fatalf("%s: layers %v, want the plain tar's digest %s", ext, tp.Layers, digestOf(plain))
		}
		first = tp.Layers[0]
		if b, err := os.ReadFile(filepath.Join(s.LayerFS(first), "bin/hello")); err != nil || !strings.Contains(string(b), "echo hello") {
			t.Fatalf("%s: %q, %v", ext, b, err)
		}
	}
	if u, _ := s.Usage(); u.Layers != 1 {
		t.Fatalf("three compressions of one tar make %d layers", u.Layers)
	}
}

// TestAddLayer: a build's layer, from WriteTree of a directory, goes into the store as an
// imported one would, and a second copy of the same content is the same layer.
func TestAddLayer(t *testing.T) {
	needRoot(t)
	src := t.TempDir()
	os.MkdirAll(filepath.Join(src, "usr", "bin"), 0o755)
	os.WriteFile(filepath.Join(src, "usr", "bin", "tool"), []byte("#!/bin/sh\n"), 0o755)
	os.Symlink("../escape", filepath.Join(src, "link"))
	var buf bytes.Buffer
	if err := WriteTree(bg, &buf, src, TreeOptions{}); err != nil {
		t.Fatal(err)
	}
	s := newStore(t)
	l, err := s.AddLayer(bg, bytes.NewReader(buf.Bytes()), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if l.DiffID != digestOf(buf.Bytes()) || l.Files < 3 || !s.HasLayer(l.DiffID) {
		t.Fatalf("layer %+v", l)
	}
	if b, err := os.ReadFile(filepath.Join(s.LayerFS(l.DiffID), "usr/bin/tool")); err != nil || string(b) != "#!/bin/sh\n" {
		t.Fatalf("tool: %q, %v", b, err)
	}
	again, err := s.AddLayer(bg, bytes.NewReader(gz(t, buf.Bytes())), Limits{})
	if err != nil || again.DiffID != l.DiffID {
		t.Fatalf("the same content again: %+v, %v", again, err)
	}
	if _, err := s.AddLayer(bg, bytes.NewReader(tarOf(t, ent{name: "../x", body: "x"})), Limits{}); provider.CodeOf(err) != provider.CodeInvalidArgument {
		t.Fatalf("a hostile layer: %v", err)
	}
	storeIsCleanTmp(t, s)
}

// TestPullBaseRefWithPath: a build's FROM of an image reference with a path (a registry, an
// organisation) is imported and tagged with the reference, so that the next build finds it
// without asking the registry again; an image whose repository is called like a built-in
// template does not take that template's name.
func TestPullBaseRefWithPath(t *testing.T) {
	needRoot(t)
	reg := newRegistry(t)
	ref := reg + "/library/debian:12"
	push(t, ref, imageOf(t, "amd64", testConfig, baseTar(t)))
	s := newStore(t)
	tp, err := s.PullBase(bg, ref, nil)
	if err != nil {
		t.Fatalf("PullBase(%s): %v", ref, err)
	}
	if tp.Name != "debian-12" || len(tp.Tags) != 1 || tp.Tags[0] != ref {
		t.Errorf("imported as %s tagged %q", tp.Name, tp.Tags)
	}
	again, err := s.Ensure(bg, ref, EnsureOptions{})
	if err != nil || again.Name != tp.Name {
		t.Errorf("Ensure(%s) after the import: %v, %v", ref, again, err)
	}
	for ref, want := range map[string]string{"docker.io/library/debian": "debian-image", "e2bdev/base": "base-image", "ghcr.io/org/app:1.2": "app-1.2"} {
		if got := ImportName(ref); got != want {
			t.Errorf("ImportName(%s) = %s, want %s", ref, got, want)
		}
	}
}
