//go:build linux

package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tupper-dev/tupper/internal/testenv"
	"github.com/tupper-dev/tupper/providers/local"
	"github.com/tupper-dev/tupper/server/servertest"
	"github.com/tupper-dev/tupper/store"
)

// serveShared starts `tupper serve` on the local provider with state in home and its store
// in the PostgreSQL database spec, and waits until it listens.
func serveShared(t *testing.T, home, spec string) *child {
	t.Helper()
	cmd := exec.Command(servertest.Binary(t), "serve", "--addr", "127.0.0.1:0", "--home", home, "--store", spec,
		"--provider", "local", "--allow-private-webhooks")
	cmd.Env = append(os.Environ(), "TUPPER_HOME="+home, "TUPPER_STORE="+spec)
	c := startChild(t, cmd)
	if err := c.waitServing(60 * time.Second); err != nil {
		c.kill()
		t.Fatal(err)
	}
	return c
}

// hook is a webhook receiver that records every delivery: how often each event came, and
// each sandbox's events in the order they arrived. It can hold the deliveries of one event
// type open until told.
type hook struct {
	*httptest.Server
	mu      sync.Mutex
	times   map[string]int      // event id → deliveries
	bySB    map[string][]string // sandbox → event ids, as they arrived
	hold    string              // event type whose deliveries wait for release
	held    chan string         // each held delivery's event id, as it arrives
	release chan struct{}
	once    sync.Once
}

// unhold lets the held deliveries go, and delivers the next ones at once.
func (h *hook) unhold() {
	h.mu.Lock()
	h.hold = ""
	h.mu.Unlock()
	h.once.Do(func() { close(h.release) })
}

func newHook(t *testing.T) *hook {
	h := &hook{times: map[string]int{}, bySB: map[string][]string{}, held: make(chan string, 16), release: make(chan struct{})}
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var ev store.Event
		body, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(body, &ev); err != nil {
			t.Errorf("a delivery that is not an event: %s", body)
			return
		}
		h.mu.Lock()
		h.times[ev.ID]++
		h.bySB[ev.SandboxID] = append(h.bySB[ev.SandboxID], ev.ID)
		hold := h.hold != "" && ev.Type == h.hold
		h.mu.Unlock()
		if hold {
			h.held <- ev.ID
			<-h.release
			http.Error(w, "held", http.StatusServiceUnavailable) // as a server that died would leave it
		}
	}))
	t.Cleanup(func() { h.unhold(); h.Close() })
	return h
}

func (h *hook) count(id string) int { h.mu.Lock(); defer h.mu.Unlock(); return h.times[id] }

// TestServersShareAStore: two `tupper serve` on one PostgreSQL database and one state
// directory are correct at once. Either answers any call for any sandbox; a get-or-create
// by key sent to both at once makes one sandbox; every event is delivered to a webhook once,
// each sandbox's in order, whichever server stored it; a key revoked on one is refused by
// both within a second; deliveries a server had in flight when it is killed (-9) are sent
// by the other at once, not after their lease, and not while the first one lives; and when
// the server that ran the reaper is killed, the other takes it over: a sandbox's deadline
// that passes after that is acted on, once.
func TestServersShareAStore(t *testing.T) {
	home := localServeHome(t, "servers sharing sandboxes need the local provider: ")
	spec := testenv.PostgresDB(t)
	st, err := store.OpenURL(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	_, key, err := st.CreateKey(context.Background(), "test")
	if err != nil {
		t.Fatal(err)
	}
	h := newHook(t)
	h.hold = "sandbox.paused"

	// a alone first: what it claims is its own.
	a := serveShared(t, home, spec)
	var wh struct{ ID string }
	if code := call(t, "POST", a.url+"/v1/webhooks", key, map[string]any{"url": h.URL}, &wh); code != 201 {
		t.Fatalf("webhook: %d", code)
	}
	none := map[string]any{"network": map[string]string{"mode": "none"}}
	var held struct{ ID, Token string }
	if code := call(t, "POST", a.url+"/v1/sandboxes", key, none, &held); code != 201 {
		t.Fatalf("create: %d: %s", code, a.logs())
	}
	if code := call(t, "POST", a.url+"/v1/sandboxes/"+held.ID+"/pause", key, nil, nil); code >= 300 {
		t.Fatalf("pause: %d: %s", code, a.logs())
	}
	var heldEvent string
	select {
	case heldEvent = <-h.held:
	case <-time.After(30 * time.Second):
		t.Fatalf("the sandbox.paused delivery did not arrive: %s", a.logs())
	}
	b := serveShared(t, home, spec)

	t.Run("either server answers", func(t *testing.T) {
		var sb struct{ ID, Token string }
		if code := call(t, "POST", a.url+"/v1/sandboxes", key, none, &sb); code != 201 {
			t.Fatalf("create on a: %d", code)
		}
		var res struct {
			ExitCode int
			Stdout   string
		}
		if code := call(t, "POST", b.url+"/v1/sandboxes/"+sb.ID+"/run", sb.Token, map[string]string{"command": "echo from-b > /workspace/f"}, &res); code != 200 || res.ExitCode != 0 {
			t.Fatalf("run on b with a's token: %d %+v", code, res)
		}
		if code := call(t, "POST", a.url+"/v1/sandboxes/"+sb.ID+"/run", key, map[string]string{"command": "cat /workspace/f"}, &res); code != 200 || res.Stdout != "from-b\n" {
			t.Fatalf("read on a: %d %+v", code, res)
		}
		// b does not lead, so it has sampled nothing: it reads the sandbox when asked.
		var series struct {
			Samples []struct{ MemUsedBytes int64 }
		}
		if code := call(t, "GET", b.url+"/v1/sandboxes/"+sb.ID+"/metrics", key, nil, &series); code != 200 || len(series.Samples) == 0 || series.Samples[0].MemUsedBytes <= 0 {
			t.Fatalf("metrics on the server that does not sample: %d %+v", code, series)
		}
		if code := call(t, "DELETE", b.url+"/v1/sandboxes/"+sb.ID, key, nil, nil); code != 204 {
			t.Fatalf("destroy on b: %d", code)
		}
		if code := call(t, "GET", a.url+"/v1/sandboxes/"+sb.ID, key, nil, nil); code != 404 {
			t.Fatalf("a sandbox b destroyed, on a: %d", code)
		}
	})

	t.Run("either server answers E2B's SDK", func(t *testing.T) {
		// E2B's control plane takes the key as Authorization: Bearer too.
		e2b := func(method, url, body string) (int, []byte) {
			return callCtx(t, context.Background(), method, url, key, body)
		}
		code, data := e2b("POST", a.url+"/sandboxes", `{"templateID":"base","timeout":300}`)
		var sb struct{ SandboxID string }
		if code != 201 || json.Unmarshal(data, &sb) != nil || sb.SandboxID == "" {
			t.Fatalf("E2B create on a: %d %s", code, data)
		}
		if code, data := e2b("GET", b.url+"/sandboxes/"+sb.SandboxID, ""); code != 200 {
			t.Fatalf("E2B get on b: %d %s", code, data)
		}
		if code, data := e2b("DELETE", b.url+"/sandboxes/"+sb.SandboxID, ""); code != 204 {
			t.Fatalf("E2B kill on b: %d %s", code, data)
		}
		if code, _ := e2b("GET", a.url+"/sandboxes/"+sb.SandboxID, ""); code != 404 {
			t.Fatalf("a sandbox b killed, on a: %d", code)
		}
	})

	t.Run("one sandbox per key", func(t *testing.T) {
		p, err := local.New(local.Config{Home: home, AgentPath: servertest.Binary(t)})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		count := func() int {
			infos, err := p.List(context.Background(), localFilter())
			if err != nil {
				t.Fatal(err)
			}
			return len(infos)
		}
		before := count()
		for round := range 2 {
			k := fmt.Sprint("user-", round)
			ids := make([]string, 4)
			var wg sync.WaitGroup
			for i := range ids {
				wg.Add(1)
				go func() {
					defer wg.Done()
					srv := []*child{a, b}[i%2]
					var sb struct{ ID string }
					if code := call(t, "POST", srv.url+"/v1/sandboxes", key, map[string]any{"key": k, "network": map[string]string{"mode": "none"}}, &sb); code != 201 && code != 200 {
						t.Errorf("get-or-create %s: %d", k, code)
					}
					ids[i] = sb.ID
				}()
			}
			wg.Wait()
			if ids[0] == "" || slices.ContainsFunc(ids, func(id string) bool { return id != ids[0] }) {
				t.Errorf("get-or-create %s from two servers at once: %v; want one sandbox", k, ids)
			}
		}
		if n := count(); n != before+2 {
			t.Errorf("%d sandboxes made by two keys from two servers; want 2", n-before)
		}
	})

	t.Run("revoked everywhere within a second", func(t *testing.T) {
		k, secret, err := st.CreateKey(context.Background(), "short-lived")
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []*child{a, b} {
			if code := call(t, "GET", c.url+"/v1/sandboxes", secret, nil, nil); code != 200 {
				t.Fatalf("a new key: %d", code)
			}
		}
		if out, stderr, err := tupper(t, []string{"TUPPER_STORE=" + spec}, "keys", "revoke", k.ID); err != nil {
			t.Fatalf("keys revoke: %v: %s %s", err, out, stderr)
		}
		revoked := time.Now()
		for _, c := range []*child{a, b} {
			for call(t, "GET", c.url+"/v1/sandboxes", secret, nil, nil) != http.StatusUnauthorized {
				if time.Since(revoked) > time.Second {
					t.Fatalf("%s still takes a key revoked %v ago", c.url, time.Since(revoked))
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
	})

	t.Run("a dead server's deliveries", func(t *testing.T) {
		// a holds sandbox.paused's delivery in flight; b, alive beside it, leaves it.
		time.Sleep(3 * time.Second) // more than b's release interval
		if n := h.count(heldEvent); n != 1 {
			t.Fatalf("delivered %d times while the server that has it in flight lives", n)
		}
		a.kill()
		killed := time.Now()
		h.unhold()
		for h.count(heldEvent) < 2 {
			if time.Since(killed) > 15*time.Second {
				t.Fatalf("the delivery a killed server had in flight was not resent by the other within 15 s: %s", b.logs())
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Logf("resent %v after the kill (the lease is 30 s)", time.Since(killed).Round(10*time.Millisecond))
	})

	t.Run("the reaper moves", func(t *testing.T) {
		// a led (it came first) and is dead; b leads now. A sandbox whose server-enforced
		// deadline passes is paused, once.
		var sb struct{ ID string }
		req := map[string]any{"network": map[string]string{"mode": "none"}, "timeoutMs": 3000, "onTimeout": "pause"}
		if code := call(t, "POST", b.url+"/v1/sandboxes", key, req, &sb); code != 201 {
			t.Fatalf("create: %d", code)
		}
		serveShared(t, home, spec) // a third server joins; b keeps the lead
		deadline := time.Now().Add(30 * time.Second)
		for {
			var got struct{ State string }
			call(t, "GET", b.url+"/v1/sandboxes/"+sb.ID, key, nil, &got)
			if got.State == "paused" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the sandbox was not paused at its deadline after the leader died: %+v\n%s", got, b.logs())
			}
			time.Sleep(200 * time.Millisecond)
		}
		time.Sleep(2 * time.Second)
		var evs struct{ Events []store.Event }
		call(t, "GET", b.url+"/v1/events?sandbox="+sb.ID+"&type=sandbox.paused", key, nil, &evs)
		if len(evs.Events) != 1 {
			t.Errorf("%d sandbox.paused events; want 1", len(evs.Events))
		}
	})

	t.Run("every event once, in order", func(t *testing.T) {
		var evs struct{ Events []store.Event }
		if code := call(t, "GET", b.url+"/v1/events?limit=1000", key, nil, &evs); code != 200 {
			t.Fatalf("events: %d", code)
		}
		bySB := map[string][]string{}
		for _, e := range evs.Events {
			bySB[e.SandboxID] = append(bySB[e.SandboxID], e.ID)
		}
		deadline := time.Now().Add(20 * time.Second)
		for _, e := range evs.Events {
			for h.count(e.ID) == 0 && time.Now().Before(deadline) {
				time.Sleep(50 * time.Millisecond)
			}
			if n := h.count(e.ID); n != 1 && e.ID != heldEvent {
				t.Errorf("event %s (%s) delivered %d times", e.ID, e.Type, n)
			}
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		for sb, want := range bySB {
			got := slices.DeleteFunc(slices.Clone(h.bySB[sb]), func(id string) bool { return id == heldEvent })
			want = slices.DeleteFunc(want, func(id string) bool { return id == heldEvent })
			if strings.Join(got, " ") != strings.Join(want, " ") {
				t.Errorf("sandbox %s's events arrived as %v; stored as %v", sb, got, want)
			}
		}
	})
}
