//go:build linux

package mcpserver

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/tupper-dev/tupper/internal/testenv"
	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/providers/local"
	"github.com/tupper-dev/tupper/providers/memory"
	"github.com/tupper-dev/tupper/sandbox"
	"github.com/tupper-dev/tupper/tools"
)

// The official TypeScript MCP client (npm @modelcontextprotocol/sdk, pinned by
// test/mcp/package-lock.json) drives `tupper mcp` over stdio and NewHTTPHandler over
// streamable HTTP, in real sandboxes: test/mcp/client.mjs lists the tools, runs commands, and
// does a file round trip and an edit.
//
// The provider is $TUPPER_TEST_PROVIDER, else local when running as root with runc, else
// memory.

func repoRoot(t *testing.T) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..")
}

// nodeClient returns the directory of the client project after `npm ci`, or skips (fails
// under CI=true) without node and npm.
func nodeClient(t *testing.T) string {
	t.Helper()
	return testenv.NPMProject(t, filepath.Join(repoRoot(t), "test", "mcp"))
}

// testProvider picks the provider name the test runs on.
func testProvider(t *testing.T) string {
	if name := os.Getenv("TUPPER_TEST_PROVIDER"); name != "" {
		return name
	}
	if _, err := exec.LookPath("runc"); err == nil && os.Geteuid() == 0 {
		return "local"
	}
	return "memory"
}

// tupperBinary is the static tupper built from this checkout (or $TUPPER_AGENT).
func tupperBinary(t *testing.T) string { return testenv.TupperBinary(t) }

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

// localHome returns a private state root for the local provider.
func localHome(t *testing.T) string {
	home := t.TempDir()
	if err := os.Chmod(filepath.Dir(home), 0o711); err != nil {
		t.Fatal(err)
	}
	return home
}

// runClient runs client.mjs with args and fails t with its output unless it passes.
func runClient(t *testing.T, dir string, env []string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", append([]string{"client.mjs"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	t.Logf("node client.mjs %s:\n%s", strings.Join(args, " "), out)
	if err != nil || !strings.Contains(string(out), "PASS") {
		t.Fatalf("the TypeScript MCP client failed: %v", err)
	}
}

func TestOfficialClientStdio(t *testing.T) {
	dir := nodeClient(t)
	name := testProvider(t)
	t.Logf("provider: %s (set TUPPER_TEST_PROVIDER to choose)", name)
	bin := tupperBinary(t)
	if out, err := exec.Command(bin, "mcp", "--help").CombinedOutput(); err != nil || !strings.Contains(string(out), "MCP") {
		t.Fatalf("%s mcp --help: %v\n%s\ncmd/tupper does not register the mcp command yet: add newMCPCmd() to the root command", bin, err, out)
	}
	var env []string
	var home string
	if name == "local" {
		home = localHome(t)
		env = append(env, "TUPPER_HOME="+home)
	}
	// The session's sandboxes take create's flags: the client checks the variable is set.
	env = append(env, "EXPECT_SANDBOX_ENV=TUPPER_MCP_FLAG=set-by-a-flag")
	runClient(t, dir, env, "stdio", bin, "mcp", "--provider", name, "--network", "none", "-e", "TUPPER_MCP_FLAG=set-by-a-flag")

	if name == "local" {
		// The default sandbox died with the session (stdin closed).
		p, err := local.New(local.Config{Home: home, AgentPath: bin})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		waitNoSandboxes(t, p)
	}
}

func TestOfficialClientHTTP(t *testing.T) {
	dir := nodeClient(t)
	name := testProvider(t)
	t.Logf("provider: %s (set TUPPER_TEST_PROVIDER to choose)", name)
	var prov provider.Provider
	switch name {
	case "local":
		p, err := local.New(local.Config{Home: localHome(t), AgentPath: tupperBinary(t)})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		if err := p.Available(t.Context()); err != nil {
			testenv.Skip(t, err.Error())
		}
		prov = p
	case "memory":
		prov = memory.New()
	default:
		var err error
		if prov, err = provider.Resolve(t.Context(), provider.ResolveOptions{Name: name}); err != nil {
			t.Fatal(err)
		}
	}
	h, err := NewHTTPHandler(HTTPOptions{Options: Options{
		Provider: prov,
		Version:  "test",
		Session:  tools.SessionOptions{Create: sandbox.CreateOptions{Network: sandbox.NetworkNone}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	// Behind auth, as tupper serve mounts it.
	const key = "ak_test_key"
	mux := http.NewServeMux()
	mux.Handle("/mcp", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+key {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	defer h.Close(context.Background())

	runClient(t, dir, nil, "http", srv.URL+"/mcp", key)
	// The client ended its session (HTTP DELETE): its default sandbox is gone.
	waitNoSandboxes(t, prov)

	resp, err := http.Post(srv.URL+"/mcp", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a request without the key got %d", resp.StatusCode)
	}
}

func waitNoSandboxes(t *testing.T, p provider.Provider) {
	t.Helper()
	var infos []sandbox.Info
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		var err error
		if infos, err = sandbox.List(context.Background(), p, sandbox.ListOptions{}); err != nil {
			t.Fatal(err)
		}
		if len(infos) == 0 {
			return
		}
	}
	t.Errorf("%d sandboxes left after the session ended, want 0: %+v", len(infos), infos)
}
