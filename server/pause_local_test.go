//go:build linux

package server_test

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tupper-dev/tupper/internal/testenv"
	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/server/servertest"
)

// onTimeout pause and autoResume over the native API on a real runsc sandbox: at its
// deadline the reaper pauses it (its memory saved to disk: the provider reports it paused
// and it declares pause-frees-memory) instead of destroying it, it has no deadline while
// paused, and a command through its API resumes it with its processes running on and its
// timeout given again; paused once more, a request to a preview port resumes it too.
func TestOnTimeoutPauseAutoResume(t *testing.T) {
	testenv.RequireBinary(t, "runsc")
	prov := servertest.Local(t, 72)
	srv := servertest.Start(t, prov, "")
	ctx := context.Background()
	type box struct {
		ID, Token, State, OnTimeout string
		AutoResume                  bool
		Deadline                    time.Time
		Capabilities                []string
	}
	var sb box
	if code := call(t, "POST", srv.URL+"/v1/sandboxes", srv.Key, map[string]any{
		"network": "none", "runtime": "runsc", "timeoutMs": 120_000, "onTimeout": "pause", "autoResume": true,
	}, &sb); code != 201 || sb.OnTimeout != "pause" || !sb.AutoResume {
		t.Fatalf("create: %d %+v", code, sb)
	}
	if code := call(t, "POST", srv.URL+"/v1/sandboxes", srv.Key, map[string]any{"autoResume": true}, nil); code != 400 {
		t.Errorf("autoResume without onTimeout pause: %d, want 400", code)
	}
	get := func() box {
		t.Helper()
		var b box
		if code := call(t, "GET", srv.URL+"/v1/sandboxes/"+sb.ID, srv.Key, nil, &b); code != 200 {
			t.Fatalf("get: %d", code)
		}
		return b
	}
	runOut := func(cmd string) string {
		t.Helper()
		var res struct {
			Stdout   string
			ExitCode int
		}
		if code := call(t, "POST", srv.URL+"/v1/sandboxes/"+sb.ID+"/run", sb.Token, map[string]any{"command": cmd}, &res); code != 200 || res.ExitCode != 0 {
			t.Fatalf("run %q: %d %+v", cmd, code, res)
		}
		return strings.TrimSpace(res.Stdout)
	}
	runOut(`(n=0; while :; do n=$((n+1)); echo $n > /workspace/t.new; mv /workspace/t.new /workspace/t; sleep 0.05; done) >/dev/null 2>&1 &
perl -MIO::Socket::INET -e '$s = IO::Socket::INET->new(LocalPort => 8080, Listen => 5, ReuseAddr => 1) or die; open(F, ">/tmp/listening"); close F; while (1) { $c = $s->accept or next; while (<$c>) { last if /^\r?$/ } print $c "HTTP/1.0 200 OK\r\nContent-Length: 4\r\n\r\npong"; close $c }' >/dev/null 2>&1 &
i=0; until [ -e /tmp/listening ]; do i=$((i+1)); [ $i -lt 300 ] || exit 1; sleep 0.1; done`)
	counter := func() int {
		n, _ := strconv.Atoi(runOut("cat /workspace/t"))
		return n
	}

	// The deadline comes; the reaper pauses it.
	if code := call(t, "POST", srv.URL+"/v1/sandboxes/"+sb.ID+"/timeout", srv.Key, map[string]any{"timeoutMs": 500}, nil); code >= 300 {
		t.Fatalf("set timeout: %d", code)
	}
	before := counter()
	time.Sleep(time.Second)
	if err := srv.Server.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	b := get()
	if b.State != string(provider.StatePaused) || !b.Deadline.IsZero() {
		t.Fatalf("past its deadline: state %s, deadline %v; want paused without a deadline", b.State, b.Deadline)
	}
	inst, err := prov.Connect(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	freed := inst.(provider.CapabilityReporter).Capabilities().Has(provider.CapPauseFreesMemory)
	inst.Close()
	if !freed {
		t.Errorf("a runsc sandbox with network none lacks %s", provider.CapPauseFreesMemory)
	}
	// Reconciles later leave a paused sandbox alone.
	if err := srv.Server.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if b := get(); b.State != string(provider.StatePaused) {
		t.Fatalf("a second reconcile: state %s", b.State)
	}

	// A command through its API resumes it; its counter runs on from where it was.
	n1 := counter()
	if n1 < before {
		t.Errorf("after the resume the counter is %d, was %d", n1, before)
	}
	b = get()
	if b.State != string(provider.StateRunning) || b.Deadline.Before(time.Now().Add(time.Minute)) {
		t.Errorf("resumed by use: state %s, deadline %v; want running with its 2 minutes again", b.State, b.Deadline)
	}
	deadline := time.Now().Add(30 * time.Second)
	for counter() <= n1 {
		if time.Now().After(deadline) {
			t.Fatalf("the counter stopped after the resume (at %d)", n1)
		}
		time.Sleep(100 * time.Millisecond)
	}

	// Paused again, a request to its preview port resumes it.
	if code := call(t, "POST", srv.URL+"/v1/sandboxes/"+sb.ID+"/pause", srv.Key, nil, nil); code != 204 {
		t.Fatalf("pause: %d", code)
	}
	if b := get(); b.State != string(provider.StatePaused) {
		t.Fatalf("after pause: %s", b.State)
	}
	req, _ := http.NewRequest("GET", srv.URL+"/v1/sandboxes/"+sb.ID+"/proxy/8080/", nil)
	req.Header.Set("Authorization", "Bearer "+sb.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "pong" {
		t.Errorf("the preview of a paused sandbox: %d %q", resp.StatusCode, body)
	}
	if b := get(); b.State != string(provider.StateRunning) {
		t.Errorf("after a preview request: %s, want running", b.State)
	}
}
