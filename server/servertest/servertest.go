//go:build linux

// Package servertest starts tupper servers for tests: in-process on loopback, over the local
// provider when the machine can run it (root and runc) and the memory provider otherwise;
// under CI=true the local provider is required, so coverage never disappears silently.
package servertest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/tupper-dev/tupper/internal/testenv"
	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/providers/local"
	"github.com/tupper-dev/tupper/providers/memory"
	"github.com/tupper-dev/tupper/server"
	"github.com/tupper-dev/tupper/store"
)

// Binary returns a static tupper binary: testenv.TupperBinary.
func Binary(t testing.TB) string { return testenv.TupperBinary(t) }

// CanRunLocal reports whether the local provider can run here (root and runc), and why not.
func CanRunLocal() (bool, string) {
	if os.Geteuid() != 0 {
		return false, "needs root"
	}
	if _, err := exec.LookPath("runc"); err != nil {
		return false, "runc not found on PATH"
	}
	return true, ""
}

// RequireLocal skips the test loudly (failing under CI=true) when this machine cannot run the
// local provider (CanRunLocal); needs says what needs it.
func RequireLocal(t testing.TB, needs string) {
	t.Helper()
	if ok, why := CanRunLocal(); !ok {
		testenv.Skip(t, needs+": "+why)
	}
}

// LocalConfig is a local provider configuration of its own for a test: its own home, and
// its own subnet and bridge numbered n (1..200), so packages testing at once never meet.
func LocalConfig(t testing.TB, n int) local.Config {
	t.Helper()
	home := t.TempDir()
	// A user namespace's root must traverse t.TempDir's private parent.
	if err := os.Chmod(filepath.Dir(home), 0o711); err != nil {
		t.Fatal(err)
	}
	return local.Config{
		Home:      home,
		AgentPath: Binary(t),
		Subnet:    fmt.Sprintf("10.216.%d.0/24", n),
		Bridge:    fmt.Sprintf("tuppersrv%d", n),
	}
}

// Provider returns the provider server tests run on: local (runc) when this machine can run
// it, else memory (skipping nothing: the memory provider runs every server feature but
// isolation). TUPPER_SERVERTEST_PROVIDER=memory picks memory on a developer's machine
// (never under CI). Under CI=true a machine that cannot run local fails the test. n numbers the
// local provider's network (see LocalConfig). It logs which provider it picked.
func Provider(t testing.TB, n int) provider.Provider {
	t.Helper()
	ok, why := CanRunLocal()
	if os.Getenv("TUPPER_SERVERTEST_PROVIDER") == "memory" && !testenv.InCI() {
		ok, why = false, "TUPPER_SERVERTEST_PROVIDER=memory"
	}
	if !ok {
		if testenv.InCI() {
			t.Fatalf("the local provider cannot run under CI=true: %s", why)
		}
		t.Logf("server tests run on the memory provider (local: %s)", why)
		return memory.New()
	}
	p, err := local.New(LocalConfig(t, n))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Available(context.Background()); err != nil {
		if testenv.InCI() {
			t.Fatalf("the local provider cannot run under CI=true: %v", err)
		}
		t.Logf("server tests run on the memory provider (local: %v)", err)
		return memory.New()
	}
	t.Logf("server tests run on the local provider (runc)")
	destroyAtEnd(t, p)
	return p
}

// Local returns a local provider of its own for a test that needs that provider (LocalConfig
// numbered n), or skips the test loudly (failing under CI=true) when this machine cannot run
// it. Its sandboxes are destroyed when the test ends.
func Local(t testing.TB, n int) *local.Provider {
	t.Helper()
	return LocalWith(t, n, nil)
}

// LocalWith is Local with its configuration changed by mod first (nil: none), such as a
// warm pool.
func LocalWith(t testing.TB, n int, mod func(*local.Config)) *local.Provider {
	t.Helper()
	RequireLocal(t, "local provider")
	cfg := LocalConfig(t, n)
	if mod != nil {
		mod(&cfg)
	}
	p, err := local.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Available(context.Background()); err != nil {
		testenv.Skip(t, "local provider: "+err.Error())
	}
	destroyAtEnd(t, p)
	return p
}

// destroyAtEnd destroys p's sandboxes and closes it when the test ends.
func destroyAtEnd(t testing.TB, p *local.Provider) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		infos, _ := p.List(ctx, provider.ListFilter{})
		for _, in := range infos {
			_ = p.Destroy(ctx, in.ID)
		}
		p.Close()
	})
}

// Server is a running in-process server.
type Server struct {
	URL    string // http://127.0.0.1:PORT
	Key    string // an API key
	Server *server.Server
	Store  *store.Store
}

// Start serves prov on 127.0.0.1 with a fresh store in dir ("" is a temporary directory)
// and an API key, until the test ends, as tupper serve does (Server.HTTPServer, with its
// timeouts). Its BaseURL is its loopback address unless mod sets another.
//
// With TUPPER_TEST_STORE=postgres (testenv.PostgresStore) the store is a new PostgreSQL
// database on $TUPPER_TEST_POSTGRES's cluster instead, one per dir: a server started again
// on the same dir finds the same database.
func Start(t testing.TB, prov provider.Provider, dir string, mod ...func(*server.Config)) *Server {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	ctx := context.Background()
	st, err := store.OpenURL(ctx, testenv.StoreSpec(t, dir))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := server.Config{Provider: prov, Store: st, BaseURL: "http://" + ln.Addr().String()}
	for _, m := range mod {
		m(&cfg)
	}
	srv, err := server.New(ctx, cfg)
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	hs := srv.HTTPServer()
	rctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = hs.Serve(ln) }()
	go func() { defer wg.Done(); srv.Run(rctx) }()
	t.Cleanup(func() {
		cancel()
		sctx, c2 := context.WithTimeout(context.Background(), 10*time.Second)
		defer c2()
		_ = hs.Shutdown(sctx)
		wg.Wait()
		srv.Close()
		st.Close()
	})
	_, key, err := st.CreateKey(ctx, "servertest")
	if err != nil {
		t.Fatal(err)
	}
	return &Server{URL: "http://" + ln.Addr().String(), Key: key, Server: srv, Store: st}
}
