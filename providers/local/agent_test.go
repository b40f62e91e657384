//go:build linux

package local

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"time"

	agentspec "github.com/tupper-dev/tupper/agent/spec"
	"github.com/tupper-dev/tupper/internal/testenv"
	"github.com/tupper-dev/tupper/provider"
)

// These tests find and install agents that are shell scripts standing in for tupper binaries
// of various kinds; none needs root. The real binary is found and run by every test that
// makes a sandbox, and by examples/ (on PATH, beside the program) and cmd/tupper (the
// running program under another name).

// script writes an executable shell script and returns its path. Each run appends a line to
// path+".runs", so a test can tell whether, and how often, the provider ran it.
func script(t *testing.T, dir, name, body string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	src := fmt.Sprintf("#!/bin/sh\necho run >> %s.runs\n%s\n", path, body)
	if err := os.WriteFile(path, []byte(src), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

func runs(path string) int {
	b, _ := os.ReadFile(path + ".runs")
	return strings.Count(string(b), "run\n")
}

// answering is the body of a script that answers the protocol probe with version v and
// fails as an agent.
func answering(v int) string {
	return fmt.Sprintf(`[ "$2" = %s ] && echo %s %d && exit 0; exit 1`, agentspec.ProbeFlag, agentspec.ProbeReply, v)
}

// agentTestProvider is a provider with a home of its own, not probed: only its agent is
// looked for.
func agentTestProvider(t *testing.T, agentPath string) *Provider {
	t.Helper()
	// Short: a unix socket path goes below it.
	dir, err := os.MkdirTemp("", "ta-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o711)
	p, err := New(Config{Home: filepath.Join(dir, "home"), AgentPath: agentPath})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// isolate leaves no tupper anywhere the provider would look unless the test puts one there.
func isolate(t *testing.T) (pathDir string) {
	t.Helper()
	pathDir = t.TempDir()
	t.Setenv("PATH", pathDir)
	t.Setenv(agentEnv, "")
	return pathDir
}

func TestAgentExplicitIsCopiedOnce(t *testing.T) {
	isolate(t)
	src := script(t, t.TempDir(), "my-agent", answering(agentspec.Version))
	p := agentTestProvider(t, src)
	got, err := p.agentPath()
	if err != nil {
		t.Fatal(err)
	}
	sum, err := hashFile(src)
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(p.cfg.Home, "agent", sum[:16], "tupper")
	if got != want {
		t.Fatalf("agent at %s, want the copy %s", got, want)
	}
	if copied, _ := hashFile(got); copied != sum {
		t.Fatalf("the copy's sha256 is %s, the original's %s", copied, sum)
	}
	// Readable and runnable by the sandboxes' uids, through directories they can traverse.
	for path, mode := range map[string]os.FileMode{got: 0o755, filepath.Dir(got): 0o711 | os.ModeDir, filepath.Join(p.cfg.Home, "agent"): 0o711 | os.ModeDir} {
		if fi, err := os.Stat(path); err != nil || fi.Mode() != mode {
			t.Errorf("%s: mode %v (%v), want %v", path, fi.Mode(), err, mode)
		}
	}
	if err := traversable(got); err != nil {
		t.Errorf("the copy is not reachable by other users: %v", err)
	}
	if n := runs(src); n != 1 {
		t.Fatalf("the binary ran %d times, want once (the probe)", n)
	}
	before, _ := os.Stat(got)

	// Another provider on the same home (another process, in effect) neither probes nor copies
	// the same file again.
	p2 := agentTestProvider(t, src)
	p2.cfg.Home = p.cfg.Home
	if again, err := p2.agentPath(); err != nil || again != got {
		t.Fatalf("second provider: %s %v", again, err)
	}
	after, _ := os.Stat(got)
	if n := runs(src); n != 1 || !os.SameFile(before, after) {
		t.Fatalf("second provider: %d runs, same copy %v", n, os.SameFile(before, after))
	}

	// A changed binary is a new agent: probed, and copied beside the old one.
	if err := os.WriteFile(src, []byte(strings.Replace(mustRead(t, src), "exit 1", "exit 22", 1)), 0o755); err != nil {
		t.Fatal(err)
	}
	p3 := agentTestProvider(t, src)
	p3.cfg.Home = p.cfg.Home
	third, err := p3.agentPath()
	if err != nil || third == got || !strings.HasPrefix(third, filepath.Join(p.cfg.Home, "agent")) {
		t.Fatalf("changed binary: %s %v (old copy %s)", third, err, got)
	}
	if n := runs(src); n != 2 {
		t.Fatalf("changed binary: %d runs in all, want 2", n)
	}
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Config.AgentPath wins over TUPPER_AGENT, TUPPER_AGENT over what is on PATH; a named binary
// that does not work is the error, with no fallback to another.
func TestAgentOrderAndExplicitErrors(t *testing.T) {
	pathDir := isolate(t)
	dir := t.TempDir()
	good := script(t, dir, "good", answering(agentspec.Version))
	fromEnv := script(t, dir, "from-env", answering(agentspec.Version))
	t.Setenv(agentEnv, fromEnv)

	p := agentTestProvider(t, good)
	if _, err := p.agentPath(); err != nil || runs(good) != 1 || runs(fromEnv) != 0 {
		t.Fatalf("Config.AgentPath: %v, runs %d and %d", err, runs(good), runs(fromEnv))
	}
	p = agentTestProvider(t, "")
	if _, err := p.agentPath(); err != nil || runs(fromEnv) != 1 {
		t.Fatalf("TUPPER_AGENT: %v, runs %d", err, runs(fromEnv))
	}

	for name, tc := range map[string]struct{ body, want string }{
		"newer":  {answering(agentspec.Version + 1), fmt.Sprintf("speaks agent protocol %d and this program protocol %d", agentspec.Version+1, agentspec.Version)},
		"older":  {`echo "Error: unknown flag: --protocol" >&2; exit 1`, `does not answer ` + "`agent --protocol`" + `: it is not a tupper agent, or one from before that flag (it said "Error: unknown flag: --protocol")`},
		"silent": {`exit 0`, "does not answer"},
	} {
		bad := script(t, dir, name, tc.body)
		// A working tupper on PATH must not be taken instead of the named one.
		script(t, pathDir, "tupper", answering(agentspec.Version))
		t.Setenv(agentEnv, bad)
		_, err := agentTestProvider(t, "").agentPath()
		if err == nil || provider.CodeOf(err) != provider.CodeUnavailable ||
			!strings.Contains(err.Error(), bad+" ($TUPPER_AGENT)") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s agent: %v, want %q", name, err, tc.want)
		}
	}
	_, err := agentTestProvider(t, filepath.Join(dir, "missing")).agentPath()
	if err == nil || !strings.Contains(err.Error(), "Config.AgentPath") || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("missing Config.AgentPath: %v", err)
	}
	notExec := filepath.Join(dir, "not-executable")
	os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644)
	if _, err := agentTestProvider(t, notExec).agentPath(); err == nil || !strings.Contains(err.Error(), "not an executable file") {
		t.Errorf("non-executable Config.AgentPath: %v", err)
	}
}

// A file called tupper on PATH whose build info does not name cmd/tupper is never run, even
// when it would answer the probe; with nothing else found, the one error says what to do.
func TestAgentImpostorIsNotRun(t *testing.T) {
	pathDir := isolate(t)
	impostor := script(t, pathDir, "tupper", answering(agentspec.Version))
	_, err := agentTestProvider(t, "").agentPath()
	if err == nil {
		t.Fatal("a shell script called tupper was taken as the agent")
	}
	if n := runs(impostor); n != 0 {
		t.Errorf("the impostor ran %d times", n)
	}
	msg := err.Error()
	for _, want := range []string{
		"no tupper binary to run as the sandboxes' agent",
		impostor + " is not the tupper command",
		"go install ./cmd/tupper", // the test binary is built from this checkout
		"Config.AgentPath", agentEnv,
		"no tupper beside this program",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not say %q", msg, want)
		}
	}
	if strings.Contains(msg, "none on PATH") || strings.Contains(msg, "apt-get") {
		t.Errorf("error %q", msg)
	}
}

// Providers installing the same agent at once into one home all get the same complete copy.
func TestAgentInstallConcurrent(t *testing.T) {
	isolate(t)
	src := script(t, t.TempDir(), "agent", answering(agentspec.Version)+"\n# "+strings.Repeat("x", 1<<20))
	home := filepath.Join(t.TempDir(), "home")
	var wg sync.WaitGroup
	paths := make([]string, 8)
	errs := make([]error, 8)
	for i := range paths {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := agentTestProvider(t, src)
			p.cfg.Home = home
			p.lay.home = home
			paths[i], errs[i] = p.agentPath()
		}()
	}
	wg.Wait()
	sum, _ := hashFile(src)
	for i := range paths {
		if errs[i] != nil || paths[i] != paths[0] {
			t.Fatalf("provider %d: %s %v (first: %s)", i, paths[i], errs[i], paths[0])
		}
	}
	if got, _ := hashFile(paths[0]); got != sum {
		t.Fatalf("copy sha256 %s, want %s", got, sum)
	}
	left, _ := filepath.Glob(filepath.Join(filepath.Dir(paths[0]), ".tupper-*"))
	if len(left) != 0 {
		t.Fatalf("temporary files left: %v", left)
	}
}

// Installing a new agent removes old copies that no sandbox uses and nobody chose for a day,
// and keeps the rest.
func TestAgentOldCopiesCollected(t *testing.T) {
	isolate(t)
	p := agentTestProvider(t, script(t, t.TempDir(), "agent", answering(agentspec.Version)))
	agents := filepath.Join(p.cfg.Home, "agent")
	old := time.Now().Add(-2 * agentKeep)
	mk := func(name string, mtime time.Time) string {
		dir := filepath.Join(agents, name)
		if err := os.MkdirAll(dir, 0o711); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dir, "tupper"), []byte("old"), 0o755)
		os.Chtimes(dir, mtime, mtime)
		return dir
	}
	unused := mk("00000000000000aa", old)
	recent := mk("00000000000000bb", time.Now())
	inUse := mk("00000000000000cc", old)
	notOurs := mk("keep-me", old)
	// A sandbox's bundle names inUse's binary.
	sb := p.lay.dir("sandbox0000000000001")
	os.MkdirAll(sb, 0o711)
	os.WriteFile(bundleConfigPath(sb), []byte(`{"mounts":[{"source":"`+inUse+`/tupper"}]}`), 0o600)

	if _, err := p.agentPath(); err != nil {
		t.Fatal(err)
	}
	for dir, want := range map[string]bool{unused: false, recent: true, inUse: true, notOurs: true} {
		if got := fileExists(dir); got != want {
			t.Errorf("%s exists: %v, want %v", filepath.Base(dir), got, want)
		}
	}
}

// When the agent cannot be found the provider is unavailable for that reason only: no hint
// to install the runtimes, which are there (tested where they are).
func TestAgentMissingIsTheUnavailableReason(t *testing.T) {
	// The provider gets as far as the agent only with root and a runtime.
	testenv.RequireRoot(t)
	testenv.RequireBinary(t, "runc")
	isolate(t)
	t.Setenv("PATH", t.TempDir()+":/usr/sbin:/usr/bin:/sbin:/bin")
	p := agentTestProvider(t, "")
	t.Setenv("TUPPER_HOME", p.cfg.Home)
	err := p.Available(t.Context())
	if err == nil || !strings.Contains(err.Error(), "no tupper binary") || strings.Contains(err.Error(), "apt-get") {
		t.Fatalf("Available: %v", err)
	}
	_, err = provider.Resolve(t.Context(), provider.ResolveOptions{Name: "local"})
	if err == nil || !strings.Contains(err.Error(), "no tupper binary") || strings.Contains(err.Error(), "apt-get") {
		t.Fatalf("Resolve: %v", err)
	}
}

// BenchmarkFindAgent is what a process pays on its first create to find the agent: cold (hash,
// probe and copy of a new binary) and warm (the facts cached, the copy there), with the real
// tupper binary.
func BenchmarkFindAgent(b *testing.B) {
	bin := buildAgent(b)
	home, err := os.MkdirTemp("", "ba-")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(home)
	find := func(b *testing.B, home string) {
		p, err := New(Config{Home: home, AgentPath: bin})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := p.agentPath(); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("cold", func(b *testing.B) {
		for i := range b.N {
			find(b, filepath.Join(home, fmt.Sprint("cold", i)))
		}
	})
	b.Run("warm", func(b *testing.B) {
		find(b, filepath.Join(home, "warm"))
		b.ResetTimer()
		for range b.N {
			find(b, filepath.Join(home, "warm"))
		}
	})
}

// A provider whose copy was collected while it sat unused installs it again on its next use.
func TestAgentCollectedCopyComesBack(t *testing.T) {
	isolate(t)
	src := script(t, t.TempDir(), "agent", answering(agentspec.Version))
	p := agentTestProvider(t, src)
	first, err := p.agentPath()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Dir(first)); err != nil {
		t.Fatal(err)
	}
	again, err := p.agentPath()
	if err != nil || again != first || !fileExists(again) {
		t.Fatalf("after collection: %s %v, exists %v", again, err, fileExists(again))
	}
}

// The install command names the tupper that matches the program's SDK.
func TestInstallHint(t *testing.T) {
	dep := func(m debug.Module) *debug.BuildInfo {
		return &debug.BuildInfo{Main: debug.Module{Path: "example.com/app"}, Deps: []*debug.Module{{Path: "golang.org/x/sys", Version: "v0.50.0"}, &m}}
	}
	const install = "`CGO_ENABLED=0 GOBIN=/usr/local/bin go install "
	for _, tc := range []struct {
		bi   *debug.BuildInfo
		want string
	}{
		{dep(debug.Module{Path: tupperModule, Version: "v1.4.2"}), install + tupperCommand + "@v1.4.2`"},
		{dep(debug.Module{Path: tupperModule, Version: "v0.0.0-20260101120000-abcdefabcdef"}), install + tupperCommand + "@v0.0.0-20260101120000-abcdefabcdef`"},
		{dep(debug.Module{Path: tupperModule, Version: "v1.4.2", Replace: &debug.Module{Path: "/src/tupper", Version: "(devel)"}}), "`cd /src/tupper && CGO_ENABLED=0 GOBIN=/usr/local/bin go install ./cmd/tupper`"},
		{dep(debug.Module{Path: tupperModule, Version: "v1.4.2", Replace: &debug.Module{Path: "example.com/fork", Version: "v1.4.3"}}), install + "example.com/fork/cmd/tupper@v1.4.3`"},
		{&debug.BuildInfo{Main: debug.Module{Path: tupperModule, Version: "(devel)"}}, install + "./cmd/tupper` in this checkout of " + tupperModule},
		{nil, install + tupperCommand + "@latest`"},
	} {
		if got := installHintFor(tc.bi); got != tc.want {
			t.Errorf("installHintFor(%+v) = %s, want %s", tc.bi, got, tc.want)
		}
	}
	// This test binary is built from this checkout.
	if got := installHint(); !strings.Contains(got, "./cmd/tupper` in this checkout") {
		t.Errorf("installHint() = %s", got)
	}
}

// An agent handed a config of another protocol version refuses to start, and Create says
// why in the agent's words. (The real binary answers the probe for its own version, so the
// config is changed under it: between runc create and start, when the agent has not read it.)
func TestAgentProtocolAtStart(t *testing.T) {
	p := newTestProvider(t, RuntimeRunc)
	if p.net == nil {
		testenv.Skip(t, "needs network all, whose runc create and start are two steps")
	}
	other := agentspec.Version + 98
	testHookCreated = func(id string) error {
		path := p.lay.agentConfig(id)
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		old := fmt.Sprintf(`"protocol":%d`, agentspec.Version)
		if !strings.Contains(string(b), old) {
			return fmt.Errorf("the agent config does not name the protocol: %s", b)
		}
		return os.WriteFile(path, []byte(strings.Replace(string(b), old, fmt.Sprintf(`"protocol":%d`, other), 1)), 0o600)
	}
	defer func() { testHookCreated = nil }()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := p.Create(ctx, provider.CreateSpec{Network: provider.Network{Mode: provider.NetworkAll}})
	want := fmt.Sprintf("the host speaks agent protocol %d and this agent protocol %d", other, agentspec.Version)
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("create with a config of protocol %d: %v, want it to say %q", other, err, want)
	}
	t.Log(err)
	assertNoLeftovers(t, p)
}
