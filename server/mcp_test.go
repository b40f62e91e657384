//go:build linux

package server_test

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/tupper-dev/tupper/internal/testenv"
	"github.com/tupper-dev/tupper/sandbox"
	"github.com/tupper-dev/tupper/server/servertest"
)

// TestMCPOverServer drives /mcp of a real server with the official TypeScript MCP client
// (test/mcp): tools listed, a command run, a file written and read back, an edit — in a real
// sandbox — and checks the key requirement and that the session's sandbox is gone after.
func TestMCPOverServer(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	dir := testenv.NPMProject(t, filepath.Join(filepath.Dir(file), "..", "test", "mcp"))
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	prov := servertest.Provider(t, 7)
	srv := servertest.Start(t, prov, "")
	t.Logf("provider: %s", prov.Name())

	// No key, and a sandbox token, are refused.
	resp, err := http.Post(srv.URL+"/mcp", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("POST /mcp without a key: %d, want 401", resp.StatusCode)
	}

	node := exec.CommandContext(ctx, "node", "client.mjs", "http", srv.URL+"/mcp", srv.Key)
	node.Dir = dir
	node.Env = os.Environ()
	out, err := node.CombinedOutput()
	t.Logf("node client.mjs http:\n%s", out)
	if err != nil || !strings.Contains(string(out), "PASS") {
		t.Fatalf("the TypeScript MCP client failed against /mcp: %v", err)
	}

	// The client ended its session: the default sandbox it used is destroyed.
	deadline := time.Now().Add(30 * time.Second)
	for {
		all, err := sandbox.List(ctx, prov, sandbox.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		left := 0
		for _, in := range all {
			if _, ok := in.Labels["tupper.mcp-key"]; ok {
				left++
			}
		}
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d MCP sandboxes left after the session ended", left)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
