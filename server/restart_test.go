//go:build linux

package server_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tupper-dev/tupper/internal/testenv"
	"github.com/tupper-dev/tupper/providers/local"
	"github.com/tupper-dev/tupper/server"
	"github.com/tupper-dev/tupper/server/servertest"
	"github.com/tupper-dev/tupper/store"
)

// child is a `tupper serve` process.
type child struct {
	cmd    *exec.Cmd
	url    string
	stderr *bytes.Buffer
	mu     *sync.Mutex
	found  chan string   // the address it serves on, once
	exited chan struct{} // closed when its stderr ends
}

// serve starts `tupper serve` on a free loopback port with state in home and waits until it
// listens.
func serve(t *testing.T, home, prov string, env ...string) *child {
	t.Helper()
	c := startServe(t, home, prov, env...)
	if err := c.waitServing(60 * time.Second); err != nil {
		c.kill()
		t.Fatal(err)
	}
	return c
}

// startServe starts `tupper serve` as serve does, without waiting for it.
func startServe(t *testing.T, home, prov string, env ...string) *child {
	t.Helper()
	// Webhook receivers of these tests listen on loopback.
	return startServeArgs(t, home, []string{"--provider", prov, "--allow-private-webhooks"}, env...)
}

// startServeArgs starts `tupper serve` on a free loopback port with state in home and the
// flags args, without waiting for it. Its store is home's (testenv.StoreSpec): home itself,
// or under TUPPER_TEST_STORE=postgres the PostgreSQL database that stands for it.
func startServeArgs(t *testing.T, home string, args []string, env ...string) *child {
	t.Helper()
	cmd := exec.Command(servertest.Binary(t), append([]string{"serve", "--addr", "127.0.0.1:0", "--home", home, "--store", testenv.StoreSpec(t, home)}, args...)...)
	cmd.Env = append(append(os.Environ(), stateEnv(t, home)...), env...)
	return startChild(t, cmd)
}

// stateEnv is the environment of a tupper command on home's state: TUPPER_HOME, and
// TUPPER_STORE naming home's store (testenv.StoreSpec), so that `tupper keys` opens the
// database the test's servers use.
func stateEnv(t *testing.T, home string) []string {
	t.Helper()
	return []string{"TUPPER_HOME=" + home, "TUPPER_STORE=" + testenv.StoreSpec(t, home)}
}

// startChild starts cmd, a `tupper serve`, and follows its stderr; it is killed when t ends.
func startChild(t *testing.T, cmd *exec.Cmd) *child {
	t.Helper()
	pr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, stderr: &bytes.Buffer{}, mu: &sync.Mutex{}, found: make(chan string, 1), exited: make(chan struct{})}
	t.Cleanup(func() { c.kill() })
	go func() {
		defer close(c.exited)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			line := sc.Text()
			c.mu.Lock()
			c.stderr.WriteString(line + "\n")
			c.mu.Unlock()
			if i := strings.Index(line, "serving on "); i >= 0 {
				select {
				case c.found <- strings.Fields(line[i+len("serving on "):])[0]:
				default:
				}
			}
		}
	}()
	return c
}

// waitServing waits until c serves, and sets c.url.
func (c *child) waitServing(timeout time.Duration) error {
	select {
	case c.url = <-c.found:
		return nil
	case <-c.exited:
		select {
		case c.url = <-c.found: // it served, then stopped
			return nil
		default:
		}
		return fmt.Errorf("tupper serve exited: %s", c.logs())
	case <-time.After(timeout):
		return fmt.Errorf("tupper serve did not start: %s", c.logs())
	}
}

func (c *child) logs() string { c.mu.Lock(); defer c.mu.Unlock(); return c.stderr.String() }

// kill is kill -9: no shutdown of any kind.
func (c *child) kill() {
	if c.cmd.ProcessState == nil {
		_ = c.cmd.Process.Signal(syscall.SIGKILL)
		_ = c.cmd.Wait()
	}
}

func call(t *testing.T, method, url, key string, in, out any) int {
	t.Helper()
	var body io.Reader
	if in != nil {
		b, _ := json.Marshal(in)
		body = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, url, body)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s %s: %v: %s", method, url, err, data)
		}
	}
	if resp.StatusCode >= 300 {
		t.Logf("%s %s: %d %s", method, url, resp.StatusCode, data)
	}
	return resp.StatusCode
}

// localServeHome is a state directory for a `tupper serve` on the local provider, or a loud
// skip (failing under CI=true) saying why this machine cannot run it. What sandboxes the
// test leaves there are destroyed, through the provider itself, when it ends.
func localServeHome(t *testing.T, why string) string {
	t.Helper()
	if ok, reason := servertest.CanRunLocal(); !ok {
		servertestSkip(t, why+reason)
	}
	home := t.TempDir()
	// A user namespace's root must traverse t.TempDir's private parent.
	if err := os.Chmod(filepath.Dir(home), 0o711); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p, err := local.New(local.Config{Home: home, AgentPath: servertest.Binary(t)})
		if err != nil {
			return
		}
		defer p.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		infos, _ := p.List(ctx, localFilter())
		for _, in := range infos {
			_ = p.Destroy(ctx, in.ID)
		}
	})
	return home
}

func newKey(t *testing.T, home string) string {
	t.Helper()
	// The store is opened here, in another process than the server: as `tupper keys` does.
	st, err := store.OpenURL(context.Background(), testenv.StoreSpec(t, home))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	_, key, err := st.CreateKey(context.Background(), "test")
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// TestOutboxSurvivesKill: the server is killed with -9 while a webhook delivery is in flight
// (the receiver holds the request); after a restart on the same state the delivery is made,
// with the same event id and a valid signature. At least once, never lost.
func TestOutboxSurvivesKill(t *testing.T) {
	home := t.TempDir()
	key := newKey(t, home)
	var (
		mu       sync.Mutex
		byID     = map[string]int{}
		secret   string
		badSig   int
		inFlight = make(chan struct{})
		release  = make(chan struct{})
		redone   = make(chan string, 4)
		first    = true
	)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		ts := r.Header.Get("X-Webhook-Timestamp")
		var tsn int64
		fmt.Sscan(ts, &tsn)
		id := r.Header.Get("X-Webhook-Id")
		mu.Lock()
		if r.Header.Get("X-Webhook-Signature") != server.Sign(secret, tsn, body) {
			badSig++
		}
		byID[id]++
		isFirst := first
		first = false
		mu.Unlock()
		if isFirst {
			close(inFlight)
			<-release // hold the delivery open until the server is dead
			return
		}
		redone <- id
	}))
	defer recv.Close()
	defer close(release)

	a := serve(t, home, "memory")
	var wh struct{ ID, Secret string }
	if code := call(t, "POST", a.url+"/v1/webhooks", key, map[string]any{"url": recv.URL, "events": []string{"sandbox.created"}}, &wh); code != 201 {
		t.Fatalf("webhook: %d", code)
	}
	mu.Lock()
	secret = wh.Secret
	mu.Unlock()
	var sb struct{ ID string }
	if code := call(t, "POST", a.url+"/v1/sandboxes", key, map[string]any{}, &sb); code != 201 {
		t.Fatalf("create: %d", code)
	}
	select {
	case <-inFlight:
	case <-time.After(20 * time.Second):
		t.Fatalf("no delivery arrived: %s", a.logs())
	}
	a.kill()

	b := serve(t, home, "memory")
	select {
	case id := <-redone:
		var evs struct{ Events []store.Event }
		call(t, "GET", b.url+"/v1/events?type=sandbox.created", key, nil, &evs)
		if len(evs.Events) != 1 || evs.Events[0].ID != id || evs.Events[0].SandboxID != sb.ID {
			t.Errorf("redelivered %s; events %+v", id, evs.Events)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("the delivery was lost after kill -9: %s", b.logs())
	}
	mu.Lock()
	defer mu.Unlock()
	if badSig != 0 {
		t.Errorf("%d deliveries with a bad signature", badSig)
	}
}

// TestSandboxesSurviveKill: sandboxes made through a server that is killed with -9 are
// listed and usable through the next server on the same state (they live in the local
// provider, not in the server process).
func TestSandboxesSurviveKill(t *testing.T) {
	home := localServeHome(t, "sandboxes that outlive the server need the local provider: ")
	key := newKey(t, home)
	a := serve(t, home, "local")
	var ids []string
	for i := range 2 {
		var sb struct{ ID, Token string }
		if code := call(t, "POST", a.url+"/v1/sandboxes", key, map[string]any{"network": map[string]string{"mode": "none"}, "labels": map[string]string{"n": fmt.Sprint(i)}}, &sb); code != 201 {
			t.Fatalf("create: %d: %s", code, a.logs())
		}
		ids = append(ids, sb.ID)
		var res struct{ ExitCode int }
		call(t, "POST", a.url+"/v1/sandboxes/"+sb.ID+"/run", sb.Token, map[string]string{"command": "echo kept-" + sb.ID + " > /workspace/f"}, &res)
		if res.ExitCode != 0 {
			t.Fatalf("write: exit %d", res.ExitCode)
		}
	}
	a.kill()

	b := serve(t, home, "local")
	var list struct{ Sandboxes []struct{ ID, State string } }
	call(t, "GET", b.url+"/v1/sandboxes", key, nil, &list)
	if len(list.Sandboxes) != 2 {
		t.Fatalf("after kill -9 and restart: %+v; want %v", list.Sandboxes, ids)
	}
	for _, id := range ids {
		var res struct {
			ExitCode int
			Stdout   string
		}
		if code := call(t, "POST", b.url+"/v1/sandboxes/"+id+"/run", key, map[string]string{"command": "cat /workspace/f"}, &res); code != 200 || res.Stdout != "kept-"+id+"\n" {
			t.Errorf("sandbox %s after restart: %d %+v", id, code, res)
		}
		if code := call(t, "DELETE", b.url+"/v1/sandboxes/"+id, key, nil, nil); code != 204 {
			t.Errorf("delete %s: %d", id, code)
		}
	}
}

// TestCreatesSurviveKill: kill -9 of a server mid-burst of creates (and of `tupper keys
// create` beside it) loses nothing acknowledged: after a restart on the same store every
// sandbox answered 201 is listed and runs, every key printed authenticates, the webhook is
// there, and every event stored is delivered to it. On both stores (TUPPER_TEST_STORE).
func TestCreatesSurviveKill(t *testing.T) {
	home := localServeHome(t, "sandboxes that outlive the server need the local provider: ")
	key := newKey(t, home)
	var (
		mu        sync.Mutex
		delivered = map[string]bool{}
	)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		delivered[r.Header.Get("X-Webhook-Id")] = true
		mu.Unlock()
	}))
	defer recv.Close()

	a := serve(t, home, "local")
	var wh struct{ ID string }
	if code := call(t, "POST", a.url+"/v1/webhooks", key, map[string]any{"url": recv.URL}, &wh); code != 201 {
		t.Fatalf("webhook: %d", code)
	}
	var (
		acked  []string // sandboxes answered 201
		keys   []string // keys `tupper keys create` printed
		wg     sync.WaitGroup
		stop   = make(chan struct{})
		enough = make(chan struct{})
	)
	client := &http.Client{Timeout: time.Minute}
	workers(&wg, stop, 3, func(w, i int) bool {
		b, _ := json.Marshal(map[string]any{"network": map[string]string{"mode": "none"}, "labels": map[string]string{"n": fmt.Sprint(w, "-", i)}})
		req, _ := http.NewRequest("POST", a.url+"/v1/sandboxes", bytes.NewReader(b))
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := client.Do(req)
		if err != nil {
			return false // the server is dead
		}
		var sb struct{ ID string }
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == 201 && json.Unmarshal(data, &sb) == nil {
			mu.Lock()
			acked = append(acked, sb.ID)
			if len(acked) == 6 {
				close(enough)
			}
			mu.Unlock()
		}
		return true
	})
	workers(&wg, stop, 1, func(int, int) bool {
		out, _, err := tupper(t, stateEnv(t, home), "keys", "create")
		if err == nil {
			mu.Lock()
			keys = append(keys, strings.TrimSpace(out))
			mu.Unlock()
		}
		return true
	})
	select {
	case <-enough:
	case <-time.After(2 * time.Minute):
		t.Fatalf("6 creates did not succeed within 2 minutes: %s", a.logs())
	}
	a.kill() // mid-burst: creates are in flight
	close(stop)
	wg.Wait()

	b := serve(t, home, "local")
	mu.Lock()
	ackedNow, keysNow := append([]string(nil), acked...), append([]string(nil), keys...)
	mu.Unlock()
	var list struct{ Sandboxes []struct{ ID string } }
	if code := call(t, "GET", b.url+"/v1/sandboxes", key, nil, &list); code != 200 {
		t.Fatalf("list after restart: %d", code)
	}
	listed := map[string]bool{}
	for _, sb := range list.Sandboxes {
		listed[sb.ID] = true
	}
	for _, id := range ackedNow {
		if !listed[id] {
			t.Errorf("sandbox %s was acknowledged, and is gone after kill -9 and restart", id)
			continue
		}
		var res struct{ ExitCode int }
		if code := call(t, "POST", b.url+"/v1/sandboxes/"+id+"/run", key, map[string]string{"command": "true"}, &res); code != 200 || res.ExitCode != 0 {
			t.Errorf("sandbox %s after restart: %d %+v", id, code, res)
		}
	}
	for _, k := range keysNow {
		if code := call(t, "GET", b.url+"/v1/sandboxes", k, nil, nil); code != 200 {
			t.Errorf("a key printed by `tupper keys create` during the burst is refused after the restart: %d", code)
		}
	}
	var hooks struct{ Webhooks []struct{ ID string } }
	if code := call(t, "GET", b.url+"/v1/webhooks", key, nil, &hooks); code != 200 || len(hooks.Webhooks) != 1 || hooks.Webhooks[0].ID != wh.ID {
		t.Errorf("webhooks after restart: %d %+v, want %s", code, hooks, wh.ID)
	}
	var evs struct{ Events []store.Event }
	if code := call(t, "GET", b.url+"/v1/events?limit=1000", key, nil, &evs); code != 200 {
		t.Fatalf("events: %d", code)
	}
	created := map[string]bool{}
	for _, e := range evs.Events {
		if e.Type == "sandbox.created" {
			created[e.SandboxID] = true
		}
	}
	for _, id := range ackedNow {
		// The event is stored after the record, in a transaction of its own (see
		// TestPostgresGoesAway): a kill between the two would lose it, silently.
		if !created[id] {
			t.Logf("sandbox %s was acknowledged and has no sandbox.created event", id)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		var missing []string
		for _, e := range evs.Events {
			if !delivered[e.ID] {
				missing = append(missing, e.ID)
			}
		}
		mu.Unlock()
		if len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("events never delivered after kill -9 and restart: %v\n%s", missing, b.logs())
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("%d sandboxes and %d keys acknowledged before kill -9; %d sandboxes listed, %d events", len(ackedNow), len(keysNow), len(listed), len(evs.Events))
}

// workers starts n goroutines (counted in wg) that call f(worker, i) for i = 0, 1, … until
// stop is closed or f returns false.
func workers(wg *sync.WaitGroup, stop <-chan struct{}, n int, f func(w, i int) bool) {
	for w := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if !f(w, i) {
					return
				}
			}
		}()
	}
}
