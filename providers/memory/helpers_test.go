package memory

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tupper-dev/tupper/provider"
)

// newInstance creates a sandbox on a fresh provider and destroys it when the test ends.
func newInstance(t *testing.T, spec provider.CreateSpec) *Instance {
	t.Helper()
	p := New()
	inst, err := p.Create(context.Background(), spec)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	t.Cleanup(func() { _ = p.Destroy(context.Background(), inst.(*Instance).ID()) })
	return inst.(*Instance)
}

type result struct {
	out, err string
	code     int
}

// sh runs script in /workspace with a 10 s deadline.
func sh(t *testing.T, in *Instance, script string) result {
	t.Helper()
	return shIn(t, in, script, "/workspace", nil)
}

func shIn(t *testing.T, in *Instance, script, cwd string, stdin *string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out, errb bytes.Buffer
	req := provider.ExecRequest{Command: script, Cwd: cwd, Stdout: &out, Stderr: &errb}
	if stdin != nil {
		req.Stdin = strings.NewReader(*stdin)
	}
	res, err := in.Exec(ctx, req)
	if err != nil {
		t.Fatalf("exec %q: %v", script, err)
	}
	return result{out.String(), errb.String(), res.ExitCode}
}

// expect runs script and checks its stdout and exit code.
func expect(t *testing.T, in *Instance, script, want string, code int) {
	t.Helper()
	r := sh(t, in, script)
	if r.out != want || r.code != code {
		t.Errorf("%s\n got: %q (exit %d, stderr %q)\nwant: %q (exit %d)", script, r.out, r.code, r.err, want, code)
	}
}
