//go:build linux

package agent

import (
	"os"
	"path/filepath"
	"testing"
)

// TestUserByNumber: a uid, or uid:gid, is a user whether or not passwd names it, as a
// Dockerfile's USER is.
func TestUserByNumber(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "passwd"), []byte("root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000::/home/user:/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "group"), []byte("root:x:0:\nuser:x:1000:\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	db := newUserDB(dir)
	for _, c := range []struct {
		name     string
		uid, gid uint32
		home     string
	}{
		{"1000", 1000, 1000, "/home/user"}, // passwd's account of that uid
		{"4242", 4242, 4242, "/"},
		{"4242:7", 4242, 7, "/"},
		{"1000:0", 1000, 0, "/"},
	} {
		u, err := db.lookup(c.name)
		if err != nil || u.UID != c.uid || u.GID != c.gid || u.Home != c.home || u.Name != c.name {
			t.Errorf("lookup(%q) = %+v, %v; want uid %d gid %d home %s", c.name, u, err, c.uid, c.gid, c.home)
		}
	}
	for _, bad := range []string{"4242:x", "nobody", "-1", "99999999999"} {
		if u, err := db.lookup(bad); err == nil {
			t.Errorf("lookup(%q) = %+v, want an error", bad, u)
		}
	}
}
