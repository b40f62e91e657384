package agentinst

import (
	"context"
	"errors"
	"io"
	"os"

	"github.com/tupper-dev/tupper/agent/client"
	"github.com/tupper-dev/tupper/provider"
)

// Terminal is an interactive process on a pseudo-terminal in the sandbox: a login shell
// (Agent.Terminal) or a given command (Agent.TerminalCommand). Beyond provider.Terminal it
// has Wait (provider.TerminalWaiter). Read may run concurrently with the other methods;
// Close is idempotent.
type Terminal struct {
	a *Agent
	t *client.Terminal
}

var (
	_ provider.Terminal       = (*Terminal)(nil)
	_ provider.TerminalWaiter = (*Terminal)(nil)
)

// Terminal opens a login shell on a new PTY of cols × rows (bash -l where the image has
// /bin/bash, else sh -l). See provider.Terminaler.
func (a *Agent) Terminal(ctx context.Context, cols, rows int) (provider.Terminal, error) {
	return a.TerminalCommand(ctx, nil, "", cols, rows)
}

// TerminalCommand runs argv (empty: a login shell) in cwd (empty: the default workdir) on a
// new PTY of cols × rows, as `docker exec -t` does. See provider.CommandTerminaler.
func (a *Agent) TerminalCommand(ctx context.Context, argv []string, cwd string, cols, rows int) (provider.Terminal, error) {
	if err := a.check(ctx); err != nil {
		return nil, err
	}
	t, err := a.c.Terminal(ctx, client.TerminalRequest{Argv: argv, Cwd: cwd, Cols: cols, Rows: rows})
	if err != nil {
		return nil, a.Err(ctx, err, "terminal")
	}
	return &Terminal{a: a, t: t}, nil
}

// Read returns terminal output; io.EOF once the process has ended and its output is read.
func (t *Terminal) Read(p []byte) (int, error) {
	n, err := t.t.Read(p)
	return n, t.err(context.Background(), err, "terminal.read")
}

// Write types p into the terminal.
func (t *Terminal) Write(p []byte) (int, error) {
	n, err := t.t.Write(p)
	return n, t.err(context.Background(), err, "terminal.write")
}

// Resize sets the window size (each 1..client.MaxTerminalSize); the process gets SIGWINCH.
func (t *Terminal) Resize(ctx context.Context, cols, rows int) error {
	return t.err(ctx, t.t.Resize(ctx, cols, rows), "terminal.resize")
}

// Close kills the process group and releases the stream.
func (t *Terminal) Close() error { return t.t.Close() }

// Wait waits for the process to end. Output must be read until io.EOF, or the terminal
// closed, for the end to be seen. A signal gives ExitCode 128+n and Signal set, as Exec.
func (t *Terminal) Wait(ctx context.Context) (provider.ExecResult, error) {
	res, err := t.t.Wait(ctx)
	if err != nil {
		return provider.ExecResult{}, t.err(ctx, err, "terminal.wait")
	}
	return execResult(res), nil
}

// err passes io.EOF and os.ErrClosed through and classifies the rest.
func (t *Terminal) err(ctx context.Context, err error, op string) error {
	if err == nil || err == io.EOF || errors.Is(err, os.ErrClosed) {
		return err
	}
	return t.a.Err(ctx, err, op)
}
