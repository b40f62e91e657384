//go:build linux

package server_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tupper-dev/tupper/providers/memory"
	"github.com/tupper-dev/tupper/server"
	"github.com/tupper-dev/tupper/server/servertest"
	"github.com/tupper-dev/tupper/store"
)

type bearer struct {
	key  string
	next http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.key)
	return b.next.RoundTrip(r)
}

// mcpSession connects the official MCP Go client to srv's /mcp over streamable HTTP with its
// key, closed when the test ends.
func mcpSession(ctx context.Context, t *testing.T, srv *servertest.Server) *mcp.ClientSession {
	t.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "tupper-test", Version: "0"}, nil)
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint:   srv.URL + "/mcp",
		HTTPClient: &http.Client{Transport: bearer{srv.Key, http.DefaultTransport}},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// A sandbox made over /mcp is recorded like one made with the API: listed under /v1 for the
// same key, with sandbox.created and sandbox.destroyed events, and gone from the list once
// the MCP session destroys it. Uses the official MCP Go client over streamable HTTP.
func TestMCPSandboxesAreRecorded(t *testing.T) {
	prov := servertest.Provider(t, 2)
	srv := servertest.Start(t, prov, "")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	cs := mcpSession(ctx, t, srv)

	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "create_sandbox", Arguments: map[string]any{}})
	if err != nil || res.IsError {
		t.Fatalf("create_sandbox: %v %+v", err, res)
	}
	var created struct {
		ID string `json:"sandbox_id"`
	}
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, &created); err != nil || created.ID == "" {
		t.Fatalf("create_sandbox result %s: %v", b, err)
	}

	var list struct {
		Sandboxes []struct {
			ID     string            `json:"id"`
			Labels map[string]string `json:"labels"`
		} `json:"sandboxes"`
	}
	if code := call(t, "GET", srv.URL+"/v1/sandboxes", srv.Key, nil, &list); code != 200 {
		t.Fatalf("GET /v1/sandboxes: %d", code)
	}
	found := false
	for _, s := range list.Sandboxes {
		if s.ID == created.ID {
			found = true
			if s.Labels["tupper.mcp-key"] == "" {
				t.Errorf("listed without the MCP key label: %v", s.Labels)
			}
		}
	}
	if !found {
		t.Fatalf("sandbox %s made over MCP is not in /v1/sandboxes: %+v", created.ID, list)
	}

	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "destroy_sandbox", Arguments: map[string]any{"sandbox_id": created.ID}})
	if err != nil || res.IsError {
		t.Fatalf("destroy_sandbox: %v %+v", err, res)
	}
	list.Sandboxes = nil
	call(t, "GET", srv.URL+"/v1/sandboxes", srv.Key, nil, &list)
	for _, s := range list.Sandboxes {
		if s.ID == created.ID {
			t.Fatalf("destroyed sandbox %s still listed", created.ID)
		}
	}
	for _, typ := range []string{"sandbox.created", "sandbox.destroyed"} {
		var evs struct{ Events []store.Event }
		call(t, "GET", srv.URL+"/v1/events?type="+typ, srv.Key, nil, &evs)
		n := 0
		for _, e := range evs.Events {
			if e.SandboxID == created.ID {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%d %s events for %s, want 1: %+v", n, typ, created.ID, evs.Events)
		}
	}
}

// The snapshot tool over /mcp takes the server's snapshots: counted against the sandbox's and
// the key's quotas, as the API's own are (it once went to the provider directly, around them).
func TestMCPSnapshotQuota(t *testing.T) {
	srv := servertest.Start(t, memory.New(), "", func(c *server.Config) {
		c.SnapshotsPerSandbox, c.SnapshotsPerKey, c.SnapshotExpiry = 1, 10, time.Hour
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs := mcpSession(ctx, t, srv)
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "snapshot", Arguments: map[string]any{}})
	if err != nil || res.IsError {
		t.Fatalf("first snapshot: %v %+v", err, res)
	}
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "snapshot", Arguments: map[string]any{}})
	if err != nil {
		t.Fatal(err)
	}
	text := ""
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			text += tc.Text
		}
	}
	if !res.IsError || !strings.Contains(text, "per sandbox") {
		t.Fatalf("a second snapshot of the sandbox past its quota of 1: error %v, %q", res.IsError, text)
	}
}
