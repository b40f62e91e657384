package audit

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/tupper-dev/tupper/internal/testenv"
	"github.com/tupper-dev/tupper/store"
)

func openStore(t *testing.T) *store.Store {
	t.Helper()
	spec := t.TempDir()
	if testenv.PostgresStore() {
		spec = testenv.PostgresDB(t)
	}
	st, err := store.OpenURL(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// Close writes every entry queued before it returns; Flush every entry queued before it.
func TestCloseAndFlushWriteEverything(t *testing.T) {
	st := openStore(t)
	r := New(st, slog.New(slog.DiscardHandler))
	for range 3000 {
		r.Add(store.AuditEntry{API: "rest", Action: "sandbox.exec", Result: "ok"})
	}
	if err := r.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got, _ := st.Audit(context.Background(), store.AuditFilter{Limit: store.MaxAuditPage}); len(got) != store.MaxAuditPage {
		t.Fatalf("after Flush: %d entries on the first page", len(got))
	}
	for range 5000 {
		r.Add(store.AuditEntry{API: "rest", Action: "file.write", Result: "ok"})
	}
	r.Close()
	r.Close() // idempotent
	n := 0
	for f := (store.AuditFilter{Action: "file.write"}); ; {
		page, err := st.Audit(context.Background(), f)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		n += len(page)
		f.After = page[len(page)-1].ID
	}
	if n != 5000 {
		t.Errorf("after Close: %d of 5000 entries written", n)
	}
	// After Close an entry is still written, directly.
	r.Add(store.AuditEntry{API: "rest", Action: "late", Result: "ok"})
	if got, _ := st.Audit(context.Background(), store.AuditFilter{Action: "late"}); len(got) != 1 {
		t.Errorf("an entry added after Close: %d written", len(got))
	}
}

// Wrap records the status as the result, the path's target or the one the handler names,
// and nothing for a call no one is named for.
func TestWrap(t *testing.T) {
	st := openStore(t)
	r := New(st, slog.New(slog.DiscardHandler))
	defer r.Close()
	serve := func(pattern, path string, c *Caller, h http.HandlerFunc) {
		mux := http.NewServeMux()
		mux.HandleFunc(pattern, func(w http.ResponseWriter, req *http.Request) { r.Wrap(w, req, "rest", "x.y", c, h) })
		req := httptest.NewRequest("POST", path, nil)
		req.RemoteAddr = "192.0.2.7:5555"
		mux.ServeHTTP(httptest.NewRecorder(), req)
	}
	key := &Caller{KeyID: "key_a", Via: "key"}
	serve("POST /v1/sandboxes/{id}/x", "/v1/sandboxes/sb1/x", key, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusConflict) })
	serve("POST /v1/x", "/v1/x", key, func(w http.ResponseWriter, req *http.Request) { SetTarget(req.Context(), "made1") })
	serve("POST /v1/anon", "/v1/anon", nil, func(w http.ResponseWriter, _ *http.Request) {})
	serve("POST /v1/signed", "/v1/signed", nil, func(w http.ResponseWriter, req *http.Request) {
		SetCaller(req.Context(), Caller{SandboxID: "sb1", Via: "signed"})
		w.Write([]byte("done"))
	})
	if err := r.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	got, err := st.Audit(context.Background(), store.AuditFilter{})
	if err != nil || len(got) != 3 {
		t.Fatalf("%d entries, %v: %+v", len(got), err, got)
	}
	want := []struct{ target, result, via string }{{"sb1", "conflict", "key"}, {"made1", "ok", "key"}, {"", "ok", "signed"}}
	for i, w := range want {
		e := got[i]
		if e.Target != w.target || e.Result != w.result || e.Via != w.via || e.Source != "192.0.2.7" || e.Action != "x.y" {
			t.Errorf("entry %d = %+v; want target %q, result %q, via %q from 192.0.2.7", i, e, w.target, w.result, w.via)
		}
	}
}
