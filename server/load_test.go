//go:build linux

package server_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/providers/remote"
	"github.com/tupper-dev/tupper/sandbox"
	"github.com/tupper-dev/tupper/server"
	"github.com/tupper-dev/tupper/server/servertest"
	"github.com/tupper-dev/tupper/store"
)

// instance is one server process's worth of state, restartable on the same address.
type instance struct {
	srv  *server.Server
	st   *store.Store
	hs   *http.Server
	stop context.CancelFunc
	wg   sync.WaitGroup
}

func startOn(t *testing.T, prov provider.Provider, dir, addr string) (*instance, string) {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	var ln net.Listener
	for start := time.Now(); ; time.Sleep(20 * time.Millisecond) {
		if ln, err = net.Listen("tcp", addr); err == nil || time.Since(start) > 5*time.Second {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(ctx, server.Config{Provider: prov, Store: st, BaseURL: "http://" + ln.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	in := &instance{srv: srv, st: st, hs: srv.HTTPServer()}
	rctx, cancel := context.WithCancel(ctx)
	in.stop = cancel
	in.wg.Add(2)
	go func() { defer in.wg.Done(); _ = in.hs.Serve(ln) }()
	go func() { defer in.wg.Done(); srv.Run(rctx) }()
	return in, ln.Addr().String()
}

func (in *instance) close() {
	in.stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = in.hs.Shutdown(ctx)
	in.wg.Wait()
	in.srv.Close()
	in.st.Close()
}

func countFDs() int {
	ents, _ := os.ReadDir("/proc/self/fd")
	return len(ents)
}

// TestLoadAndRestart: 100 clients run commands across 20 sandboxes through the Go SDK over
// the API for a few seconds, while the server is restarted (a new server on the same store,
// provider and address). No command fails, every sandbox is still there and usable after,
// and once everything is destroyed no sandbox, goroutine or file descriptor is left over.
func TestLoadAndRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("load test")
	}
	prov := servertest.Provider(t, 2)
	dir := t.TempDir()
	ctx := context.Background()
	baseG, baseFD := runtime.NumGoroutine(), countFDs()

	srv, addr := startOn(t, prov, dir, "127.0.0.1:0")
	_, key, err := srv.st.CreateKey(ctx, "load")
	if err != nil {
		t.Fatal(err)
	}
	rp := remote.New(remote.Config{URL: "http://" + addr, APIKey: key})

	const nBoxes, nClients = 20, 100
	boxes := make([]*sandbox.Sandbox, nBoxes)
	var cwg sync.WaitGroup
	cerrs := make(chan error, nBoxes)
	for i := range boxes {
		cwg.Add(1)
		go func() {
			defer cwg.Done()
			b, err := sandbox.Create(ctx, rp, sandbox.CreateOptions{Network: sandbox.NetworkNone, Labels: map[string]string{"load": "1"}})
			if err != nil {
				cerrs <- err
				return
			}
			boxes[i] = b
		}()
	}
	cwg.Wait()
	close(cerrs)
	for err := range cerrs {
		t.Fatalf("create: %v", err)
	}

	var (
		runs, retries atomic.Int64
		emu           sync.Mutex
		errs          []error
	)
	deadline := time.Now().Add(3 * time.Second)
	var wg sync.WaitGroup
	for c := range nClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; time.Now().Before(deadline); n++ {
				b := boxes[(c+n)%nBoxes]
				want := fmt.Sprintf("%d-%d", c, n)
				var res *sandbox.RunResult
				var err error
				for try := 0; ; try++ {
					rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
					res, err = b.Run(rctx, "echo "+want, sandbox.RunOptions{})
					cancel()
					// While the server restarts, the connection may be refused or reset:
					// that is the one error a client retries.
					if err != nil && errors.Is(err, sandbox.CodeUnavailable) && try < 100 {
						retries.Add(1)
						time.Sleep(50 * time.Millisecond)
						continue
					}
					break
				}
				if err == nil && (!res.OK || res.Stdout != want+"\n") {
					err = fmt.Errorf("run in %s: %+v", b.ID, res)
				}
				if err != nil {
					emu.Lock()
					errs = append(errs, err)
					emu.Unlock()
					return
				}
				runs.Add(1)
			}
		}()
	}
	// Restart the server under load, halfway.
	time.Sleep(1500 * time.Millisecond)
	srv.close()
	srv, _ = startOn(t, prov, dir, addr)
	wg.Wait()
	for _, err := range errs {
		t.Error(err)
	}
	t.Logf("%d runs by %d clients on %d sandboxes in 3 s (%d retries across the restart)", runs.Load(), nClients, nBoxes, retries.Load())
	if runs.Load() < nClients {
		t.Errorf("only %d runs", runs.Load())
	}

	// Every sandbox survived the restart.
	infos, err := sandbox.List(ctx, rp, sandbox.ListOptions{Labels: map[string]string{"load": "1"}})
	if err != nil || len(infos) != nBoxes {
		t.Fatalf("after the restart %d sandboxes are listed (%v); want %d", len(infos), err, nBoxes)
	}
	for _, b := range boxes {
		if err := b.Destroy(ctx); err != nil {
			t.Errorf("destroy %s: %v", b.ID, err)
		}
	}
	if left, _ := prov.List(ctx, provider.ListFilter{}); len(left) != 0 {
		t.Errorf("%d sandboxes left in the provider", len(left))
	}
	srv.close()
	rp.CloseIdleConnections()
	// The provider keeps descriptors of its own for sandboxes to come (user namespaces for
	// idmapped layers); closing it releases them.
	if c, ok := prov.(interface{ Close() error }); ok {
		c.Close()
	}

	// Goroutines and file descriptors return to where they were.
	var g, fd int
	for start := time.Now(); time.Since(start) < 10*time.Second; time.Sleep(100 * time.Millisecond) {
		g, fd = runtime.NumGoroutine(), countFDs()
		if g <= baseG+5 && fd <= baseFD+5 {
			break
		}
	}
	if g > baseG+5 {
		buf := make([]byte, 1<<20)
		t.Errorf("goroutines: %d before, %d after\n%s", baseG, g, buf[:runtime.Stack(buf, true)])
	}
	if fd > baseFD+5 {
		t.Errorf("file descriptors: %d before, %d after", baseFD, fd)
	}
}
