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
	"github.com/tupper-dev/tupper/agent/agenttest"
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

// testAgent is an agent served in-process (agenttest.Serve) with a client of it.
type testAgent struct {
	c    *client.Client
	sock string
}

// startAgent serves the agent in-process on a unix socket in a temp dir.
func startAgent(t testing.TB, cfg agent.Config) *testAgent {
	t.Helper()
	sock, _ := agenttest.Serve(t, cfg)
	c := client.NewWithOptions(client.Options{SocketPath: sock, AccessToken: cfg.AccessToken})
	t.Cleanup(func() { c.Close() })
	return &testAgent{c: c, sock: sock}
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}
