package main

import (
	"encoding/json"
	"net/url"
	"strings"
	"testing"

	"github.com/tupper-dev/tupper/internal/testenv"
	"github.com/tupper-dev/tupper/store"
)

// tupper store migrate copies a SQLite store into PostgreSQL: a key made before works after
// (tupper keys lists it from the new store), the output says the rows of each table, and the
// password is never shown. A non-empty target, and a store a server holds (source or target),
// are refused.
func TestStoreMigrate(t *testing.T) {
	home := t.TempDir()
	created := tupper(t, home, "", "keys", "create", "--name", "moved", "--json")
	var key struct{ ID string }
	if err := json.Unmarshal([]byte(created.stdout), &key); created.code != 0 || err != nil || key.ID == "" {
		t.Fatalf("keys create: %+v (%v)", created, err)
	}
	dsn := testenv.PostgresDB(t)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(u.User.Username(), "s3cret-pw") // the test cluster trusts its socket: any password does
	to := u.String()

	// A server on the source: refused, the target untouched.
	lk, err := store.LockServer(home)
	if err != nil {
		t.Fatal(err)
	}
	held := tupper(t, t.TempDir(), "", "store", "migrate", "--from", "sqlite://"+home+"/server.db", "--to", to)
	lk.Unlock()
	if held.code == 0 || !strings.Contains(held.stderr, "is using the state directory") {
		t.Fatalf("migrate from a store a server holds: %+v; want it refused", held)
	}

	// And a server on the target.
	lk, err = store.LockServer(to)
	if err != nil {
		t.Fatal(err)
	}
	heldTo := tupper(t, t.TempDir(), "", "store", "migrate", "--from", home, "--to", to)
	lk.Unlock()
	if heldTo.code == 0 || !strings.Contains(heldTo.stderr, "is using the PostgreSQL database postgres://") {
		t.Fatalf("migrate to a store a server holds: %+v; want it refused, naming the store without its password", heldTo)
	}

	r := tupper(t, t.TempDir(), "", "store", "migrate", "--from", "sqlite://"+home+"/server.db", "--to", to)
	if r.code != 0 {
		t.Fatalf("store migrate: %+v", r)
	}
	if !strings.Contains(r.stdout, "api_keys") || !strings.Contains(r.stdout, "secrets") || !strings.Contains(r.stderr, "postgres://postgres:xxxxx@") {
		t.Errorf("store migrate said %q on stdout, %q on stderr; want the rows per table and the store without its password", r.stdout, r.stderr)
	}
	for _, line := range strings.Split(r.stdout, "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "api_keys" && f[1] != "1" {
			t.Errorf("copied %s api_keys, want 1", f[1])
		}
	}
	listed := tupper(t, t.TempDir(), "", "keys", "list", "--store", to)
	if listed.code != 0 || !strings.Contains(listed.stdout, "moved") || !strings.Contains(listed.stdout, key.ID) {
		t.Fatalf("keys list on the copy: %+v; want the key made before", listed)
	}

	again := tupper(t, t.TempDir(), "", "store", "migrate", "--from", home, "--to", to)
	if again.code == 0 || !strings.Contains(again.stderr, "is not empty") {
		t.Fatalf("migrate into a non-empty store: %+v; want it refused", again)
	}
	for _, res := range []result{held, heldTo, r, listed, again} {
		if strings.Contains(res.stdout+res.stderr, "s3cret") {
			t.Errorf("the password shown: %+v", res)
		}
	}
	if miss := tupper(t, home, "", "store", "migrate", "--from", home); miss.code == 0 || !strings.Contains(miss.stderr, `"to" not set`) {
		t.Errorf("migrate without --to: %+v", miss)
	}
}
