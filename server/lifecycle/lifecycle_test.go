package lifecycle_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/providers/memory"
	"github.com/tupper-dev/tupper/sandbox"
	"github.com/tupper-dev/tupper/server/lifecycle"
	"github.com/tupper-dev/tupper/store"
)

// events collects what a Service emits.
type events struct {
	mu  sync.Mutex
	got []string
}

func (e *events) emit(_ context.Context, typ, id string, _ any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.got = append(e.got, typ+" "+id)
}

func (e *events) list() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.got)
}

func newService(t *testing.T) (*lifecycle.Service, *memory.Provider, *store.Store, *events) {
	t.Helper()
	st, err := store.Open(t.Context(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	prov := memory.New()
	ev := &events{}
	lc, err := lifecycle.New(lifecycle.Config{Provider: prov, Store: st, Emit: ev.emit})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lc.Close() })
	return lc, prov, st, ev
}

// TestCreateUndo: a create that fails after the provider made the sandbox leaves no sandbox,
// no record and no event.
func TestCreateUndo(t *testing.T) {
	lc, prov, st, ev := newService(t)
	refused := errors.New("refused")
	var made string
	_, err := lc.Create(t.Context(), lifecycle.CreateOptions{Prepare: func(_ context.Context, b *sandbox.Sandbox) error { made = b.ID; return refused }})
	if !errors.Is(err, refused) || made == "" {
		t.Fatalf("Create with a refusing Prepare: %v (id %q)", err, made)
	}
	if infos, _ := prov.List(t.Context(), provider.ListFilter{}); len(infos) != 0 {
		t.Errorf("the refused sandbox is still in the provider: %v", infos)
	}
	if _, err := st.Sandbox(t.Context(), made); !errors.Is(err, provider.CodeNotFound) {
		t.Errorf("the refused sandbox has a record: %v", err)
	}
	if got := ev.list(); len(got) != 0 {
		t.Errorf("events of a refused create: %q", got)
	}
}

// TestCreateByKey: a get-or-create by key finds the sandbox it made, with a new token each
// time and one sandbox.created.
func TestCreateByKey(t *testing.T) {
	lc, _, st, ev := newService(t)
	opts := lifecycle.CreateOptions{Sandbox: sandbox.CreateOptions{Key: "user:1"}, KeyID: "k1", Labels: map[string]string{"a": "1"}, Token: true}
	first, err := lc.Create(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	again, err := lc.Create(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if !first.Created || again.Created || again.Record.ID != first.Record.ID || first.Token == again.Token {
		t.Fatalf("get-or-create: first %+v, again %+v", first, again)
	}
	for _, tok := range []string{first.Token, again.Token} {
		if id, err := st.SandboxForToken(t.Context(), tok); err != nil || id != first.Record.ID {
			t.Errorf("token %q: %q %v", tok, id, err)
		}
	}
	if got, want := ev.list(), []string{"sandbox.created " + first.Record.ID}; !slices.Equal(got, want) {
		t.Errorf("events: %q, want %q", got, want)
	}
	if rec := first.Record; rec.Key != "user:1" || rec.APIKeyID != "k1" || rec.Labels["a"] != "1" {
		t.Errorf("record: %+v", rec)
	}
}

// TestDestroyExpired: destroying a sandbox the provider had already lost records it expired
// (once) and says so with ErrExpired; a second destroy is plain not found.
func TestDestroyExpired(t *testing.T) {
	lc, prov, _, ev := newService(t)
	c, err := lc.Create(t.Context(), lifecycle.CreateOptions{Sandbox: sandbox.CreateOptions{Timeout: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	id := c.Record.ID
	if err := prov.Destroy(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	err = lc.Destroy(t.Context(), id, "key_test")
	if !errors.Is(err, lifecycle.ErrExpired) || !errors.Is(err, provider.CodeNotFound) {
		t.Fatalf("Destroy of a lost sandbox: %v", err)
	}
	err = lc.Destroy(t.Context(), id, "key_test")
	if !errors.Is(err, provider.CodeNotFound) || errors.Is(err, lifecycle.ErrExpired) {
		t.Fatalf("Destroy again: %v", err)
	}
	if got, want := ev.list(), []string{"sandbox.created " + id, "sandbox.expired " + id}; !slices.Equal(got, want) {
		t.Errorf("events: %q, want %q", got, want)
	}
}

// coldRefusing is a provider whose sandboxes are Pausers and ColdPausers but refuse a
// cold pause, as a Docker sandbox made by another tupper process does. The memory provider
// cannot pause, so its pause is a flag its Info reports.
type coldRefusing struct {
	*memory.Provider
	mu     sync.Mutex
	paused map[string]bool
}

// Prototype is a *coldRefusingInst: a provider.Pauser and provider.ColdPauser.
func (p *coldRefusing) Prototype() provider.Instance { return (*coldRefusingInst)(nil) }

func (p *coldRefusing) Create(ctx context.Context, spec provider.CreateSpec) (provider.Instance, error) {
	inst, err := p.Provider.Create(ctx, spec)
	if err != nil {
		return nil, err
	}
	return &coldRefusingInst{inst, p}, nil
}

func (p *coldRefusing) Connect(ctx context.Context, id string) (provider.Instance, error) {
	inst, err := p.Provider.Connect(ctx, id)
	if err != nil {
		return nil, err
	}
	return &coldRefusingInst{inst, p}, nil
}

type coldRefusingInst struct {
	provider.Instance
	p *coldRefusing
}

func (i *coldRefusingInst) id() string {
	in, _ := i.Instance.Info(context.Background())
	return in.ID
}

func (i *coldRefusingInst) setPaused(v bool) {
	i.p.mu.Lock()
	defer i.p.mu.Unlock()
	i.p.paused[i.id()] = v
}

func (i *coldRefusingInst) Info(ctx context.Context) (provider.Info, error) {
	in, err := i.Instance.Info(ctx)
	i.p.mu.Lock()
	defer i.p.mu.Unlock()
	if err == nil && i.p.paused[in.ID] {
		in.State = provider.StatePaused
	}
	return in, err
}

func (i *coldRefusingInst) Pause(context.Context) error  { i.setPaused(true); return nil }
func (i *coldRefusingInst) Resume(context.Context) error { i.setPaused(false); return nil }
func (i *coldRefusingInst) PauseCold(context.Context) error {
	return provider.Errorf(provider.CodeUnsupported, "this sandbox's agent config is not known here")
}

// TestPauseAtTimeoutColdRefused: a sandbox with onTimeout pause-cold whose cold pause is
// refused at its deadline is paused keeping its memory, not left running past it; the event
// says why. An asked-for cold pause stays refused (the caller chose it and hears why).
func TestPauseAtTimeoutColdRefused(t *testing.T) {
	st, err := store.Open(t.Context(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	prov := &coldRefusing{Provider: memory.New(), paused: map[string]bool{}}
	var mu sync.Mutex
	var paused []map[string]any
	emit := func(_ context.Context, typ, _ string, data any) {
		if typ == lifecycle.EventPaused {
			mu.Lock()
			paused = append(paused, data.(map[string]any))
			mu.Unlock()
		}
	}
	lc, err := lifecycle.New(lifecycle.Config{Provider: prov, Store: st, Emit: emit})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lc.Close() })
	c, err := lc.Create(t.Context(), lifecycle.CreateOptions{Sandbox: sandbox.CreateOptions{Timeout: time.Hour}, OnTimeout: store.OnTimeoutPauseCold})
	if err != nil {
		t.Fatal(err)
	}
	id := c.Record.ID
	if err := lc.Pause(t.Context(), id, sandbox.PauseOptions{DropMemory: true}); !errors.Is(err, provider.CodeUnsupported) {
		t.Fatalf("an asked-for cold pause the sandbox refuses: %v, want unsupported", err)
	}
	if err := lc.PauseAtTimeout(t.Context(), id, time.Now()); err != nil {
		t.Fatalf("PauseAtTimeout: %v", err)
	}
	info, err := prov.Connect(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	if in, err := info.Info(t.Context()); err != nil || in.State != provider.StatePaused {
		t.Fatalf("after PauseAtTimeout: %+v %v, want paused", in, err)
	}
	rec, err := st.Sandbox(t.Context(), id)
	if err != nil || rec.State != provider.StatePaused || rec.MemoryDropped {
		t.Errorf("record after the fallback: %+v %v, want paused with its memory", rec, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(paused) != 1 || paused[0]["memoryKept"] != true || paused[0]["coldRefused"] == nil || paused[0]["reason"] != "timeout" {
		t.Errorf("sandbox.paused events: %v, want one with memoryKept, coldRefused and reason timeout", paused)
	}
}
