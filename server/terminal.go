package server

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/sandbox"
	"github.com/tupper-dev/tupper/server/api"
)

// MaxTerminalSize is the largest number of columns or rows of a terminal over the API, as in
// the SDK.
const MaxTerminalSize = 1000

// terminalChunk is the most terminal output sent in one binary message.
const terminalChunk = 32 << 10

// terminalSize reads one of the cols and rows query parameters: def when absent, else
// 1..MaxTerminalSize.
func terminalSize(r *http.Request, name string, def int64) (int, error) {
	n, err := queryInt(r, name, def)
	if err != nil {
		return 0, err
	}
	if n < 1 || n > MaxTerminalSize {
		return 0, badRequest("%s=%d is out of range: want 1 to %d", name, n, MaxTerminalSize)
	}
	return int(n), nil
}

func checkTerminalSize(cols, rows int) error {
	if cols < 1 || rows < 1 || cols > MaxTerminalSize || rows > MaxTerminalSize {
		return badRequest("terminal size %dx%d is out of range: want 1 to %d each", cols, rows, MaxTerminalSize)
	}
	return nil
}

// terminal serves GET /v1/sandboxes/{id}/terminal?cols=&rows=: a login shell on a PTY over a
// WebSocket. Binary messages carry the terminal's bytes both ways; text messages carry JSON
// control (see api.TerminalControl). The terminal is opened before the upgrade, so a bad size,
// an unknown sandbox or a provider without terminals is an ordinary JSON error; closing the
// WebSocket kills the shell.
func (s *Server) terminal(w http.ResponseWriter, r *http.Request, _ *caller) {
	cols, err := terminalSize(r, "cols", 80)
	if err != nil {
		writeError(w, err)
		return
	}
	rows, err := terminalSize(r, "rows", 24)
	if err != nil {
		writeError(w, err)
		return
	}
	b, err := s.box(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	// Asked before the upgrade, so that the refusal is an ordinary JSON error: the sandbox's
	// capabilities list "terminal" where it is a provider.Terminaler not refused.
	if !b.Capabilities.Has(provider.CapTerminal) {
		writeError(w, provider.Errorf(provider.CodeUnsupported, "provider %s has no terminal", b.Provider))
		return
	}
	if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		w.Header().Set("Upgrade", "websocket")
		writeError(w, badRequest("the terminal is a WebSocket: send Upgrade: websocket"))
		return
	}
	term, err := b.Terminal(r.Context(), cols, rows)
	if err != nil {
		writeError(w, err)
		return
	}
	defer term.Close()
	// Clients authenticate with a header, which a browser page cannot set on a WebSocket,
	// so the default same-origin check costs nothing and stops cross-site pages.
	conn, err := websocket.Accept(w, r, &websocket.AcceptOptions{})
	if err != nil {
		return // Accept has answered
	}
	defer conn.CloseNow()
	conn.SetReadLimit(1 << 20)
	serveTerminal(context.WithoutCancel(r.Context()), conn, term)
}

// serveTerminal copies between conn and term until either ends, then closes both.
func serveTerminal(ctx context.Context, conn *websocket.Conn, term provider.Terminal) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var once sync.Once
	closeTerm := func() { once.Do(func() { _ = term.Close() }) }

	// Output: terminal → client, then the exit report and a normal close.
	outDone := make(chan struct{})
	go func() {
		defer close(outDone)
		buf := make([]byte, terminalChunk)
		for {
			n, err := term.Read(buf)
			if n > 0 {
				if werr := conn.Write(ctx, websocket.MessageBinary, buf[:n]); werr != nil {
					closeTerm()
					return
				}
			}
			if err != nil {
				if err == io.EOF {
					sendExit(ctx, conn, term)
					_ = conn.Close(websocket.StatusNormalClosure, "the terminal's process ended")
				} else {
					_ = conn.Close(websocket.StatusInternalError, "reading the terminal failed")
				}
				cancel()
				return
			}
		}
	}()

	// Input: client → terminal, until the client closes or the output side ends.
	for {
		typ, data, err := conn.Read(ctx)
		if err != nil {
			break
		}
		if typ == websocket.MessageBinary {
			if _, err := term.Write(data); err != nil {
				break
			}
			continue
		}
		if err := terminalCommand(ctx, term, data); err != nil {
			e := toAPIError(err)
			msg, _ := json.Marshal(api.TerminalControl{Type: "error", Code: e.Code, Message: e.Message})
			if conn.Write(ctx, websocket.MessageText, msg) != nil {
				break
			}
		}
	}
	// The client went away (or the process ended): the shell goes with it.
	closeTerm()
	<-outDone
}

// terminalCommand carries out one control message from the client.
func terminalCommand(ctx context.Context, term provider.Terminal, data []byte) error {
	var c api.TerminalControl
	if err := json.Unmarshal(data, &c); err != nil {
		return badRequest("malformed control message: %s", strings.TrimPrefix(err.Error(), "json: "))
	}
	switch c.Type {
	case "resize":
		if err := checkTerminalSize(c.Cols, c.Rows); err != nil {
			return err
		}
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		return term.Resize(rctx, c.Cols, c.Rows)
	default:
		return badRequest("unknown control message type %q: want resize", c.Type)
	}
}

// sendExit sends how the terminal's process ended, when the terminal can tell.
func sendExit(ctx context.Context, conn *websocket.Conn, term provider.Terminal) {
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	res, err := sandbox.WaitTerminal(wctx, term)
	if errors.Is(err, sandbox.CodeUnsupported) {
		return // the terminal cannot tell: the socket closes without an exit message
	}
	if err != nil {
		if !errors.Is(err, context.Canceled) {
			e := toAPIError(err)
			msg, _ := json.Marshal(api.TerminalControl{Type: "error", Code: e.Code, Message: e.Message})
			_ = conn.Write(ctx, websocket.MessageText, msg)
		}
		return
	}
	code := res.ExitCode
	msg, _ := json.Marshal(api.TerminalControl{Type: "exit", ExitCode: &code, Signal: res.Signal})
	_ = conn.Write(ctx, websocket.MessageText, msg)
}
