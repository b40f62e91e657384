package docker

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/tupper-dev/tupper/internal/testenv"
	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/sandbox"
)

// TestCreateExecDestroy makes a sandbox of the host template, runs a command through the
// agent, and checks that its container carries the provider's labels and is gone after
// Destroy.
func TestCreateExecDestroy(t *testing.T) {
	p := newTestProvider(t, Config{})
	ctx := t.Context()
	start := time.Now()
	inst, err := p.Create(ctx, provider.CreateSpec{Key: "k1", Labels: map[string]string{"team": "a"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("create: %v", time.Since(start))
	defer inst.Close()
	id := inst.(*Instance).id
	var out strings.Builder
	start = time.Now()
	// The agent got its config on its standard input: no file in the container holds it.
	res, err := inst.Exec(ctx, provider.ExecRequest{Command: "echo hi; id -u; cat /proc/1/cmdline | tr '\\0' ' '; ! test -e /.tupper/config.json || echo a config file", Cwd: "/", Stdout: &out})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("exec: %v %+v", err, res)
	}
	t.Logf("exec: %v", time.Since(start))
	if got := out.String(); !strings.HasPrefix(got, "hi\n0\n/.tupper/bin/tupper agent") || strings.Contains(got, "a config file") {
		t.Fatalf("output %q", got)
	}
	infos, err := p.List(ctx, provider.ListFilter{Labels: map[string]string{"team": "a"}})
	if err != nil || len(infos) != 1 || infos[0].ID != id || infos[0].Key != "k1" {
		t.Fatalf("list: %v %+v", err, infos)
	}
	if err := p.Destroy(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Connect(ctx, id); provider.CodeOf(err) != provider.CodeNotFound {
		t.Fatalf("connect after destroy: %v", err)
	}
	if err := p.Destroy(ctx, id); provider.CodeOf(err) != provider.CodeNotFound {
		t.Fatalf("second destroy: %v", err)
	}
}

// busyboxImage imports an image made of the host's static busybox (no registry), tagged
// for this test binary, and removes it when the test ends.
func busyboxImage(t *testing.T, p *Provider) string {
	t.Helper()
	return busyboxImageWith(t, p, "busybox")
}

// busyboxImageWith imports busybox as image tupper-test-NAME with the Dockerfile
// instructions changes besides ENV FROM_IMAGE=yes.
func busyboxImageWith(t *testing.T, p *Provider, name string, changes ...string) string {
	t.Helper()
	bb := testenv.RequireBinary(t, "busybox")
	b, err := os.ReadFile(bb)
	if err != nil {
		t.Fatal(err)
	}
	files := []tarFile{{name: "bin/", mode: 0o755 | dirBit}, {name: "bin/busybox", mode: 0o755, data: b}}
	for _, c := range []string{"sh", "cat", "echo", "env", "id"} {
		files = append(files, tarFile{name: "bin/" + c, link: "busybox"})
	}
	ref := fmt.Sprintf("tupper-test-%s:%d", name, os.Getpid())
	res, err := p.cli.ImageImport(t.Context(), client.ImageImportSource{Source: bytes.NewReader(makeTar(files)), SourceName: "-"}, ref,
		client.ImageImportOptions{Changes: append([]string{"ENV FROM_IMAGE=yes"}, changes...)})
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, res)
	res.Close()
	t.Cleanup(func() {
		p.cli.ImageRemove(context.Background(), ref, client.ImageRemoveOptions{Force: true})
	})
	return ref
}

// TestImageWorkdir: an image's WORKDIR is where commands given no cwd run and what the
// sandbox reports (the SDK resolves relative paths against it), as under docker run; an
// image without one keeps /workspace.
func TestImageWorkdir(t *testing.T) {
	p := newTestProvider(t, Config{})
	ctx := t.Context()
	for _, c := range []struct{ image, want string }{
		{busyboxImageWith(t, p, "busybox-workdir", "WORKDIR /app"), "/app"},
		{busyboxImage(t, p), "/workspace"},
	} {
		box, err := sandbox.Create(ctx, p, sandbox.CreateOptions{Template: c.image})
		if err != nil {
			t.Fatal(err)
		}
		defer box.Destroy(context.Background())
		if box.Workdir != c.want {
			t.Errorf("%s: Workdir %q, want %q", c.image, box.Workdir, c.want)
		}
		res, err := box.Run(ctx, "pwd; echo hi > rel.txt", sandbox.RunOptions{})
		if err != nil || !res.OK || strings.TrimSpace(res.Stdout) != c.want {
			t.Errorf("%s: pwd %+v %v, want %s", c.image, res, err, c.want)
		}
		b, err := box.Files.ReadText(ctx, "rel.txt")
		if err != nil || b != "hi\n" {
			t.Errorf("%s: reading rel.txt, relative to the working directory: %q %v", c.image, b, err)
		}
		if res, err := box.Run(ctx, "cat "+c.want+"/rel.txt", sandbox.RunOptions{Cwd: "/"}); err != nil || res.Stdout != "hi\n" {
			t.Errorf("%s: rel.txt is not in %s: %+v %v", c.image, c.want, res, err)
		}
	}
}

// TestImageTemplateCopiedAgent runs a sandbox of an image that is not the host template,
// with the agent copied into the container (as for a remote engine), and checks the image's
// environment, a fresh provider finding it by key and id (as after a restart), SetTimeout's
// deadline, and reaping once that deadline has passed.
func TestImageTemplateCopiedAgent(t *testing.T) {
	copyAgent := true
	p := newTestProvider(t, Config{CopyAgent: &copyAgent})
	img := busyboxImage(t, p)
	ctx := t.Context()
	inst, err := p.Create(ctx, provider.CreateSpec{Template: img, Key: "img-key", Env: map[string]string{"A": "1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close()
	id := inst.(*Instance).id
	var out strings.Builder
	if _, err := inst.Exec(ctx, provider.ExecRequest{Command: "echo $FROM_IMAGE $A; cat /proc/1/cmdline", Cwd: "/", Stdout: &out}); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); !strings.HasPrefix(got, "yes 1\n/.tupper/bin/tupper") {
		t.Fatalf("output %q", got)
	}
	if caps := inst.(*Instance).Capabilities(); caps.Has(provider.CapShell) || caps.Has(provider.CapGit) {
		t.Errorf("an image sandbox declares %v", caps)
	}

	// A second provider, as a restarted process: it finds the sandbox by key and id.
	p2 := newTestProvider(t, Config{})
	found, err := p2.FindByKey(ctx, "img-key")
	if err != nil || found.(*Instance).id != id {
		t.Fatalf("find by key: %v", err)
	}
	defer found.Close()
	if err := found.(*Instance).SetTimeout(ctx, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	inf, err := found.Info(ctx)
	if err != nil || inf.Deadline.IsZero() || time.Until(inf.Deadline) > 5*time.Second {
		t.Fatalf("info after SetTimeout: %+v %v", inf, err)
	}
	time.Sleep(time.Until(inf.Deadline) + 500*time.Millisecond)
	if _, err := p.Reap(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := p2.Connect(ctx, id); provider.CodeOf(err) != provider.CodeNotFound {
		t.Fatalf("connect after the deadline and a reap: %v", err)
	}
}
