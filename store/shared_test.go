package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tupper-dev/tupper/internal/testenv"
)

// joined opens spec as a server that joined it does: its ServerLock, and a Store whose claims
// carry the lock's instance.
func joined(t *testing.T, spec string) (*ServerLock, *Store) {
	t.Helper()
	l, err := LockServer(spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Unlock)
	s := open(t, spec)
	s.SetInstance(l.Instance())
	return l, s
}

// Two servers on one PostgreSQL store: neither releases the other's deliveries in flight
// while it lives, nor claims them; when one dies, the other releases them at once, long
// before their lease ends.
func TestClaimsOfDeadServers(t *testing.T) {
	ctx := context.Background()
	spec := testenv.PostgresDB(t)
	la, a := joined(t, spec)
	_, b := joined(t, spec)
	if _, err := a.CreateWebhook(ctx, "http://127.0.0.1:1/", nil); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if _, err := a.AddEvent(ctx, "sandbox.created", fmt.Sprint("sb", i), nil); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now()
	ofA, err := a.ClaimDeliveries(ctx, now, time.Hour, 10)
	if err != nil || len(ofA) != 10 {
		t.Fatalf("a claimed %d, %v", len(ofA), err)
	}
	if n, err := b.ReleaseClaims(ctx); err != nil || n != 0 {
		t.Fatalf("b released %d of a live server's claims, %v", n, err)
	}
	ofB, err := b.ClaimDeliveries(ctx, now, time.Hour, 20)
	if err != nil || len(ofB) != 10 {
		t.Fatalf("b claimed %d, %v; want the 10 a did not", len(ofB), err)
	}
	for _, d := range ofB {
		for _, e := range ofA {
			if d.ID == e.ID {
				t.Fatalf("delivery %d claimed by both", d.ID)
			}
		}
	}
	la.Unlock() // a dies
	if n, err := b.ReleaseClaims(ctx); err != nil || n != 10 {
		t.Fatalf("b released %d of a dead server's claims, %v; want 10", n, err)
	}
	again, err := b.ClaimDeliveries(ctx, time.Now(), time.Hour, 20)
	if err != nil || len(again) != 10 {
		t.Fatalf("b claimed %d of a dead server's deliveries, %v", len(again), err)
	}
}

// Servers claiming at once from one PostgreSQL store never claim a delivery twice, and a
// sandbox's events go out in order: none is claimed before the one before it is done.
func TestConcurrentClaims(t *testing.T) {
	ctx := context.Background()
	spec := testenv.PostgresDB(t)
	var stores []*Store
	for range 3 {
		_, s := joined(t, spec)
		stores = append(stores, s)
	}
	if _, err := stores[0].CreateWebhook(ctx, "http://127.0.0.1:1/", nil); err != nil {
		t.Fatal(err)
	}
	const sandboxes, each = 20, 5
	for i := range each {
		for sb := range sandboxes {
			if _, err := stores[0].AddEvent(ctx, fmt.Sprint("e", i), fmt.Sprint("sb", sb), nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	var (
		mu      sync.Mutex
		claimed = map[int64]int{}
		order   = map[string][]int64{} // per sandbox: event seqs in the order they were done
		wg      sync.WaitGroup
	)
	for _, s := range stores {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for idle := 0; idle < 20; {
				ds, err := s.ClaimDeliveries(ctx, time.Now(), time.Hour, 4)
				if err != nil {
					t.Error(err)
					return
				}
				if len(ds) == 0 {
					idle++
					time.Sleep(10 * time.Millisecond)
					continue
				}
				idle = 0
				for _, d := range ds {
					mu.Lock()
					claimed[d.ID]++
					order[d.Event.SandboxID] = append(order[d.Event.SandboxID], d.Event.Seq)
					mu.Unlock()
					if err := s.DeliverySucceeded(ctx, d.ID); err != nil {
						t.Error(err)
					}
				}
			}
		}()
	}
	wg.Wait()
	if len(claimed) != sandboxes*each {
		t.Errorf("%d deliveries claimed; want %d", len(claimed), sandboxes*each)
	}
	for id, n := range claimed {
		if n != 1 {
			t.Errorf("delivery %d claimed %d times", id, n)
		}
	}
	for sb, seqs := range order {
		for i := 1; i < len(seqs); i++ {
			if seqs[i] < seqs[i-1] {
				t.Errorf("%s's events done out of order: %v", sb, seqs)
				break
			}
		}
	}
}

// A store lock is one holder's at a time, across servers; a holder that dies loses it at
// once. On both databases (on SQLite, any other instance than the store's own is dead).
func TestStoreLock(t *testing.T) {
	eachStore(t, func(t *testing.T, spec string) {
		ctx := context.Background()
		la, a := joined(t, spec)
		var b *Store
		if pg, _, _ := ParseSpec(spec); pg {
			_, b = joined(t, spec)
		} else {
			b = a // one server to a SQLite store: its own goroutines contend
		}
		release, err := a.Lock(ctx, "key k")
		if err != nil {
			t.Fatal(err)
		}
		short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		_, err = b.Lock(short, "key k")
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("a second holder while the first holds it: %v; want it to wait", err)
		}
		other, err := b.Lock(ctx, "key other")
		if err != nil {
			t.Fatalf("another name: %v", err)
		}
		other()
		got := make(chan func(), 1)
		go func() {
			r, err := b.Lock(ctx, "key k")
			if err != nil {
				t.Error(err)
			}
			got <- r
		}()
		time.Sleep(50 * time.Millisecond)
		release()
		select {
		case r := <-got:
			r()
		case <-time.After(5 * time.Second):
			t.Fatal("the lock was not taken after its release")
		}
		// A holder that dies.
		if _, err := a.Lock(ctx, "key dies"); err != nil {
			t.Fatal(err)
		}
		if b == a {
			a.SetInstance(a.Instance() + 1) // the process that held it is gone
		} else {
			la.Unlock()
		}
		quick, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		r, err := b.Lock(quick, "key dies")
		if err != nil {
			t.Fatalf("the lock of a server that died: %v", err)
		}
		r()
	})
}
