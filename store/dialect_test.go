package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tupper-dev/tupper/internal/testenv"
	"github.com/tupper-dev/tupper/provider"
)

func TestParseSpec(t *testing.T) {
	for _, c := range []struct {
		spec string
		pg   bool
		dir  string
	}{
		{"/var/lib/tupper", false, "/var/lib/tupper"},
		{"state", false, "state"},
		{"sqlite:///var/lib/tupper", false, "/var/lib/tupper"},
		{"sqlite:///var/lib/tupper/server.db", false, "/var/lib/tupper"},
		{"postgres://u:p@db/tupper", true, "postgres://u:p@db/tupper"},
		{"postgresql://db/tupper?sslmode=require", true, "postgresql://db/tupper?sslmode=require"},
		{"host=/tmp dbname=tupper", true, "host=/tmp dbname=tupper"},
	} {
		pg, dir, err := ParseSpec(c.spec)
		if err != nil || pg != c.pg || dir != c.dir {
			t.Errorf("ParseSpec(%q) = %v, %q, %v; want %v, %q", c.spec, pg, dir, err, c.pg, c.dir)
		}
	}
	for _, bad := range []string{"", "sqlite://host/x", "sqlite://relative", "mysql://u:hunter2@db/x"} {
		_, _, err := ParseSpec(bad)
		if !errors.Is(err, provider.CodeInvalidArgument) || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("ParseSpec(%q) = %v; want invalid argument without the password", bad, err)
		}
	}
}

// The password of a PostgreSQL store is in no error: not in the URL the error names, not
// in what the driver says.
func TestPasswordNeverShown(t *testing.T) {
	for spec, want := range map[string]string{
		"postgres://tupper:s3cret-pw@127.0.0.1:1/db?connect_timeout=5":     "postgres://tupper:xxxxx@127.0.0.1:1/db?connect_timeout=5",
		"postgresql://tupper@127.0.0.1:1/db?password=s3cret-pw":            "postgresql://tupper@127.0.0.1:1/db?password=xxxxx",
		"host=127.0.0.1 port=1 user=tupper password=s3cret-pw dbname=db":   "host=127.0.0.1 port=1 user=tupper password=xxxxx dbname=db",
		"host=127.0.0.1 port=1 user=tupper password='s3cret-pw' dbname=db": "host=127.0.0.1 port=1 user=tupper password=xxxxx dbname=db",
	} {
		if got := Redact(spec); got != want {
			t.Errorf("Redact(%q) = %q; want %q", spec, got, want)
		}
		_, err := OpenURL(context.Background(), spec)
		// (provider.Error drops a URL's user information altogether.)
		if !errors.Is(err, provider.CodeUnavailable) || strings.Contains(err.Error(), "s3cret") || !strings.Contains(err.Error(), "127.0.0.1") {
			t.Errorf("OpenURL(%q) = %v; want unavailable, naming the store without its password", spec, err)
		}
	}
}

// A store whose schema is newer than this tupper's is refused, naming both versions, and
// left as it was.
func TestNewerSchemaRefused(t *testing.T) {
	eachStore(t, func(t *testing.T, spec string) {
		ctx := context.Background()
		s := open(t, spec)
		newer := len(migrations) + 1
		q := fmt.Sprintf(`PRAGMA user_version = %d`, newer)
		if s.db.dialect == postgres {
			q = fmt.Sprintf(`UPDATE schema_version SET version = %d`, newer)
		}
		if _, err := s.db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
		_, err := OpenURL(ctx, spec)
		if want := fmt.Sprintf("schema version %d, newer than this tupper knows (%d)", newer, len(migrations)); err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("open a newer store: %v; want a refusal saying %q", err, want)
		}
		if v, err := s.Version(ctx); err != nil || v != newer {
			t.Fatalf("version after the refusal = %d, %v; want %d still", v, err, newer)
		}
	})
}

// Many processes' worth of handles opening one new PostgreSQL database at once migrate it
// once: the advisory lock orders them.
func TestPostgresOpenAtOnce(t *testing.T) {
	spec := testenv.PostgresDB(t)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := OpenURL(context.Background(), spec)
			if err != nil {
				errs <- err
				return
			}
			if v, err := s.Version(context.Background()); err != nil || v != len(migrations) {
				errs <- errors.Join(err, errors.New("wrong version"))
			}
			s.Close()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// Servers share a PostgreSQL store: a second server joins beside the first, with another
// instance number, and exactly one of them leads; a store copy (LockStore) is refused while
// any server is on it, naming one by its pid and address, without the password, and a server
// is refused while a copy runs. LockServer makes no directory of a URL.
func TestLockServerPostgres(t *testing.T) {
	wd, _ := os.Getwd()
	spec := testenv.PostgresDB(t)
	a, err := LockServer(spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Serving("http://127.0.0.1:7423"); err != nil {
		t.Fatal(err)
	}
	b, err := LockServer(spec)
	if err != nil {
		t.Fatalf("a second server on the database: %v", err)
	}
	if a.Instance() == b.Instance() || a.Instance() <= 0 || b.Instance() <= 0 {
		t.Errorf("instances %d and %d; want two positive numbers", a.Instance(), b.Instance())
	}
	aLeads, _ := a.Leading()
	bLeads, bChanged := b.Leading()
	if !aLeads || bLeads {
		t.Errorf("leading: first %v, second %v; want the first only", aLeads, bLeads)
	}
	_, err = LockStore(spec)
	if provider.CodeOf(err) != provider.CodeConflict || !strings.Contains(err.Error(), "serving on http://127.0.0.1:7423") ||
		!strings.Contains(err.Error(), fmt.Sprintf("pid %d", os.Getpid())) || !strings.Contains(err.Error(), "stop every server") {
		t.Fatalf("a store copy beside servers: %v", err)
	}
	// The leader goes: the other takes the lead within a lock check or two.
	a.Unlock()
	a.Unlock() // idempotent
	select {
	case <-bChanged:
	case <-time.After(5 * pgServerLockCheck):
		t.Fatal("the second server did not take the lead when the first went")
	}
	if on, _ := b.Leading(); !on {
		t.Fatal("the lead changed, and the second server does not lead")
	}
	b.Unlock()
	c, err := LockStore(spec)
	if err != nil {
		t.Fatalf("a store copy once the servers are gone: %v", err)
	}
	if _, err := LockServer(spec); provider.CodeOf(err) != provider.CodeConflict || !strings.Contains(err.Error(), "is copying") {
		t.Fatalf("a server during a store copy: %v", err)
	}
	c.Unlock()
	// Another database of the same cluster is another store.
	other, err := LockStore(testenv.PostgresDB(t))
	if err != nil {
		t.Fatalf("another database: %v", err)
	}
	other.Unlock()
	if _, err := os.Stat(filepath.Join(wd, "postgres:")); err == nil {
		t.Fatal("LockServer made a directory of a URL")
	}
	// A database that does not answer: unavailable, without the password.
	_, err = LockServer("postgres://u:s3cret@127.0.0.1:1/db?connect_timeout=2")
	if provider.CodeOf(err) != provider.CodeUnavailable || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("an unreachable database: %v", err)
	}
}

// A unique constraint's violation is the same error on both databases.
func TestUniqueViolationSameOnBoth(t *testing.T) {
	eachStore(t, func(t *testing.T, spec string) {
		ctx := context.Background()
		s := open(t, spec)
		h := Hash(NewToken())
		if err := s.PutSandbox(ctx, Sandbox{ID: "sb1", Provider: "memory"}, h); err != nil {
			t.Fatal(err)
		}
		err := s.AddToken(ctx, "sb1", h)
		var pe *provider.Error
		if !errors.As(err, &pe) || pe.Code != provider.CodeUnavailable || pe.Op != "store" {
			t.Fatalf("a token added twice: %#v; want the store's unavailable, as SQLite has always said", err)
		}
	})
}

// Text orders by its bytes on both databases, whatever the PostgreSQL database's locale.
func TestTextOrderSameOnBoth(t *testing.T) {
	eachStore(t, func(t *testing.T, spec string) {
		ctx := context.Background()
		s := open(t, spec)
		at := time.UnixMilli(1_700_000_000_000)
		for _, id := range []string{"a", "_x", "B"} {
			if err := s.PutSandbox(ctx, Sandbox{ID: id, Provider: "memory", CreatedAt: at}, nil); err != nil {
				t.Fatal(err)
			}
		}
		sbs, err := s.Sandboxes(ctx)
		var ids []string
		for _, sb := range sbs {
			ids = append(ids, sb.ID)
		}
		if err != nil || strings.Join(ids, " ") != "B _x a" {
			t.Fatalf("sandboxes in order %q, %v; want B _x a (by bytes)", ids, err)
		}
	})
}

// A PostgreSQL database that goes away makes calls fail as unavailable, saying so, not
// panic.
func TestPostgresGoneIsUnavailable(t *testing.T) {
	ctx := context.Background()
	spec := testenv.PostgresDB(t)
	s := open(t, spec)
	if _, _, err := s.CreateKey(ctx, "before"); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(spec)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := sql.Open("pgx", testenv.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if _, err := admin.ExecContext(ctx, `DROP DATABASE `+strings.TrimPrefix(u.Path, "/")+` WITH (FORCE)`); err != nil {
		t.Fatal(err)
	}
	_, err = s.Keys(ctx)
	if !errors.Is(err, provider.CodeUnavailable) || !strings.Contains(err.Error(), "PostgreSQL") {
		t.Fatalf("keys of a dropped database: %v; want unavailable, naming PostgreSQL", err)
	}
}

// A connection whose socket fails under a query (PostgreSQL stopped between two of them:
// pgx says "write failed: … broken pipe") is PostgreSQL unreachable too, not a bare error.
func TestPostgresSocketFailureIsUnavailable(t *testing.T) {
	sock := &net.OpError{Op: "write", Net: "unix", Err: syscall.EPIPE}
	for _, err := range []error{fmt.Errorf("write failed: %w", sock), fmt.Errorf("read: %w", io.ErrUnexpectedEOF), driver.ErrBadConn} {
		got := dbErr(err)
		if !errors.Is(got, provider.CodeUnavailable) || !strings.Contains(got.Error(), "cannot reach PostgreSQL") {
			t.Errorf("dbErr(%v) = %v; want unavailable, naming PostgreSQL", err, got)
		}
	}
}
