// Package store is the durable state of a tupper server: account API keys, the sandboxes it
// made and their tokens, the snapshots made through it, lifecycle events, webhooks and the
// outbox of webhook deliveries, and the audit log.
//
// It is in one of two databases, behind the same Store. By default (Open, or OpenURL of a
// directory or sqlite:// URL) an embedded SQLite database (modernc.org/sqlite, pure Go, no
// cgo) in one file, in WAL mode, every connection with a busy timeout, so `tupper keys` in
// another process can read and write it while the server runs. Or (OpenURL of a postgres:// URL) a
// PostgreSQL database through pgx's database/sql driver, for the database a team already
// runs; dialect.go holds the one seam between the two. The schema is created by numbered
// migrations, each written for both, applied in order at open, one process at a time (on
// SQLite a lock on server.db.lock beside the database, the version in its user_version; on
// PostgreSQL an advisory lock, the version in the schema_version table). A PostgreSQL URL's
// password is never in an error (Redact). On both, LockServer keeps a second server off a
// store that a server uses (a lock file beside SQLite's, an advisory lock on PostgreSQL).
//
// Credentials are stored only as SHA-256 hashes (API keys, sandbox tokens). Webhook secrets
// and the server's own secrets (Setting) are stored as they are, since the server needs
// them to sign, and so are stored secrets (secrets.go), whose values the server writes into
// sandboxes' egress; the database's files are readable by their owner only.
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
	"strings"
	"sync"
	"sync/atomic"
	"time"

	_ "modernc.org/sqlite" // the database/sql driver "sqlite"

	"github.com/tupper-dev/tupper/internal/flock"
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
	db      *conn
	path    string // the database file, or the redacted URL
	exposed string // see Exposed

	recorded atomic.Uint64 // see Recorded
	instance atomic.Int64  // see SetInstance

	wakeMu sync.Mutex
	wake   chan struct{} // see DeadlineChanged
}

// migration is one version of the schema: the same change in each dialect.
type migration struct {
	sqlite, postgres string
}

// migrations are applied in order; migration i brings the schema to version i+1. Never edit
// one that has shipped: add another, in both dialects. On PostgreSQL, integers are BIGINT
// (times are Unix milliseconds), blobs BYTEA, text is compared and ordered by bytes as
// SQLite does (COLLATE "C"), and sequences identity columns BY DEFAULT (so that a copied
// store can keep its ids).
var migrations = []migration{
	// 1: the initial schema.
	{
		sqlite: `
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
		postgres: `
CREATE TABLE api_keys (
	id         TEXT COLLATE "C" PRIMARY KEY,
	name       TEXT COLLATE "C" NOT NULL DEFAULT '',
	prefix     TEXT COLLATE "C" NOT NULL,
	hash       BYTEA NOT NULL UNIQUE,
	created_at BIGINT NOT NULL,
	revoked_at BIGINT
);
CREATE TABLE sandboxes (
	id           TEXT COLLATE "C" PRIMARY KEY,
	provider     TEXT COLLATE "C" NOT NULL,
	api_key_id   TEXT COLLATE "C" NOT NULL DEFAULT '',
	key          TEXT COLLATE "C" NOT NULL DEFAULT '',
	labels       TEXT COLLATE "C" NOT NULL DEFAULT '{}',
	created_at   BIGINT NOT NULL,
	deadline     BIGINT NOT NULL DEFAULT 0,
	state        TEXT COLLATE "C" NOT NULL DEFAULT 'running',
	destroyed_at BIGINT
);
CREATE INDEX sandboxes_key ON sandboxes(key) WHERE destroyed_at IS NULL AND key != '';
CREATE TABLE sandbox_tokens (
	hash       BYTEA PRIMARY KEY,
	sandbox_id TEXT COLLATE "C" NOT NULL REFERENCES sandboxes(id) ON DELETE CASCADE,
	created_at BIGINT NOT NULL
);
CREATE INDEX sandbox_tokens_sandbox ON sandbox_tokens(sandbox_id);
CREATE TABLE ports (
	sandbox_id TEXT COLLATE "C" NOT NULL REFERENCES sandboxes(id) ON DELETE CASCADE,
	port       BIGINT NOT NULL,
	public     BIGINT NOT NULL DEFAULT 0,
	created_at BIGINT NOT NULL,
	PRIMARY KEY (sandbox_id, port)
);
CREATE TABLE events (
	seq        BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
	id         TEXT COLLATE "C" NOT NULL UNIQUE,
	type       TEXT COLLATE "C" NOT NULL,
	sandbox_id TEXT COLLATE "C" NOT NULL DEFAULT '',
	created_at BIGINT NOT NULL,
	data       TEXT COLLATE "C" NOT NULL DEFAULT '{}'
);
CREATE INDEX events_sandbox ON events(sandbox_id, seq);
CREATE INDEX events_type ON events(type, seq);
CREATE TABLE webhooks (
	id         TEXT COLLATE "C" PRIMARY KEY,
	url        TEXT COLLATE "C" NOT NULL,
	secret     TEXT COLLATE "C" NOT NULL,
	events     TEXT COLLATE "C" NOT NULL DEFAULT '[]',
	created_at BIGINT NOT NULL
);
CREATE TABLE deliveries (
	id           BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
	webhook_id   TEXT COLLATE "C" NOT NULL REFERENCES webhooks(id) ON DELETE CASCADE,
	event_seq    BIGINT NOT NULL REFERENCES events(seq),
	attempts     BIGINT NOT NULL DEFAULT 0,
	next_attempt BIGINT NOT NULL,
	last_error   TEXT COLLATE "C" NOT NULL DEFAULT '',
	delivered_at BIGINT,
	failed_at    BIGINT
);
CREATE INDEX deliveries_due ON deliveries(next_attempt) WHERE delivered_at IS NULL AND failed_at IS NULL;
CREATE TABLE settings (
	name  TEXT COLLATE "C" PRIMARY KEY,
	value BYTEA NOT NULL
);
`,
	},
	// 2: tell a delivery in flight (claimed, leased) from one waiting for its retry, so a
	// restarted server resends what a dead one left in flight at once.
	{
		sqlite:   `ALTER TABLE deliveries ADD COLUMN claimed INTEGER NOT NULL DEFAULT 0;`,
		postgres: `ALTER TABLE deliveries ADD COLUMN claimed BIGINT NOT NULL DEFAULT 0;`,
	},
	// 3: replace the server's secrets. Tuppers before this one created server.db-wal and
	// server.db-shm readable by other users, and the secrets passed through them.
	{
		sqlite:   `DELETE FROM settings;`,
		postgres: `DELETE FROM settings;`,
	},
	// 4: the snapshots made through the server, for its quotas and its expiry.
	{
		sqlite: `
CREATE TABLE snapshots (
	id         TEXT PRIMARY KEY,
	sandbox_id TEXT NOT NULL,
	api_key_id TEXT NOT NULL DEFAULT '',
	created_at INTEGER NOT NULL,
	expires_at INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX snapshots_sandbox ON snapshots(sandbox_id);
CREATE INDEX snapshots_key ON snapshots(api_key_id);
CREATE INDEX snapshots_expiry ON snapshots(expires_at) WHERE expires_at != 0;
`,
		postgres: `
CREATE TABLE snapshots (
	id         TEXT COLLATE "C" PRIMARY KEY,
	sandbox_id TEXT COLLATE "C" NOT NULL,
	api_key_id TEXT COLLATE "C" NOT NULL DEFAULT '',
	created_at BIGINT NOT NULL,
	expires_at BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX snapshots_sandbox ON snapshots(sandbox_id);
CREATE INDEX snapshots_key ON snapshots(api_key_id);
CREATE INDEX snapshots_expiry ON snapshots(expires_at) WHERE expires_at != 0;
`,
	},
	// 5: what a sandbox does at its deadline (kill or pause), whether use resumes it when
	// paused, and its timeout, which a resume gives it again.
	{
		sqlite: `
ALTER TABLE sandboxes ADD COLUMN on_timeout TEXT NOT NULL DEFAULT '';
ALTER TABLE sandboxes ADD COLUMN auto_resume INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sandboxes ADD COLUMN timeout_ms INTEGER NOT NULL DEFAULT 0;
`,
		postgres: `
ALTER TABLE sandboxes ADD COLUMN on_timeout TEXT COLLATE "C" NOT NULL DEFAULT '';
ALTER TABLE sandboxes ADD COLUMN auto_resume BIGINT NOT NULL DEFAULT 0;
ALTER TABLE sandboxes ADD COLUMN timeout_ms BIGINT NOT NULL DEFAULT 0;
`,
	},
	// 6: stored secrets (E2B's /secrets), each an API key's own, its value written into
	// sandboxes' egress and never returned.
	{
		sqlite: `
CREATE TABLE secrets (
	seq        INTEGER PRIMARY KEY AUTOINCREMENT,
	id         TEXT NOT NULL UNIQUE,
	api_key_id TEXT NOT NULL,
	name       TEXT NOT NULL,
	value      TEXT NOT NULL,
	version    INTEGER NOT NULL DEFAULT 1,
	metadata   TEXT NOT NULL DEFAULT '{}',
	created_at INTEGER NOT NULL,
	updated_at INTEGER NOT NULL,
	UNIQUE (api_key_id, name)
);
`,
		postgres: `
CREATE TABLE secrets (
	seq        BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
	id         TEXT COLLATE "C" NOT NULL UNIQUE,
	api_key_id TEXT COLLATE "C" NOT NULL,
	name       TEXT COLLATE "C" NOT NULL,
	value      TEXT COLLATE "C" NOT NULL,
	version    BIGINT NOT NULL DEFAULT 1,
	metadata   TEXT COLLATE "C" NOT NULL DEFAULT '{}',
	created_at BIGINT NOT NULL,
	updated_at BIGINT NOT NULL,
	UNIQUE (api_key_id, name)
);
`,
	},
	// 7: whether a paused sandbox's pause dropped its memory (a cold pause: its resume boots
	// it again), which no use of it may resume behind the client's back.
	{
		sqlite: `
ALTER TABLE sandboxes ADD COLUMN memory_dropped INTEGER NOT NULL DEFAULT 0;
`,
		postgres: `
ALTER TABLE sandboxes ADD COLUMN memory_dropped BIGINT NOT NULL DEFAULT 0;
`,
	},
	// 8: store-wide locks (Lock), which servers on one PostgreSQL database take to
	// serialize get-or-create by key: held by a server's instance, void when it dies.
	{
		sqlite: `
CREATE TABLE locks (
	name        TEXT PRIMARY KEY,
	instance    INTEGER NOT NULL,
	acquired_at INTEGER NOT NULL
);
`,
		postgres: `
CREATE TABLE locks (
	name        TEXT COLLATE "C" PRIMARY KEY,
	instance    BIGINT NOT NULL,
	acquired_at BIGINT NOT NULL
);
`,
	},
	// 9: why a sandbox ended (End): its reason, who destroyed it (an API key id) and what
	// went wrong. Sandboxes that ended before it have none (''). The index serves the latest
	// to end (EndedSandboxes).
	{
		sqlite: `
ALTER TABLE sandboxes ADD COLUMN end_reason TEXT NOT NULL DEFAULT '';
ALTER TABLE sandboxes ADD COLUMN end_by TEXT NOT NULL DEFAULT '';
ALTER TABLE sandboxes ADD COLUMN end_message TEXT NOT NULL DEFAULT '';
CREATE INDEX sandboxes_ended ON sandboxes(destroyed_at) WHERE destroyed_at IS NOT NULL;
`,
		postgres: `
ALTER TABLE sandboxes ADD COLUMN end_reason TEXT COLLATE "C" NOT NULL DEFAULT '';
ALTER TABLE sandboxes ADD COLUMN end_by TEXT COLLATE "C" NOT NULL DEFAULT '';
ALTER TABLE sandboxes ADD COLUMN end_message TEXT COLLATE "C" NOT NULL DEFAULT '';
CREATE INDEX sandboxes_ended ON sandboxes(destroyed_at) WHERE destroyed_at IS NOT NULL;
`,
	},
	// 10: the audit log (audit.go): who changed what, when, from where, with what result.
	{
		sqlite: `
CREATE TABLE audit (
	id      INTEGER PRIMARY KEY AUTOINCREMENT,
	at      INTEGER NOT NULL,
	key_id  TEXT NOT NULL DEFAULT '',
	via     TEXT NOT NULL DEFAULT '',
	source  TEXT NOT NULL DEFAULT '',
	api     TEXT NOT NULL DEFAULT '',
	action  TEXT NOT NULL,
	target  TEXT NOT NULL DEFAULT '',
	result  TEXT NOT NULL,
	status  INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX audit_at ON audit(at);
CREATE INDEX audit_key ON audit(key_id, id);
CREATE INDEX audit_action ON audit(action, id);
`,
		postgres: `
CREATE TABLE audit (
	id      BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
	at      BIGINT NOT NULL,
	key_id  TEXT COLLATE "C" NOT NULL DEFAULT '',
	via     TEXT COLLATE "C" NOT NULL DEFAULT '',
	source  TEXT COLLATE "C" NOT NULL DEFAULT '',
	api     TEXT COLLATE "C" NOT NULL DEFAULT '',
	action  TEXT COLLATE "C" NOT NULL,
	target  TEXT COLLATE "C" NOT NULL DEFAULT '',
	result  TEXT COLLATE "C" NOT NULL,
	status  BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX audit_at ON audit(at);
CREATE INDEX audit_key ON audit(key_id, id);
CREATE INDEX audit_action ON audit(action, id);
`,
	},
}

// rotateSecretsVersion is the migration that replaces the secrets of stores made by older
// tuppers: Open reports it (Exposed) when it applies it to a store that had some.
const rotateSecretsVersion = 3

// OpenURL opens the store spec names (see ParseSpec): a state directory as Open does, or a
// PostgreSQL database, whose schema it creates or brings up to date as Open does, one process
// at a time. Its errors name a PostgreSQL store without the URL's password.
func OpenURL(ctx context.Context, spec string) (*Store, error) {
	pg, target, err := ParseSpec(spec)
	if err != nil {
		return nil, err
	}
	if !pg {
		return Open(ctx, target)
	}
	db, err := openPostgres(ctx, target)
	if err != nil {
		return nil, err
	}
	s := &Store{db: db, path: Redact(target)}
	if err := s.migratePostgres(ctx); err != nil {
		db.Close()
		return nil, err
	}
	return s, nil
}

// Open opens (creating it when missing) the database in dir and applies the migrations it
// lacks. Many processes may open one store at once (the server, `tupper keys`, a server
// started twice by mistake): they wait for each other, never fail with "database is locked".
//
// dir is created with mode 0711 when missing: the local provider, whose home it is by
// default, needs other users to traverse it. The database's files (server.db and SQLite's
// -wal, -shm and -journal beside it) are 0600 from the moment they exist; files an older
// tupper left readable by other users are made 0600, and the server's secrets in them are
// replaced (see Exposed).
func Open(ctx context.Context, dir string) (*Store, error) {
	if dir == "" {
		return nil, errorf(provider.CodeInvalidArgument, "store directory is empty")
	}
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return nil, errorf(provider.CodeUnavailable, "store directory: %v (set TUPPER_HOME to a writable directory)", err)
	}
	path := filepath.Join(dir, FileName)
	// The set-up below runs in one process at a time. Turning a new database to WAL takes
	// SQLite's exclusive lock without waiting on the busy timeout, so two processes doing it
	// at once fail with SQLITE_BUSY; migrations and the repair of modes must not interleave
	// either. The lock is held only for the set-up: afterwards SQLite's own locks and busy
	// timeout make writers wait for each other.
	lk, err := flock.Acquire(ctx, path+".lock")
	if err != nil {
		return nil, errorf(provider.CodeUnavailable, "open store: %v", err)
	}
	defer lk.Unlock()
	if err := createFile(path); err != nil {
		return nil, errorf(provider.CodeUnavailable, "open store: %v", err)
	}
	exposed, err := openFiles(path, false)
	if err != nil {
		return nil, errorf(provider.CodeUnavailable, "open store: %v", err)
	}
	q := url.Values{}
	// Applied to every connection, which is why journal_mode is not here: it is a property
	// of the file, set once below.
	q.Add("_pragma", "busy_timeout(10000)")
	q.Add("_pragma", "synchronous(NORMAL)")
	q.Add("_pragma", "foreign_keys(1)")
	q.Set("_txlock", "immediate")
	db, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, errorf(provider.CodeUnavailable, "open store: %v", err)
	}
	db.SetMaxOpenConns(8)
	s := &Store{db: &conn{DB: db, dialect: sqlite}, path: path}
	var mode string
	if err := s.db.QueryRowContext(ctx, `PRAGMA journal_mode = WAL`).Scan(&mode); err != nil || mode != "wal" {
		db.Close()
		if err == nil {
			err = fmt.Errorf("journal mode is %q, not wal", mode)
		}
		return nil, errorf(provider.CodeUnavailable, "open store %s: %v", path, err)
	}
	olderSecrets, err := s.migrate(ctx)
	if err != nil {
		db.Close()
		return nil, err
	}
	var why []string
	if len(exposed) > 0 {
		// Replaced before the modes are repaired: should this process die in between, the
		// next Open finds the files still readable and replaces the secrets again.
		if _, err := db.ExecContext(ctx, `DELETE FROM settings`); err != nil {
			db.Close()
			return nil, dbErr(err)
		}
		why = append(why, strings.Join(exposed, ", ")+" could be read by other users (now 0600)")
	}
	// Also files the connection above created, after the mode of a database file that
	// others could read.
	if _, err := openFiles(path, true); err != nil {
		db.Close()
		return nil, errorf(provider.CodeUnavailable, "open store: %v", err)
	}
	if olderSecrets {
		why = append(why, "an older tupper made the store with server.db-wal and server.db-shm readable by other users")
	}
	s.exposed = strings.Join(why, "; ")
	return s, nil
}

// Exposed says why other users may have read the store's secrets before Open, or "" when
// they could not: a file of the database was readable by them, or an older tupper made it
// so. Open has then made the files 0600 and replaced the server's own secrets (the settings:
// the keys that sign URLs and derive E2B envd tokens), so URLs and tokens signed before no
// longer verify once a server starts on the store. Webhook secrets are in the store too;
// only their receivers can replace them.
func (s *Store) Exposed() string { return s.exposed }

// createFile creates the database file, 0600, when it is missing. SQLite creates the -wal,
// -shm and -journal files with the database file's mode (it chmods them so, whatever the
// umask), so they are never readable by others, not even for a moment.
func createFile(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		return nil
	}
	if err != nil {
		return err
	}
	// A new file: no SQLite connection of this process holds locks on it, which closing
	// another descriptor of the file would drop.
	return errors.Join(f.Chmod(0o600), f.Close())
}

// openFiles returns the database's files that other users can read, with their modes, and
// makes every file that grants other users anything 0600 when repair is set.
func openFiles(path string, repair bool) (readable []string, err error) {
	for _, p := range []string{path, path + "-wal", path + "-shm", path + "-journal"} {
		fi, err := os.Stat(p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		perm := fi.Mode().Perm()
		if perm&0o044 != 0 {
			readable = append(readable, fmt.Sprintf("%s (mode %04o)", filepath.Base(p), perm))
		}
		if repair && perm&0o077 != 0 {
			// By path, not through a descriptor: see createFile.
			if err := os.Chmod(p, 0o600); err != nil {
				return nil, err
			}
		}
	}
	return readable, nil
}

// Path is the database file, or the PostgreSQL database's URL without its password.
func (s *Store) Path() string { return s.path }

// Close closes the database. It is idempotent.
func (s *Store) Close() error { return s.db.Close() }

// migrate applies the migrations the database lacks. It reports whether it replaced the
// secrets of a store made by an older tupper (migration rotateSecretsVersion).
func (s *Store) migrate(ctx context.Context) (olderSecrets bool, err error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return false, errorf(provider.CodeUnavailable, "%v", err)
	}
	defer tx.Rollback()
	var v int
	if err := tx.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&v); err != nil {
		return false, errorf(provider.CodeUnavailable, "reading schema version: %v", err)
	}
	if v > len(migrations) {
		return false, errorf(provider.CodeUnavailable, "%s has schema version %d, newer than this tupper knows (%d): upgrade tupper", s.path, v, len(migrations))
	}
	if v > 0 && v < rotateSecretsVersion {
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM settings`).Scan(&n); err != nil {
			return false, errorf(provider.CodeUnavailable, "%v", err)
		}
		olderSecrets = n > 0
	}
	for i := v; i < len(migrations); i++ {
		if _, err := tx.ExecContext(ctx, migrations[i].sqlite); err != nil {
			return false, errorf(provider.CodeInternal, "migration %d: %v", i+1, err)
		}
		if _, err := tx.ExecContext(ctx, fmt.Sprintf(`PRAGMA user_version = %d`, i+1)); err != nil {
			return false, errorf(provider.CodeInternal, "migration %d: %v", i+1, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return false, errorf(provider.CodeUnavailable, "%v", err)
	}
	return olderSecrets, nil
}

// Version is the schema version.
func (s *Store) Version(ctx context.Context) (int, error) {
	q := `PRAGMA user_version`
	if s.db.dialect == postgres {
		q = `SELECT version FROM schema_version`
	}
	var v int
	err := s.db.QueryRowContext(ctx, q).Scan(&v)
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

// errorf is an error of the store: its Op is "store".
func errorf(code provider.Code, format string, args ...any) error {
	return &provider.Error{Code: code, Op: "store", Message: fmt.Sprintf(format, args...)}
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
	if isPgConnErr(err) {
		return &provider.Error{Code: provider.CodeUnavailable, Op: "store", Message: "cannot reach PostgreSQL: " + err.Error(), Err: err}
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
