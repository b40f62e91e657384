package mcpserver

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tupper-dev/tupper/tools"
)

// closeTimeout bounds destroying a session's default sandbox.
const closeTimeout = 30 * time.Second

// DefaultIdleTimeout ends an HTTP MCP session, and destroys its default sandbox, after this
// long without a request.
const DefaultIdleTimeout = 30 * time.Minute

// HTTPOptions configures NewHTTPHandler.
type HTTPOptions struct {
	Options
	// SessionFor, when set, gives the tools.SessionOptions of the session a request opens,
	// for example labels that scope it to the caller's API key. It runs after the server's
	// authentication, on the request that initializes the session. Nil: Options.Session.
	SessionFor func(r *http.Request) tools.SessionOptions
	// IdleTimeout ends a session after this long without a request. 0: DefaultIdleTimeout;
	// negative: never.
	IdleTimeout time.Duration
	// JSONResponse answers each POST with application/json instead of an event stream.
	JSONResponse bool
}

// HTTPHandler serves MCP over streamable HTTP. Mount it where MCP clients will post, e.g.
// /mcp, behind authentication: every session can create and destroy sandboxes.
type HTTPHandler struct {
	h    http.Handler
	opts HTTPOptions

	mu       sync.Mutex
	closed   bool
	sessions map[*tools.Session]bool
}

// NewHTTPHandler returns a streamable HTTP handler of MCP. Each MCP session gets its own
// tools.Session and default sandbox, destroyed when the client ends the session (HTTP
// DELETE), when it stays idle past IdleTimeout, or by Close.
//
// The handler rejects requests that reach a loopback address with a non-loopback Host
// header (DNS rebinding protection).
func NewHTTPHandler(opts HTTPOptions) (*HTTPHandler, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	h := &HTTPHandler{opts: opts, sessions: map[*tools.Session]bool{}}
	idle := opts.IdleTimeout
	switch {
	case idle == 0:
		idle = DefaultIdleTimeout
	case idle < 0:
		idle = 0
	}
	h.h = mcp.NewStreamableHTTPHandler(h.server, &mcp.StreamableHTTPOptions{
		Logger:         opts.Logger,
		SessionTimeout: idle,
		JSONResponse:   opts.JSONResponse,
	})
	return h, nil
}

// server makes the MCP server of a new session.
func (h *HTTPHandler) server(r *http.Request) *mcp.Server {
	so := h.opts.Session
	if h.opts.SessionFor != nil {
		so = h.opts.SessionFor(r)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil // the SDK answers 400
	}
	sess := tools.NewSession(h.opts.Provider, so)
	h.sessions[sess] = true
	return newServer(h.opts.Options, sess, func() {
		h.mu.Lock()
		delete(h.sessions, sess)
		h.mu.Unlock()
	})
}

// ServeHTTP implements http.Handler.
func (h *HTTPHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	closed := h.closed
	h.mu.Unlock()
	if closed {
		http.Error(w, "mcp endpoint is shutting down", http.StatusServiceUnavailable)
		return
	}
	h.h.ServeHTTP(w, r)
}

// Close ends every session and destroys their default sandboxes, waiting for sessions that
// are already ending. Later requests get 503. Idempotent.
func (h *HTTPHandler) Close(ctx context.Context) error {
	h.mu.Lock()
	h.closed = true
	sessions := h.sessions
	h.sessions = map[*tools.Session]bool{}
	h.mu.Unlock()
	var errs []error
	for s := range sessions {
		if err := s.Close(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
