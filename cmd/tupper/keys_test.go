package main

import (
	"bufio"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tupper-dev/tupper/internal/testenv"
)

// A failure of the server's store is not about what the machine lacks: no `tupper doctor`
// hint follows it.
func TestStoreErrorHasNoDoctorHint(t *testing.T) {
	home := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(home, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	r := tupper(t, home, "", "keys", "list")
	if r.code != exitTupperError || !strings.Contains(r.stderr, "store directory") {
		t.Fatalf("keys list with a file for home: exit %d, stderr %q; want exit %d about the store directory", r.code, r.stderr, exitTupperError)
	}
	if strings.Contains(r.stderr, "doctor") {
		t.Errorf("a store error sends the user to tupper doctor: %q", r.stderr)
	}
}

// tupper keys works on a PostgreSQL store named by --store or $TUPPER_STORE, and never shows
// the store's password.
func TestKeysStoreFlag(t *testing.T) {
	bad := tupper(t, t.TempDir(), "", "keys", "list", "--store", "postgres://tupper:s3cret-pw@127.0.0.1:1/db")
	if bad.code == 0 || strings.Contains(bad.stderr, "s3cret") || !strings.Contains(bad.stderr, "PostgreSQL") {
		t.Fatalf("keys list on an unreachable PostgreSQL: exit %d, stderr %q; want a failure naming PostgreSQL without the password", bad.code, bad.stderr)
	}
	dsn := testenv.PostgresDB(t)
	home := t.TempDir()
	created := tupper(t, home, "", "keys", "create", "--name", "pg", "--store", dsn)
	if created.code != 0 || !strings.HasPrefix(created.stdout, "ak_") {
		t.Fatalf("keys create --store: %+v", created)
	}
	cmd := exec.Command(tupperBin(t), "keys", "list")
	cmd.Env = append(os.Environ(), "TUPPER_HOME="+home, "TUPPER_STORE="+dsn)
	listed := runCmd(t, cmd)
	if listed.code != 0 || !strings.Contains(listed.stdout, "pg") {
		t.Fatalf("keys list with $TUPPER_STORE: %+v", listed)
	}
	if _, err := os.Stat(filepath.Join(home, "server.db")); err == nil {
		t.Error("keys on a PostgreSQL store made a SQLite store in --home")
	}
}

// tupper serve on a PostgreSQL store: it serves, says which store without its password, and
// takes no lock in --home (several servers may share a PostgreSQL database).
func TestServeStoreFlag(t *testing.T) {
	dsn := testenv.PostgresDB(t)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(u.User.Username(), "s3cret-pw") // the test cluster trusts its socket: any password does
	home := t.TempDir()
	cmd := exec.Command(tupperBin(t), "serve", "--provider", "memory", "--addr", "127.0.0.1:0", "--store", u.String())
	cmd.Env = append(os.Environ(), "TUPPER_HOME="+home, "TUPPER_PROVIDER=")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	sc := bufio.NewScanner(stderr)
	var logs []string
	for sc.Scan() {
		logs = append(logs, sc.Text())
		if strings.Contains(sc.Text(), "serving on") {
			break
		}
	}
	all := strings.Join(logs, "\n")
	if !strings.Contains(all, "serving on") || !strings.Contains(all, "state postgres://postgres:xxxxx@") || strings.Contains(all, "s3cret") {
		t.Fatalf("tupper serve --store postgres://…: %s; want it serving, naming the store without its password", all)
	}
	if _, err := os.Stat(filepath.Join(home, "server.lock")); err == nil {
		t.Error("a server on PostgreSQL locked --home")
	}
}
