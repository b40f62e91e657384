package server

import (
	"crypto/hmac"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/tupper-dev/tupper/store"
)

// verify is what docs/webhooks.md tells a receiver to do.
func verify(secret string, r *http.Request, body []byte) bool {
	ts, err := strconv.ParseInt(r.Header.Get("X-Webhook-Timestamp"), 10, 64)
	if err != nil || time.Since(time.Unix(ts, 0)).Abs() > 5*time.Minute {
		return false
	}
	return hmac.Equal([]byte(r.Header.Get("X-Webhook-Signature")), []byte(Sign(secret, ts, body)))
}

// TestWebhookSignedAndRetried: a delivery carries the event id, a timestamp and a valid
// signature; a receiver that fails at first gets it again, with backoff, until it accepts.
func TestWebhookSignedAndRetried(t *testing.T) {
	e := newEnv(t)
	var (
		mu       sync.Mutex
		attempts []time.Time
		got      []store.Event
		bad      int
	)
	var secret string
	done := make(chan struct{})
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		if !verify(secret, r, body) {
			bad++
			w.WriteHeader(400)
			return
		}
		var ev store.Event
		json.Unmarshal(body, &ev)
		if ev.ID != r.Header.Get("X-Webhook-Id") {
			t.Errorf("X-Webhook-Id %q, event id %q", r.Header.Get("X-Webhook-Id"), ev.ID)
		}
		if ev.Type != EventCreated {
			t.Errorf("a webhook for %s only got %s", EventCreated, ev.Type)
		}
		attempts = append(attempts, time.Now())
		if len(attempts) < 3 {
			w.WriteHeader(503) // fail twice
			return
		}
		got = append(got, ev)
		close(done)
	}))
	defer recv.Close()
	var wh webhookJSON
	e.want(201, &wh, "POST", "/v1/webhooks", e.key, map[string]any{"url": recv.URL + "/hook", "events": []string{EventCreated}})
	if len(wh.Secret) < 20 || wh.ID == "" {
		t.Fatalf("webhook = %+v", wh)
	}
	mu.Lock()
	secret = wh.Secret
	mu.Unlock()
	var list struct{ Webhooks []webhookJSON }
	e.want(200, &list, "GET", "/v1/webhooks", e.key, nil)
	if len(list.Webhooks) != 1 || list.Webhooks[0].Secret != "" {
		t.Fatalf("list shows %+v (secrets must not be listed)", list)
	}
	sb := e.create(nil)
	e.want(204, nil, "DELETE", "/v1/sandboxes/"+sb.ID, e.key, nil) // filtered out
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the webhook was not delivered")
	}
	mu.Lock()
	defer mu.Unlock()
	if bad != 0 {
		t.Errorf("%d deliveries had a bad signature", bad)
	}
	if len(got) != 1 || got[0].SandboxID != sb.ID {
		t.Fatalf("delivered %+v", got)
	}
	// Backoff: 50 ms, then 100 ms.
	if d := attempts[2].Sub(attempts[1]); d < 90*time.Millisecond {
		t.Errorf("second retry after %v, want ≥ 100 ms", d)
	}
	e.want(400, nil, "POST", "/v1/webhooks", e.key, map[string]any{"url": "ftp://x"})
	e.want(400, nil, "POST", "/v1/webhooks", e.key, map[string]any{"url": recv.URL, "events": []string{"nope"}})
	e.want(204, nil, "DELETE", "/v1/webhooks/"+wh.ID, e.key, nil)
}

func TestSignKnownVector(t *testing.T) {
	// printf '1700000000.{"a":1}' | openssl dgst -sha256 -hmac whsec_test
	got := Sign("whsec_test", 1700000000, []byte(`{"a":1}`))
	want := "sha256=38877139021993b830af32feea6e18a8da83eb2f6e49ee50bd9e4cf4ca4d3789"
	if got != want {
		t.Fatalf("Sign = %q, want %q", got, want)
	}
}
