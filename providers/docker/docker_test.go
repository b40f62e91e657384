package docker

import (
	"strings"
	"testing"
	"time"

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
	res, err := inst.Exec(ctx, provider.ExecRequest{Command: "echo hi; id -u; cat /proc/1/cmdline | tr '\\0' ' '", Cwd: "/", Stdout: &out})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("exec: %v %+v", err, res)
	}
	t.Logf("exec: %v", time.Since(start))
	if got := out.String(); !strings.HasPrefix(got, "hi\n0\n/.tupper/bin/tupper agent") {
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
