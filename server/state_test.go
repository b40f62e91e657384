//go:build linux

package server_test

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tupper-dev/tupper/internal/testenv"
	"github.com/tupper-dev/tupper/server/servertest"
	"github.com/tupper-dev/tupper/store"
)

// The README's first steps, `tupper serve &` and at once `tupper keys create`, on a new state
// directory, many times over, with more key commands starting a few milliseconds apart: every
// process succeeds (none fails with SQLite's "database is locked"), and the server accepts
// every key.
func TestServeAndKeysOnANewStateDirectory(t *testing.T) {
	const rounds, keys = 50, 5
	for r := range rounds {
		home := filepath.Join(t.TempDir(), "state") // made by whichever process comes first
		srv := startServe(t, home, "memory")
		var (
			wg     sync.WaitGroup
			mu     sync.Mutex
			secret []string
		)
		for i := range keys {
			wg.Add(1)
			go func() {
				defer wg.Done()
				time.Sleep(time.Duration(i) * 2 * time.Millisecond)
				out, errOut, err := tupper(t, stateEnv(t, home), "keys", "create")
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					t.Errorf("round %d: keys create: %v: %s", r, err, errOut)
					return
				}
				secret = append(secret, strings.TrimSpace(out))
			}()
		}
		wg.Wait()
		if err := srv.waitServing(60 * time.Second); err != nil {
			t.Fatalf("round %d: %v", r, err)
		}
		if strings.Contains(srv.logs(), "database is locked") {
			t.Errorf("round %d: the server logged: %s", r, srv.logs())
		}
		for _, k := range secret {
			if code := call(t, "GET", srv.url+"/v1/sandboxes", k, nil, nil); code != http.StatusOK {
				t.Errorf("round %d: the server answers %d to a key made beside it", r, code)
			}
		}
		srv.kill()
		if t.Failed() {
			return
		}
	}
}

// A second `tupper serve` on a state directory in use stops at once with an error that names
// the first one, and leaves the first one serving. On a PostgreSQL store (which servers
// share), a second server joins, and both answer with the same keys.
func TestSecondServerRefused(t *testing.T) {
	home := t.TempDir()
	first := serve(t, home, "memory")
	key := newKey(t, home)
	if testenv.PostgresStore() {
		second := serve(t, home, "memory")
		for _, c := range []*child{first, second} {
			if code := call(t, "GET", c.url+"/v1/sandboxes", key, nil, nil); code != http.StatusOK {
				t.Errorf("a server on the shared store answers %d", code)
			}
		}
		return
	}
	start := time.Now()
	cmd := exec.Command(servertest.Binary(t), "serve", "--addr", "127.0.0.1:0", "--home", home, "--store", testenv.StoreSpec(t, home), "--provider", "memory")
	cmd.Env = append(os.Environ(), stateEnv(t, home)...)
	out, err := cmd.CombinedOutput()
	took := time.Since(start)
	want := fmt.Sprintf("another tupper server (pid %d, serving on %s) is using the state directory %s", first.cmd.Process.Pid, first.url, home)
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 125 || !strings.Contains(string(out), want) {
		t.Fatalf("second server: %v: %s\nwant exit 125 and %q", err, out, want)
	}
	if strings.Contains(string(out), "SQLITE") || strings.Contains(string(out), "doctor") {
		t.Errorf("second server's error: %s", out)
	}
	if took > 5*time.Second {
		t.Errorf("the second server took %v to stop", took)
	}
	if code := call(t, "GET", first.url+"/v1/sandboxes", key, nil, nil); code != http.StatusOK {
		t.Errorf("the first server answers %d after the second one tried", code)
	}
	// Killed (-9), the first one leaves the directory free: the kernel drops its lock.
	first.kill()
	serve(t, home, "memory")
}

// A server that starts on a store whose files other users could read warns, and the URLs it
// signed before no longer verify; after a clean restart they still do.
func TestSignedURLsAfterAnExposedStore(t *testing.T) {
	home := t.TempDir()
	key := newKey(t, home)
	a := serve(t, home, "memory")
	var sb struct{ ID string }
	if code := call(t, "POST", a.url+"/v1/sandboxes", key, map[string]any{}, &sb); code != 201 {
		t.Fatalf("create: %d", code)
	}
	var signed struct{ URL string }
	if code := call(t, "POST", a.url+"/v1/sandboxes/"+sb.ID+"/files/presign", key, map[string]string{"path": "f"}, &signed); code != 200 {
		t.Fatalf("presign: %d", code)
	}
	// The URL's signature is checked before its sandbox is looked for: the memory provider's
	// sandboxes end with their server, so a valid signature gets 404 after a restart, a
	// signature that no longer verifies 401.
	get := func(c *child) int {
		resp, err := http.Get(strings.Replace(signed.URL, a.url, c.url, 1))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	a.kill() // -9: server.db-wal and -shm stay, as a running server has them
	b := serve(t, home, "memory")
	if code := get(b); code != http.StatusNotFound {
		t.Fatalf("signed URL after a clean restart: %d, want 404 (signature valid, sandbox gone)", code)
	}
	if strings.Contains(b.logs(), "could be read by other users") {
		t.Errorf("a clean restart warns: %s", b.logs())
	}
	b.kill()
	if testenv.PostgresStore() {
		return // no files to expose: a PostgreSQL store's access is its database's
	}
	for _, f := range []string{store.FileName, store.FileName + "-wal", store.FileName + "-shm"} {
		if err := os.Chmod(filepath.Join(home, f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	c := serve(t, home, "memory")
	if code := get(c); code != http.StatusUnauthorized {
		t.Errorf("signed URL after the store was found readable: %d, want 401", code)
	}
	for _, want := range []string{"warning: server.db (mode 0644), server.db-wal (mode 0644), server.db-shm (mode 0644) could be read by other users", "stop working"} {
		if !strings.Contains(c.logs(), want) {
			t.Errorf("the server's log lacks %q:\n%s", want, c.logs())
		}
	}
	for _, f := range []string{store.FileName, store.FileName + "-wal", store.FileName + "-shm"} {
		fi, err := os.Stat(filepath.Join(home, f))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s after the server started: %04o, want 0600", f, fi.Mode().Perm())
		}
	}
}
