//go:build linux

package agent_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tupper-dev/tupper/agent"
	"github.com/tupper-dev/tupper/agent/client"
)

func TestMain(m *testing.M) {
	// Serve as a subprocess (PID 1 of a new PID namespace in the reaping test).
	if sock := os.Getenv("TUPPER_TEST_AGENT_SOCKET"); sock != "" {
		ln, err := net.Listen("unix", sock)
		if err != nil {
			panic(err)
		}
		// Hiding the socket's directory: the reaper and the spawner's thread together.
		cfg := agent.Config{DefaultUser: "root", DefaultWorkdir: "/", HidePaths: []string{filepath.Dir(sock)}}
		err = agent.Serve(context.Background(), ln, cfg)
		if err != nil {
			panic(err)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

type testAgent struct {
	c    *client.Client
	sock string
	dir  string
	done chan error
	stop context.CancelFunc
}

// startAgent serves the agent in-process on a unix socket in a temp dir.
func startAgent(t testing.TB, cfg agent.Config) *testAgent {
	t.Helper()
	dir := t.TempDir()
	sock := filepath.Join(dir, "agent.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- agent.Serve(ctx, ln, cfg) }()
	ta := &testAgent{c: client.NewWithOptions(client.Options{SocketPath: sock, AccessToken: cfg.AccessToken}), sock: sock, dir: dir, done: done, stop: cancel}
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("agent did not stop")
		}
		ta.c.Close()
	})
	return ta
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}
