//go:build linux

// Package codeinterp runs E2B's Code Interpreter SDK (npm @e2b/code-interpreter 2.8.0),
// unmodified, against a real tupper server on sandboxes of the built-in code-interpreter
// template: statefulness, streaming callbacks, contexts, a matplotlib chart's PNG and chart
// data, a pandas DataFrame, environment variables, interrupt, a dying kernel, truncated
// output, the access token, a killed sandbox (run.mjs). The template is made from this
// machine's Debian mirror first (debian, base, then its packages: many minutes, once per home),
// so scripts/test.sh runs it in a group of its own; TUPPER_TEST_CODEINTERP_HOME names a
// provider home to keep it in between runs.
package codeinterp

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tupper-dev/tupper/internal/testenv"
	"github.com/tupper-dev/tupper/providers/local"
	"github.com/tupper-dev/tupper/sandbox"
	"github.com/tupper-dev/tupper/server/servertest"
	"github.com/tupper-dev/tupper/template"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

// setup makes (or finds, in TUPPER_TEST_CODEINTERP_HOME) the template and returns a local
// provider that has it, and its home.
func setup(ctx context.Context, t *testing.T) (*local.Provider, string) {
	testenv.RequireRoot(t)
	testenv.RequireBinary(t, "debootstrap")
	if _, err := template.HostDistro("/"); err != nil {
		testenv.Skip(t, err.Error())
	}
	cfg := servertest.LocalConfig(t, 33)
	if home := os.Getenv("TUPPER_TEST_CODEINTERP_HOME"); home != "" {
		cfg.Home = home
	}
	p, err := local.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Available(ctx); err != nil {
		testenv.Skip(t, err.Error())
	}
	st, err := template.Open(cfg.Home)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	tp, err := st.EnsureCodeInterpreter(ctx, template.CodeInterpreterOptions{Runner: p.BuildRunner()})
	if err != nil {
		t.Fatalf("making the code-interpreter template: %v", err)
	}
	t.Logf("the code-interpreter template (%d layers) ready in %v", len(tp.Layers), time.Since(start).Round(time.Second))
	return p, cfg.Home
}

func TestCodeInterpreterSDK(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Minute)
	defer cancel()
	p, home := setup(ctx, t)
	node := testenv.RequireBinary(t, "node")
	srv := servertest.Start(t, p, "")
	_, key, err := srv.Store.CreateE2BKey(ctx, "code-interpreter")
	if err != nil {
		t.Fatal(err)
	}
	dir, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	testenv.NPMProject(t, dir)
	run, stop := context.WithTimeout(ctx, 10*time.Minute)
	defer stop()
	cmd := exec.CommandContext(run, node, "run.mjs")
	cmd.Dir = dir
	for _, kv := range os.Environ() {
		if !bytes.HasPrefix([]byte(kv), []byte("E2B_")) { // nothing may reach E2B's cloud
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "E2B_API_URL="+srv.URL, "E2B_SANDBOX_URL="+srv.URL, "E2B_API_KEY="+key)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("@e2b/code-interpreter against tupper serve: %v\n%s", err, out)
	}
	t.Logf("%s", out)

	// The Go SDK, under each runtime.
	for _, rt := range []string{"runc", "runsc"} {
		t.Run("go-"+rt, func(t *testing.T) {
			testenv.RequireBinary(t, rt)
			testGoSDK(ctx, t, p, rt, home)
		})
	}
}

// testGoSDK runs the Go SDK's RunCode and contexts on a sandbox of the template under
// runtime rt, and gives the figures of the first cell and of later ones.
func testGoSDK(ctx context.Context, t *testing.T, p *local.Provider, rt, home string) {
	start := time.Now()
	b, err := sandbox.Create(ctx, p, sandbox.CreateOptions{Template: template.CodeInterpreter, Runtime: rt})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Destroy(context.Background())
	created := time.Since(start)
	start = time.Now()
	ex, err := b.RunCode(ctx, "1+1", sandbox.CodeOptions{})
	if err != nil || ex.Text() != "2" {
		t.Fatalf("the first cell: %+v %v", ex, err)
	}
	t.Logf("figure (%s): create %v, then the first RunCode(1+1) %v", rt, created.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))

	run := func(code string, opts sandbox.CodeOptions) *sandbox.Execution {
		t.Helper()
		ex, err := b.RunCode(ctx, code, opts)
		if err != nil {
			t.Fatalf("%q: %v", code, err)
		}
		return ex
	}
	run("x = 20", sandbox.CodeOptions{})
	var out []string
	var results int
	ex = run("print('hi')\nx * 2", sandbox.CodeOptions{OnStdout: func(s string) { out = append(out, s) }, OnResult: func(sandbox.CodeResult) { results++ }})
	if ex.Text() != "40" || len(out) != 1 || out[0] != "hi\n" || results != 1 || ex.ExecutionCount < 3 {
		t.Errorf("state and streaming: %+v, stdout %q, %d results", ex, out, results)
	}
	var raised *sandbox.CodeError
	ex = run("1/0", sandbox.CodeOptions{OnError: func(e sandbox.CodeError) { raised = &e }})
	if ex.Error == nil || ex.Error.Name != "ZeroDivisionError" || raised == nil || !strings.Contains(ex.Error.Traceback, "ZeroDivisionError") {
		t.Errorf("an error: %+v", ex.Error)
	}
	if ex = run("import os; os.environ['GO_VAR']", sandbox.CodeOptions{Env: map[string]string{"GO_VAR": "v"}}); ex.Text() != "'v'" {
		t.Errorf("env: %+v", ex)
	}

	c, err := b.CreateCodeContext(ctx, sandbox.CodeContextOptions{Cwd: "/tmp"})
	if err != nil || c.Language != "python" || c.Cwd != "/tmp" {
		t.Fatalf("create context: %+v %v", c, err)
	}
	if ex = run("import os; os.getcwd()", sandbox.CodeOptions{Context: c.ID}); ex.Text() != "'/tmp'" {
		t.Errorf("cwd of the context: %+v", ex)
	}
	if ex = run("x", sandbox.CodeOptions{Context: c.ID}); ex.Error == nil || ex.Error.Name != "NameError" {
		t.Errorf("the new context sees the default one's x: %+v", ex)
	}
	cs, err := b.CodeContexts(ctx)
	if err != nil || !slices.ContainsFunc(cs, func(x sandbox.CodeContext) bool { return x.ID == c.ID }) {
		t.Errorf("contexts %+v %v", cs, err)
	}
	run("y = 1", sandbox.CodeOptions{Context: c.ID})
	if err := b.RestartCodeContext(ctx, c.ID); err != nil {
		t.Fatal(err)
	}
	if ex = run("y", sandbox.CodeOptions{Context: c.ID}); ex.Error == nil || ex.Error.Name != "NameError" {
		t.Errorf("y after a restart: %+v", ex)
	}
	if err := b.RemoveCodeContext(ctx, c.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := b.RunCode(ctx, "1", sandbox.CodeOptions{Context: c.ID}); !errors.Is(err, sandbox.CodeNotFound) {
		t.Errorf("a removed context: %v", err)
	}

	start = time.Now()
	if _, err := b.RunCode(ctx, "while True: pass", sandbox.CodeOptions{Timeout: time.Second}); !errors.Is(err, sandbox.CodeTimeout) {
		t.Errorf("a cell past its timeout: %v", err)
	}
	if ex = run("x", sandbox.CodeOptions{}); ex.Text() != "20" {
		t.Errorf("the context after an interrupt: %+v (%v after the timeout)", ex, time.Since(start))
	}

	// tupper code: the same context, from the command line.
	cli := exec.CommandContext(ctx, testenv.TupperBinary(t), "code", b.ID, "print('cli'); x + 1")
	cli.Env = append(os.Environ(), "TUPPER_HOME="+home)
	if out, err := cli.CombinedOutput(); err != nil || string(out) != "cli\n21\n" {
		t.Errorf("tupper code: %v: %q", err, out)
	}

	ex = run("import matplotlib.pyplot as plt\nplt.bar(['a', 'b'], [3, 5])\nplt.title('Bars')\nplt.show()", sandbox.CodeOptions{})
	if len(ex.Results) != 1 || ex.Results[0].PNG == "" || ex.Results[0].Chart["type"] != "bar" || ex.Results[0].Chart["title"] != "Bars" {
		t.Errorf("a bar chart: %d results, error %+v, chart %v", len(ex.Results), ex.Error, chartOf(ex))
	}

	var times []time.Duration
	for range 30 {
		start := time.Now()
		if ex := run("1", sandbox.CodeOptions{}); ex.Text() != "1" {
			t.Fatalf("1: %+v", ex)
		}
		times = append(times, time.Since(start))
	}
	slices.Sort(times)
	t.Logf("figure (%s): RunCode(1) p50 %v of %d, max %v", rt, times[len(times)/2].Round(100*time.Microsecond), len(times), times[len(times)-1].Round(time.Millisecond))
}

func chartOf(ex *sandbox.Execution) any {
	for _, r := range ex.Results {
		if r.Chart != nil {
			return r.Chart
		}
	}
	return nil
}
