//go:build linux

package local

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/template"
)

// buildContext writes a build context: a Dockerfile, files, a .dockerignore and a gzipped
// tar for ADD.
func buildContext(t *testing.T, dockerfile string) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"Dockerfile":      dockerfile,
		"greet.txt":       "hello from the context\n",
		"dir/a.txt":       "a\n",
		"dir/sub/b.txt":   "b\n",
		"dir/secret.key":  "never copied\n",
		".dockerignore":   "**/*.key\n",
		"untouched/c.txt": "c\n",
	}
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, f := range []struct {
		name string
		uid  int
		body string
	}{{"pkg/", 0, ""}, {"pkg/data.txt", 1001, "from the archive\n"}} {
		h := &tar.Header{Name: f.name, Mode: 0o644, Uid: f.uid, Gid: f.uid, Size: int64(len(f.body)), Typeflag: tar.TypeReg}
		if strings.HasSuffix(f.name, "/") {
			h.Typeflag, h.Mode = tar.TypeDir, 0o755
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(f.body))
	}
	tw.Close()
	zw.Close()
	if err := os.WriteFile(filepath.Join(dir, "files.tar.gz"), buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

const testDockerfile = `ARG BASE=bb
FROM ${BASE} AS base
ARG GREETING=hello
ENV APP=/srv/app
WORKDIR $APP
COPY --chown=1000:1000 greet.txt ./
COPY dir/ sub/
ADD files.tar.gz /opt/
RUN echo "$GREETING from $APP" > out.txt && rm /data/owned && mkdir -p /usr/local/bin && \
    echo '#!/bin/sh' > /usr/local/bin/tool && chmod 755 /usr/local/bin/tool

FROM base
COPY --from=base /srv/app/out.txt /copied.txt
LABEL org.example.test=yes
EXPOSE 8080
USER 1000
CMD ["cat", "out.txt"]
`

// TestBuild builds a two-stage Dockerfile on the busybox template, makes a sandbox of the
// result, and checks every instruction's effect, the layer cache, and a failing step.
func TestBuild(t *testing.T) {
	forRuntimes(t, func(t *testing.T, rt string) {
		p := newTestProvider(t, rt)
		busyboxTemplate(t, p, "bb", template.Config{Env: []string{"PATH=/usr/local/bin:/usr/bin:/bin"}})
		st, err := template.Open(p.cfg.Home)
		if err != nil {
			t.Fatal(err)
		}
		ctxDir := buildContext(t, testDockerfile)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		var events []template.BuildEvent
		opts := template.BuildOptions{
			Name: "built", Context: ctxDir, Runner: p.BuildRunner(), Network: provider.NetworkNone,
			BuildArgs: map[string]string{"GREETING": "hi"},
			Progress:  func(ev template.BuildEvent) { events = append(events, ev) },
		}
		tp, err := st.Build(ctx, opts)
		if err != nil {
			t.Fatalf("build: %v", err)
		}
		if tp.Config.User != "1000" || tp.Config.WorkingDir != "/srv/app" || strings.Join(tp.Config.Cmd, " ") != "cat out.txt" ||
			tp.Config.Labels["org.example.test"] != "yes" || tp.Config.ExposedPorts[0] != "8080/tcp" {
			t.Errorf("config = %+v", tp.Config)
		}
		a := create(t, p, provider.CreateSpec{Template: "built", Network: netNone})
		got := run(t, a, "id -u; pwd; echo $APP; cat out.txt /copied.txt greet.txt sub/a.txt sub/sub/b.txt /opt/pkg/data.txt; "+
			"test -e sub/secret.key || echo no-key; test -e /data/owned || echo owned-removed; tool && echo tool-ran; "+
			"stat -c '%n %u' greet.txt out.txt /opt/pkg/data.txt /usr/local/bin/tool")
		want := strings.Join([]string{
			"1000", "/srv/app", "/srv/app",
			"hi from /srv/app", "hi from /srv/app", "hello from the context", "a", "b", "from the archive",
			"no-key", "owned-removed", "tool-ran",
			"greet.txt 1000", "out.txt 0", "/opt/pkg/data.txt 1001", "/usr/local/bin/tool 0",
		}, "\n")
		if got != want {
			t.Errorf("the built template:\n%s\nwant:\n%s", got, want)
		}
		// No layer the build made holds what the provider put in the step sandboxes.
		if len(tp.Layers) != 2+6 {
			t.Errorf("%d layers, want bb's 2 and one per WORKDIR, COPY, ADD and RUN (6)", len(tp.Layers))
		}
		for _, l := range tp.Layers[2:] {
			for _, rel := range []string{".tupper", "etc/hosts", "etc/hostname", "etc/resolv.conf", "etc/passwd", "proc", "tmp"} {
				if _, err := os.Lstat(filepath.Join(st.LayerFS(l), rel)); err == nil {
					t.Errorf("layer %s has /%s", l, rel)
				}
			}
		}
		// The build's own sandboxes are gone.
		left, err := p.List(ctx, provider.ListFilter{Labels: map[string]string{"tupper.build": "1"}})
		if err != nil || len(left) != 0 {
			t.Errorf("build sandboxes left: %v, %v", left, err)
		}

		// An unchanged rebuild is all cache hits: no step runs.
		events = nil
		again, err := st.Build(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		cached, ran := 0, 0
		for _, ev := range events {
			switch {
			case ev.Kind == "cached":
				cached++
			case ev.Kind == "output":
				ran++
			}
		}
		if cached != 6 || ran != 0 || strings.Join(again.Layers, ",") != strings.Join(tp.Layers, ",") {
			t.Errorf("rebuild: %d cached steps (want 6), %d outputs, layers %v vs %v", cached, ran, again.Layers, tp.Layers)
		}
		// A changed file in the context reruns its COPY and what follows, not what precedes.
		if err := os.WriteFile(filepath.Join(ctxDir, "dir/a.txt"), []byte("changed\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		events = nil
		if _, err := st.Build(ctx, opts); err != nil {
			t.Fatal(err)
		}
		var ranSteps []int
		for _, ev := range events {
			if ev.Kind == "done" && ev.Layer != "" {
				ranSteps = append(ranSteps, ev.Line)
			}
		}
		if fmt.Sprint(ranSteps) != "[7 8 9 13]" {
			t.Errorf("after a context change, the steps that made a layer were on lines %v, want [7 8 9 13]", ranSteps)
		}

		// A failing RUN names its line, its exit code and its output.
		failing := buildContext(t, "FROM bb\nRUN echo first\nRUN echo about to fail; exit 3\n")
		_, err = st.Build(ctx, template.BuildOptions{Name: "broken", Context: failing, Runner: p.BuildRunner(), Network: provider.NetworkNone})
		var be *template.BuildError
		if !errors.As(err, &be) || be.Line != 3 || be.ExitCode != 3 || !strings.Contains(be.Output, "about to fail") {
			t.Fatalf("failing build: %v (%+v)", err, be)
		}
		if _, err := st.Get("broken"); provider.CodeOf(err) != provider.CodeNotFound {
			t.Errorf("a failed build left a template: %v", err)
		}
	})
}

// TestBuildHostileSteps: a step's sandbox code plants symlinks for the next step's COPY to
// write through, and leaves links to host paths in its layer. Every path resolves inside the
// sandbox's own root; nothing is written on the host, and the links are stored as links.
func TestBuildHostileSteps(t *testing.T) {
	p := newTestProvider(t, "")
	busyboxTemplate(t, p, "bb", template.Config{Env: []string{"PATH=/usr/local/bin:/usr/bin:/bin"}})
	st, err := template.Open(p.cfg.Home)
	if err != nil {
		t.Fatal(err)
	}
	marker := "tupper-build-escape-" + filepath.Base(t.TempDir())
	hostDir := filepath.Join(os.TempDir(), marker)
	t.Cleanup(func() { os.RemoveAll(hostDir) })
	df := "FROM bb\n" +
		"RUN mkdir -p /tmp/" + marker + " && ln -s ../../../../../../../../../tmp/" + marker + " /escape && " +
		"ln -s /etc/shadow /shadowlink\n" +
		"COPY greet.txt /escape/\n"
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := st.Build(ctx, template.BuildOptions{Name: "hostile", Context: buildContext(t, df), Runner: p.BuildRunner(), Network: provider.NetworkNone}); err != nil {
		t.Fatalf("build: %v", err)
	}
	// A link into /proc: from the host the sandbox's /proc is an empty directory, so the
	// destination does not exist; the COPY fails rather than write anywhere.
	df2 := "FROM bb\nRUN ln -s /proc/1/root/tmp/" + marker + " /viaproc\nCOPY greet.txt /viaproc/\n"
	_, err = st.Build(ctx, template.BuildOptions{Name: "hostile2", Context: buildContext(t, df2), Runner: p.BuildRunner(), Network: provider.NetworkNone})
	var be *template.BuildError
	if !errors.As(err, &be) || be.Line != 3 {
		t.Errorf("COPY through a link into /proc: %v, want a failure at line 3", err)
	}
	if _, err := os.Stat(filepath.Join(hostDir, "greet.txt")); err == nil {
		t.Fatal("a COPY through a symlink a RUN planted wrote on the host")
	}
	a := create(t, p, provider.CreateSpec{Template: "hostile", Network: netNone})
	if got := run(t, a, "cat /tmp/"+marker+"/greet.txt; readlink /shadowlink"); got != "hello from the context\n/etc/shadow" {
		t.Errorf("inside the built template: %q", got)
	}
}

// A Prune while a build runs waits for it: the layer a finished step added names no template
// until the build writes its own, and a Prune that took it would fail the build (its template
// would name a layer the store no longer has).
func TestBuildPruneWaits(t *testing.T) {
	p := newTestProvider(t, "")
	busyboxTemplate(t, p, "bb", template.Config{Env: []string{"PATH=/usr/local/bin:/usr/bin:/bin"}})
	st, err := template.Open(p.cfg.Home)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	pruned := make(chan time.Time, 1)
	var built time.Time
	opts := template.BuildOptions{
		Name: "slow", Runner: p.BuildRunner(), Network: provider.NetworkNone,
		DockerfileText: "FROM bb\nRUN echo one > /one\nRUN sleep 2; echo two > /two\n",
		Progress: func(ev template.BuildEvent) {
			// The first RUN's layer is in the store, named by nothing yet: prune now.
			if ev.Kind == "step" && ev.Step == 3 {
				go func() {
					if _, err := st.Prune(ctx); err != nil {
						t.Errorf("prune: %v", err)
					}
					pruned <- time.Now()
				}()
			}
		},
	}
	tp, err := st.Build(ctx, opts)
	built = time.Now()
	if err != nil {
		t.Fatalf("build with a prune beside it: %v", err)
	}
	if at := <-pruned; at.Before(built) {
		t.Errorf("the prune finished %v before the build", built.Sub(at))
	}
	for _, l := range tp.Layers {
		if !st.HasLayer(l) {
			t.Errorf("layer %s of the built template is gone", l)
		}
	}
	a := create(t, p, provider.CreateSpec{Template: "slow", Network: netNone})
	if got := run(t, a, "cat /one /two"); got != "one\ntwo" {
		t.Errorf("the built template: %q", got)
	}
}

// TestBuildFromBuiltin: a FROM that names a built-in template the store lacks makes it then,
// through the store's one resolver (template.Store.Ensure), instead of asking a registry for
// an image of that name; E2B's base image e2bdev/base (what the E2B SDK's fromBaseImage
// sends) means the built-in base, for builds and creates alike.
func TestBuildFromBuiltin(t *testing.T) {
	p := newTestProvider(t, "")
	st, err := template.Open(p.cfg.Home)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	build := func(name, df string) (string, error) {
		var out strings.Builder
		_, err := st.Build(ctx, template.BuildOptions{
			Name: name, Context: buildContext(t, df), Runner: p.BuildRunner(), Network: provider.NetworkNone,
			Pull: func(ctx context.Context, ref string) (*template.Template, error) {
				return nil, provider.Errorf(provider.CodeUnavailable, "FROM %s: asked a registry", ref)
			},
			Progress: func(ev template.BuildEvent) { out.WriteString(ev.Output) },
		})
		return out.String(), err
	}
	// A debian stand-in, so that base is made on it here without a mirror: base's apt-get
	// then fails, which shows base's own build ran.
	busyboxTemplate(t, p, template.Debian, template.Config{Env: []string{"PATH=/usr/bin:/bin"}})
	for _, from := range []string{"base", "e2bdev/base", "docker.io/e2bdev/base:latest"} {
		out, err := build("on-base", "FROM "+from+"\nRUN true\n")
		var be *template.BuildError
		if !errors.As(err, &be) || be.Line != 1 || !strings.Contains(err.Error(), "apt-get") || strings.Contains(err.Error(), "registry") ||
			!strings.Contains(out, "making the built-in template base") {
			t.Errorf("FROM %s with no base yet: %v\n%s\nwant base's build to run and fail at its apt-get", from, err, out)
		}
	}
	// Once base exists, each of its names is it, in a build and in a create.
	busyboxTemplate(t, p, template.Base, template.Config{Env: []string{"PATH=/usr/bin:/bin", "FROM_BASE=yes"}})
	for _, from := range []string{"base", "e2bdev/base"} {
		if out, err := build("on-base", "FROM "+from+"\nRUN echo built > /built\n"); err != nil {
			t.Fatalf("FROM %s: %v\n%s", from, err, out)
		}
		a := create(t, p, provider.CreateSpec{Template: "on-base", Network: netNone})
		if got := run(t, a, "cat /built; echo $FROM_BASE"); got != "built\nyes" {
			t.Errorf("FROM %s: %q", from, got)
		}
	}
	a := create(t, p, provider.CreateSpec{Template: "e2bdev/base", Network: netNone})
	if got := run(t, a, "echo $FROM_BASE"); got != "yes" {
		t.Errorf("a sandbox of e2bdev/base: %q", got)
	}
}

// TestBuildCopySymlinks: a symlink in what COPY and ADD read — below a directory, matched by a
// pattern, or the source itself — whose target is absolute is copied as a link: its target is
// data, not a host path to resolve. Writing through such a link afterwards stays in the
// sandbox's root: the host directory it names is never written.
func TestBuildCopySymlinks(t *testing.T) {
	p := newTestProvider(t, "")
	busyboxTemplate(t, p, "bb", template.Config{Env: []string{"PATH=/usr/bin:/bin"}})
	st, err := template.Open(p.cfg.Home)
	if err != nil {
		t.Fatal(err)
	}
	// A directory that exists on the host, where a write that followed the link would land.
	// Not under /tmp, which the sandbox of a build step may have of its own (runsc).
	hostDir, err := os.MkdirTemp("/var/tmp", "tupper-copy-link-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(hostDir) })
	df := "FROM bb\n" +
		"COPY tree /app/tree\n" +
		"COPY tree/* /globbed/\n" +
		"COPY toplink /app/top\n" +
		"ADD toplink /app/added\n" +
		"RUN mkdir -p " + hostDir + "\n" +
		"COPY greet.txt /app/tree/esc/\n" +
		"COPY greet.txt /app/top/again.txt\n"
	ctxDir := buildContext(t, df)
	if err := os.MkdirAll(filepath.Join(ctxDir, "tree"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(ctxDir, "tree", "file.txt"), []byte("f\n"), 0o644)
	for link, target := range map[string]string{"tree/abs": "/etc/hostname", "tree/esc": hostDir, "toplink": hostDir} {
		if err := os.Symlink(target, filepath.Join(ctxDir, link)); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := st.Build(ctx, template.BuildOptions{Name: "links", Context: ctxDir, Runner: p.BuildRunner(), Network: provider.NetworkNone}); err != nil {
		t.Fatalf("build: %v", err)
	}
	if ents, _ := os.ReadDir(hostDir); len(ents) != 0 {
		t.Fatalf("a COPY through a copied link wrote on the host: %v", ents)
	}
	a := create(t, p, provider.CreateSpec{Template: "links", Network: netNone})
	got := run(t, a, "cat /app/tree/file.txt; for l in /app/tree/abs /globbed/abs /app/tree/esc /app/top /app/added; do readlink $l; done; cat "+hostDir+"/greet.txt "+hostDir+"/again.txt")
	want := strings.Join([]string{"f", "/etc/hostname", "/etc/hostname", hostDir, hostDir, hostDir, "hello from the context", "hello from the context"}, "\n")
	if got != want {
		t.Errorf("inside the built template:\n%s\nwant:\n%s", got, want)
	}
}
