package store

import (
	"context"
	"net/http/httptest"
	"regexp"
	"testing"
	"time"

	"github.com/tupper-dev/tupper/internal/metrics"
)

// TestOutboxBacklog: Outbox counts the deliveries neither delivered nor given up and dates
// the oldest by its event; Ping answers; a measured store times its statements.
func TestOutboxBacklog(t *testing.T) {
	eachStore(t, func(t *testing.T, spec string) {
		ctx := context.Background()
		s := open(t, spec)
		m := metrics.New()
		s.Measure(m)
		if err := s.Ping(ctx); err != nil {
			t.Fatal(err)
		}
		if n, oldest, err := s.Outbox(ctx); err != nil || n != 0 || !oldest.IsZero() {
			t.Fatalf("empty outbox: %d %v %v", n, oldest, err)
		}
		if _, err := s.CreateWebhook(ctx, "http://127.0.0.1:1/", nil); err != nil {
			t.Fatal(err)
		}
		first, err := s.AddEvent(ctx, "sandbox.created", "sb1", nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.AddEvent(ctx, "sandbox.destroyed", "sb1", nil); err != nil {
			t.Fatal(err)
		}
		n, oldest, err := s.Outbox(ctx)
		if err != nil || n != 2 || !oldest.Equal(first.CreatedAt.Truncate(time.Millisecond)) {
			t.Fatalf("outbox: %d %v %v, want 2 since %v", n, oldest, err, first.CreatedAt)
		}
		// The first delivered, the second given up (claimed one at a time or together: a
		// store may deliver in order per sandbox and webhook).
		for done := 0; done < 2; {
			ds, err := s.ClaimDeliveries(ctx, time.Now(), time.Minute, 10)
			if err != nil || len(ds) == 0 {
				t.Fatalf("claimed %d, %v, after %d", len(ds), err, done)
			}
			for _, d := range ds {
				if done == 0 {
					if err := s.DeliverySucceeded(ctx, d.ID); err != nil {
						t.Fatal(err)
					}
					if n, _, err := s.Outbox(ctx); err != nil || n != 1 {
						t.Fatalf("outbox after a delivery: %d %v", n, err)
					}
				} else if err := s.DeliveryFailed(ctx, d.ID, "gone", time.Time{}); err != nil {
					t.Fatal(err)
				}
				done++
			}
		}
		if n, _, err := s.Outbox(ctx); err != nil || n != 0 {
			t.Fatalf("outbox after a delivery and a give-up: %d %v", n, err)
		}
		s.Measure(nil)
		rec := httptest.NewRecorder()
		m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		for _, op := range []string{"exec", "query", "begin", "commit"} {
			if !regexp.MustCompile(`tupper_store_query_seconds_count\{db="(sqlite|postgres)",op="` + op + `"\} [1-9]`).MatchString(rec.Body.String()) {
				t.Errorf("no %s statement timed:\n%s", op, rec.Body.String())
			}
		}
	})
}
