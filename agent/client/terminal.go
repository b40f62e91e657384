package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"

	"github.com/tupper-dev/tupper/agent/spec/process"
)

// MaxTerminalSize bounds a terminal's columns and rows. The kernel's window size is 16-bit;
// anything near this is a mistake, not a screen.
const MaxTerminalSize = 10000

// loginShell runs bash as a login shell where there is one, else sh. The agent does not say
// which shell a user has, and every image has /bin/sh.
var loginShell = []string{"/bin/sh", "-c", "if [ -x /bin/bash ]; then exec /bin/bash -l; fi; exec /bin/sh -l"}

// TerminalRequest describes a process to run on a pseudo-terminal.
type TerminalRequest struct {
	// Argv is the program and its arguments; empty runs a login shell (bash -l where
	// /bin/bash exists, else sh -l).
	Argv []string
	// Env is added after the agent's environment, which for a terminal includes
	// TERM=xterm-256color.
	Env map[string]string
	// Cwd is the working directory; empty is the agent's default workdir.
	Cwd string
	// User runs the process as this OS user; empty uses the client's user.
	User string
	// Cols and Rows are the initial window size, each 1..MaxTerminalSize.
	Cols, Rows int
	// Tag names the process for Attach and List.
	Tag string
}

func checkSize(cols, rows int) error {
	if cols < 1 || rows < 1 || cols > MaxTerminalSize || rows > MaxTerminalSize {
		return &Error{Code: CodeInvalidArgument, Message: fmt.Sprintf("terminal size %dx%d is out of range (1..%d each)", cols, rows, MaxTerminalSize)}
	}
	return nil
}

// Terminal is a process running on a pseudo-terminal in the sandbox. Read returns what the
// process writes to the terminal (stdout and stderr are one stream on a PTY), Write types
// into it. The process's output is read from the agent only as fast as Read consumes it, so
// a caller that wants Wait to return must keep reading until io.EOF or call Close.
//
// Read may run concurrently with Write, Resize, Wait and Close; concurrent Reads (or
// concurrent Writes) are serialised in no particular order.
type Terminal struct {
	c       *Client
	pid     int
	stream  *connect.ServerStreamForClient[process.StartResponse]
	release func()

	pr *io.PipeReader
	pw *io.PipeWriter

	done chan struct{} // closed when the pump has stopped; res and err are then set
	res  ExecResult
	err  error

	closeOnce sync.Once
	closed    chan struct{}
}

// Terminal starts a process on a new pseudo-terminal of r.Cols × r.Rows. ctx bounds the
// start only: once Terminal returns, the terminal lives until the process ends or Close is
// called, as a connection outlives the context it was dialled with.
func (c *Client) Terminal(ctx context.Context, r TerminalRequest) (*Terminal, error) {
	if err := checkSize(r.Cols, r.Rows); err != nil {
		return nil, err
	}
	argv := r.Argv
	if len(argv) == 0 {
		argv = loginShell
	}
	if argv[0] == "" {
		return nil, &Error{Code: CodeInvalidArgument, Message: "empty program name"}
	}
	pty := &process.PTY{Size: &process.PTY_Size{Cols: uint32(r.Cols), Rows: uint32(r.Rows)}}
	stream, pid, release, err := c.startStream(ctx,
		&ExecRequest{Argv: argv, Env: r.Env, Cwd: r.Cwd, User: r.User, Tag: r.Tag},
		startOpts{stdin: true, pty: pty, startOnly: true})
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	t := &Terminal{
		c: c, pid: pid, stream: stream, release: release,
		done: make(chan struct{}), closed: make(chan struct{}),
	}
	t.pr, t.pw = io.Pipe()
	t.res.PID = t.pid
	go t.pump()
	return t, nil
}

// pump copies PTY output into the pipe until the end event.
func (t *Terminal) pump() {
	defer close(t.done)
	gotEnd := false
	for t.stream.Receive() {
		switch e := t.stream.Msg().GetEvent().GetEvent().(type) {
		case *process.ProcessEvent_Data:
			b := e.Data.GetPty()
			if b == nil {
				// A PTY process has no separate pipes; take whatever arrives.
				b = append(e.Data.GetStdout(), e.Data.GetStderr()...)
			}
			if len(b) > 0 {
				// After Close the pipe refuses writes; keep receiving for the end event.
				_, _ = t.pw.Write(b)
			}
		case *process.ProcessEvent_End:
			gotEnd = true
			t.res.ExitCode = int(e.End.GetExitCode())
			t.res.Exited = e.End.GetExited()
			t.res.Status = bounded(e.End.GetStatus())
		}
	}
	switch err := t.stream.Err(); {
	case gotEnd:
	case isClosed(t.closed):
		t.err = os.ErrClosed
	case err != nil:
		t.err = rpcErr(err)
	default:
		t.err = errors.New("agent: process stream ended without an end event")
	}
	if t.err != nil {
		t.pw.CloseWithError(t.err)
	} else {
		t.pw.Close()
	}
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// PID is the process's id in the sandbox.
func (t *Terminal) PID() int { return t.pid }

// Read reads terminal output. It returns io.EOF after the process has ended and all its
// output has been read, and os.ErrClosed after Close.
func (t *Terminal) Read(p []byte) (int, error) {
	n, err := t.pr.Read(p)
	if errors.Is(err, io.ErrClosedPipe) {
		err = os.ErrClosed
	}
	return n, err
}

// writeChunk bounds one SendInput message.
const writeChunk = 32 << 10

// writeTimeout bounds one SendInput call; Write has no context.
const writeTimeout = 30 * time.Second

// Write types p into the terminal. It fails once the process has ended or Close was called.
func (t *Terminal) Write(p []byte) (int, error) {
	if isClosed(t.closed) {
		return 0, os.ErrClosed
	}
	n := 0
	for len(p) > 0 {
		chunk := p[:min(len(p), writeChunk)]
		ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
		_, err := t.c.procRPC().SendInput(ctx, connect.NewRequest(&process.SendInputRequest{
			Process: pidSel(t.pid),
			Input:   &process.ProcessInput{Input: &process.ProcessInput_Pty{Pty: chunk}},
		}))
		cancel()
		if err != nil {
			return n, rpcErr(err)
		}
		n += len(chunk)
		p = p[len(chunk):]
	}
	return n, nil
}

// Resize sets the terminal's window size; the process gets SIGWINCH.
func (t *Terminal) Resize(ctx context.Context, cols, rows int) error {
	if err := checkSize(cols, rows); err != nil {
		return err
	}
	if isClosed(t.closed) {
		return os.ErrClosed
	}
	_, err := t.c.procRPC().Update(ctx, connect.NewRequest(&process.UpdateRequest{
		Process: pidSel(t.pid),
		Pty:     &process.PTY{Size: &process.PTY_Size{Cols: uint32(cols), Rows: uint32(rows)}},
	}))
	return rpcErr(err)
}

// Done is closed when the process has ended (or the stream failed) and its output has been
// read.
func (t *Terminal) Done() <-chan struct{} { return t.done }

// Wait waits for the process to end and returns how it ended. Output must be read until
// io.EOF (or the terminal closed) for the end to be seen. After Close, Wait returns the
// result if the end arrived in time, else os.ErrClosed.
func (t *Terminal) Wait(ctx context.Context) (ExecResult, error) {
	select {
	case <-t.done:
		return t.res, t.err
	case <-ctx.Done():
		return ExecResult{PID: t.pid}, ctx.Err()
	}
}

// closeWait is how long Close waits for the end event of the process it killed.
const closeWait = 5 * time.Second

// Close kills the process group (SIGKILL) and releases the stream. It waits briefly for the
// process's end, so that Wait can report it. Close is idempotent and safe to call
// concurrently; it always returns nil.
func (t *Terminal) Close() error {
	t.closeOnce.Do(func() {
		close(t.closed)
		// Unblock Read and let the pump drain the stream without anyone reading.
		t.pr.CloseWithError(os.ErrClosed)
		select {
		case <-t.done:
		default:
			ctx, cancel := context.WithTimeout(context.Background(), closeWait)
			_ = t.c.Signal(ctx, t.pid, syscall.SIGKILL)
			select {
			case <-t.done:
			case <-ctx.Done():
			}
			cancel()
		}
		t.release()
		t.stream.Close()
		<-t.done
	})
	return nil
}
