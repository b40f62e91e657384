//go:build linux

package e2b_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/providers/memory"
	"github.com/tupper-dev/tupper/sandbox"
	"github.com/tupper-dev/tupper/server/e2b"
	"github.com/tupper-dev/tupper/server/servertest"
)

// headerTransport adds headers to every request: E2B's routing headers and the bearer token.
type headerTransport map[string]string

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h {
		r.Header.Set(k, v)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// TestSandboxMCP: E2B's mcp option, driven with the official Go MCP client. A config naming
// catalog servers is refused; with mcp: {} the server puts mcp-gateway in the sandbox, which
// records the client's token; the sandbox's port 50005 then serves Tupper's tools bound to
// that sandbox, for that token only, and to no other sandbox.
func TestSandboxMCP(t *testing.T) {
	prov := memory.New()
	srv := servertest.Start(t, prov, "")
	_, key, err := srv.Store.CreateE2BKey(t.Context(), "test")
	if err != nil {
		t.Fatal(err)
	}
	var e struct {
		Code    int
		Message string
	}
	if r := call(t, "POST", srv.URL+"/sandboxes", key, `{"templateID":"mcp-gateway","mcp":["x"]}`, nil, &e); r.StatusCode != 400 {
		t.Fatalf("create with an mcp that is not an object: %d %+v", r.StatusCode, e)
	}
	// A config naming catalog servers: the sandbox's gateway fails saying why (E2B's SDK
	// then fails the create with its output and kills the sandbox).
	var cat struct{ SandboxID string }
	if r := call(t, "POST", srv.URL+"/sandboxes", key, `{"templateID":"mcp-gateway","mcp":{"github":{"token":"x"}}}`, nil, &cat); r.StatusCode != 201 {
		t.Fatalf("create with a catalog server: %d", r.StatusCode)
	}
	catBox, err := sandbox.Connect(t.Context(), prov, cat.SandboxID, sandbox.ConnectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer catBox.Close()
	if res, err := catBox.Run(t.Context(), "mcp-gateway --config '{\"github\":{}}'", sandbox.RunOptions{Env: map[string]string{"GATEWAY_ACCESS_TOKEN": "x"}}); err != nil || res.OK || !strings.Contains(res.Stderr, "(github) are not available") {
		t.Fatalf("mcp-gateway with a catalog server: %+v %v", res, err)
	}
	if r := call(t, "DELETE", srv.URL+"/sandboxes/"+cat.SandboxID, key, "", nil, nil); r.StatusCode != 204 {
		t.Fatalf("kill: %d", r.StatusCode)
	}
	var sb struct{ SandboxID string }
	if r := call(t, "POST", srv.URL+"/sandboxes", key, `{"templateID":"mcp-gateway","mcp":{}}`, nil, &sb); r.StatusCode != 201 {
		t.Fatalf("create with mcp {}: %d", r.StatusCode)
	}
	var plain struct{ SandboxID string }
	if r := call(t, "POST", srv.URL+"/sandboxes", key, `{"templateID":"base"}`, nil, &plain); r.StatusCode != 201 {
		t.Fatalf("create: %d", r.StatusCode)
	}
	ctx := t.Context()
	box, err := sandbox.Connect(ctx, prov, sb.SandboxID, sandbox.ConnectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer box.Close()
	// What E2B's SDK runs after create, as root, with the token it chose.
	const token = "4b1f0c2e-9d55-4b7e-8d0c-1f2a3b4c5d6e"
	res, err := box.Run(ctx, "mcp-gateway --config '{}'", sandbox.RunOptions{Env: map[string]string{"GATEWAY_ACCESS_TOKEN": token}})
	if err != nil || !res.OK {
		t.Fatalf("mcp-gateway: %+v %v", res, err)
	}
	if got, err := box.Files.Read(ctx, e2b.MCPTokenPath); err != nil || string(got) != token {
		t.Fatalf("%s: %q %v", e2b.MCPTokenPath, got, err)
	}

	connect := func(id, tok string) (*mcp.ClientSession, error) {
		hc := &http.Client{Transport: headerTransport{"E2b-Sandbox-Id": id, "E2b-Sandbox-Port": "50005", "Authorization": "Bearer " + tok}}
		c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
		return c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: srv.URL + "/mcp", HTTPClient: hc}, nil)
	}
	if cs, err := connect(sb.SandboxID, "wrong"); err == nil {
		cs.Close()
		t.Fatal("connected with a wrong token")
	}
	// A sandbox made without the option has no endpoint: its port 50005 is an ordinary
	// (private) port, which the gateway's token does not open.
	if cs, err := connect(plain.SandboxID, token); err == nil {
		cs.Close()
		t.Fatal("connected to the MCP endpoint of a sandbox without the mcp option")
	}
	cs, err := connect(sb.SandboxID, token)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	callTool := func(name string, args map[string]any) *mcp.CallToolResult {
		t.Helper()
		r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return r
	}
	text := func(r *mcp.CallToolResult) string {
		var b strings.Builder
		for _, c := range r.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				b.WriteString(tc.Text)
			}
		}
		return b.String()
	}
	if r := callTool("write_file", map[string]any{"path": "from-mcp.txt", "content": "hello"}); r.IsError {
		t.Fatalf("write_file: %s", text(r))
	}
	if got, err := box.Files.Read(ctx, "from-mcp.txt"); err != nil || string(got) != "hello" {
		t.Fatalf("the tool did not write into the bound sandbox: %q %v", got, err)
	}
	if r := callTool("run_command", map[string]any{"command": "true", "sandbox_id": plain.SandboxID}); !r.IsError {
		t.Fatalf("reached another sandbox: %s", text(r))
	}
	if r := callTool("create_sandbox", map[string]any{}); !r.IsError || !strings.Contains(text(r), "bound to sandbox") {
		t.Fatalf("create_sandbox: %s", text(r))
	}
	if r := callTool("destroy_sandbox", map[string]any{"sandbox_id": sb.SandboxID}); !r.IsError {
		t.Fatalf("destroy_sandbox: %s", text(r))
	}
	if n := count(t, prov); n != 2 {
		t.Fatalf("%d sandboxes, want the 2 the test made", n)
	}
	// Killed through E2B's API: the endpoint goes with it.
	if r := call(t, "DELETE", srv.URL+"/sandboxes/"+sb.SandboxID, key, "", nil, nil); r.StatusCode != 204 {
		t.Fatalf("kill: %d", r.StatusCode)
	}
	if r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "run_command", Arguments: map[string]any{"command": "true"}}); err == nil && !r.IsError {
		t.Fatal("the endpoint of a killed sandbox still runs tools")
	}
}

func count(t *testing.T, p provider.Provider) int {
	infos, err := p.List(context.Background(), provider.ListFilter{})
	if err != nil {
		t.Fatal(err)
	}
	return len(infos)
}
