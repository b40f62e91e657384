// Package sandboxtest is the conformance suite every Tupper provider must pass.
//
// A provider's package runs it from a test:
//
//	func TestConformance(t *testing.T) {
//		sandboxtest.Run(t, func(t testing.TB) provider.Provider { return memory.New() })
//	}
//
// Run drives the provider only through package sandbox, the public API, in the manner of
// testing/fstest.TestFS and x/net/nettest.TestConn: one reusable function that takes a
// factory, probes the provider's declared capabilities and optional interfaces, and reports
// every failure it finds rather than stopping at the first.
//
// Cases are named "Group/Case" (for example "Run/ExitCode" or "Files/EditNotUnique") so one
// can be picked with go test -run. A case skips only when the provider's declared
// capabilities exclude it, and says which capability; a capability that is declared is
// tested, so a declaration is a promise. Cases that need the Go toolchain to build a small
// helper server for the sandbox (ports, HTTP readiness, git over HTTP) skip on a developer's
// machine without it and fail under CI=true.
//
// Every case runs under a watchdog: it gets a context that ends at its deadline
// (Config.CaseTimeout), and a case still running some time after that is failed with the
// stacks of every goroutine and abandoned, so one hung call cannot hang the whole run. Every
// sandbox a case creates carries a label unique to the run and is destroyed when the case
// ends; at the end, Run fails if the provider still lists any sandbox with that label.
//
// Shell-level cases on a provider without provider.CapShell use only a small set of common
// utilities (echo, printf, cat, ls, mkdir -p, rm -rf, grep, sort, seq, sleep, kill, trap, …)
// that the pure-Go memory provider implements; cases that need /proc, real signals, ports or
// git require CapShell, CapPreview or CapGit.
package sandboxtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/sandbox"
)

// Factory returns the provider under test. Run calls it once and uses the one provider for
// every case, so that a sandbox made by one handle can be found by another.
type Factory func(t testing.TB) provider.Provider

// Config configures RunWith. The zero value of every field but Factory means the default.
type Config struct {
	Factory Factory

	// CaseTimeout is the deadline of each case's context; 0 is 60 s.
	CaseTimeout time.Duration
	// Grace is how long after its deadline a case may still take to return before the
	// watchdog fails and abandons it; 0 is 15 s.
	Grace time.Duration
	// Serial runs the cases one at a time instead of in parallel.
	Serial bool
	// Groups, when set, runs only the groups of cases it names ("Create", "Run", …): for a
	// second pass over a variant of a provider whose difference only some groups reach.
	Groups []string
}

// Labels every sandbox of a run carries.
const (
	// RunLabel's value is unique to one call of Run; the final leak check lists by it.
	RunLabel = "sandboxtest.run"
	// CaseLabel's value is unique to one case, so cases that list or reap stay apart.
	CaseLabel = "sandboxtest.case"
)

// Run runs the conformance suite against the provider the factory returns.
func Run(t *testing.T, factory Factory) {
	t.Helper()
	RunWith(t, Config{Factory: factory})
}

// RunWith is Run with options.
func RunWith(t *testing.T, cfg Config) {
	t.Helper()
	if cfg.Factory == nil {
		t.Fatal("sandboxtest: Config.Factory is nil")
	}
	if cfg.CaseTimeout <= 0 {
		cfg.CaseTimeout = 60 * time.Second
	}
	if cfg.Grace <= 0 {
		cfg.Grace = 15 * time.Second
	}
	p := cfg.Factory(t)
	if p == nil {
		t.Fatal("sandboxtest: the factory returned a nil provider")
	}
	s := &suite{cfg: cfg, p: p, caps: provider.CapabilitiesOf(p), runID: randHex(8)}
	t.Logf("provider %s, capabilities [%s], run %s", p.Name(), s.caps, s.runID)

	if s.caps.Has(provider.CapShell) || s.caps.Has(provider.CapPreview) {
		// Build the helper server before the cases start, so the build (a minute on a cold
		// cache) does not count against any case's deadline.
		if _, err := s.buildHelper(runtime.GOARCH); err != nil && err != errNoGo {
			t.Errorf("building the sandbox helper server: %v", err)
		}
	}

	// After every case and its cleanups: nothing of this run may be left behind.
	t.Cleanup(func() { s.checkLeaks(t) })

	all := groups()
	for _, name := range cfg.Groups {
		if !slices.ContainsFunc(all, func(g group) bool { return g.name == name }) {
			t.Fatalf("sandboxtest: Config.Groups names %q, which is no group of the suite", name)
		}
	}
	for _, g := range all {
		if len(cfg.Groups) > 0 && !slices.Contains(cfg.Groups, g.name) {
			continue
		}
		t.Run(g.name, func(t *testing.T) {
			for _, c := range g.cases {
				t.Run(c.name, func(t *testing.T) { s.runCase(t, c.fn) })
			}
		})
	}
}

type caseFunc func(c *C)

type testCase struct {
	name string
	fn   caseFunc
}

type group struct {
	name  string
	cases []testCase
}

// groups lists every case, in the order they are reported.
func groups() []group {
	return []group{
		{"Create", createCases()},
		{"Secrets", secretCases()},
		{"Connect", connectCases()},
		{"List", listCases()},
		{"Reap", reapCases()},
		{"Run", runCases()},
		{"Stream", streamCases()},
		{"Sh", shCases()},
		{"Process", processCases()},
		{"Terminal", terminalCases()},
		{"Files", fileCases()},
		{"Watch", watchCases()},
		{"Changes", changesCases()},
		{"Git", gitCases()},
		{"Lifecycle", lifecycleCases()},
		{"Volumes", volumeCases()},
		{"Errors", errorCases()},
		{"Fallback", fallbackCases()},
	}
}

type suite struct {
	cfg   Config
	p     provider.Provider
	caps  provider.Capabilities
	runID string

	helperMu  sync.Mutex
	helperBin map[string][]byte // GOARCH → helper server binary
}

func (s *suite) checkLeaks(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	left, err := s.p.List(ctx, provider.ListFilter{Labels: map[string]string{RunLabel: s.runID}})
	if err != nil {
		t.Errorf("leak check: provider List: %v", err)
		return
	}
	for _, in := range left {
		t.Errorf("leak check: sandbox %s (labels %v, state %s) is still there after the suite; a case or Destroy left it behind", in.ID, in.Labels, in.State)
		_ = s.p.Destroy(ctx, in.ID)
	}
	// sandbox.List must agree.
	infos, err := sandbox.List(ctx, s.p, sandbox.ListOptions{Labels: map[string]string{RunLabel: s.runID}})
	if err != nil {
		t.Errorf("leak check: sandbox.List: %v", err)
	}
	for _, in := range infos {
		t.Errorf("leak check: sandbox.List still shows %s after the suite", in.ID)
	}
}

// runCase runs fn in its own goroutine under the watchdog.
func (s *suite) runCase(t *testing.T, fn caseFunc) {
	if !s.cfg.Serial {
		t.Parallel()
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.CaseTimeout)
	defer cancel()
	ct := &T{t: t}
	c := &C{T: ct, Ctx: ctx, s: s, caseID: randHex(6)}
	done := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(done)
		fn(c)
	}()
	timer := time.NewTimer(s.cfg.CaseTimeout + s.cfg.Grace)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		ct.abandon()
		t.Errorf("watchdog: the case has not returned %v after it started (deadline %v, grace %v); abandoning it.\ngoroutines:\n%s",
			time.Since(start).Round(time.Millisecond), s.cfg.CaseTimeout, s.cfg.Grace, allStacks())
	}
}

func allStacks() string {
	for n := 1 << 20; ; n *= 2 {
		buf := make([]byte, n)
		m := runtime.Stack(buf, true)
		if m < n || n >= 64<<20 {
			return string(buf[:m])
		}
	}
}

// T is the part of *testing.T a case uses. A case runs in its own goroutine so that the
// watchdog can abandon it; once abandoned, its reports are dropped instead of reaching a
// test that has already ended, and a Fatal ends only the case's goroutine.
type T struct {
	t *testing.T

	mu        sync.Mutex
	abandoned bool
	late      []func() // cleanups registered after abandonment
}

func (t *T) abandon() {
	t.mu.Lock()
	t.abandoned = true
	t.mu.Unlock()
}

func (t *T) gone() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.abandoned
}

// Helper marks the caller as a helper.
func (t *T) Helper() { t.t.Helper() }

// Name is the case's full test name.
func (t *T) Name() string { return t.t.Name() }

// Logf logs.
func (t *T) Logf(format string, args ...any) {
	if t.gone() {
		return
	}
	t.t.Helper()
	t.t.Logf(format, args...)
}

// Errorf reports a failure and goes on.
func (t *T) Errorf(format string, args ...any) {
	if t.gone() {
		return
	}
	t.t.Helper()
	t.t.Errorf(format, args...)
}

// Fatalf reports a failure and ends the case.
func (t *T) Fatalf(format string, args ...any) {
	if !t.gone() {
		t.t.Helper()
		t.t.Errorf(format, args...)
	}
	runtime.Goexit()
}

// Skipf skips the case.
func (t *T) Skipf(format string, args ...any) {
	if t.gone() {
		runtime.Goexit()
	}
	t.t.Helper()
	t.t.Skipf(format, args...)
}

// Failed reports whether the case has failed.
func (t *T) Failed() bool { return t.t.Failed() }

// Cleanup registers fn to run when the case ends (at once if it was abandoned).
func (t *T) Cleanup(fn func()) {
	if t.gone() {
		fn()
		return
	}
	t.t.Cleanup(fn)
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// String helps fmt.
func (s *suite) String() string { return fmt.Sprintf("sandboxtest run %s on %s", s.runID, s.p.Name()) }
