// Package js_test runs the JavaScript packages in js/ (the @tupper/* npm workspace) against a
// real tupper server on loopback with real sandboxes: it installs the workspace (npm ci),
// builds it with tsc, runs node's test runner over js/test, and packs each package.
package js_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"flag"
	"io"
	"os"
	"os/exec"
	"path/filepath"
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

// TestJS needs root and runc (real sandboxes), node and npm, and the npm registry for the
// first `npm ci`.
func TestJS(t *testing.T) {
	if ok, why := servertest.CanRunLocal(); !ok {
		testenv.Skip(t, "the JavaScript packages are tested on real sandboxes: "+why)
	}
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
	if out, err := command(t, 5*time.Minute, dir, nil, npm, "run", "build"); err != nil {
		t.Fatalf("npm run build (tsc): %v\n%s", err, out)
	}

	srv := servertest.Start(t, servertest.Provider(t, 17), "")
	t.Run("node", func(t *testing.T) {
		env := []string{"TUPPER_URL=" + srv.URL, "TUPPER_API_KEY=" + srv.Key}
		out, err := command(t, 10*time.Minute, dir, env, node, "--test", "--test-concurrency=1", "--test-reporter=spec", "test/")
		if err != nil {
			t.Fatalf("node --test: %v\n%s", err, out)
		}
		t.Logf("%s", out)
	})
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
	for _, want := range []string{"@tupper/sdk", "@tupper/ai", "@tupper/deepagents"} {
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
