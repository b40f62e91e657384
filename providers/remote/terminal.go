package remote

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"

	"github.com/coder/websocket"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/server/api"
)

var _ provider.Terminaler = (*Instance)(nil)

// maxTerminalSize is the server's limit on columns and rows.
const maxTerminalSize = 1000

// Terminal is a login shell on a PTY in a sandbox on the server, over the WebSocket of
// GET /v1/sandboxes/{id}/terminal. Beyond provider.Terminal it has Wait. Read may run
// concurrently with the other methods (but not with another Read); Close is idempotent and
// kills the shell.
type Terminal struct {
	conn   *websocket.Conn
	cancel context.CancelFunc // the connection's context

	data chan []byte   // output messages, in order; closed when the connection ends
	done chan struct{} // closed when the connection ends
	rest []byte        // the part of a message Read has not returned yet

	mu      sync.Mutex
	exit    *provider.ExecResult // the server's exit report
	endErr  error                // why the connection ended, when not at the process's end
	closed  bool
	closeMu sync.Once
}

var (
	_ provider.Terminal       = (*Terminal)(nil)
	_ provider.TerminalWaiter = (*Terminal)(nil)
)

func checkSize(cols, rows int) error {
	if cols < 1 || rows < 1 || cols > maxTerminalSize || rows > maxTerminalSize {
		return provider.Errorf(provider.CodeInvalidArgument, "terminal size %dx%d is out of range: want 1 to %d each", cols, rows, maxTerminalSize)
	}
	return nil
}

// Terminal opens a login shell on a cols × rows PTY in the sandbox. ctx bounds the opening
// only. See provider.Terminaler.
func (in *Instance) Terminal(ctx context.Context, cols, rows int) (provider.Terminal, error) {
	if err := in.p.Refuse(provider.CapTerminal); err != nil {
		return nil, err
	}
	if err := checkSize(cols, rows); err != nil {
		return nil, err
	}
	u := fmt.Sprintf("%s%s/terminal?cols=%d&rows=%d", in.p.base, in.path, cols, rows)
	// The connection outlives ctx; ctx cancels only the handshake.
	cctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, cancel)
	conn, resp, err := websocket.Dial(cctx, u, &websocket.DialOptions{
		HTTPClient: in.p.client,
		HTTPHeader: http.Header{"Authorization": {"Bearer " + in.p.cfg.APIKey}},
	})
	if !stop() {
		if conn != nil {
			_ = conn.CloseNow()
		}
		cancel()
		return nil, fmt.Errorf("terminal: %w", ctx.Err())
	}
	if err != nil {
		cancel()
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			return nil, errorFrom(resp)
		}
		return nil, transportErr(ctx, "terminal", err)
	}
	conn.SetReadLimit(1 << 20)
	t := &Terminal{conn: conn, cancel: cancel, data: make(chan []byte), done: make(chan struct{})}
	go t.readLoop(cctx)
	return t, nil
}

// readLoop reads the server's messages until the connection ends: output goes to Read
// (one message at a time, so output is fetched only as fast as it is read), control
// messages are recorded.
func (t *Terminal) readLoop(ctx context.Context) {
	defer close(t.done)
	defer close(t.data)
	for {
		typ, msg, err := t.conn.Read(ctx)
		if err != nil {
			t.mu.Lock()
			if t.exit == nil && !t.closed {
				if websocket.CloseStatus(err) == websocket.StatusNormalClosure {
					t.endErr = io.EOF
				} else {
					t.endErr = transportErr(ctx, "terminal", err)
				}
			}
			t.mu.Unlock()
			return
		}
		if typ == websocket.MessageBinary {
			select {
			case t.data <- msg:
			case <-ctx.Done():
				return
			}
			continue
		}
		var c api.TerminalControl
		if json.Unmarshal(msg, &c) != nil {
			continue
		}
		switch c.Type {
		case "exit":
			res := provider.ExecResult{Signal: c.Signal}
			if c.ExitCode != nil {
				res.ExitCode = *c.ExitCode
			}
			t.mu.Lock()
			t.exit = &res
			t.mu.Unlock()
		case "error":
			// A refused control message; Resize checks sizes before sending, so there is
			// no caller left to tell.
		}
	}
}

// Read returns terminal output; io.EOF once the process has ended and its output is read.
// After Close it returns os.ErrClosed.
func (t *Terminal) Read(p []byte) (int, error) {
	for len(t.rest) == 0 {
		msg, ok := <-t.data
		if !ok {
			return 0, t.readErr()
		}
		t.rest = msg
	}
	n := copy(p, t.rest)
	t.rest = t.rest[n:]
	return n, nil
}

func (t *Terminal) readErr() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case t.exit != nil:
		return io.EOF
	case t.closed:
		return os.ErrClosed
	case t.endErr != nil:
		return t.endErr
	}
	return io.EOF
}

// Write types p into the terminal.
func (t *Terminal) Write(p []byte) (int, error) {
	t.mu.Lock()
	closed := t.closed
	t.mu.Unlock()
	if closed {
		return 0, os.ErrClosed
	}
	select {
	case <-t.done:
		return 0, t.readErr()
	default:
	}
	if err := t.conn.Write(context.Background(), websocket.MessageBinary, p); err != nil {
		return 0, t.writeErr(err)
	}
	return len(p), nil
}

// Resize sets the window size (each 1..1000); the process gets SIGWINCH. The server applies
// it in order with the input.
func (t *Terminal) Resize(ctx context.Context, cols, rows int) error {
	if err := checkSize(cols, rows); err != nil {
		return err
	}
	msg, _ := json.Marshal(api.TerminalControl{Type: "resize", Cols: cols, Rows: rows})
	if err := t.conn.Write(ctx, websocket.MessageText, msg); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("terminal.resize: %w", ctx.Err())
		}
		return t.writeErr(err)
	}
	return nil
}

func (t *Terminal) writeErr(err error) error {
	t.mu.Lock()
	closed := t.closed
	t.mu.Unlock()
	if closed {
		return os.ErrClosed
	}
	return &provider.Error{Code: provider.CodeUnavailable, Op: "terminal", Message: provider.StripCredentials(err.Error()), Err: err}
}

// Wait waits for the process to end and returns how it ended, as the server reports it.
// Output must be read until io.EOF for the end to be seen. After Close, or when the
// connection ends without a report, it returns an error.
func (t *Terminal) Wait(ctx context.Context) (provider.ExecResult, error) {
	select {
	case <-t.done:
	case <-ctx.Done():
		return provider.ExecResult{}, fmt.Errorf("terminal.wait: %w", ctx.Err())
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.exit != nil {
		return *t.exit, nil
	}
	if t.closed {
		return provider.ExecResult{}, os.ErrClosed
	}
	return provider.ExecResult{}, provider.Errorf(provider.CodeUnavailable, "terminal: the connection ended without the process's exit status")
}

// Close closes the WebSocket, which makes the server kill the shell. Idempotent.
func (t *Terminal) Close() error {
	t.closeMu.Do(func() {
		t.mu.Lock()
		t.closed = true
		t.mu.Unlock()
		_ = t.conn.Close(websocket.StatusNormalClosure, "")
		t.cancel()
		<-t.done
	})
	return nil
}
