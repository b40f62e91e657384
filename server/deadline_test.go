package server

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/providers/memory"
	"github.com/tupper-dev/tupper/server/api"
	"github.com/tupper-dev/tupper/store"
)

// pausable is the memory provider with pause (a flag per sandbox, which Info and List
// report), enough for the server to pause a sandbox at its timeout without a runtime.
// Without timeout it also drops the "timeout" capability, so that the server enforces
// every deadline itself. With dial set, every port of its sandboxes is that address
// (previews: "preview" and DialPort).
type pausable struct {
	*memory.Provider
	noTimeout bool
	dial      string

	mu     sync.Mutex
	paused map[string]bool
}

func newPausable(noTimeout bool) *pausable {
	return &pausable{Provider: memory.New(), noTimeout: noTimeout, paused: map[string]bool{}}
}

func (p *pausable) Capabilities() provider.Capabilities {
	c := p.Provider.Capabilities()
	if p.noTimeout {
		delete(c, provider.CapTimeout)
	}
	if p.dial != "" {
		c[provider.CapPreview] = true
	}
	return c
}

// Prototype is a *pausableInstance: a provider.Pauser (and no Snapshotter: it hides the
// memory provider's).
func (p *pausable) Prototype() provider.Instance { return (*pausableInstance)(nil) }

func (p *pausable) Create(ctx context.Context, spec provider.CreateSpec) (provider.Instance, error) {
	inst, err := p.Provider.Create(ctx, spec)
	if err != nil {
		return nil, err
	}
	return &pausableInstance{Instance: inst, p: p}, nil
}

func (p *pausable) Connect(ctx context.Context, id string) (provider.Instance, error) {
	inst, err := p.Provider.Connect(ctx, id)
	if err != nil {
		return nil, err
	}
	return &pausableInstance{Instance: inst, p: p}, nil
}

func (p *pausable) List(ctx context.Context, f provider.ListFilter) ([]provider.Info, error) {
	infos, err := p.Provider.List(ctx, f)
	for i := range infos {
		infos[i].State = p.state(infos[i].ID, infos[i].State)
	}
	return infos, err
}

func (p *pausable) state(id string, s provider.State) provider.State {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.paused[id] {
		return provider.StatePaused
	}
	return s
}

func (p *pausable) setPaused(id string, paused bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.paused[id] = paused
}

type pausableInstance struct {
	provider.Instance
	p *pausable
}

func (i *pausableInstance) Info(ctx context.Context) (provider.Info, error) {
	in, err := i.Instance.Info(ctx)
	in.State = i.p.state(in.ID, in.State)
	return in, err
}

func (i *pausableInstance) id(ctx context.Context) string {
	in, _ := i.Instance.Info(ctx)
	return in.ID
}

func (i *pausableInstance) Pause(ctx context.Context) error {
	i.p.setPaused(i.id(ctx), true)
	return nil
}

func (i *pausableInstance) DialPort(ctx context.Context, port int) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "tcp", i.p.dial)
}

func (i *pausableInstance) Resume(ctx context.Context) error {
	i.p.setPaused(i.id(ctx), false)
	return nil
}

// A sandbox that pauses at its timeout is paused at its deadline, not at the reaper's next
// round (every 10 s, so 0 to 10 s late before); one whose deadline the server enforces itself
// (a provider without the "timeout" capability) is destroyed at it, not 5 to 15 s late; and
// a deadline moved later is kept. The reaper's interval here is an hour, so only the
// deadline timer can act in time.
func TestActsAtTheDeadline(t *testing.T) {
	const bound = time.Second
	e := newEnv(t, func(c *Config) { c.Provider = newPausable(true) }) // ReapInterval: an hour
	create := func(body string) (id string, deadline time.Time) {
		t.Helper()
		var sb api.Sandbox
		e.want(201, &sb, "POST", "/v1/sandboxes", e.key, body)
		return sb.ID, sb.Deadline
	}
	record := func(id string) (store.Sandbox, bool) {
		rec, err := e.st.Sandbox(t.Context(), id)
		return rec, err == nil
	}
	waitFor := func(what string, deadline time.Time, cond func() bool) {
		t.Helper()
		for !cond() {
			if time.Now().After(deadline.Add(bound)) {
				t.Fatalf("%s: not done %v after the deadline", what, bound)
			}
			time.Sleep(10 * time.Millisecond)
		}
		if late := time.Since(deadline); late > bound {
			t.Errorf("%s %v after the deadline, want within %v", what, late, bound)
		}
	}

	paused, pd := create(`{"timeoutMs":1000,"onTimeout":"pause"}`)
	killed, kd := create(`{"timeoutMs":1500}`)
	moved, md := create(`{"timeoutMs":1200,"onTimeout":"pause"}`)
	if pd.IsZero() || kd.IsZero() || md.IsZero() {
		t.Fatalf("deadlines %v %v %v", pd, kd, md)
	}
	e.want(200, nil, "POST", "/v1/sandboxes/"+moved+"/timeout", e.key, `{"timeoutMs":60000}`)
	if time.Now().After(pd) {
		t.Fatalf("the sandboxes took longer to make than their timeout")
	}
	if rec, _ := record(paused); rec.State != provider.StateRunning {
		t.Fatalf("before its deadline: %s", rec.State)
	}
	waitFor("paused", pd, func() bool { rec, _ := record(paused); return rec.State == provider.StatePaused })
	waitFor("destroyed, with sandbox.timeout", kd, func() bool {
		_, live := record(killed)
		evs, err := e.st.Events(t.Context(), store.EventFilter{SandboxID: killed, Type: EventTimedOut})
		return !live && err == nil && len(evs) == 1
	})
	if rec, _ := record(moved); rec.State != provider.StateRunning {
		t.Errorf("the sandbox whose deadline moved: %s at its first deadline, want running", rec.State)
	}
}
