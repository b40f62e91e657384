//go:build linux

package client_test

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/tupper-dev/tupper/agent"
	"github.com/tupper-dev/tupper/agent/agenttest"
	"github.com/tupper-dev/tupper/agent/client"
	"github.com/tupper-dev/tupper/internal/testenv"
)

// serve returns a client of an agent served in-process (agenttest.Serve).
func serve(tb testing.TB, cfg agent.Config) *client.Client {
	tb.Helper()
	sock, _ := agenttest.Serve(tb, cfg)
	c := client.New(sock)
	tb.Cleanup(func() { c.Close() })
	return c
}

func TestErrorsAreTyped(t *testing.T) {
	c := serve(t, agent.Config{})
	_, err := c.Stat(context.Background(), "/definitely/not/here")
	if !client.IsNotFound(err) {
		t.Fatalf("got %v", err)
	}
	if err := c.Health(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func benchExec(b *testing.B, cfg agent.Config) {
	c := serve(b, cfg)
	ctx := context.Background()
	req := client.ExecRequest{Argv: []string{"/bin/true"}, Cwd: "/"}
	if _, err := c.Exec(ctx, req); err != nil {
		b.Fatal(err)
	}
	defer reportCPU(b)()
	for b.Loop() {
		res, err := c.Exec(ctx, req)
		if err != nil || res.ExitCode != 0 {
			b.Fatal(res, err)
		}
	}
}

// BenchmarkForkExecTrue is the baseline the exec benchmarks are compared
// with: the bare cost of fork+exec+wait of /bin/true with os/exec on this
// machine, measured in the same run (the machine is noisy; report ratios).
func BenchmarkForkExecTrue(b *testing.B) {
	defer reportCPU(b)()
	for b.Loop() {
		if err := exec.Command("/bin/true").Run(); err != nil {
			b.Fatal(err)
		}
	}
}

// reportCPU adds cpu-ns/op: the CPU time of this process and its reaped
// children per iteration, which a loaded machine inflates less than wall
// time. Call as defer reportCPU(b)() after set-up.
func reportCPU(b *testing.B) func() {
	cpu := func() time.Duration {
		var self, kids syscall.Rusage
		syscall.Getrusage(syscall.RUSAGE_SELF, &self)
		syscall.Getrusage(syscall.RUSAGE_CHILDREN, &kids)
		d := func(t syscall.Timeval) time.Duration { return time.Duration(t.Nano()) }
		return d(self.Utime) + d(self.Stime) + d(kids.Utime) + d(kids.Stime)
	}
	start := cpu()
	return func() {
		if b.N > 0 {
			b.ReportMetric(float64(cpu()-start)/float64(b.N), "cpu-ns/op")
		}
	}
}

// BenchmarkHealth is the floor of one request through the client and the
// agent's HTTP stack: GET /health on a pooled connection.
func BenchmarkHealth(b *testing.B) {
	c := serve(b, agent.Config{})
	ctx := context.Background()
	defer reportCPU(b)()
	for b.Loop() {
		if err := c.Health(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkExecTrue is the exec round trip of `true` through client and
// agent over a unix socket, without hiding (a direct fork+exec).
func BenchmarkExecTrue(b *testing.B) { benchExec(b, agent.Config{}) }

// BenchmarkExecTrueHidden hides two paths: commands fork from the agent's
// spawner thread, in its mount namespace.
func BenchmarkExecTrueHidden(b *testing.B) {
	testenv.RequireRoot(b)
	dir := b.TempDir()
	f := filepath.Join(dir, "bin")
	os.WriteFile(f, nil, 0o755)
	benchExec(b, agent.Config{HidePaths: []string{dir, f}})
}

func BenchmarkWriteRead64MiB(b *testing.B) {
	c := serve(b, agent.Config{})
	ctx := context.Background()
	data := bytes.Repeat([]byte("0123456789abcdef"), 4<<20)
	p := filepath.Join(b.TempDir(), "big")
	b.SetBytes(int64(2 * len(data)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := c.WriteFile(ctx, p, bytes.NewReader(data), client.WriteOptions{}); err != nil {
			b.Fatal(err)
		}
		rc, err := c.ReadFile(ctx, p, client.ReadOptions{})
		if err != nil {
			b.Fatal(err)
		}
		n, err := io.Copy(io.Discard, rc)
		rc.Close()
		if err != nil || n != int64(len(data)) {
			b.Fatal(n, err)
		}
	}
}
