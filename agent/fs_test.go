//go:build linux

package agent_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"net/textproto"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tupper-dev/tupper/agent"
	"github.com/tupper-dev/tupper/agent/client"
)

// rawHTTP returns an http.Client for the agent's socket, for requests
// shaped like E2B's SDKs send.
func rawHTTP(sock string) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DisableCompression: true,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
	}}
}

func TestFileWriteReadRanged(t *testing.T) {
	ta := startAgent(t, agent.Config{})
	ctx := ctxT(t)
	dir := t.TempDir()
	p := filepath.Join(dir, "a/b/c.txt") // parents are created
	if err := ta.c.WriteFile(ctx, p, strings.NewReader("0123456789"), client.WriteOptions{Mode: 0o600}); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(p)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("stat %v %v", fi, err)
	}
	read := func(o client.ReadOptions) string {
		rc, err := ta.c.ReadFile(ctx, p, o)
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		b, _ := io.ReadAll(rc)
		return string(b)
	}
	if got := read(client.ReadOptions{}); got != "0123456789" {
		t.Errorf("read %q", got)
	}
	if got := read(client.ReadOptions{Offset: 3, Length: 4}); got != "3456" {
		t.Errorf("ranged read %q", got)
	}
	if got := read(client.ReadOptions{Offset: 8}); got != "89" {
		t.Errorf("tail read %q", got)
	}
	if got := read(client.ReadOptions{Offset: 100, Length: 5}); got != "" {
		t.Errorf("past end %q", got)
	}
	// Overwrite keeps the mode unless one is given.
	if err := ta.c.WriteFile(ctx, p, strings.NewReader("x"), client.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o600 || fi.Size() != 1 {
		t.Errorf("after overwrite: %v size %d", fi.Mode(), fi.Size())
	}
	_, err = ta.c.ReadFile(ctx, filepath.Join(dir, "missing"), client.ReadOptions{})
	if e := (*client.Error)(nil); !asErr(err, &e) || e.HTTPStatus != 404 || e.Code != client.CodeNotFound {
		t.Errorf("missing file: %v", err)
	}
	_, err = ta.c.ReadFile(ctx, dir, client.ReadOptions{})
	if e := (*client.Error)(nil); !asErr(err, &e) || e.HTTPStatus != 400 {
		t.Errorf("directory read: %v", err)
	}
	// Writing below a regular file is a client error.
	err = ta.c.WriteFile(ctx, filepath.Join(p, "x"), strings.NewReader("x"), client.WriteOptions{})
	if client.CodeOf(err) != client.CodeInvalidArgument {
		t.Errorf("write below a file: %v", err)
	}
}

func TestFilesRESTLikeE2B(t *testing.T) {
	ta := startAgent(t, agent.Config{})
	hc := rawHTTP(ta.sock)
	dir := t.TempDir()

	// Multipart, as the SDKs send it: part "file", filename the full path
	// (directories included), no path parameter for several files.
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	files := map[string]string{
		filepath.Join(dir, "one.txt"):                "1",
		filepath.Join(dir, "sub/dir/two.txt"):        "2",
		filepath.Join(dir, "x/../y/three.txt"):       "3", // names dir/y/three.txt
		"/../../.." + filepath.Join(dir, "four.txt"): "4", // ".." never climbs above /
	}
	var names []string
	for name := range files {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		h := textproto.MIMEHeader{}
		h.Set("Content-Disposition", fmt.Sprintf(`form-data; name="file"; filename="%s"`, name))
		h.Set("Content-Type", "application/octet-stream")
		w, _ := mw.CreatePart(h)
		io.WriteString(w, files[name])
	}
	mw.Close()
	resp, err := hc.Post("http://sandbox/files", mw.FormDataContentType(), &body)
	if err != nil {
		t.Fatal(err)
	}
	var got []map[string]string
	json.NewDecoder(resp.Body).Decode(&got)
	resp.Body.Close()
	if resp.StatusCode != 200 || len(got) != 4 {
		t.Fatalf("status %d, %v", resp.StatusCode, got)
	}
	for _, e := range got {
		if e["type"] != "file" || e["name"] != filepath.Base(e["path"]) || !strings.HasPrefix(e["path"], dir+"/") {
			t.Errorf("entry %v", e)
		}
	}
	for p, want := range map[string]string{"one.txt": "1", "sub/dir/two.txt": "2", "y/three.txt": "3", "four.txt": "4"} {
		if b, err := os.ReadFile(filepath.Join(dir, p)); err != nil || string(b) != want {
			t.Errorf("%s: %q %v", p, b, err)
		}
	}

	// Octet-stream with path, gzip-encoded.
	var gz bytes.Buffer
	zw := gzipWriter(&gz)
	io.WriteString(zw, "zipped")
	zw.Close()
	req, _ := http.NewRequest("POST", "http://sandbox/files?path="+filepath.Join(dir, "z.txt"), &gz)
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Set("Content-Encoding", "gzip")
	resp, err = hc.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("octet upload: %v %v", resp, err)
	}
	resp.Body.Close()
	if b, _ := os.ReadFile(filepath.Join(dir, "z.txt")); string(b) != "zipped" {
		t.Errorf("z.txt %q", b)
	}

	// GET /files: raw bytes; errors carry {"code","message"}.
	resp, err = hc.Get("http://sandbox/files?path=" + filepath.Join(dir, "one.txt"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "1" || resp.Header.Get("Content-Type") != "application/octet-stream" {
		t.Errorf("GET /files: %d %q %v", resp.StatusCode, b, resp.Header)
	}
	resp, _ = hc.Get("http://sandbox/files?path=" + filepath.Join(dir, "nope"))
	var e struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
	json.NewDecoder(resp.Body).Decode(&e)
	resp.Body.Close()
	if resp.StatusCode != 404 || e.Code != 404 || e.Message == "" {
		t.Errorf("404 body %+v", e)
	}
	resp, _ = hc.Get("http://sandbox/health")
	if resp.StatusCode != 204 {
		t.Errorf("health %d", resp.StatusCode)
	}
	resp.Body.Close()
}

func asErr(err error, target **client.Error) bool {
	e, ok := err.(*client.Error)
	if ok {
		*target = e
	}
	return ok
}

func TestFilesystemRPC(t *testing.T) {
	ta := startAgent(t, agent.Config{})
	ctx := ctxT(t)
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "f.txt"), []byte("hello"), 0o640)
	os.MkdirAll(filepath.Join(dir, "d/e/f"), 0o755)
	os.WriteFile(filepath.Join(dir, "d/e/deep.txt"), nil, 0o644)
	os.Symlink("f.txt", filepath.Join(dir, "link"))

	fi, err := ta.c.Stat(ctx, filepath.Join(dir, "f.txt"))
	if err != nil {
		t.Fatal(err)
	}
	uid, gid := os.Getuid(), os.Getgid()
	_ = gid
	if fi.Name != "f.txt" || fi.Type != client.FileTypeFile || fi.Size != 5 || fi.Mode != 0o640 ||
		fi.Permissions != "-rw-r-----" || fi.Owner == "" || fi.Group == "" || time.Since(fi.ModTime) > time.Minute ||
		fi.Path != filepath.Join(dir, "f.txt") {
		t.Errorf("stat %+v (uid %d)", fi, uid)
	}
	if uid == 0 && fi.Owner != "root" {
		t.Errorf("owner %q", fi.Owner)
	}
	li, err := ta.c.Stat(ctx, filepath.Join(dir, "link"))
	if err != nil || li.SymlinkTarget != filepath.Join(dir, "f.txt") || li.Type != client.FileTypeFile || !strings.HasPrefix(li.Permissions, "L") {
		t.Errorf("symlink %+v %v", li, err)
	}
	if _, err := ta.c.Stat(ctx, filepath.Join(dir, "nope")); !client.IsNotFound(err) {
		t.Errorf("stat missing: %v", err)
	}

	list, err := ta.c.ListDir(ctx, dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := entryPaths(list, dir); !slices.Equal(got, []string{"d", "f.txt", "link"}) {
		t.Errorf("depth 1: %v", got)
	}
	list, _ = ta.c.ListDir(ctx, dir, 2)
	if got := entryPaths(list, dir); !slices.Equal(got, []string{"d", "d/e", "f.txt", "link"}) {
		t.Errorf("depth 2: %v", got)
	}
	list, _ = ta.c.ListDir(ctx, dir, 5)
	if got := entryPaths(list, dir); !slices.Equal(got, []string{"d", "d/e", "d/e/deep.txt", "d/e/f", "f.txt", "link"}) {
		t.Errorf("depth 5: %v", got)
	}
	if _, err := ta.c.ListDir(ctx, filepath.Join(dir, "f.txt"), 1); client.CodeOf(err) != client.CodeInvalidArgument {
		t.Errorf("list a file: %v", err)
	}
	if _, err := ta.c.ListDir(ctx, filepath.Join(dir, "nope"), 1); !client.IsNotFound(err) {
		t.Errorf("list missing: %v", err)
	}

	created, err := ta.c.MakeDir(ctx, filepath.Join(dir, "m/n"))
	if err != nil || !created {
		t.Errorf("mkdir: %v %v", created, err)
	}
	created, err = ta.c.MakeDir(ctx, filepath.Join(dir, "m/n"))
	if err != nil || created {
		t.Errorf("mkdir again: %v %v", created, err)
	}
	if _, err := ta.c.MakeDir(ctx, filepath.Join(dir, "f.txt")); client.CodeOf(err) != client.CodeInvalidArgument {
		t.Errorf("mkdir over file: %v", err)
	}

	mi, err := ta.c.Move(ctx, filepath.Join(dir, "f.txt"), filepath.Join(dir, "new/place/g.txt"))
	if err != nil || mi.Name != "g.txt" || mi.Size != 5 {
		t.Errorf("move %+v %v", mi, err)
	}
	if _, err := ta.c.Move(ctx, filepath.Join(dir, "f.txt"), filepath.Join(dir, "h.txt")); !client.IsNotFound(err) {
		t.Errorf("move missing: %v", err)
	}
	if err := ta.c.Remove(ctx, filepath.Join(dir, "d")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "d")); !os.IsNotExist(err) {
		t.Errorf("remove left %v", err)
	}
}

func entryPaths(list []client.FileInfo, dir string) []string {
	var out []string
	for _, e := range list {
		rel, _ := filepath.Rel(dir, e.Path)
		out = append(out, rel)
	}
	slices.Sort(out)
	return out
}

func TestListDirRawJSON(t *testing.T) {
	ta := startAgent(t, agent.Config{})
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "a.txt"), []byte("abc"), 0o644)
	req, _ := http.NewRequest("POST", "http://sandbox/filesystem.Filesystem/ListDir",
		strings.NewReader(fmt.Sprintf(`{"path":%q,"depth":1}`, dir)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Connect-Protocol-Version", "1")
	resp, err := rawHTTP(ta.sock).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Entries []map[string]any `json:"entries"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != 200 || len(out.Entries) != 1 {
		t.Fatalf("%d %v %v", resp.StatusCode, out, err)
	}
	e := out.Entries[0]
	if e["name"] != "a.txt" || e["type"] != "FILE_TYPE_FILE" || e["size"] != "3" || e["permissions"] != "-rw-r--r--" ||
		e["modifiedTime"] == nil || e["path"] != filepath.Join(dir, "a.txt") || e["mode"] != float64(0o644) {
		t.Errorf("entry %v", e)
	}
	// not_found as a Connect JSON error.
	req, _ = http.NewRequest("POST", "http://sandbox/filesystem.Filesystem/Stat", strings.NewReader(`{"path":"/no/such"}`))
	req.Header.Set("Content-Type", "application/json")
	resp2, err := rawHTTP(ta.sock).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp2.Body.Close()
	var ce struct{ Code string }
	json.NewDecoder(resp2.Body).Decode(&ce)
	if resp2.StatusCode != 404 || ce.Code != "not_found" {
		t.Errorf("stat missing: %d %+v", resp2.StatusCode, ce)
	}
}

func TestWatch(t *testing.T) {
	ta := startAgent(t, agent.Config{})
	ctx := ctxT(t)
	dir := t.TempDir()
	w, err := ta.c.Watch(ctx, dir, true)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	expect := func(name string, op client.WatchOp) {
		t.Helper()
		for {
			ev, err := w.Next()
			if err != nil {
				t.Fatalf("waiting for %s %s: %v", op, name, err)
			}
			if ev.Name == name && ev.Op == op {
				return
			}
		}
	}
	f := filepath.Join(dir, "a.txt")
	os.WriteFile(f, []byte("x"), 0o644)
	expect("a.txt", client.OpCreate)
	expect("a.txt", client.OpWrite)
	os.Chmod(f, 0o600)
	expect("a.txt", client.OpChmod)
	os.Rename(f, filepath.Join(dir, "b.txt"))
	expect("a.txt", client.OpRename)
	expect("b.txt", client.OpCreate)
	os.MkdirAll(filepath.Join(dir, "sub/deeper"), 0o755) // recursive: new directories are watched
	expect("sub", client.OpCreate)
	expect("sub/deeper", client.OpCreate)
	time.Sleep(20 * time.Millisecond)
	os.WriteFile(filepath.Join(dir, "sub/deeper/c.txt"), nil, 0o644)
	expect("sub/deeper/c.txt", client.OpCreate)
	os.Remove(filepath.Join(dir, "b.txt"))
	expect("b.txt", client.OpRemove)

	if _, err := ta.c.Watch(ctx, filepath.Join(dir, "nope"), false); !client.IsNotFound(err) {
		t.Errorf("watch missing: %v", err)
	}
}

func TestTunnel(t *testing.T) {
	ta := startAgent(t, agent.Config{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.(*net.TCPConn).CloseWrite() }()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	conn, err := ta.c.DialPort(ctxT(t), port)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	msg := strings.Repeat("ping through the tunnel ", 10000)
	go func() {
		io.WriteString(conn, msg)
		conn.(interface{ CloseWrite() error }).CloseWrite()
	}()
	got, err := io.ReadAll(conn)
	if err != nil || string(got) != msg {
		t.Errorf("echo: %d bytes, %v", len(got), err)
	}
	// A closed port is a 502 from the agent.
	ln2, _ := net.Listen("tcp", "127.0.0.1:0")
	closed := ln2.Addr().(*net.TCPAddr).Port
	ln2.Close()
	if _, err := ta.c.DialPort(ctxT(t), closed); client.CodeOf(err) != client.CodeUnavailable {
		t.Errorf("closed port: %v", err)
	}
}

func gzipWriter(w io.Writer) io.WriteCloser { return gzip.NewWriter(w) }

// File metadata as E2B's SDKs send it (envd 0.6.2): X-Metadata-* headers on POST /files,
// kept in user.e2b.* attributes, reported by the upload, stat, list and move, cleared by a
// write without it; a bad header is refused before the file changes.
func TestFileMetadata(t *testing.T) {
	ta := startAgent(t, agent.Config{})
	hc := rawHTTP(ta.sock)
	dir := t.TempDir()
	if err := unix.Setxattr(dir, "user.probe", []byte("x"), 0); err != nil {
		t.Skipf("%s keeps no user extended attributes: %v", dir, err)
	}
	ctx := ctxT(t)
	post := func(path, content string, hdr map[string]string) (int, []map[string]any) {
		t.Helper()
		req, _ := http.NewRequest("POST", "http://sandbox/files?path="+path, strings.NewReader(content))
		req.Header.Set("Content-Type", "application/octet-stream")
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out []map[string]any
		if resp.StatusCode == 200 {
			if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
				t.Fatal(err)
			}
		}
		return resp.StatusCode, out
	}
	f := filepath.Join(dir, "m.txt")
	code, out := post(f, "one", map[string]string{"X-Metadata-Author": "mish", "x-metadata-purpose": "up load"})
	want := map[string]string{"author": "mish", "purpose": "up load"}
	if code != 200 || len(out) != 1 || fmt.Sprint(out[0]["metadata"]) != fmt.Sprint(want) {
		t.Fatalf("upload: %d %v", code, out)
	}
	fi, err := ta.c.Stat(ctx, f)
	if err != nil || fmt.Sprint(fi.Metadata) != fmt.Sprint(want) {
		t.Errorf("stat: %v %v", fi.Metadata, err)
	}
	list, err := ta.c.ListDir(ctx, dir, 1)
	if err != nil || len(list) != 1 || fmt.Sprint(list[0].Metadata) != fmt.Sprint(want) {
		t.Errorf("list: %+v %v", list, err)
	}
	moved := filepath.Join(dir, "n.txt")
	if fi, err := ta.c.Move(ctx, f, moved); err != nil || fmt.Sprint(fi.Metadata) != fmt.Sprint(want) {
		t.Errorf("move: %v %v", fi.Metadata, err)
	}

	// Bad metadata: refused, and the file is as it was.
	for _, hdr := range []map[string]string{
		{"X-Metadata-Author": "caf\u00e9"},            // not US-ASCII
		{"X-Metadata-Big": strings.Repeat("v", 5000)}, // over the size bound
		{"X-Metadata-Ctl": "a\tb"},                    // a control byte
	} {
		if code, _ := post(moved, "clobbered", hdr); code != 400 {
			t.Errorf("%v: status %d, want 400", hdr, code)
		}
		if b, _ := os.ReadFile(moved); string(b) != "one" {
			t.Errorf("a refused upload changed the file: %q", b)
		}
	}

	// Another write replaces the metadata; one without headers clears it.
	if code, out := post(moved, "two", map[string]string{"X-Metadata-Stage": "2"}); code != 200 || fmt.Sprint(out[0]["metadata"]) != "map[stage:2]" {
		t.Errorf("rewrite: %d %v", code, out)
	}
	if fi, _ := ta.c.Stat(ctx, moved); fmt.Sprint(fi.Metadata) != "map[stage:2]" {
		t.Errorf("after rewrite: %v", fi.Metadata)
	}
	if code, out := post(moved, "three", nil); code != 200 || out[0]["metadata"] != nil {
		t.Errorf("plain rewrite: %d %v", code, out)
	}
	if fi, _ := ta.c.Stat(ctx, moved); fi.Metadata != nil {
		t.Errorf("metadata survived a write without it: %v", fi.Metadata)
	}
	if b, _ := os.ReadFile(moved); string(b) != "three" {
		t.Errorf("content %q", b)
	}

	// Attributes set inside the sandbox are reported the same way; others are not.
	if err := unix.Setxattr(moved, "user.e2b.owner", []byte("tool"), 0); err != nil {
		t.Fatal(err)
	}
	if err := unix.Setxattr(moved, "user.other", []byte("no"), 0); err != nil {
		t.Fatal(err)
	}
	if fi, _ := ta.c.Stat(ctx, moved); fmt.Sprint(fi.Metadata) != "map[owner:tool]" {
		t.Errorf("setfattr's metadata: %v", fi.Metadata)
	}
}
