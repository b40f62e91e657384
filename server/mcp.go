package server

import (
	"context"
	"maps"
	"net/http"
	"time"

	"github.com/tupper-dev/tupper/mcpserver"
	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/sandbox"
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
			return tools.SessionOptions{
				Labels: labels,
				// Sandboxes made over MCP are recorded, listed and evented like the API's own.
				Created: func(ctx context.Context, b *sandbox.Sandbox) error {
					return s.recordMCPSandbox(ctx, key, labels, b)
				},
				Destroyed: func(ctx context.Context, id string) { s.gone(ctx, id, EventDestroyed, nil) },
				// Through the server's proxy: no listener on this host per port.
				PreviewURL: s.previewPath,
				// Counted against the key's and the sandbox's quotas, with the server's expiry.
				Snapshot: func(ctx context.Context, b *sandbox.Sandbox) (string, error) {
					if c == nil || c.KeyID == "" {
						return "", provider.Errorf(provider.CodeForbidden, "snapshots need an API key")
					}
					return s.takeSnapshot(ctx, b, c.KeyID, 0)
				},
			}
		},
	})
}

// recordMCPSandbox stores a sandbox an MCP session made, owned by the session's API key, and
// emits sandbox.created. Its token is random and never shown: MCP callers reach the sandbox
// through the session, API callers with their key.
func (s *Server) recordMCPSandbox(ctx context.Context, keyID string, labels map[string]string, b *sandbox.Sandbox) error {
	ctx = context.WithoutCancel(ctx)
	info, err := b.Native.Info(ctx)
	if err != nil {
		return err
	}
	if keyID == "unknown" {
		keyID = ""
	}
	rec := store.Sandbox{
		ID: b.ID, Provider: s.prov.Name(), APIKeyID: keyID, Labels: maps.Clone(labels),
		CreatedAt: info.CreatedAt, Deadline: info.Deadline, State: info.State,
	}
	if err := s.st.PutSandbox(ctx, rec, store.Hash(store.NewToken())); err != nil {
		return err
	}
	s.emit(ctx, EventCreated, b.ID, map[string]any{"labels": rec.Labels, "via": "mcp"})
	return nil
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
