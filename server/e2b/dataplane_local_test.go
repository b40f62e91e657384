//go:build linux

package e2b_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tupper-dev/tupper/server/e2b"
	"github.com/tupper-dev/tupper/server/servertest"
)

// localServer is a server on the local provider: the envd data plane needs real sandboxes.
func localServer(t *testing.T) *servertest.Server {
	t.Helper()
	servertest.RequireLocal(t, "the envd data plane runs real sandboxes")
	return servertest.Start(t, servertest.Provider(t, 41), "")
}

// nativeRun runs a command through the native API with the account key.
func nativeRun(t *testing.T, srv *servertest.Server, id, command string) {
	t.Helper()
	var res struct {
		ExitCode int
		Output   string
	}
	body, _ := json.Marshal(map[string]string{"command": command})
	if r := call(t, "POST", srv.URL+"/v1/sandboxes/"+id+"/run", "", string(body), map[string]string{"Authorization": "Bearer " + srv.Key}, &res); r.StatusCode != 200 || res.ExitCode != 0 {
		t.Fatalf("run %q: %d %+v", command, r.StatusCode, res)
	}
}

func get(t *testing.T, rawURL string, hdr map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), "GET", rawURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// The data plane passes on envd's API only. The agent's own endpoints (the deadline that
// holds the idle timeout, the tunnel to the sandbox's ports) are the server's: with the envd
// token a client used to clear a sandbox's idle timeout, so it outlived it.
func TestAgentRoutes(t *testing.T) {
	srv := localServer(t)
	var sb struct{ ID string }
	if r := call(t, "POST", srv.URL+"/v1/sandboxes", "", `{"idleTimeoutMs":3000}`, map[string]string{"Authorization": "Bearer " + srv.Key}, &sb); r.StatusCode != 201 {
		t.Fatalf("create: %d", r.StatusCode)
	}
	var detail struct{ EnvdAccessToken string }
	if r := call(t, "GET", srv.URL+"/sandboxes/"+sb.ID, srv.Key, "", nil, &detail); r.StatusCode != 200 || detail.EnvdAccessToken == "" {
		t.Fatalf("E2B detail: %d %+v", r.StatusCode, detail)
	}
	hdr := map[string]string{"E2b-Sandbox-Id": sb.ID, "X-Access-Token": detail.EnvdAccessToken}
	for _, op := range []struct{ method, path, body string }{
		{"POST", "/tupper/deadline", `{"deadlineUnix":0,"idleTimeoutSeconds":0}`},
		{"GET", "/tupper/busy", ""},
		{"GET", "/tupper/tunnel?port=22", ""},
	} {
		if r := call(t, op.method, srv.URL+op.path, "", op.body, hdr, nil); r.StatusCode != 404 {
			t.Errorf("%s %s through the data plane: %d, want 404", op.method, op.path, r.StatusCode)
		}
	}
	// envd's own API still answers.
	if r := call(t, "GET", srv.URL+"/health", "", "", hdr, nil); r.StatusCode != 204 {
		t.Errorf("GET /health: %d", r.StatusCode)
	}
	// The idle timeout still holds: the sandbox goes once idle for 3 s.
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := call(t, "GET", srv.URL+"/v1/sandboxes/"+sb.ID, "", "", map[string]string{"Authorization": "Bearer " + srv.Key}, nil)
		if r.StatusCode == 404 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the sandbox outlived its 3 s idle timeout by 30 s: %d", r.StatusCode)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// A signed /files URL acts as the user it was signed for, or as the default user ("user")
// when it names none, as envd does: an Authorization header the holder adds does not pick
// another. It used to: a URL signed for the relative path "f" with no user read /root/f
// with "Authorization: Basic root:".
func TestSignedUser(t *testing.T) {
	srv := localServer(t)
	var sb struct{ SandboxID, EnvdAccessToken string }
	if r := call(t, "POST", srv.URL+"/v2/sandboxes", srv.Key, `{"templateID":"base","timeout":300}`, nil, &sb); r.StatusCode != 201 {
		t.Fatalf("create: %d", r.StatusCode)
	}
	nativeRun(t, srv, sb.SandboxID, "mkdir -p /home/user /root && echo user-file > /home/user/f && echo root-file > /root/f && chmod 600 /root/f")
	sign := func(path, user string) string {
		q := url.Values{"path": {path}, "signature": {e2b.Signature(path, "read", user, sb.EnvdAccessToken, 0)}}
		if user != "" {
			q.Set("username", user)
		}
		return srv.URL + "/files?" + q.Encode()
	}
	asRoot := "Basic " + "cm9vdDo=" // root:
	for _, c := range []struct {
		name, url string
		hdr       map[string]string
		want      string
	}{
		{"no user", sign("f", ""), nil, "user-file\n"},
		{"no user, Basic root added", sign("f", ""), map[string]string{"Authorization": asRoot}, "user-file\n"},
		{"signed for root", sign("f", "root"), nil, "root-file\n"},
		{"signed for user, Basic root added", sign("f", "user"), map[string]string{"Authorization": asRoot}, "user-file\n"},
	} {
		hdr := map[string]string{"E2b-Sandbox-Id": sb.SandboxID}
		for k, v := range c.hdr {
			hdr[k] = v
		}
		if code, body := get(t, c.url, hdr); code != 200 || body != c.want {
			t.Errorf("%s: %d %q, want 200 %q", c.name, code, body, c.want)
		}
	}
}

// A header-less signed /files URL (what E2B's SDKs make with E2B_SANDBOX_URL set) names no
// sandbox: the server finds the one whose token signed it, among several, and serves it as
// that sandbox; with E2b-Sandbox-Id the same URL works too, and names another sandbox in
// vain. A URL no live sandbox signed is refused.
func TestSignedNamed(t *testing.T) {
	srv := localServer(t)
	var sbs [2]struct{ SandboxID, EnvdAccessToken string }
	for i := range sbs {
		if r := call(t, "POST", srv.URL+"/v2/sandboxes", srv.Key, `{"templateID":"base","timeout":300}`, nil, &sbs[i]); r.StatusCode != 201 {
			t.Fatalf("create: %d", r.StatusCode)
		}
		nativeRun(t, srv, sbs[i].SandboxID, fmt.Sprintf("echo signed-%d > /home/user/s.txt", i))
	}
	for i, sb := range sbs {
		q := url.Values{"path": {"/home/user/s.txt"}, "signature": {e2b.Signature("/home/user/s.txt", "read", "", sb.EnvdAccessToken, 0)}}
		u := srv.URL + "/files?" + q.Encode()
		want := fmt.Sprintf("signed-%d\n", i)
		if code, body := get(t, u, nil); code != 200 || body != want {
			t.Errorf("header-less signed URL of sandbox %d: %d %q, want %q", i, code, body, want)
		}
		if code, body := get(t, u, map[string]string{"E2b-Sandbox-Id": sb.SandboxID}); code != 200 || body != want {
			t.Errorf("with E2b-Sandbox-Id: %d %q", code, body)
		}
		if code, _ := get(t, u, map[string]string{"E2b-Sandbox-Id": sbs[1-i].SandboxID}); code != 401 {
			t.Errorf("signed by sandbox %d, sent naming the other: %d, want 401", i, code)
		}
	}
	q := url.Values{"path": {"/home/user/s.txt"}, "signature": {e2b.Signature("/home/user/s.txt", "read", "", "sbt_"+strings.Repeat("0", 40), 0)}}
	if code, body := get(t, srv.URL+"/files?"+q.Encode(), nil); code != 401 || !strings.Contains(body, "invalid signature") {
		t.Errorf("a URL no sandbox signed: %d %s", code, body)
	}
}

// GET /sandboxes/{id}/metrics reads a script's output from the sandbox. Sandbox code can
// write into that output (a root process there opens the script's stdout through
// /proc/PID/fd/1, and stops the script meanwhile): here 256 MiB of it. The server reads at most maxMetricsOutput and
// answers an error; it used to buffer all of it.
func TestMetricsBounded(t *testing.T) {
	srv := localServer(t)
	var sb struct{ SandboxID string }
	if r := call(t, "POST", srv.URL+"/v2/sandboxes", srv.Key, `{"templateID":"base","timeout":300}`, nil, &sb); r.StatusCode != 201 {
		t.Fatalf("create: %d", r.StatusCode)
	}
	const flood = 256 << 20
	// The attacker stops the script while it floods, so the script is still running (and
	// its output still read) when the flood ends. It finds the script's "sleep 0.2" with
	// shell builtins only: a fork per process scanned made a scan outlast the 0.2 s window
	// on a loaded machine, and the attacker missed every sample. (read stops at the NUL
	// after "sleep" in dash; bash drops the NUL.)
	attacker := `for i in $(seq 1 20000); do
  for d in /proc/[0-9]*; do
    a=; read -r a < $d/cmdline 2>/dev/null
    if [ "$a" = sleep ] || [ "$a" = sleep0.2 ]; then
      pp=$(sed -n 's/^PPid:[[:space:]]*//p' $d/status 2>/dev/null)
      [ -n "$pp" ] && kill -STOP $pp 2>/dev/null
      ( echo found > /tmp/flooded; head -c ` + strconv.Itoa(flood) + ` /dev/zero ) 2>/dev/null > $d/fd/1
      [ -n "$pp" ] && kill -CONT $pp 2>/dev/null
      [ -e /tmp/flooded ] && exit 0
    fi
  done
done`
	body, _ := json.Marshal(map[string]string{"command": attacker, "name": "flood"})
	if r := call(t, "POST", srv.URL+"/v1/sandboxes/"+sb.SandboxID+"/processes", "", string(body), map[string]string{"Authorization": "Bearer " + srv.Key}, nil); r.StatusCode != 201 && r.StatusCode != 200 {
		t.Fatalf("start the attacker: %d", r.StatusCode)
	}
	for try := 0; ; try++ {
		// The peak of the server's heap (it runs in this process) while it reads the metrics.
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		base := ms.HeapAlloc
		var peak atomic.Uint64
		stop := make(chan struct{})
		sampled := make(chan struct{})
		go func() {
			defer close(sampled)
			for {
				var m runtime.MemStats
				runtime.ReadMemStats(&m)
				if m.HeapAlloc > peak.Load() {
					peak.Store(m.HeapAlloc)
				}
				select {
				case <-stop:
					return
				case <-time.After(5 * time.Millisecond):
				}
			}
		}()
		var raw json.RawMessage
		r := call(t, "GET", srv.URL+"/sandboxes/"+sb.SandboxID+"/metrics", srv.Key, "", nil, &raw)
		close(stop)
		<-sampled
		var e struct{ Message string }
		_ = json.Unmarshal(raw, &e)
		var res struct{ ExitCode int }
		flooded, _ := json.Marshal(map[string]string{"command": "test -e /tmp/flooded"})
		call(t, "POST", srv.URL+"/v1/sandboxes/"+sb.SandboxID+"/run", "", string(flooded), map[string]string{"Authorization": "Bearer " + srv.Key}, &res)
		if res.ExitCode != 0 {
			if try == 20 {
				var logs struct{ Text string }
				call(t, "GET", srv.URL+"/v1/sandboxes/"+sb.SandboxID+"/processes/flood/logs", "", "", map[string]string{"Authorization": "Bearer " + srv.Key}, &logs)
				t.Fatalf("the attacker never flooded the metrics script's output: %s", logs.Text)
			}
			continue // the attacker missed this sample
		}
		grew := max(peak.Load(), base) - base
		t.Logf("metrics under a %d MiB flood: %d %q; the heap grew by %d MiB at most", flood>>20, r.StatusCode, e.Message, grew>>20)
		if r.StatusCode == 200 || !strings.Contains(e.Message, "metrics are more than") {
			t.Errorf("metrics under a flood: %d %q, want an error saying the output was too large", r.StatusCode, e.Message)
		}
		if grew > flood/8 {
			t.Errorf("the server's heap grew by %d MiB reading the metrics, for a %d MiB flood", grew>>20, flood>>20)
		}
		return
	}
}
