//go:build unix

package store

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/tupper-dev/tupper/internal/testenv"
)

// dbFiles are the database's files, all of which exist while a store is open.
var dbFiles = []string{FileName, FileName + "-wal", FileName + "-shm"}

func perm(t *testing.T, path string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

func secrets(t *testing.T, s *Store) (signing, envd string) {
	t.Helper()
	a, err := s.Setting(context.Background(), "url-signing-key", 32)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.Setting(context.Background(), "e2b-envd-token-key", 32)
	if err != nil {
		t.Fatal(err)
	}
	return string(a), string(b)
}

// A new store's files are 0600 however permissive the umask: the database file is created
// so, and SQLite gives -wal and -shm the database file's mode.
func TestNewStoreModes(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	dir := filepath.Join(t.TempDir(), "state")
	s := open(t, dir)
	secrets(t, s) // the server's first write
	if got := perm(t, dir); got != 0o711 {
		t.Errorf("state directory is %04o, want 0711", got)
	}
	for _, f := range dbFiles {
		if got := perm(t, filepath.Join(dir, f)); got != 0o600 {
			t.Errorf("%s is %04o, want 0600", f, got)
		}
	}
	if why := s.Exposed(); why != "" {
		t.Errorf("a new store says it was exposed: %s", why)
	}
}

// A store whose files others could read (as an older tupper left them, while its server
// ran) gets its files made 0600 and its server secrets replaced; a clean reopen keeps them.
func TestReadableStoreIsRepaired(t *testing.T) {
	dir := t.TempDir()
	running := open(t, dir) // the server that runs on
	sign0, envd0 := secrets(t, running)
	for _, f := range dbFiles {
		if err := os.Chmod(filepath.Join(dir, f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s := open(t, dir)
	why := s.Exposed()
	for _, f := range dbFiles {
		if !strings.Contains(why, f+" (mode 0644)") {
			t.Errorf("Exposed() = %q; want it to name %s", why, f)
		}
		if got := perm(t, filepath.Join(dir, f)); got != 0o600 {
			t.Errorf("%s is %04o after Open, want 0600", f, got)
		}
	}
	sign1, envd1 := secrets(t, s)
	if sign1 == sign0 || envd1 == envd0 {
		t.Error("the secrets that other users could read were not replaced")
	}
	running.Close()
	s.Close()
	s = open(t, dir)
	if why := s.Exposed(); why != "" {
		t.Errorf("a clean reopen says the store was exposed: %s", why)
	}
	if sign2, envd2 := secrets(t, s); sign2 != sign1 || envd2 != envd1 {
		t.Error("a clean reopen replaced the secrets")
	}
}

// olderStore makes the store of a tupper at schema version 2, before its secrets were
// replaced, with settings when withSecrets.
func olderStore(t *testing.T, dir string, withSecrets bool) {
	t.Helper()
	if err := createFile(filepath.Join(dir, FileName)); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, FileName)+"?_pragma=journal_mode(WAL)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for i, m := range migrations[:2] {
		if _, err := db.Exec(m.sqlite); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec(fmt.Sprintf("PRAGMA user_version = %d", i+1)); err != nil {
			t.Fatal(err)
		}
	}
	if withSecrets {
		if _, err := db.Exec(`INSERT INTO settings(name, value) VALUES('url-signing-key', x'00112233')`); err != nil {
			t.Fatal(err)
		}
	}
}

// The secrets of a store an older tupper made passed through its -wal, which others could
// read: they are replaced once, at the upgrade.
func TestOlderStoreSecretsReplaced(t *testing.T) {
	dir := t.TempDir()
	olderStore(t, dir, true)
	s := open(t, dir)
	if why := s.Exposed(); !strings.Contains(why, "older tupper") {
		t.Errorf("Exposed() = %q; want the older tupper named", why)
	}
	sign, _ := secrets(t, s)
	if sign == "\x00\x11\x22\x33" {
		t.Error("the older store's signing key was kept")
	}
	s.Close()
	s = open(t, dir)
	if why := s.Exposed(); why != "" {
		t.Errorf("the second open says the store was exposed: %s", why)
	}
	if again, _ := secrets(t, s); again != sign {
		t.Error("the second open replaced the secrets again")
	}

	// An older store whose server never ran had no secrets: nothing to say.
	dir = t.TempDir()
	olderStore(t, dir, false)
	if why := open(t, dir).Exposed(); why != "" {
		t.Errorf("an older store without secrets: Exposed() = %q", why)
	}
}

// catAs reads path as uid/gid 65534 (nobody), as any local user could.
func catAs(path string) (string, error) {
	cmd := exec.Command("cat", path)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// head is the start of s, for a failure message.
func head(s string) string {
	if len(s) > 60 {
		return s[:60] + "…"
	}
	return s
}

// Another user of the host can read none of the database's files: not those of a new store,
// and not those of a store an older tupper left readable, once it has been opened.
func TestOtherUserCannotReadTheStore(t *testing.T) {
	testenv.RequireRoot(t)
	// A directory other users can traverse, as the local provider's home must be, so only
	// the files' own modes stand in the way.
	base, err := os.MkdirTemp("", "tupper-store-modes-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o711); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(base, "state")
	running := open(t, dir)
	secrets(t, running)
	control := filepath.Join(dir, "readable")
	if err := os.WriteFile(control, []byte("ok"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := catAs(control); err != nil || out != "ok" {
		t.Fatalf("nobody cannot read a 0644 file in the state directory (%v: %s): the check below would prove nothing", err, out)
	}
	check := func(when string) {
		for _, f := range dbFiles {
			if out, err := catAs(filepath.Join(dir, f)); err == nil || !strings.Contains(out, "Permission denied") {
				t.Errorf("%s: nobody reads %s: %v %q", when, f, err, head(out))
			}
		}
	}
	check("a new store")

	for _, f := range dbFiles {
		if err := os.Chmod(filepath.Join(dir, f), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := catAs(filepath.Join(dir, f)); err != nil {
			t.Fatalf("nobody cannot read %s at 0644: %v", f, err)
		}
	}
	open(t, dir)
	check("a store opened after its files were 0644")
}
