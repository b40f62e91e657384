//go:build linux

package server_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tupper-dev/tupper/server"
	"github.com/tupper-dev/tupper/server/servertest"
)

// A snapshot made through the server is deleted from the host's disk by the reaper once it
// expires, not when someone next happens to snapshot; the server forgets it, so it no longer
// counts against a quota.
func TestExpiredSnapshotReaped(t *testing.T) {
	prov := servertest.Local(t, 43)
	srv := servertest.Start(t, prov, "", func(c *server.Config) {
		c.ReapInterval = 200 * time.Millisecond
		c.SnapshotsPerSandbox = 1
	})
	var sb struct{ ID, Token string }
	if code := call(t, "POST", srv.URL+"/v1/sandboxes", srv.Key, map[string]any{"network": map[string]string{"mode": "none"}}, &sb); code != 201 {
		t.Fatalf("create: %d", code)
	}
	var snap struct{ ID string }
	if code := call(t, "POST", srv.URL+"/v1/sandboxes/"+sb.ID+"/snapshot", srv.Key, map[string]any{"expiresInMs": 1500}, &snap); code != 201 {
		t.Fatalf("snapshot: %d", code)
	}
	dir := filepath.Join(prov.Home(), "snapshots", snap.ID)
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("the snapshot is not on disk where this test looks: %v", err)
	}
	if code := call(t, "POST", srv.URL+"/v1/sandboxes/"+sb.ID+"/snapshot", srv.Key, nil, nil); code != 429 {
		t.Fatalf("second snapshot within a quota of 1: %d, want 429", code)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err := os.Stat(dir)
		if os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the snapshot expired after 1.5 s is still on disk 20 s later (%v)", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// An expired snapshot no longer counts: the quota has room again.
	if code := call(t, "POST", srv.URL+"/v1/sandboxes/"+sb.ID+"/snapshot", srv.Key, nil, nil); code != 201 {
		t.Fatalf("snapshot after the first expired: %d, want 201", code)
	}
}
