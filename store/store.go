// Package store is the durable state of a tupper server: account API keys, the sandboxes it
// made and their tokens, lifecycle events, webhooks and the outbox of webhook deliveries.
//
// It is an embedded SQLite database (modernc.org/sqlite, pure Go, no cgo) in one file, opened
// in WAL mode with a busy timeout, so `tupper keys` in another process can read and write it
// while the server runs. The schema is created by numbered migrations applied in order at
// Open; the applied version is kept in SQLite's user_version.
//
// Credentials are stored only as SHA-256 hashes (API keys, sandbox tokens). Webhook secrets
// are stored as they are, since the server needs them to sign deliveries.
//
// A *Store may be used from many goroutines at once.
package store

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"time"

	_ "modernc.org/sqlite" // the database/sql driver "sqlite"

	"github.com/tupper-dev/tupper/provider"
)

// DefaultHome is the state directory when $TUPPER_HOME is unset.
const DefaultHome = "/var/lib/tupper"

// FileName is the database's file name inside the home directory.
const FileName = "server.db"

// Home returns $TUPPER_HOME, or DefaultHome.
func Home() string {
	if h := os.Getenv("TUPPER_HOME"); h != "" {
		return h
	}
	return DefaultHome
}

// Store is an open database.
type Store struct {
	db   *sql.DB
	path string
}

// migrations are applied in order; migration i brings the schema to version i+1. Never edit
// one that has shipped: add another.
var migrations = []string{
	// 1: the initial schema.
	`
CREATE TABLE api_keys (
	id         TEXT PRIMARY KEY,
	name       TEXT NOT NULL DEFAULT '',
	prefix     TEXT NOT NULL,
	hash       BLOB NOT NULL UNIQUE,
	created_at INTEGER NOT NULL,
	revoked_at INTEGER
);
CREATE TABLE sandboxes (
	id           TEXT PRIMARY KEY,
	provider     TEXT NOT NULL,
	api_key_id   TEXT NOT NULL DEFAULT '',
	key          TEXT NOT NULL DEFAULT '',
	labels       TEXT NOT NULL DEFAULT '{}',
	created_at   INTEGER NOT NULL,
	deadline     INTEGER NOT NULL DEFAULT 0,
	state        TEXT NOT NULL DEFAULT 'running',
	destroyed_at INTEGER
);
CREATE INDEX sandboxes_key ON sandboxes(key) WHERE destroyed_at IS NULL AND key != '';
CREATE TABLE sandbox_tokens (
	hash       BLOB PRIMARY KEY,
	sandbox_id TEXT NOT NULL REFERENCES sandboxes(id) ON DELETE CASCADE,
	created_at INTEGER NOT NULL
);
CREATE INDEX sandbox_tokens_sandbox ON sandbox_tokens(sandbox_id);
CREATE TABLE ports (
	sandbox_id TEXT NOT NULL REFERENCES sandboxes(id) ON DELETE CASCADE,
	port       INTEGER NOT NULL,
	public     INTEGER NOT NULL DEFAULT 0,
	created_at INTEGER NOT NULL,
	PRIMARY KEY (sandbox_id, port)
);
CREATE TABLE events (
	seq        INTEGER PRIMARY KEY AUTOINCREMENT,
	id         TEXT NOT NULL UNIQUE,
	type       TEXT NOT NULL,
	sandbox_id TEXT NOT NULL DEFAULT '',
	created_at INTEGER NOT NULL,
	data       TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX events_sandbox ON events(sandbox_id, seq);
CREATE INDEX events_type ON events(type, seq);
CREATE TABLE webhooks (
	id         TEXT PRIMARY KEY,
	url        TEXT NOT NULL,
	secret     TEXT NOT NULL,
	events     TEXT NOT NULL DEFAULT '[]',
	created_at INTEGER NOT NULL
);
CREATE TABLE deliveries (
	id           INTEGER PRIMARY KEY AUTOINCREMENT,
	webhook_id   TEXT NOT NULL REFERENCES webhooks(id) ON DELETE CASCADE,
	event_seq    INTEGER NOT NULL REFERENCES events(seq),
	attempts     INTEGER NOT NULL DEFAULT 0,
	next_attempt INTEGER NOT NULL,
	last_error   TEXT NOT NULL DEFAULT '',
	delivered_at INTEGER,
	failed_at    INTEGER
);
CREATE INDEX deliveries_due ON deliveries(next_attempt) WHERE delivered_at IS NULL AND failed_at IS NULL;
CREATE TABLE settings (
	name  TEXT PRIMARY KEY,
	value BLOB NOT NULL
);
`,
	// 2: tell a delivery in flight (claimed, leased) from one waiting for its retry, so a
	// restarted server resends what a dead one left in flight at once.
	`ALTER TABLE deliveries ADD COLUMN claimed INTEGER NOT NULL DEFAULT 0;`,
}

// Open opens (creating it when missing) the database in dir, which it creates with mode 0700,
// and applies the migrations it lacks.
func Open(ctx context.Context, dir string) (*Store, error) {
	if dir == "" {
		return nil, provider.Errorf(provider.CodeInvalidArgument, "store directory is empty")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, provider.Errorf(provider.CodeUnavailable, "store directory: %v (set TUPPER_HOME to a writable directory)", err)
	}
	path := filepath.Join(dir, FileName)
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(10000)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(NORMAL)")
	q.Add("_pragma", "foreign_keys(1)")
	q.Set("_txlock", "immediate")
	db, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, provider.Errorf(provider.CodeUnavailable, "open store: %v", err)
	}
	db.SetMaxOpenConns(8)
	s := &Store{db: db, path: path}
	if err := s.migrate(ctx); err != nil {
		db.Close()
		return nil, err
	}
	_ = os.Chmod(path, 0o600)
	return s, nil
}

// Path is the database file.
func (s *Store) Path() string { return s.path }

// Close closes the database. It is idempotent.
func (s *Store) Close() error { return s.db.Close() }

func (s *Store) migrate(ctx context.Context) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return provider.Errorf(provider.CodeUnavailable, "store: %v", err)
	}
	defer tx.Rollback()
	var v int
	if err := tx.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&v); err != nil {
		return provider.Errorf(provider.CodeUnavailable, "store: reading schema version: %v", err)
	}
	if v > len(migrations) {
		return provider.Errorf(provider.CodeUnavailable, "store %s has schema version %d, newer than this tupper knows (%d): upgrade tupper", s.path, v, len(migrations))
	}
	for i := v; i < len(migrations); i++ {
		if _, err := tx.ExecContext(ctx, migrations[i]); err != nil {
			return provider.Errorf(provider.CodeInternal, "store: migration %d: %v", i+1, err)
		}
		if _, err := tx.ExecContext(ctx, fmt.Sprintf(`PRAGMA user_version = %d`, i+1)); err != nil {
			return provider.Errorf(provider.CodeInternal, "store: migration %d: %v", i+1, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return provider.Errorf(provider.CodeUnavailable, "store: %v", err)
	}
	return nil
}

// Version is the schema version.
func (s *Store) Version(ctx context.Context) (int, error) {
	var v int
	err := s.db.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&v)
	return v, dbErr(err)
}

// Hash is the SHA-256 of a credential, the only form in which credentials are stored.
func Hash(secret string) []byte {
	h := sha256.Sum256([]byte(secret))
	return h[:]
}

// RandomString returns n random bytes in hex.
func RandomString(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Setting returns a named server secret, creating it with n random bytes the first time, so
// signatures the server makes stay valid across restarts.
func (s *Store) Setting(ctx context.Context, name string, n int) ([]byte, error) {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	if _, err := s.db.ExecContext(ctx, `INSERT INTO settings(name, value) VALUES(?, ?) ON CONFLICT(name) DO NOTHING`, name, b); err != nil {
		return nil, dbErr(err)
	}
	var v []byte
	err := s.db.QueryRowContext(ctx, `SELECT value FROM settings WHERE name = ?`, name).Scan(&v)
	return v, dbErr(err)
}

func dbErr(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, sql.ErrNoRows) {
		return provider.Errorf(provider.CodeNotFound, "not found")
	}
	if errors.Is(err, context.Canceled) {
		return &provider.Error{Code: provider.CodeAborted, Message: err.Error(), Err: err}
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return &provider.Error{Code: provider.CodeTimeout, Message: err.Error(), Err: err}
	}
	return &provider.Error{Code: provider.CodeUnavailable, Op: "store", Message: err.Error(), Err: err}
}

func unixMilli(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

func fromMilli(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms).UTC()
}

func nullTime(n sql.NullInt64) time.Time {
	if !n.Valid {
		return time.Time{}
	}
	return fromMilli(n.Int64)
}
