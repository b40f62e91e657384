package local

import (
	"context"
	"errors"
	"io"
	"os"

	"github.com/tupper-dev/tupper/agent/client"
	"github.com/tupper-dev/tupper/provider"
)

var (
	_ provider.Terminaler        = (*Instance)(nil)
	_ provider.CommandTerminaler = (*Instance)(nil)
)

// Terminal is an interactive process on a pseudo-terminal in a local sandbox: a login shell
// (Instance.Terminal) or a given command (Instance.TerminalCommand). Beyond
// provider.Terminal it has Wait, which reports how the process ended. Read may run
// concurrently with the other methods; Close is idempotent.
type Terminal struct {
	i *Instance
	t *client.Terminal
}

var _ provider.Terminal = (*Terminal)(nil)

// Terminal opens a login shell on a new PTY of cols × rows (bash -l where the image has
// /bin/bash, else sh -l). See provider.Terminaler.
func (i *Instance) Terminal(ctx context.Context, cols, rows int) (provider.Terminal, error) {
	return i.TerminalCommand(ctx, nil, "", cols, rows)
}

// TerminalCommand runs argv (empty: a login shell) in cwd (empty: the default workdir) on a
// new PTY of cols × rows, as `docker exec -t` does. See provider.CommandTerminaler.
func (i *Instance) TerminalCommand(ctx context.Context, argv []string, cwd string, cols, rows int) (provider.Terminal, error) {
	if err := i.check(); err != nil {
		return nil, err
	}
	t, err := i.c.Terminal(ctx, client.TerminalRequest{Argv: argv, Cwd: cwd, Cols: cols, Rows: rows})
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, i.agentErr(err, "terminal")
	}
	return &Terminal{i: i, t: t}, nil
}

// Read returns terminal output; io.EOF once the process has ended and its output is read.
func (t *Terminal) Read(p []byte) (int, error) {
	n, err := t.t.Read(p)
	return n, t.err(err, "terminal.read")
}

// Write types p into the terminal.
func (t *Terminal) Write(p []byte) (int, error) {
	n, err := t.t.Write(p)
	return n, t.err(err, "terminal.write")
}

// Resize sets the window size (each 1..client.MaxTerminalSize); the process gets SIGWINCH.
func (t *Terminal) Resize(ctx context.Context, cols, rows int) error {
	return t.err(t.t.Resize(ctx, cols, rows), "terminal.resize")
}

// Close kills the process group and releases the stream.
func (t *Terminal) Close() error { return t.t.Close() }

// Wait waits for the process to end. Output must be read until io.EOF, or the terminal
// closed, for the end to be seen. A signal gives ExitCode 128+n and Signal set, as Exec.
func (t *Terminal) Wait(ctx context.Context) (provider.ExecResult, error) {
	res, err := t.t.Wait(ctx)
	if err != nil {
		return provider.ExecResult{}, t.err(err, "terminal.wait")
	}
	return execResult(res), nil
}

// err passes io.EOF, os.ErrClosed and context errors through and classifies the rest.
func (t *Terminal) err(err error, op string) error {
	if err == nil || err == io.EOF || errors.Is(err, os.ErrClosed) {
		return err
	}
	return t.i.agentErr(err, op)
}
