package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tupper-dev/tupper/internal/testenv"
	"github.com/tupper-dev/tupper/provider"
)

func open(t *testing.T, spec string) *Store {
	t.Helper()
	s, err := OpenURL(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// eachStore runs f on a new empty store of each database, as subtests "sqlite" (a temporary
// state directory) and "postgres" (a new database on $TUPPER_TEST_POSTGRES's cluster: see
// testenv.Postgres), with the spec that opens it.
func eachStore(t *testing.T, f func(t *testing.T, spec string)) {
	t.Run("sqlite", func(t *testing.T) { f(t, t.TempDir()) })
	t.Run("postgres", func(t *testing.T) { f(t, testenv.PostgresDB(t)) })
}

func TestMigrationsAndReopen(t *testing.T) {
	eachStore(t, func(t *testing.T, spec string) {
		s := open(t, spec)
		v, err := s.Version(context.Background())
		if err != nil || v != len(migrations) {
			t.Fatalf("version = %d, %v; want %d", v, err, len(migrations))
		}
		s.Close()
		s2 := open(t, spec) // migrations already applied: a no-op
		if v, _ := s2.Version(context.Background()); v != len(migrations) {
			t.Fatalf("version after reopen = %d", v)
		}
	})
}

func TestKeys(t *testing.T) {
	eachStore(t, func(t *testing.T, spec string) {
		ctx := context.Background()
		s := open(t, spec)
		k, secret, err := s.CreateKey(ctx, "ci")
		if err != nil {
			t.Fatal(err)
		}
		if len(secret) < 40 || secret[:3] != KeyPrefix || k.Prefix != secret[:len(k.Prefix)] {
			t.Fatalf("key %q prefix %q", secret, k.Prefix)
		}
		got, err := s.AuthenticateKey(ctx, secret)
		if err != nil || got.ID != k.ID {
			t.Fatalf("authenticate = %+v, %v", got, err)
		}
		if _, err := s.AuthenticateKey(ctx, secret+"x"); !errors.Is(err, provider.CodeUnauthorized) {
			t.Fatalf("wrong key: %v", err)
		}
		if _, err := s.RevokeKey(ctx, k.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := s.AuthenticateKey(ctx, secret); !errors.Is(err, provider.CodeUnauthorized) {
			t.Fatalf("revoked key: %v", err)
		}
		keys, _ := s.Keys(ctx)
		if len(keys) != 1 || !keys[0].Revoked() {
			t.Fatalf("keys = %+v", keys)
		}
		if _, err := s.RevokeKey(ctx, "key_nope"); !errors.Is(err, provider.CodeNotFound) {
			t.Fatalf("revoke unknown: %v", err)
		}
	})
}

// Two handles on one directory behave like the server and `tupper keys` in two processes:
// concurrent writers wait for each other instead of failing with "database is locked".
func TestConcurrentHandles(t *testing.T) {
	eachStore(t, func(t *testing.T, spec string) {
		ctx := context.Background()
		a, b := open(t, spec), open(t, spec)
		var wg sync.WaitGroup
		errs := make(chan error, 200)
		for i := range 50 {
			wg.Add(2)
			go func() {
				defer wg.Done()
				if _, _, err := a.CreateKey(ctx, fmt.Sprint("a", i)); err != nil {
					errs <- err
				}
			}()
			go func() {
				defer wg.Done()
				if _, err := b.AddEvent(ctx, "sandbox.created", fmt.Sprint("sb", i), nil); err != nil {
					errs <- err
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		keys, _ := b.Keys(ctx)
		evs, _ := a.Events(ctx, EventFilter{})
		if len(keys) != 50 || len(evs) != 50 {
			t.Fatalf("keys %d events %d", len(keys), len(evs))
		}
	})
}

func TestSandboxesAndTokens(t *testing.T) {
	eachStore(t, func(t *testing.T, spec string) {
		ctx := context.Background()
		s := open(t, spec)
		tok := NewToken()
		sb := Sandbox{ID: "sb1", Provider: "memory", Key: "user:1", Labels: map[string]string{"a": "b"}, CreatedAt: time.Now()}
		if err := s.PutSandbox(ctx, sb, Hash(tok)); err != nil {
			t.Fatal(err)
		}
		if id, err := s.SandboxForToken(ctx, tok); err != nil || id != "sb1" {
			t.Fatalf("token → %q, %v", id, err)
		}
		if got, err := s.SandboxByKey(ctx, "user:1"); err != nil || got.ID != "sb1" || got.Labels["a"] != "b" {
			t.Fatalf("by key = %+v, %v", got, err)
		}
		live, err := s.MarkDestroyed(ctx, "sb1", End{Reason: EndDestroyed, By: "key_1"})
		if err != nil || !live {
			t.Fatalf("destroy = %v, %v", live, err)
		}
		if live, _ := s.MarkDestroyed(ctx, "sb1", End{Reason: EndTimeout}); live {
			t.Fatal("second destroy reported live")
		}
		// The first reason is kept, with who destroyed it.
		ended, err := s.EndedSandboxes(ctx, 10)
		if err != nil || len(ended) != 1 || ended[0].ID != "sb1" || ended[0].DestroyedAt.IsZero() ||
			ended[0].End != (End{Reason: EndDestroyed, By: "key_1"}) {
			t.Fatalf("ended = %+v, %v", ended, err)
		}
		// A record put again (the same id made again) is live, without the old reason.
		if err := s.PutSandbox(ctx, sb, nil); err != nil {
			t.Fatal(err)
		}
		if got, err := s.Sandbox(ctx, "sb1"); err != nil || got.End != (End{}) {
			t.Fatalf("put again = %+v, %v", got, err)
		}
		if live, _ := s.MarkDestroyed(ctx, "sb1", End{Reason: EndError, Message: "its init exited"}); !live {
			t.Fatal("destroy of the record put again reported not live")
		}
		if _, err := s.SandboxForToken(ctx, tok); !errors.Is(err, provider.CodeUnauthorized) {
			t.Fatalf("token of a destroyed sandbox: %v", err)
		}
		if _, err := s.Sandbox(ctx, "sb1"); !errors.Is(err, provider.CodeNotFound) {
			t.Fatalf("destroyed sandbox: %v", err)
		}
	})
}

// A pause records whether it dropped the memory; any other state (a resume) clears it.
func TestPausedMemoryDropped(t *testing.T) {
	eachStore(t, func(t *testing.T, spec string) {
		ctx := context.Background()
		s := open(t, spec)
		if err := s.PutSandbox(ctx, Sandbox{ID: "sb1", Provider: "memory", CreatedAt: time.Now(), OnTimeout: OnTimeoutPauseCold}, nil); err != nil {
			t.Fatal(err)
		}
		check := func(what string, state provider.State, dropped bool) {
			t.Helper()
			sb, err := s.Sandbox(ctx, "sb1")
			if err != nil || sb.State != state || sb.MemoryDropped != dropped || sb.OnTimeout != OnTimeoutPauseCold {
				t.Fatalf("%s: %+v %v; want %s, memory dropped %v", what, sb, err, state, dropped)
			}
		}
		check("created", provider.StateRunning, false)
		if err := s.SetPaused(ctx, "sb1", true); err != nil {
			t.Fatal(err)
		}
		check("paused without memory", provider.StatePaused, true)
		if err := s.SetState(ctx, "sb1", provider.StateRunning); err != nil {
			t.Fatal(err)
		}
		check("resumed", provider.StateRunning, false)
		if err := s.SetPaused(ctx, "sb1", false); err != nil {
			t.Fatal(err)
		}
		check("paused with memory", provider.StatePaused, false)
		if !PausesAtTimeout(OnTimeoutPause) || !PausesAtTimeout(OnTimeoutPauseCold) || PausesAtTimeout(OnTimeoutKill) || PausesAtTimeout("") {
			t.Error("PausesAtTimeout")
		}
	})
}

func TestOutbox(t *testing.T) {
	eachStore(t, func(t *testing.T, spec string) {
		ctx := context.Background()
		s := open(t, spec)
		all, _ := s.CreateWebhook(ctx, "http://127.0.0.1:1/all", nil)
		only, _ := s.CreateWebhook(ctx, "http://127.0.0.1:1/only", []string{"sandbox.destroyed"})
		if _, err := s.AddEvent(ctx, "sandbox.created", "sb1", map[string]string{"x": "y"}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.AddEvent(ctx, "sandbox.destroyed", "sb1", nil); err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		// In order per sandbox and webhook: "all"'s second delivery waits for its first.
		ds, err := s.ClaimDeliveries(ctx, now, time.Minute, 10)
		if err != nil || len(ds) != 2 {
			t.Fatalf("claimed %d, %v; want 2 (the second of sb1's events to %s waits)", len(ds), err, all.ID)
		}
		// Leased: not claimed again until the lease ends.
		if again, _ := s.ClaimDeliveries(ctx, now, time.Minute, 10); len(again) != 0 {
			t.Fatalf("claimed %d again within the lease", len(again))
		}
		if again, _ := s.ClaimDeliveries(ctx, now.Add(2*time.Minute), time.Minute, 10); len(again) != 2 {
			t.Fatalf("claimed %d after the lease", len(again))
		}
		// Its own claims are not a dead server's: nothing to release.
		if n, err := s.ReleaseClaims(ctx); err != nil || n != 0 {
			t.Fatalf("released %d of its own claims, %v", n, err)
		}
		// A restarted server (another instance) releases what a dead one had in flight.
		s.SetInstance(s.Instance() + 1)
		if n, err := s.ReleaseClaims(ctx); err != nil || n != 2 {
			t.Fatalf("released %d, %v", n, err)
		}
		if again, _ := s.ClaimDeliveries(ctx, time.Now(), time.Minute, 10); len(again) != 2 {
			t.Fatalf("claimed %d after release", len(again))
		}
		for _, d := range ds {
			if d.Webhook.ID == only.ID && d.Event.Type != "sandbox.destroyed" {
				t.Errorf("filtered webhook got %s", d.Event.Type)
			}
			if d.Webhook.ID == all.ID && d.Event.Type != "sandbox.created" {
				t.Errorf("webhook %s got %s before sandbox.created", all.ID, d.Event.Type)
			}
			if err := s.DeliverySucceeded(ctx, d.ID); err != nil {
				t.Fatal(err)
			}
		}
		// The first done, the second is claimed.
		next, err := s.ClaimDeliveries(ctx, time.Now(), time.Minute, 10)
		if err != nil || len(next) != 1 || next[0].Event.Type != "sandbox.destroyed" || next[0].Webhook.ID != all.ID {
			t.Fatalf("after the first: claimed %+v, %v", next, err)
		}
		if err := s.DeliverySucceeded(ctx, next[0].ID); err != nil {
			t.Fatal(err)
		}
		st, _ := s.Deliveries(ctx, all.ID)
		if len(st) != 2 || !st[0].Delivered || !st[1].Delivered {
			t.Fatalf("deliveries = %+v", st)
		}
		evs, _ := s.Events(ctx, EventFilter{SandboxID: "sb1", Type: "sandbox.created"})
		if len(evs) != 1 || string(evs[0].Data) != `{"x":"y"}` {
			t.Fatalf("events = %+v", evs)
		}
		after, _ := s.Events(ctx, EventFilter{After: evs[0].ID})
		if len(after) != 1 || after[0].Type != "sandbox.destroyed" {
			t.Fatalf("events after = %+v", after)
		}
	})
}
