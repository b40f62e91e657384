package server

import (
	"context"
	"net/http"
	"time"

	"github.com/tupper-dev/tupper/mcpserver"
	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/sandbox"
	"github.com/tupper-dev/tupper/server/lifecycle"
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
			return tools.SessionOptions{
				Labels: labels,
				// Sandboxes made over MCP are recorded, listed and evented like the API's own.
				Created: func(ctx context.Context, b *sandbox.Sandbox) error {
					return s.recordMCPSandbox(ctx, key, labels, b)
				},
				Destroyed: func(ctx context.Context, id string) { s.lc.Gone(ctx, id, EventDestroyed, nil) },
				// Through the server's proxy: no listener on this host per port.
				PreviewURL: s.previewPath,
				// Counted against the key's and the sandbox's quotas, with the server's expiry.
				Snapshot: func(ctx context.Context, b *sandbox.Sandbox) (string, error) {
					if c == nil || c.KeyID == "" {
						return "", provider.Errorf(provider.CodeForbidden, "snapshots need an API key")
					}
					return s.lc.Snapshot(ctx, b.ID, lifecycle.SnapshotOptions{KeyID: c.KeyID})
				},
			}
		},
	})
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

// closeMCP ends every open MCP session, destroying their default sandboxes.
func (s *Server) closeMCP() {
	if s.mcp == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_ = s.mcp.Close(ctx)
}
