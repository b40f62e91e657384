package sandboxtest

import (
	"context"
	"errors"
	"maps"
	"strings"
	"time"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/sandbox"
)

// C is one running case: its test reporter, its context and the suite.
type C struct {
	*T
	// Ctx ends at the case's deadline.
	Ctx    context.Context
	s      *suite
	caseID string
}

// P is the provider under test.
func (c *C) P() provider.Provider { return c.s.p }

// Has reports whether the provider lists cp (provider.CapabilitiesOf: it declares it, or it
// names an optional interface the provider or its sandboxes implement and do not refuse).
func (c *C) Has(cp provider.Capability) bool { return c.s.caps.Has(cp) }

// Need skips the case unless the provider lists every capability in caps.
func (c *C) Need(caps ...provider.Capability) {
	c.Helper()
	for _, cp := range caps {
		if !c.s.caps.Has(cp) {
			c.Skipf("provider %s does not list capability %q", c.s.p.Name(), cp)
		}
	}
}

// NeedNot skips the case when the provider lists cp (its listed branch is tested by another
// case).
func (c *C) NeedNot(cp provider.Capability, other string) {
	c.Helper()
	if c.s.caps.Has(cp) {
		c.Skipf("provider %s lists capability %q; %s tests it", c.s.p.Name(), cp, other)
	}
}

// labels returns the labels every sandbox of this case carries, plus extra.
func (c *C) labels(extra map[string]string) map[string]string {
	l := map[string]string{RunLabel: c.s.runID, CaseLabel: c.caseID}
	maps.Copy(l, extra)
	return l
}

// caseFilter selects this case's sandboxes.
func (c *C) caseFilter() map[string]string {
	return map[string]string{RunLabel: c.s.runID, CaseLabel: c.caseID}
}

// Create creates a sandbox with the case's labels and destroys it when the case ends.
func (c *C) Create(opts sandbox.CreateOptions) *sandbox.Sandbox {
	c.Helper()
	b, err := c.TryCreate(opts)
	if err != nil {
		c.Fatalf("Create: %v", err)
	}
	return b
}

// TryCreate is Create that returns the error.
func (c *C) TryCreate(opts sandbox.CreateOptions) (*sandbox.Sandbox, error) {
	c.Helper()
	opts.Labels = c.labels(opts.Labels)
	b, err := sandbox.Create(c.Ctx, c.s.p, opts)
	if err != nil {
		c.CheckErr("Create", err)
		return nil, err
	}
	c.destroyLater(b)
	return b, nil
}

// Box creates a default sandbox.
func (c *C) Box() *sandbox.Sandbox {
	c.Helper()
	return c.Create(sandbox.CreateOptions{})
}

func (c *C) destroyLater(b *sandbox.Sandbox) {
	p := c.s.p
	id := b.ID
	c.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := b.Destroy(ctx); err != nil {
			c.Errorf("cleanup: Destroy(%s): %v", id, err)
			_ = p.Destroy(ctx, id)
		}
	})
}

// Run runs command and fails the case on an error (not on a non-zero exit).
func (c *C) Run(b *sandbox.Sandbox, command string, opts sandbox.RunOptions) *sandbox.RunResult {
	c.Helper()
	res, err := b.Run(c.Ctx, command, opts)
	if err != nil {
		c.CheckErr("Run", err)
		c.Fatalf("Run(%q): %v", command, err)
	}
	if res == nil {
		c.Fatalf("Run(%q): nil result and nil error", command)
	}
	return res
}

// MustRun runs command and fails the case unless it exits 0.
func (c *C) MustRun(b *sandbox.Sandbox, command string) *sandbox.RunResult {
	c.Helper()
	res := c.Run(b, command, sandbox.RunOptions{})
	if !res.OK {
		c.Fatalf("Run(%q): exit %d, timedOut %v, output:\n%s", command, res.ExitCode, res.TimedOut, res.Output)
	}
	return res
}

// Out runs command (which must succeed) and returns its stdout.
func (c *C) Out(b *sandbox.Sandbox, command string) string {
	c.Helper()
	return c.MustRun(b, command).Stdout
}

// Write writes a file and fails the case on error.
func (c *C) Write(b *sandbox.Sandbox, path, data string) {
	c.Helper()
	if err := b.Files.Write(c.Ctx, path, []byte(data), sandbox.WriteOptions{}); err != nil {
		c.Fatalf("Files.Write(%q): %v", path, err)
	}
}

// Read reads a file and fails the case on error.
func (c *C) Read(b *sandbox.Sandbox, path string) string {
	c.Helper()
	s, err := b.Files.ReadText(c.Ctx, path)
	if err != nil {
		c.Fatalf("Files.ReadText(%q): %v", path, err)
	}
	return s
}

// CheckErr reports err unless it is a *sandbox.Error with one of the fixed codes.
func (c *C) CheckErr(what string, err error) {
	c.Helper()
	if err == nil {
		return
	}
	var se *sandbox.Error
	if !errors.As(err, &se) {
		c.Errorf("%s: error %T %q is not a *sandbox.Error", what, err, err)
		return
	}
	if !se.Code.Valid() {
		c.Errorf("%s: error %q has code %q, not one of the fixed codes", what, err, se.Code)
	}
}

// WantCode reports unless err is a *sandbox.Error with code want. It returns whether it was.
func (c *C) WantCode(what string, err error, want sandbox.Code) bool {
	c.Helper()
	if err == nil {
		c.Errorf("%s: got no error, want %s", what, want)
		return false
	}
	c.CheckErr(what, err)
	if !errors.Is(err, want) {
		c.Errorf("%s: got error %q (code %s), want code %s", what, err, sandbox.CodeOf(err), want)
		return false
	}
	return true
}

// NoErr fails the case if err is not nil.
func (c *C) NoErr(what string, err error) {
	c.Helper()
	if err != nil {
		c.CheckErr(what, err)
		c.Fatalf("%s: %v", what, err)
	}
}

// Eq reports unless got == want.
func Eq[V comparable](c *C, what string, got, want V) bool {
	c.Helper()
	if got != want {
		c.Errorf("%s: got %#v, want %#v", what, got, want)
		return false
	}
	return true
}

// listCase lists this case's sandboxes through the SDK.
func (c *C) listCase() []sandbox.Info {
	c.Helper()
	infos, err := sandbox.List(c.Ctx, c.s.p, sandbox.ListOptions{Labels: c.caseFilter()})
	if err != nil {
		c.CheckErr("List", err)
		c.Fatalf("List: %v", err)
	}
	return infos
}

// nothingCreated reports if this case has any sandbox (used after a create that must fail).
func (c *C) nothingCreated(what string) {
	c.Helper()
	if infos := c.listCase(); len(infos) != 0 {
		c.Errorf("%s: %d sandbox(es) exist after a failed Create; want none", what, len(infos))
		for _, in := range infos {
			_ = c.s.p.Destroy(context.Background(), in.ID)
		}
	}
	left, err := c.s.p.List(c.Ctx, provider.ListFilter{Labels: c.caseFilter()})
	if err == nil && len(left) != 0 {
		c.Errorf("%s: the provider lists %d sandbox(es) after a failed Create; want none", what, len(left))
	}
}

// waitFor polls cond every 20 ms until it is true or d passes; it reports whether it became
// true. It is for observing effects that have no event to wait on (a deadline passing).
func (c *C) waitFor(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) || c.Ctx.Err() != nil {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// noLeak reports every string in texts that contains secret.
func (c *C) noLeak(secret string, texts map[string]string) {
	c.Helper()
	for what, s := range texts {
		if strings.Contains(s, secret) {
			c.Errorf("%s leaks the secret: %q", what, s)
		}
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

var errorsIs = errors.Is
