//go:build linux

package server_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tupper-dev/tupper/internal/metrics"
	"github.com/tupper-dev/tupper/server"
	"github.com/tupper-dev/tupper/server/servertest"
)

// TestMetricsMCPRun: a run_command through /mcp is timed under the dialect "mcp".
func TestMetricsMCPRun(t *testing.T) {
	prov := servertest.Provider(t, 92)
	srv := servertest.Start(t, prov, "", func(c *server.Config) { c.Metrics = metrics.New() })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cs := mcpSession(ctx, t, srv)
	for range 2 {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "run_command", Arguments: map[string]any{"command": "true"}})
		if err != nil || res.IsError {
			t.Fatalf("run_command: %v %+v", err, res)
		}
	}
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+srv.Key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := `tupper_exec_seconds_count{api="mcp"} 2`; !strings.Contains(string(body), want+"\n") {
		t.Errorf("no %q in the metrics:\n%s", want, body)
	}
}
