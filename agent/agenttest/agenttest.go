//go:build linux

// Package agenttest serves a real agent in-process for tests: agent.Serve on a unix socket
// in a temporary directory, stopped at the test's cleanup. It is the one such helper, for
// the agent's own tests, its client's and the provider half's (provider/agentinst).
package agenttest

import (
	"context"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/tupper-dev/tupper/agent"
)

// stopTimeout bounds how long stop waits for the agent to return.
const stopTimeout = 10 * time.Second

// Serve runs an agent with cfg on a new unix socket and returns the socket's path and what
// stops the agent. stop waits for agent.Serve to return (a test error after 10 s), may be
// called more than once, and runs at cleanup when the test did not call it.
func Serve(tb testing.TB, cfg agent.Config) (sock string, stop func()) {
	tb.Helper()
	sock = filepath.Join(tb.TempDir(), "agent.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- agent.Serve(ctx, ln, cfg) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case <-done:
			case <-time.After(stopTimeout):
				tb.Error("the agent did not stop")
			}
		})
	}
	tb.Cleanup(stop)
	return sock, stop
}
