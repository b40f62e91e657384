//go:build linux

package server_test

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tupper-dev/tupper/server"
	"github.com/tupper-dev/tupper/server/servertest"
	"github.com/tupper-dev/tupper/template"
)

// tarEntry is an entry of a test's build context.
type tarEntry struct {
	name, body, link string
	typ              byte
}

func contextTar(t *testing.T, gz bool, ents ...tarEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	var w io.Writer = &buf
	var zw *gzip.Writer
	if gz {
		zw = gzip.NewWriter(&buf)
		w = zw
	}
	tw := tar.NewWriter(w)
	for _, e := range ents {
		h := &tar.Header{Name: e.name, Mode: 0o644, Typeflag: e.typ, Linkname: e.link, Size: int64(len(e.body))}
		if h.Typeflag == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Typeflag != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		io.WriteString(tw, e.body)
	}
	tw.Close()
	if zw != nil {
		zw.Close()
	}
	return buf.Bytes()
}

// buildBody is a multipart build request: the build's JSON, then the context (if not nil).
func buildBody(t *testing.T, build map[string]any, ctxTar []byte) (string, []byte) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	pw, _ := mw.CreateFormField("build")
	json.NewEncoder(pw).Encode(build)
	if ctxTar != nil {
		fw, _ := mw.CreateFormFile("context", "context.tar")
		fw.Write(ctxTar)
	}
	mw.Close()
	return mw.FormDataContentType(), buf.Bytes()
}

func send(t *testing.T, method, url, key, ctype string, body []byte, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp, data
}

type buildStatus struct {
	ID, Template, State string
	Layers              []string
	Error               *struct {
		Code, Message, Instruction, Output string
		Line, ExitCode                     int
	}
}

// followBuild reads the build's log as NDJSON until its end event and returns the log's text
// and the final status.
func followBuild(t *testing.T, srv *servertest.Server, id string) (string, buildStatus) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/v1/templates/builds/"+id+"/logs", nil)
	req.Header.Set("Authorization", "Bearer "+srv.Key)
	req.Header.Set("Accept", "application/x-ndjson")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var log strings.Builder
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 8<<20)
	for sc.Scan() {
		var ev struct {
			Type, Text string
		}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("log line %q: %v", sc.Text(), err)
		}
		if ev.Type == "end" {
			var st buildStatus
			json.Unmarshal(sc.Bytes(), &st)
			return log.String(), st
		}
		log.WriteString(ev.Text + "\n")
	}
	t.Fatalf("the log stream ended without an end event (%v):\n%s", sc.Err(), log.String())
	return "", buildStatus{}
}

// TestTemplateBuildAPI builds templates through POST /v1/templates on the local provider:
// from a busybox template, a context upload and a Dockerfile in it; the log followed as a
// stream, a sandbox of the result, the events, a cached rebuild, a failing step and a
// cancelled one (neither leaves a template), builds being their key's, and every refusal
// of hostile input.
func TestTemplateBuildAPI(t *testing.T) {
	prov := servertest.Local(t, 61)
	servertest.BusyboxTemplate(t, prov, "bb")
	const limit = 64 << 10
	srv := servertest.Start(t, prov, "", func(c *server.Config) { c.MaxBuildContextBytes = limit })
	st, err := template.Open(prov.Home())
	if err != nil {
		t.Fatal(err)
	}
	scratch := func() []string {
		m, _ := filepath.Glob(filepath.Join(st.Root(), "build-*"))
		return m
	}

	// A build: context uploaded as a gzipped tar, the Dockerfile in it.
	df := "FROM bb\nCOPY greet.txt /greet.txt\nRUN cat /greet.txt > /out.txt && echo step-output-here\nENV GREETING=hi\n"
	ctype, body := buildBody(t, map[string]any{"name": "app", "tags": []string{"app:1"}, "network": "none"},
		contextTar(t, true, tarEntry{name: "Dockerfile", body: df}, tarEntry{name: "greet.txt", body: "hello from the upload\n"}))
	resp, data := send(t, "POST", srv.URL+"/v1/templates", srv.Key, ctype, body)
	var b buildStatus
	if resp.StatusCode != 202 || json.Unmarshal(data, &b) != nil || b.ID == "" || resp.Header.Get("Location") != "/v1/templates/builds/"+b.ID {
		t.Fatalf("build: %d %s (Location %q)", resp.StatusCode, data, resp.Header.Get("Location"))
	}
	log, final := followBuild(t, srv, b.ID)
	if final.State != "ready" || len(final.Layers) != 3 || !strings.Contains(log, "Step 3/4 : RUN cat") || !strings.Contains(log, "\nstep-output-here\n") {
		t.Fatalf("build ended %+v with log:\n%s", final, log)
	}
	var tp struct {
		Name   string
		Tags   []string
		Layers int
	}
	if code := call(t, "GET", srv.URL+"/v1/templates/app:1", srv.Key, nil, &tp); code != 200 || tp.Name != "app" || tp.Layers != 3 {
		t.Fatalf("the built template: %d %+v", code, tp)
	}
	// Its record names the build (E2B's tags report it as their buildID).
	if rec, err := st.Get("app"); err != nil || rec.Build != b.ID {
		t.Errorf("the template's build: %v, %v, want %s", rec, err, b.ID)
	}
	var sb struct{ ID, Token string }
	if code := call(t, "POST", srv.URL+"/v1/sandboxes", srv.Key, map[string]any{"template": "app", "network": map[string]string{"mode": "none"}}, &sb); code != 201 {
		t.Fatalf("create from the built template: %d", code)
	}
	var res struct{ Stdout string }
	if code := call(t, "POST", srv.URL+"/v1/sandboxes/"+sb.ID+"/run", sb.Token, map[string]any{"command": "cat /out.txt; echo $GREETING"}, &res); code != 200 ||
		res.Stdout != "hello from the upload\nhi\n" {
		t.Fatalf("in a sandbox of the built template: %d %q", code, res.Stdout)
	}
	var evs struct {
		Events []struct {
			Type string
			Data struct{ BuildID, Template string }
		}
	}
	call(t, "GET", srv.URL+"/v1/events", srv.Key, nil, &evs)
	var seen []string
	for _, ev := range evs.Events {
		if ev.Data.BuildID == b.ID && ev.Data.Template == "app" {
			seen = append(seen, ev.Type)
		}
	}
	if strings.Join(seen, " ") != "template.build_queued template.build_started template.build_ready" {
		t.Errorf("events of the build: %v", seen)
	}

	// Builds are their key's: another key does not see this one.
	_, other, err := srv.Store.CreateKey(context.Background(), "other")
	if err != nil {
		t.Fatal(err)
	}
	if code := call(t, "GET", srv.URL+"/v1/templates/builds/"+b.ID, other, nil, nil); code != 404 {
		t.Errorf("another key's build: %d, want 404", code)
	}
	if code := call(t, "GET", srv.URL+"/v1/templates/builds/"+b.ID, srv.Key, nil, nil); code != 200 {
		t.Errorf("own build: %d", code)
	}

	// The same build again, with the Dockerfile given inline: every step from the cache.
	ctype, body = buildBody(t, map[string]any{"name": "app", "network": "none", "dockerfileText": df},
		contextTar(t, false, tarEntry{name: "greet.txt", body: "hello from the upload\n"}))
	resp, data = send(t, "POST", srv.URL+"/v1/templates", srv.Key, ctype, body)
	if resp.StatusCode != 202 || json.Unmarshal(data, &b) != nil {
		t.Fatalf("rebuild: %d %s", resp.StatusCode, data)
	}
	if log, final := followBuild(t, srv, b.ID); final.State != "ready" || strings.Count(log, "Using cache") != 2 || strings.Contains(log, "\nstep-output-here\n") {
		t.Fatalf("rebuild ended %+v, want every step cached; log:\n%s", final, log)
	}

	// A failing step: the build fails with its line and exit code, and leaves no template.
	resp, data = send(t, "POST", srv.URL+"/v1/templates", srv.Key, "application/json",
		[]byte(`{"name":"broken","network":"none","dockerfileText":"FROM bb\nRUN echo about to fail; exit 3\n"}`))
	if resp.StatusCode != 202 || json.Unmarshal(data, &b) != nil {
		t.Fatalf("failing build: %d %s", resp.StatusCode, data)
	}
	if log, final := followBuild(t, srv, b.ID); final.State != "error" || final.Error == nil || final.Error.ExitCode != 3 || final.Error.Line != 2 ||
		!strings.Contains(final.Error.Output, "about to fail") || !strings.Contains(log, "about to fail") {
		t.Fatalf("failing build ended %+v; log:\n%s", final, log)
	}
	if code := call(t, "GET", srv.URL+"/v1/templates/broken", srv.Key, nil, nil); code != 404 {
		t.Errorf("a failed build left template broken: %d", code)
	}

	// A build cancelled halfway, in its RUN step: no template, nothing left of its context;
	// while it runs, a second build of the same name is refused.
	ctype, body = buildBody(t, map[string]any{"name": "slow", "network": "none"},
		contextTar(t, false, tarEntry{name: "Dockerfile", body: "FROM bb\nRUN echo started-sleeping; sleep 120\n"}))
	resp, data = send(t, "POST", srv.URL+"/v1/templates", srv.Key, ctype, body)
	if resp.StatusCode != 202 || json.Unmarshal(data, &b) != nil {
		t.Fatalf("slow build: %d %s", resp.StatusCode, data)
	}
	if len(scratch()) != 1 {
		t.Errorf("scratch directories while the slow build runs: %v", scratch())
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var page struct{ Entries []struct{ Text string } }
		call(t, "GET", srv.URL+"/v1/templates/builds/"+b.ID+"/logs", srv.Key, nil, &page)
		if len(page.Entries) > 0 && strings.Contains(page.Entries[len(page.Entries)-1].Text, "started-sleeping") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the slow build's RUN never started: %+v", page)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if resp, data := send(t, "POST", srv.URL+"/v1/templates", srv.Key, ctype, body); resp.StatusCode != 409 {
		t.Errorf("a second build of a name being built: %d %s", resp.StatusCode, data)
	}
	if code := call(t, "DELETE", srv.URL+"/v1/templates/builds/"+b.ID, srv.Key, nil, nil); code != 204 {
		t.Fatalf("cancel: %d", code)
	}
	if _, final := followBuild(t, srv, b.ID); final.State != "error" || final.Error == nil || final.Error.Code != "aborted" {
		t.Fatalf("cancelled build ended %+v", final)
	}
	if code := call(t, "GET", srv.URL+"/v1/templates/slow", srv.Key, nil, nil); code != 404 {
		t.Errorf("a cancelled build left template slow: %d", code)
	}
	if m := scratch(); len(m) != 0 {
		t.Errorf("a finished build left its context: %v", m)
	}

	// Hostile and invalid input: each refused before any build, with the API's error body.
	zeros := make([]byte, 1<<20)
	noise := make([]byte, 2*limit)
	rand.Read(noise)
	outside := filepath.Join(prov.Home(), "escaped")
	for _, c := range []struct {
		name   string
		build  map[string]any
		ctx    []byte
		status int
		code   string
		msg    string
	}{
		{"dotdot", map[string]any{"name": "x"}, contextTar(t, true, tarEntry{name: "Dockerfile", body: "FROM bb\n"}, tarEntry{name: "../../escaped", body: "x"}), 400, "invalid_argument", "'..' in path"},
		{"absolute", map[string]any{"name": "x"}, contextTar(t, false, tarEntry{name: "/tmp/escaped", body: "x"}), 400, "invalid_argument", "absolute path"},
		{"through a symlink", map[string]any{"name": "x"}, contextTar(t, false, tarEntry{name: "up", typ: tar.TypeSymlink, link: "../.."}, tarEntry{name: "up/escaped", body: "x"}), 400, "invalid_argument", "build context"},
		{"hard link out", map[string]any{"name": "x"}, contextTar(t, false, tarEntry{name: "passwd", typ: tar.TypeLink, link: "../../../etc/passwd"}), 400, "invalid_argument", "build context"},
		{"Dockerfile a symlink out", map[string]any{"name": "x"}, contextTar(t, false, tarEntry{name: "Dockerfile", typ: tar.TypeSymlink, link: "/etc/passwd"}), 400, "invalid_argument", "no Dockerfile"},
		{"not a Dockerfile", map[string]any{"name": "x"}, contextTar(t, false, tarEntry{name: "Dockerfile", body: "this is not a dockerfile\n"}), 400, "invalid_argument", "line 1"},
		{"no Dockerfile", map[string]any{"name": "x"}, contextTar(t, false, tarEntry{name: "a.txt", body: "x"}), 400, "invalid_argument", "no Dockerfile"},
		{"not a tar", map[string]any{"name": "x"}, []byte("plain text, not an archive, long enough to be read as one block of it................................................................................................................................................................................................................................................................................................................................................................................................................................................................................................................................"), 400, "invalid_argument", "build context"},
		{"too large", map[string]any{"name": "x"}, contextTar(t, false, tarEntry{name: "Dockerfile", body: "FROM bb\n"}, tarEntry{name: "noise", body: string(noise)}), 413, "resource_exhausted", "larger than"},
		{"decompression bomb", map[string]any{"name": "x"}, contextTar(t, true, tarEntry{name: "Dockerfile", body: "FROM bb\n"}, tarEntry{name: "zeros", body: string(zeros)}), 429, "resource_exhausted", "larger than the limit"},
		{"invalid name", map[string]any{"name": "Not A Name"}, contextTar(t, false, tarEntry{name: "Dockerfile", body: "FROM bb\n"}), 400, "invalid_argument", "template name"},
		{"built-in name", map[string]any{"name": "host"}, contextTar(t, false, tarEntry{name: "Dockerfile", body: "FROM bb\n"}), 400, "invalid_argument", "built in"},
		{"absolute dockerfile", map[string]any{"name": "x", "dockerfile": "/etc/passwd"}, contextTar(t, false, tarEntry{name: "Dockerfile", body: "FROM bb\n"}), 400, "invalid_argument", "relative to the context"},
		{"bad network", map[string]any{"name": "x", "network": "some"}, nil, 400, "invalid_argument", "all or none"},
		{"unknown field", map[string]any{"name": "x", "nope": 1}, nil, 400, "invalid_argument", "unknown field"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctype, body := buildBody(t, c.build, c.ctx)
			resp, data := send(t, "POST", srv.URL+"/v1/templates", srv.Key, ctype, body)
			var e struct{ Code, Message string }
			if resp.StatusCode != c.status || json.Unmarshal(data, &e) != nil || e.Code != c.code || !strings.Contains(e.Message, c.msg) {
				t.Errorf("status %d %s; want %d %s containing %q", resp.StatusCode, data, c.status, c.code, c.msg)
			}
			if _, err := os.Lstat(outside); err == nil {
				t.Fatalf("an entry was written outside the context: %s", outside)
			}
			if m := scratch(); len(m) != 0 {
				t.Errorf("a refused build left its context: %v", m)
			}
		})
	}
	if resp, data := send(t, "POST", srv.URL+"/v1/templates", srv.Key, "text/plain", []byte("FROM bb\n")); resp.StatusCode != 400 {
		t.Errorf("a text/plain body: %d %s", resp.StatusCode, data)
	}
	if resp, _ := send(t, "POST", srv.URL+"/v1/templates", "", "application/json", []byte(`{"name":"x","dockerfileText":"FROM bb\n"}`)); resp.StatusCode != 401 {
		t.Errorf("no API key: %d", resp.StatusCode)
	}
	if resp, _ := send(t, "POST", srv.URL+"/v1/templates", sb.Token, "application/json", []byte(`{"name":"x","dockerfileText":"FROM bb\n"}`)); resp.StatusCode != 403 {
		t.Errorf("a sandbox token: %d", resp.StatusCode)
	}
}

// TestServeBuildFlags: `tupper serve --build-context-mib` bounds what a build request may
// send (413 past it; a context under it is read whole: its bad Dockerfile is what fails),
// and values under 1 are refused at start.
func TestServeBuildFlags(t *testing.T) {
	for _, flag := range []string{"--build-context-mib", "--concurrent-builds"} {
		out, err := exec.Command(servertest.Binary(t), "serve", "--addr", "127.0.0.1:0", "--home", t.TempDir(), "--provider", "memory", flag, "0").CombinedOutput()
		if err == nil || !strings.Contains(string(out), "must be at least 1") {
			t.Errorf("serve %s 0: %v %s", flag, err, out)
		}
	}
	home := localServeHome(t, "local provider: ")
	key := newKey(t, home)
	c := startServeArgs(t, home, []string{"--provider", "local", "--build-context-mib", "1", "--concurrent-builds", "2"})
	if err := c.waitServing(60 * time.Second); err != nil {
		t.Fatal(err)
	}
	build := map[string]any{"name": "big", "dockerfile": "Dockerfile"}
	for _, tc := range []struct {
		size int
		want int
	}{{2 << 20, http.StatusRequestEntityTooLarge}, {512 << 10, http.StatusBadRequest}} {
		ctype, body := buildBody(t, build, contextTar(t, false,
			tarEntry{name: "Dockerfile", body: "NOSUCHINSTRUCTION x\n"},
			tarEntry{name: "big", body: strings.Repeat("x", tc.size)}))
		resp, data := send(t, "POST", c.url+"/v1/templates", key, ctype, body)
		if resp.StatusCode != tc.want {
			t.Errorf("a context of %d bytes under --build-context-mib 1: %d %s, want %d", tc.size, resp.StatusCode, data, tc.want)
		}
		if tc.want == http.StatusBadRequest && !strings.Contains(string(data), "NOSUCHINSTRUCTION") {
			t.Errorf("the context under the bound was not read to its Dockerfile: %s", data)
		}
	}
}
