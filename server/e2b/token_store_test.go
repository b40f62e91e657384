package e2b

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/tupper-dev/tupper/providers/memory"
	"github.com/tupper-dev/tupper/store"
)

// The envd token of a sandbox is the same through every server on a store, until the store
// is found readable by other users: then its key is replaced and earlier tokens stop working.
func TestEnvdTokensAfterAnExposedStore(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	token := func() string {
		t.Helper()
		st, err := store.Open(ctx, dir)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		s, err := New(ctx, Config{Provider: memory.New(), Store: st})
		if err != nil {
			t.Fatal(err)
		}
		return s.envdToken("sbx")
	}
	first := token()
	if again := token(); again != first {
		t.Fatal("a restart changed the envd token")
	}
	if err := os.Chmod(filepath.Join(dir, store.FileName), 0o644); err != nil {
		t.Fatal(err)
	}
	rotated := token()
	if rotated == first {
		t.Fatal("the envd token survived a store that others could read")
	}
	if again := token(); again != rotated {
		t.Fatal("a clean restart changed the envd token")
	}
}

// Servers before this one recorded each envd token as a sandbox token of the native API.
// New forgets them, so the native API refuses them from the first request on.
func TestStoredEnvdTokensForgotten(t *testing.T) {
	ctx := context.Background()
	s, st := newMemoryServer(t)
	tok := s.envdToken("old")
	if err := st.PutSandbox(ctx, store.Sandbox{ID: "old", Provider: "memory"}, store.Hash(tok)); err != nil {
		t.Fatal(err)
	}
	if id, err := st.SandboxForToken(ctx, tok); err != nil || id != "old" {
		t.Fatalf("the planted token: %q %v", id, err)
	}
	if _, err := New(ctx, Config{Provider: memory.New(), Store: st}); err != nil {
		t.Fatal(err)
	}
	if id, err := st.SandboxForToken(ctx, tok); err == nil {
		t.Fatalf("the envd token is still a sandbox token of %q", id)
	}
}

// newMemoryServer is a Server on the memory provider with a store of its own, closed when
// the test ends.
func newMemoryServer(t *testing.T) (*Server, *store.Store) {
	t.Helper()
	st, err := store.Open(t.Context(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	s, err := New(t.Context(), Config{Provider: memory.New(), Store: st})
	if err != nil {
		t.Fatal(err)
	}
	return s, st
}

// signedSandbox finds the signer among the live records, reads the list at most once per
// signedScanListTTL unless this server recorded a sandbox since, and runs one search at a
// time: a second caller waits for its turn and gives up with its context.
func TestSignedSandboxScan(t *testing.T) {
	dir := t.TempDir()
	ctx := t.Context()
	st, err := store.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	s, err := New(ctx, Config{Provider: memory.New(), Store: st})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for _, id := range []string{"aaaaaaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbbbbbb"} {
		if err := st.PutSandbox(ctx, store.Sandbox{ID: id, Provider: "memory", CreatedAt: now}, nil); err != nil {
			t.Fatal(err)
		}
	}
	signed := func(id string, exp int64) url.Values {
		return url.Values{"path": {"/a"}, "signature_expiration": {strconv.FormatInt(exp, 10)},
			"signature": {Signature("/a", "read", "", s.envdToken(id), exp)}}
	}
	if id, err := s.signedSandbox(ctx, "GET", signed("bbbbbbbbbbbbbbbbbbbb", now.Unix()+60), now); err != nil || id != "bbbbbbbbbbbbbbbbbbbb" {
		t.Fatalf("signer: %q %v", id, err)
	}
	if _, err := s.signedSandbox(ctx, "GET", signed("bbbbbbbbbbbbbbbbbbbb", now.Unix()-1), now); err != errSignatureExpired {
		t.Fatalf("expired: %v", err)
	}
	if _, err := s.signedSandbox(ctx, "POST", signed("bbbbbbbbbbbbbbbbbbbb", now.Unix()+60), now); err != errSignatureInvalid {
		t.Fatalf("a read URL used to write: %v", err)
	}
	// A sandbox this server records within the list's lifetime is found at once: the list
	// is read again (a new sandbox's URLs work the moment it exists).
	if err := st.PutSandbox(ctx, store.Sandbox{ID: "cccccccccccccccccccc", Provider: "memory", CreatedAt: now}, nil); err != nil {
		t.Fatal(err)
	}
	q := signed("cccccccccccccccccccc", now.Unix()+60)
	if id, err := s.signedSandbox(ctx, "GET", q, now.Add(signedScanListTTL/4)); err != nil || id != "cccccccccccccccccccc" {
		t.Fatalf("a sandbox recorded since the list was read: %q %v", id, err)
	}
	// One another process records (here another Store on the same database) is found once
	// the list's lifetime is over.
	other, err := store.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := other.PutSandbox(ctx, store.Sandbox{ID: "dddddddddddddddddddd", Provider: "memory", CreatedAt: now}, nil); err != nil {
		t.Fatal(err)
	}
	q = signed("dddddddddddddddddddd", now.Unix()+60)
	if _, err := s.signedSandbox(ctx, "GET", q, now.Add(signedScanListTTL/2)); err != errSignatureInvalid {
		t.Fatalf("a sandbox another process recorded, within the list's lifetime: %v", err)
	}
	if id, err := s.signedSandbox(ctx, "GET", q, now.Add(2*signedScanListTTL)); err != nil || id != "dddddddddddddddddddd" {
		t.Fatalf("after the list's lifetime: %q %v", id, err)
	}
	// One search at a time.
	s.scan.turn <- struct{}{}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := s.signedSandbox(short, "GET", q, now); err != context.DeadlineExceeded {
		t.Fatalf("while another search runs: %v, want to wait and give up", err)
	}
	<-s.scan.turn
}
