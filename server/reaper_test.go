package server

import (
	"context"
	"net/http"
	"testing"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/providers/memory"
	"github.com/tupper-dev/tupper/store"
)

// slowDestroy lets a test hold a Destroy after the provider has removed the sandbox and
// before the caller learns it.
type slowDestroy struct {
	provider.Provider
	removed, release chan struct{}
}

func (p *slowDestroy) Destroy(ctx context.Context, id string) error {
	err := p.Provider.Destroy(ctx, id)
	p.removed <- struct{}{}
	<-p.release
	return err
}

func (e *env) eventTypes(id string) []string {
	e.t.Helper()
	evs, err := e.st.Events(context.Background(), store.EventFilter{SandboxID: id})
	if err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for _, ev := range evs {
		out = append(out, ev.Type)
	}
	return out
}

// TestReconcileDuringDestroy: reconciles that run while a request destroys a sandbox (gone
// from the provider, not yet recorded) must not record it as expired: the user destroyed it.
func TestReconcileDuringDestroy(t *testing.T) {
	slow := &slowDestroy{Provider: memory.New(), removed: make(chan struct{}), release: make(chan struct{})}
	e := newEnvLoop(t, false, func(c *Config) { c.Provider = slow })
	sb := e.create(map[string]any{})
	done := make(chan int)
	go func() {
		resp, _ := e.do("DELETE", "/v1/sandboxes/"+sb.ID, e.key, nil)
		done <- resp.StatusCode
	}()
	<-slow.removed
	// Two reconciles while the request still destroys it: two misses, but it is the
	// request's to record.
	for range 2 {
		if err := e.srv.Reconcile(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	close(slow.release)
	if code := <-done; code != http.StatusNoContent {
		t.Fatalf("delete: %d", code)
	}
	if err := e.srv.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := e.eventTypes(sb.ID)
	if len(got) != 2 || got[0] != EventCreated || got[1] != EventDestroyed {
		t.Errorf("events %q, want created then destroyed", got)
	}
}

// TestReconcileExpires: a sandbox the provider lost (killed, crashed, past its deadline) is
// recorded as expired once two reconciles in a row miss it.
func TestReconcileExpires(t *testing.T) {
	e := newEnvLoop(t, false)
	sb := e.create(map[string]any{})
	if err := e.srv.prov.Destroy(context.Background(), sb.ID); err != nil {
		t.Fatal(err)
	}
	if err := e.srv.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := e.eventTypes(sb.ID); len(got) != 1 {
		t.Errorf("after one reconcile: events %q, want only created", got)
	}
	if err := e.srv.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := e.eventTypes(sb.ID)
	if len(got) != 2 || got[1] != EventExpired {
		t.Errorf("after two reconciles: events %q, want created then expired", got)
	}
	e.want(http.StatusNotFound, nil, "GET", "/v1/sandboxes/"+sb.ID, e.key, nil)
}
