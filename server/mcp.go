package server

import (
	"context"
	"net/http"
	"time"

	"github.com/tupper-dev/tupper/internal/httpdeadline"
	"github.com/tupper-dev/tupper/internal/metrics"
	"github.com/tupper-dev/tupper/mcpserver"
	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/sandbox"
	"github.com/tupper-dev/tupper/server/internal/audit"
	"github.com/tupper-dev/tupper/server/lifecycle"
	"github.com/tupper-dev/tupper/store"
	"github.com/tupper-dev/tupper/tools"
)

// mcpKeyLabel scopes an MCP session's sandboxes to the API key that opened it: a session
// lists and reaches only sandboxes made through MCP with the same key.
const mcpKeyLabel = "tupper.mcp-key"

type callerCtxKey struct{}

// newMCP builds the handler of /mcp: MCP over streamable HTTP, one session's default
// sandbox per MCP session, on the server's provider.
func (s *Server) newMCP() (*mcpserver.HTTPHandler, error) {
	return mcpserver.NewHTTPHandler(mcpserver.HTTPOptions{
		Options: mcpserver.Options{Provider: s.prov, Logger: s.log, Version: s.cfg.Version},
		SessionFor: func(r *http.Request) tools.SessionOptions {
			c, _ := r.Context().Value(callerCtxKey{}).(*caller)
			key := "unknown"
			if c != nil && c.KeyID != "" {
				key = c.KeyID
			}
			labels := map[string]string{mcpKeyLabel: key}
			source := audit.Source(r)
			return tools.SessionOptions{
				Labels: labels,
				// Tool calls that run or write are in the audit log, as the session's key's.
				Called: func(_ context.Context, tool, sandboxID string, err error) {
					s.recordMCPCall(c, source, tool, sandboxID, err)
				},
				// Sandboxes made over MCP are recorded, listed and evented like the API's own.
				Created: func(ctx context.Context, b *sandbox.Sandbox) error {
					return s.recordMCPSandbox(ctx, key, labels, b)
				},
				// Through the lifecycle, as the API's DELETE: recorded, evented, and not
				// taken for expired by a reconcile that sees it gone meanwhile.
				Destroy: func(ctx context.Context, b *sandbox.Sandbox) error {
					by := ""
					if c != nil {
						by = c.KeyID
					}
					err := s.lc.Destroy(context.WithoutCancel(ctx), b.ID, by)
					b.Close()
					return err
				},
				// Through the server's proxy: no listener on this host per port.
				PreviewURL: s.previewPath,
				// Counted against the key's and the sandbox's quotas, with the server's expiry.
				Snapshot: func(ctx context.Context, b *sandbox.Sandbox) (string, error) {
					if c == nil || c.KeyID == "" {
						return "", provider.Errorf(provider.CodeForbidden, "snapshots need an API key")
					}
					return s.lc.Snapshot(ctx, b.ID, lifecycle.SnapshotOptions{KeyID: c.KeyID})
				},
				// Recorded and evented, as the API's pause and resume.
				Pause: func(ctx context.Context, b *sandbox.Sandbox, opts sandbox.PauseOptions) error {
					return s.lc.Pause(ctx, b.ID, opts)
				},
				Resume: func(ctx context.Context, b *sandbox.Sandbox) error { return s.lc.Resume(ctx, b.ID) },
				Ran:    func(d time.Duration) { s.cfg.Metrics.ObserveExec(metrics.APIMCP, d) },
			}
		},
	})
}

// recordMCPCall records an MCP tool call that runs or writes in the audit log (as
// mcpActions names it), from the address that opened the session.
func (s *Server) recordMCPCall(c *caller, source, tool, sandboxID string, err error) {
	ac := auditCaller(c)
	if ac == nil {
		return
	}
	result := "ok"
	if err != nil {
		result = string(provider.CodeOf(err))
	}
	action := mcpActions[tool]
	if action == "" {
		action = "mcp." + tool
	}
	s.audit.Add(store.AuditEntry{KeyID: ac.KeyID, Via: ac.Via, Source: source, API: "mcp", Action: action, Target: sandboxID, Result: result})
}

// recordMCPSandbox records a sandbox an MCP session made, owned by the session's API key
// (lifecycle.Service.Record). Its token is never shown: MCP callers reach the sandbox through
// the session, API callers with their key.
func (s *Server) recordMCPSandbox(ctx context.Context, keyID string, labels map[string]string, b *sandbox.Sandbox) error {
	if keyID == "unknown" {
		keyID = ""
	}
	return s.lc.Record(ctx, b, lifecycle.RecordOptions{KeyID: keyID, Labels: labels, Event: map[string]any{"via": "mcp"}})
}

// serveMCP passes an authenticated request (an API key: scopeAccount) to the MCP handler.
func (s *Server) serveMCP(w http.ResponseWriter, r *http.Request, c *caller) {
	s.mcp.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), callerCtxKey{}, c)))
}

// closeMCP ends every open MCP session, destroying their default sandboxes (a sandbox's
// own endpoint destroys none).
func (s *Server) closeMCP() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if s.mcp != nil {
		_ = s.mcp.Close(ctx)
	}
	s.boxMCPMu.Lock()
	boxes := s.boxMCP
	s.boxMCP = nil
	s.boxMCPMu.Unlock()
	for _, h := range boxes {
		_ = h.Close(ctx)
	}
}

// serveBoxMCP serves the MCP endpoint of sandbox id (E2B's mcp option: e2b.MCPPort) when it
// has one, and reports whether it does: Tupper's tools bound to that sandbox, for a bearer
// credential its gateway recorded. A sandbox without one has an ordinary port there.
func (s *Server) serveBoxMCP(w http.ResponseWriter, r *http.Request, id string) bool {
	enabled, ok := s.e2b.MCPAuthorized(r, id)
	if !enabled {
		return false
	}
	if !ok {
		writeError(w, provider.Errorf(provider.CodeUnauthorized, "the sandbox's MCP endpoint needs the token its mcp-gateway was started with (Authorization: Bearer)"))
		return true
	}
	if r.URL.Path != "/mcp" {
		writeError(w, provider.Errorf(provider.CodeNotFound, "the sandbox's MCP endpoint is /mcp"))
		return true
	}
	h, err := s.boxMCPHandler(id)
	if err != nil {
		writeError(w, err)
		return true
	}
	httpdeadline.Lift(w)
	h.ServeHTTP(w, r)
	return true
}

// boxMCPHandler returns the MCP handler of sandbox id, made on first use.
func (s *Server) boxMCPHandler(id string) (*mcpserver.HTTPHandler, error) {
	s.boxMCPMu.Lock()
	defer s.boxMCPMu.Unlock()
	if h := s.boxMCP[id]; h != nil {
		return h, nil
	}
	h, err := mcpserver.NewHTTPHandler(mcpserver.HTTPOptions{
		Options: mcpserver.Options{Provider: s.prov, Logger: s.log, Version: s.cfg.Version},
		SessionFor: func(*http.Request) tools.SessionOptions {
			return tools.SessionOptions{Bound: id, PreviewURL: s.previewPath,
				Ran: func(d time.Duration) { s.cfg.Metrics.ObserveExec(metrics.APIMCP, d) }}
		},
	})
	if err != nil {
		return nil, err
	}
	if s.boxMCP == nil {
		s.boxMCP = map[string]*mcpserver.HTTPHandler{}
	}
	s.boxMCP[id] = h
	return h, nil
}

// lifecycleEvent records an event of the lifecycle, and ends the MCP endpoint of a sandbox
// that is gone.
func (s *Server) lifecycleEvent(ctx context.Context, typ, id string, data any) {
	s.emit(ctx, typ, id, data)
	switch typ {
	case EventDestroyed, EventExpired, EventTimedOut:
		s.dropBoxMCP(id)
	}
}

// dropBoxMCP ends the MCP endpoint of a sandbox that is gone.
func (s *Server) dropBoxMCP(id string) {
	s.boxMCPMu.Lock()
	h := s.boxMCP[id]
	delete(s.boxMCP, id)
	s.boxMCPMu.Unlock()
	if h != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = h.Close(ctx)
	}
}
