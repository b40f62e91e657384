package server

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/providers/memory"
	"github.com/tupper-dev/tupper/server/api"
	"github.com/tupper-dev/tupper/store"
)

// endsProvider is a provider that reports why the sandboxes it lost ended, as the local
// provider does (provider.EndReporter).
type endsProvider struct {
	provider.Provider
	mu   sync.Mutex
	ends map[string]provider.End
}

func (p *endsProvider) EndOf(_ context.Context, id string) (provider.End, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e, ok := p.ends[id]
	return e, ok
}

// TestEndReasons: every way a sandbox ends is recorded with its reason, listed by GET
// /v1/sandboxes?all=true, and carried by the ending event's data and its webhook: a DELETE
// (destroyed, by the caller's key id), a sandbox its provider lost saying why (the reason
// the provider gives), one lost past its deadline (timeout) and one lost without a word
// (error, with a message).
func TestEndReasons(t *testing.T) {
	prov := &endsProvider{Provider: memory.New(), ends: map[string]provider.End{}}
	e := newEnv(t, func(c *Config) { c.Provider = prov; c.AllowPrivateWebhooks = true }) // its loop delivers webhooks, and reconciles hourly only
	ctx := context.Background()
	keys, err := e.st.Keys(ctx)
	if err != nil || len(keys) != 1 {
		t.Fatalf("keys %v, %v", keys, err)
	}
	keyID := keys[0].ID

	// A webhook for the ending events, to see their data as a receiver does.
	var mu sync.Mutex
	hooked := map[string]store.Event{}
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var ev store.Event
		if err := json.Unmarshal(body, &ev); err != nil {
			t.Errorf("webhook body %q: %v", body, err)
		}
		mu.Lock()
		hooked[ev.SandboxID] = ev
		mu.Unlock()
	}))
	defer recv.Close()
	e.want(201, nil, "POST", "/v1/webhooks", e.key, map[string]any{"url": recv.URL, "events": []string{EventDestroyed, EventExpired, EventTimedOut}})

	destroyed := e.create(map[string]any{"labels": map[string]string{"case": "destroyed"}})
	e.want(204, nil, "DELETE", "/v1/sandboxes/"+destroyed.ID, e.key, nil)

	oom := e.create(map[string]any{})
	lost := e.create(map[string]any{})
	late := e.create(map[string]any{"timeoutMs": 300})
	live := e.create(map[string]any{})
	prov.mu.Lock()
	prov.ends[oom.ID] = provider.End{Reason: store.EndOOMKilled, Message: "it reached its memory limit"}
	prov.mu.Unlock()
	for _, id := range []string{oom.ID, lost.ID} {
		if err := prov.Destroy(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(400 * time.Millisecond) // past late's deadline: the memory provider drops it
	for range 2 {
		if err := e.srv.Reconcile(ctx); err != nil {
			t.Fatal(err)
		}
	}

	want := map[string]api.End{
		destroyed.ID: {Reason: store.EndDestroyed, By: keyID},
		oom.ID:       {Reason: store.EndOOMKilled, Message: "it reached its memory limit"},
		lost.ID:      {Reason: store.EndError, Message: "the provider no longer has the sandbox: it stopped by itself"},
		late.ID:      {Reason: store.EndTimeout},
	}
	var list api.SandboxList
	e.want(200, &list, "GET", "/v1/sandboxes?all=true", e.key, nil)
	seen := map[string]bool{}
	for _, sb := range list.Sandboxes {
		seen[sb.ID] = true
		w, ended := want[sb.ID]
		switch {
		case !ended && sb.End != nil:
			t.Errorf("live %s listed with an end %+v", sb.ID, sb.End)
		case ended && (sb.End == nil || *sb.End != w || sb.EndedAt.IsZero() || sb.State != "stopped"):
			t.Errorf("%s listed as %+v (end %+v), want end %+v", sb.ID, sb, sb.End, w)
		}
	}
	for id := range want {
		if !seen[id] {
			t.Errorf("%s is not listed with all=true", id)
		}
	}
	if !seen[live.ID] {
		t.Errorf("the live sandbox is not listed with all=true")
	}
	// Without all, only the live one; with a label filter, only what matches.
	e.want(200, &list, "GET", "/v1/sandboxes", e.key, nil)
	if len(list.Sandboxes) != 1 || list.Sandboxes[0].ID != live.ID {
		t.Errorf("without all: %+v", list.Sandboxes)
	}
	e.want(200, &list, "GET", "/v1/sandboxes?all=true&label=case=destroyed", e.key, nil)
	if len(list.Sandboxes) != 1 || list.Sandboxes[0].ID != destroyed.ID {
		t.Errorf("all with a label: %+v", list.Sandboxes)
	}

	// The ending events carry the reason, and their webhooks with them.
	check := func(where string, ev store.Event, w api.End) {
		t.Helper()
		var data struct{ Reason, By, Message string }
		if err := json.Unmarshal(ev.Data, &data); err != nil {
			t.Errorf("%s: data %s: %v", where, ev.Data, err)
		}
		if (api.End{Reason: data.Reason, By: data.By, Message: data.Message}) != w {
			t.Errorf("%s: %s data %s, want %+v", where, ev.Type, ev.Data, w)
		}
	}
	for id, w := range want {
		evs, err := e.st.Events(ctx, store.EventFilter{SandboxID: id})
		if err != nil || len(evs) != 2 {
			t.Fatalf("events of %s: %+v, %v", id, evs, err)
		}
		check("stored", evs[1], w)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		mu.Lock()
		n := len(hooked)
		mu.Unlock()
		if n == len(want) || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	for id, w := range want {
		ev, ok := hooked[id]
		if !ok {
			t.Errorf("no webhook for the end of %s", id)
			continue
		}
		check("webhook", ev, w)
	}
}
