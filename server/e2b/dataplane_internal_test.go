package e2b

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/store"
)

// TestProxyKeepsServerStreams sends many server-streaming requests through the data-plane
// proxy to an agent that answers with a start message as soon as it has read the request,
// and an event a little later, as the agent's WatchDir does. Every stream must arrive
// whole. Without full duplex the Go server closed the request body when the proxy wrote
// the response headers; the Transport, still finishing the request body, then dropped the
// connection to the agent, and some streams ended just after their start message.
func TestProxyKeepsServerStreams(t *testing.T) {
	start := envelope([]byte(`{"start":{}}`))
	event := envelope([]byte(`{"filesystem":{"name":"new.txt","type":"EVENT_TYPE_CREATE"}}`))
	end := append([]byte{2, 0, 0, 0, 2}, "{}"...)

	agent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			return
		}
		w.Header().Set("Content-Type", "application/connect+json")
		w.Write(start)
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
			return // the proxy's connection to us went away: the bug
		case <-time.After(5 * time.Millisecond):
		}
		w.Write(event)
		w.Write(end)
	}))
	defer agent.Close()

	s := &Server{log: slog.New(slog.DiscardHandler)}
	proxy := s.newProxy(func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", agent.Listener.Addr().String())
	})
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		proxy.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), sandboxKey{}, "sbx")))
	}))
	defer front.Close()

	want := append(append(append([]byte{}, start...), event...), end...)
	req := envelope([]byte(`{"path":"/home/user/watched"}`))
	const workers, perWorker = 16, 100
	var mu sync.Mutex
	var failures []string
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range perWorker {
				// A stream of its own, like the SDK's per-request fetch, and connections kept
				// for reuse as the SDK's dispatcher does.
				res, err := front.Client().Post(front.URL+"/filesystem.Filesystem/WatchDir", "application/connect+json", bytes.NewReader(req))
				var got []byte
				if err == nil {
					got, err = io.ReadAll(res.Body)
					res.Body.Close()
				}
				if err == nil && !bytes.Equal(got, want) {
					err = fmt.Errorf("got %q, want %q", got, want)
				}
				if err != nil {
					mu.Lock()
					failures = append(failures, fmt.Sprintf("stream %d: %v", i, err))
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if len(failures) > 0 {
		t.Fatalf("%d of %d streams were cut, e.g. %s", len(failures), workers*perWorker, failures[0])
	}
}

// A paused sandbox's data plane is answered from the store's record, at once, without
// reaching for the agent: a connection the proxy kept to it would be to a frozen agent,
// which never answers (the SDK's isRunning hung for its whole request timeout).
func TestPausedSandboxIsAnsweredWithoutTheAgent(t *testing.T) {
	ctx := t.Context()
	s, st := newMemoryServer(t)
	var dials atomic.Int32
	s.proxy = s.newProxy(func(context.Context, string, string) (net.Conn, error) {
		dials.Add(1)
		return nil, errors.New("no agent here")
	})
	if err := st.PutSandbox(ctx, store.Sandbox{ID: "abc", Provider: "memory", State: provider.StatePaused}, store.Hash(s.envdToken("abc"))); err != nil {
		t.Fatal(err)
	}
	health := func() (int, string) {
		req := httptest.NewRequest("GET", "/health", nil)
		req.Header.Set("E2b-Sandbox-Id", "abc")
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		var body struct{ Message string }
		_ = json.Unmarshal(rec.Body.Bytes(), &body)
		return rec.Code, body.Message
	}
	if code, msg := health(); code != 502 || msg != "The sandbox is paused" || dials.Load() != 0 {
		t.Errorf("paused: %d %q after %d dials, want 502 \"The sandbox is paused\" and none", code, msg, dials.Load())
	}
	// Running again: the request goes to the agent.
	if err := st.SetState(ctx, "abc", provider.StateRunning); err != nil {
		t.Fatal(err)
	}
	if code, _ := health(); code != 502 || dials.Load() == 0 {
		t.Errorf("running: %d after %d dials, want an attempt to reach the agent", code, dials.Load())
	}
}
