package server

import (
	"context"
	"net/http"
	"time"

	mcpserver "github.com/tupper-dev/tupper/mcp"
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
			return tools.SessionOptions{Labels: map[string]string{mcpKeyLabel: key}}
		},
	})
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
