//go:build linux

package server_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tupper-dev/tupper/internal/testenv"
	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/providers/remote"
	"github.com/tupper-dev/tupper/sandbox"
	"github.com/tupper-dev/tupper/server/servertest"
)

// workdirTemplate builds the template name as a user builds an image from a root file
// system: FROM scratch, ADD of the busybox tarball, WORKDIR /app.
func workdirTemplate(t *testing.T, prov provider.Provider, name string) {
	t.Helper()
	if err := sandbox.CanBuildTemplates(prov); err != nil {
		testenv.Skip(t, err.Error())
	}
	dir := t.TempDir()
	rootfs, err := os.ReadFile(servertest.BusyboxRootFS(t))
	if err != nil {
		t.Fatal(err)
	}
	for file, body := range map[string][]byte{"root.tar": rootfs, "Dockerfile": []byte("FROM scratch\nADD root.tar /\nWORKDIR /app\n")} {
		if err := os.WriteFile(filepath.Join(dir, file), body, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	if _, err := sandbox.BuildTemplate(ctx, prov, sandbox.BuildRequest{Name: name, Context: dir, Network: provider.NetworkNone}); err != nil {
		t.Fatalf("building %s: %v", name, err)
	}
}

// TestTemplateWorkdir: a template's WORKDIR is where a command given no cwd runs, and what
// relative paths resolve against, as under docker run: through the SDK on the provider, and
// through the server's REST API (its run route, and providers/remote, which the CLI uses
// with --url). A template without one keeps /workspace.
func TestTemplateWorkdir(t *testing.T) {
	servertest.RequireLocal(t, "template workdirs need real sandboxes")
	prov := servertest.Provider(t, 6)
	workdirTemplate(t, prov, "wd")
	servertest.BusyboxTemplate(t, prov, "bb")
	srv := servertest.Start(t, prov, "")
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()

	check := func(t *testing.T, p provider.Provider, tmpl, want string) {
		box, err := sandbox.Create(ctx, p, sandbox.CreateOptions{Template: tmpl, Network: sandbox.NetworkNone})
		if err != nil {
			t.Fatalf("create from %s: %v", tmpl, err)
		}
		defer box.Destroy(context.WithoutCancel(ctx))
		if box.Workdir != want {
			t.Errorf("Workdir = %q, want %q", box.Workdir, want)
		}
		run := func(cmd string, opts sandbox.RunOptions) string {
			t.Helper()
			res, err := box.Run(ctx, cmd, opts)
			if err != nil || res.ExitCode != 0 {
				t.Fatalf("%q: %v %+v", cmd, err, res)
			}
			return res.Stdout
		}
		if got := run("pwd", sandbox.RunOptions{}); got != want+"\n" {
			t.Errorf("pwd without a cwd = %q, want %q", got, want)
		}
		if got := run("pwd", sandbox.RunOptions{Cwd: "/tmp"}); got != "/tmp\n" {
			t.Errorf("pwd in /tmp = %q", got)
		}
		// Relative paths of files and commands resolve against the same directory.
		if err := box.Files.Write(ctx, "note.txt", []byte("here\n"), sandbox.WriteOptions{}); err != nil {
			t.Fatal(err)
		}
		if got := run("cat "+want+"/note.txt && mkdir -p sub", sandbox.RunOptions{}); got != "here\n" {
			t.Errorf("a relative write went elsewhere: %q", got)
		}
		if got := run("pwd", sandbox.RunOptions{Cwd: "sub"}); got != want+"/sub\n" {
			t.Errorf("pwd in the relative cwd sub = %q", got)
		}
		if info, err := box.Info(ctx); err != nil || (info.Workdir != "") != (want != sandbox.DefaultCwd) {
			t.Errorf("Info = %+v, %v", info, err)
		}
	}
	rp := remote.New(remote.Config{URL: srv.URL, APIKey: srv.Key})
	for _, c := range []struct {
		name string
		p    provider.Provider
	}{{"provider", prov}, {"remote", rp}} {
		t.Run(c.name, func(t *testing.T) {
			check(t, c.p, "wd", "/app")
			check(t, c.p, "bb", sandbox.DefaultCwd)
		})
	}

	// The REST API's own run, given no cwd.
	res, body := send(t, http.MethodPost, srv.URL+"/v1/sandboxes", srv.Key, "application/json", []byte(`{"template":"wd","network":{"mode":"none"}}`))
	var sb struct{ ID, Workdir string }
	if err := json.Unmarshal(body, &sb); res.StatusCode != http.StatusCreated || err != nil || sb.Workdir != "/app" {
		t.Fatalf("create: %d %s", res.StatusCode, body)
	}
	defer send(t, http.MethodDelete, srv.URL+"/v1/sandboxes/"+sb.ID, srv.Key, "", nil)
	res, body = send(t, http.MethodPost, srv.URL+"/v1/sandboxes/"+sb.ID+"/run", srv.Key, "application/json", []byte(`{"command":"pwd"}`))
	if res.StatusCode != http.StatusOK || !strings.Contains(string(body), `"stdout":"/app\n"`) {
		t.Errorf("run without a cwd: %d %s", res.StatusCode, body)
	}
}
