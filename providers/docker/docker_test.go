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
	bb := testenv.RequireBinary(t, "busybox")
	b, err := os.ReadFile(bb)
	if err != nil {
		t.Fatal(err)
	}
	files := []tarFile{{name: "bin/", mode: 0o755 | dirBit}, {name: "bin/busybox", mode: 0o755, data: b}}
	for _, c := range []string{"sh", "cat", "echo", "env", "id"} {
		files = append(files, tarFile{name: "bin/" + c, link: "busybox"})
	}
	ref := fmt.Sprintf("tupper-test-busybox:%d", os.Getpid())
	res, err := p.cli.ImageImport(t.Context(), client.ImageImportSource{Source: bytes.NewReader(makeTar(files)), SourceName: "-"}, ref,
		client.ImageImportOptions{Changes: []string{"ENV FROM_IMAGE=yes"}})
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
