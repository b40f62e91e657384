package e2b

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/sandbox"
)

// E2B's mcp create option gives a sandbox an MCP endpoint: the SDK creates it (from the
// template "mcp-gateway" unless it names another), runs `mcp-gateway --config JSON` in it as
// root with GATEWAY_ACCESS_TOKEN set to a token it chose, and then speaks MCP to
// https://{MCPPort}-{id}.{domain}/mcp with that token as a bearer credential.
//
// Here the endpoint is the server's: Tupper's own MCP tools, bound to that sandbox alone
// (tools.SessionOptions.Bound), served by the server when a request reaches the sandbox's
// MCPPort. The mcp-gateway command the server puts in the sandbox only records the SDK's
// token in MCPTokenPath, where E2B's SDK reads it back (getMcpToken); the server reads it
// there to check the bearer credential. The sandbox can change that file, and so choose who
// may use an endpoint whose tools act on the sandbox alone: nothing it could not do itself.
//
// E2B's gateway runs MCP servers from Docker's catalog, named in the config; those are not
// available: with a config that names any, mcp-gateway fails saying so.

// MCPPort is the port of a sandbox's MCP endpoint in E2B's SDKs.
const MCPPort = 50005

// mcpTemplate is the template E2B's SDKs ask for when mcp is set without one: the
// provider's default here, as base is.
const mcpTemplate = "mcp-gateway"

// MCPTokenPath is where the gateway keeps the token (and E2B's getMcpToken reads it).
const MCPTokenPath = "/etc/mcp-gateway/.token"

// mcpGatewayPath is where the server puts its mcp-gateway command in the sandbox.
const mcpGatewayPath = "/usr/local/bin/mcp-gateway"

// labelMCP, "true", records that the sandbox was created with the mcp option.
const labelMCP = reservedPrefix + "mcp"

// mcpGateway is the sandbox's mcp-gateway: it records the token and returns, since the
// server serves the endpoint itself.
const mcpGateway = `#!/bin/sh
# Tupper's mcp-gateway: the server serves Tupper's MCP tools for this sandbox on port 50005;
# this records the token the client chose, which the server asks for.
set -e
if [ -z "$GATEWAY_ACCESS_TOKEN" ]; then
	echo "mcp-gateway: GATEWAY_ACCESS_TOKEN is not set" >&2
	exit 2
fi
mkdir -p /etc/mcp-gateway
chmod 700 /etc/mcp-gateway
printf '%s' "$GATEWAY_ACCESS_TOKEN" > /etc/mcp-gateway/.token.new
chmod 600 /etc/mcp-gateway/.token.new
mv /etc/mcp-gateway/.token.new /etc/mcp-gateway/.token
`

// mcpRefusal is why the gateway cannot serve config, or "" when it names no MCP server ({}).
func mcpRefusal(raw json.RawMessage) (string, error) {
	var servers map[string]json.RawMessage
	if err := json.Unmarshal(raw, &servers); err != nil {
		return "", provider.Errorf(provider.CodeInvalidArgument, "mcp: want an object: %v", err)
	}
	if len(servers) == 0 {
		return "", nil
	}
	names := slices.Sorted(maps.Keys(servers))
	return "MCP servers from E2B's catalog (" + strings.Join(names, ", ") + ") are not available on tupper; " +
		"with mcp: {} the sandbox's MCP endpoint serves Tupper's own tools for the sandbox (commands, files, processes, ports)", nil
}

// hasMCP reports whether raw is an mcp option (any JSON but null).
func hasMCP(raw json.RawMessage) bool {
	s := strings.TrimSpace(string(raw))
	return s != "" && s != "null"
}

// installMCPGateway puts the mcp-gateway command into a new sandbox. A config it cannot
// serve gets a gateway that fails saying why, so the SDK fails its create with that
// message ("Failed to start MCP gateway: …") and removes the sandbox, as on E2B when a
// gateway does not start.
func installMCPGateway(ctx context.Context, b *sandbox.Sandbox, refusal string) error {
	script := mcpGateway
	if refusal != "" {
		script = "#!/bin/sh\necho 'mcp-gateway: " + strings.ReplaceAll(refusal, "'", `'"'"'`) + "' >&2\nexit 1\n"
	}
	if err := b.Files.Write(ctx, mcpGatewayPath, []byte(script), sandbox.WriteOptions{Mode: sandbox.Mode(0o755)}); err != nil {
		return provider.Errorf(provider.CodeProvider, "mcp: put mcp-gateway in the sandbox: %v", err)
	}
	return nil
}

// maxMCPToken bounds the token file the server reads from the sandbox.
const maxMCPToken = 512

// MCPAuthorized reports whether r may use the MCP endpoint of sandbox id: the sandbox was
// created through E2B's API with the mcp option, and r carries, as a bearer credential, the
// token its mcp-gateway recorded. A sandbox without the option has no endpoint (enabled
// false: its MCPPort is an ordinary port).
func (s *Server) MCPAuthorized(r *http.Request, id string) (enabled, ok bool) {
	ctx := r.Context()
	rec, err := s.st.Sandbox(ctx, id)
	if err != nil || rec.Labels[labelMCP] != "true" {
		return false, false
	}
	got, found := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !found || got == "" {
		return true, false
	}
	b, err := s.lc.Handle(ctx, id)
	if err != nil {
		return true, false
	}
	// Read at most one byte past the bound, whatever the sandbox made of the file.
	rc, err := b.Files.OpenRange(ctx, MCPTokenPath, 0, maxMCPToken+1)
	if err != nil {
		return true, false
	}
	defer rc.Close()
	want, err := io.ReadAll(io.LimitReader(rc, maxMCPToken+1))
	if err != nil || len(want) == 0 || len(want) > maxMCPToken {
		return true, false
	}
	return true, subtle.ConstantTimeCompare([]byte(got), want) == 1
}
