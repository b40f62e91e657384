package server

import (
	"crypto/hmac"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tupper-dev/tupper/server/api"
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
	e := newEnv(t, func(c *Config) { c.AllowPrivateWebhooks = true }) // the receiver is on loopback
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
	var wh api.Webhook
	e.want(201, &wh, "POST", "/v1/webhooks", e.key, map[string]any{"url": recv.URL + "/hook", "events": []string{EventCreated}})
	if len(wh.Secret) < 20 || wh.ID == "" {
		t.Fatalf("webhook = %+v", wh)
	}
	mu.Lock()
	secret = wh.Secret
	mu.Unlock()
	var list struct{ Webhooks []api.Webhook }
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

// deliveriesSettled waits until every delivery of webhook id has been attempted at least
// once and returns them.
func deliveriesSettled(t *testing.T, e *env, id string, n int) []store.DeliveryStatus {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ds, err := e.st.Deliveries(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		done := len(ds) >= n
		for _, d := range ds {
			done = done && (d.Attempts > 0 || d.Delivered)
		}
		if done {
			return ds
		}
		if time.Now().After(deadline) {
			t.Fatalf("deliveries of %s never attempted: %+v", id, ds)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// By default a webhook reaches public addresses only: registration refuses loopback,
// link-local (metadata), RFC 1918, carrier-grade NAT and IPv6 loopback and ULA targets, and
// a target that gets past registration (a name that resolves to one, or a webhook stored
// before this check) is refused when the connection is made, before anything is sent.
func TestWebhookTargetsRefused(t *testing.T) {
	var hits atomic.Int32
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer recv.Close()
	// Registration, on a server that makes no event: a regression queues no delivery to
	// these addresses.
	quiet := newEnv(t)
	for _, u := range []string{
		recv.URL + "/hook", "http://localhost:8080/", "http://127.0.0.2/", "http://[::1]:8080/",
		"http://[::ffff:127.0.0.1]/", "http://169.254.169.254/latest/meta-data/", "http://10.1.2.3/",
		"http://172.16.0.1/", "http://192.168.1.1/", "http://100.64.0.1/", "http://[fd00::1]/",
		"http://[fe80::1]/", "http://0.0.0.0:8080/",
	} {
		var ae api.Error
		quiet.want(400, &ae, "POST", "/v1/webhooks", quiet.key, map[string]any{"url": u})
		if !strings.Contains(ae.Message, "not a public address") {
			t.Errorf("%s: %q", u, ae.Message)
		}
	}
	// Past registration: the check at each connection. The store takes any URL; only
	// loopback ones here, so that a regression sends nothing beyond this machine (the other
	// ranges are TestWebhookTargetOK's, the same check without a dial).
	e := newEnv(t)
	var ids []string
	for _, u := range []string{recv.URL + "/hook", strings.Replace(recv.URL, "127.0.0.1", "localhost", 1) + "/hook"} {
		h, err := e.st.CreateWebhook(t.Context(), u, nil)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, h.ID)
	}
	e.create(nil) // sandbox.created: one delivery to each
	for i, id := range ids {
		ds := deliveriesSettled(t, e, id, 1)
		if ds[0].Delivered || !strings.Contains(ds[0].LastError, "not a public address") {
			t.Errorf("webhook %d: %+v, want refused as not public", i, ds[0])
		}
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("the loopback receiver got %d requests", n)
	}
}

// --allow-private-webhooks (Config.AllowPrivateWebhooks) lets a loopback receiver through,
// but never a link-local target such as a cloud metadata service; and no redirect is
// followed: a 3xx answer is a failed delivery, and its target gets nothing.
func TestWebhookAllowPrivateAndRedirects(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.AllowPrivateWebhooks = true })
	var got, redirected atomic.Int32
	final := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { redirected.Add(1) }))
	defer final.Close()
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/moved" {
			http.Redirect(w, r, final.URL+"/hook", http.StatusTemporaryRedirect)
			return
		}
		got.Add(1)
	}))
	defer recv.Close()
	var direct, moved api.Webhook
	e.want(201, &direct, "POST", "/v1/webhooks", e.key, map[string]any{"url": recv.URL + "/hook"})
	e.want(201, &moved, "POST", "/v1/webhooks", e.key, map[string]any{"url": recv.URL + "/moved"})
	e.create(nil)
	if ds := deliveriesSettled(t, e, direct.ID, 1); !ds[0].Delivered || got.Load() != 1 {
		t.Errorf("loopback receiver with the flag: %+v, %d requests", ds[0], got.Load())
	}
	if ds := deliveriesSettled(t, e, moved.ID, 1); ds[0].Delivered || !strings.Contains(ds[0].LastError, "status 307") {
		t.Errorf("redirected delivery: %+v, want failed with status 307", ds[0])
	}
	if n := redirected.Load(); n != 0 {
		t.Errorf("the redirect's target got %d requests", n)
	}
	// A metadata service stays refused, on a server of its own that makes no event (so a
	// regression queues no delivery to it).
	quiet := newEnv(t, func(c *Config) { c.AllowPrivateWebhooks = true })
	var ae api.Error
	quiet.want(400, &ae, "POST", "/v1/webhooks", quiet.key, map[string]any{"url": "http://169.254.169.254/"})
	if !strings.Contains(ae.Message, "link-local") {
		t.Errorf("metadata target with the flag: %q", ae.Message)
	}
}

// The check every webhook connection passes (the dialer's Control, after resolution),
// without a dial: which addresses each setting lets through.
func TestWebhookTargetOK(t *testing.T) {
	for _, c := range []struct {
		addr           string
		public, withPv bool // allowed by default, allowed with AllowPrivateWebhooks
	}{
		{"1.1.1.1", true, true},
		{"2606:4700:4700::1111", true, true},
		{"127.0.0.1", false, true},
		{"127.8.9.10", false, true},
		{"::1", false, true},
		{"::ffff:127.0.0.1", false, true},
		{"10.0.0.1", false, true},
		{"172.31.255.255", false, true},
		{"192.168.0.10", false, true},
		{"100.64.0.1", false, true},
		{"fd12:3456::1", false, true},
		{"::ffff:10.0.0.1", false, true},
		{"169.254.169.254", false, false},
		{"fe80::1", false, false},
		{"fd00:ec2::254", false, false}, // AWS's IPv6 metadata service, inside the ULA range
		{"0.0.0.0", false, false},
		{"::", false, false},
		{"224.0.0.1", false, false},
		{"255.255.255.255", false, false},
		{"64:ff9b::a9fe:a9fe", false, false}, // NAT64 of 169.254.169.254
		{"2002:a9fe:a9fe::1", false, false},  // 6to4 of 169.254.169.254
	} {
		a := netip.MustParseAddr(c.addr)
		if got := webhookTargetOK(a, false) == nil; got != c.public {
			t.Errorf("%s by default: allowed %v, want %v", c.addr, got, c.public)
		}
		if got := webhookTargetOK(a, true) == nil; got != c.withPv {
			t.Errorf("%s with AllowPrivateWebhooks: allowed %v, want %v", c.addr, got, c.withPv)
		}
	}
}
