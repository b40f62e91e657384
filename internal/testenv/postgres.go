package testenv

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the database/sql driver "pgx"

	"github.com/tupper-dev/tupper/internal/pgdsn"
)

// PostgresEnv names the PostgreSQL cluster tests may use: the DSN of a superuser on a private
// test cluster (scripts/postgres.sh starts one), such as
// postgres://postgres@/postgres?host=/tmp/tupper-pg. Tests create and drop databases on it.
const PostgresEnv = "TUPPER_TEST_POSTGRES"

// StoreEnv chooses the store of the servers servertest starts: "postgres" for a new
// PostgreSQL database each (on the cluster of PostgresEnv), anything else SQLite.
const StoreEnv = "TUPPER_TEST_STORE"

// Postgres returns $TUPPER_TEST_POSTGRES, or skips (fails under CI) when it is unset.
func Postgres(t testing.TB) string {
	t.Helper()
	dsn := os.Getenv(PostgresEnv)
	if dsn == "" {
		Skip(t, PostgresEnv+" is unset: no PostgreSQL cluster to test on (scripts/postgres.sh starts one)")
	}
	return dsn
}

// PostgresStore reports whether servertest's servers use PostgreSQL ($TUPPER_TEST_STORE).
func PostgresStore() bool { return os.Getenv(StoreEnv) == "postgres" }

var pgDatabases atomic.Int64

// PostgresDB creates a new empty database on the cluster of Postgres and returns its DSN;
// the database is dropped when t ends.
func PostgresDB(t testing.TB) string {
	t.Helper()
	admin := Postgres(t)
	name := fmt.Sprintf("tupper_test_%d_%d_%d", os.Getpid(), time.Now().UnixNano()%1e9, pgDatabases.Add(1))
	dsn, err := pgdsn.WithDatabase(admin, name)
	if err != nil {
		t.Fatalf("%s: %v", PostgresEnv, err)
	}
	ctx := context.Background()
	db, err := sql.Open("pgx", admin)
	if err != nil {
		t.Fatalf("%s: %v", PostgresEnv, err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("creating a test database on $%s: %v", PostgresEnv, err)
	}
	t.Cleanup(func() {
		db, err := sql.Open("pgx", admin)
		if err != nil {
			t.Error(err)
			return
		}
		defer db.Close()
		if _, err := db.ExecContext(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("dropping test database %s: %v", name, err)
		}
	})
	return dsn
}

// pgStores are the PostgreSQL databases standing for state directories (see StoreSpec).
var (
	pgStoresMu sync.Mutex
	pgStores   = map[string]string{}
)

// StoreSpec is the store a test's server opens for state directory dir: dir itself, or with
// TUPPER_TEST_STORE=postgres (PostgresStore) a new PostgreSQL database (PostgresDB) that
// stands for dir until t ends, so that a server started again on dir finds the same one.
func StoreSpec(t testing.TB, dir string) string {
	t.Helper()
	if !PostgresStore() {
		return dir
	}
	pgStoresMu.Lock()
	defer pgStoresMu.Unlock()
	if dsn, ok := pgStores[dir]; ok {
		return dsn
	}
	dsn := PostgresDB(t)
	pgStores[dir] = dsn
	t.Cleanup(func() {
		pgStoresMu.Lock()
		delete(pgStores, dir)
		pgStoresMu.Unlock()
	})
	return dsn
}
