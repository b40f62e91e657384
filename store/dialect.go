package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // the database/sql driver "pgx"

	"github.com/tupper-dev/tupper/internal/metrics"
	"github.com/tupper-dev/tupper/provider"
)

// The store's one seam between its two databases. The queries are written for SQLite
// (placeholders ? and ?N); on PostgreSQL, conn rewrites them to $N and passes booleans as
// integers, the columns' type on both. What differs beyond that is the DDL, side by side in
// migrations, and the schema version's place (SQLite's user_version, PostgreSQL's
// schema_version table).

// SpecEnv is the environment variable that names the store when no --store flag does.
const SpecEnv = "TUPPER_STORE"

// SpecFlagUsage describes the --store flag of the commands that open the store.
const SpecFlagUsage = "the server's store: a state directory, sqlite:///path, or a postgres:// URL (default: $" + SpecEnv + ", else the --home directory)"

// Spec is the store a command opens: its --store flag, else $TUPPER_STORE, else the state
// directory home. (The flag's default is not $TUPPER_STORE itself, which would show its
// password in --help.)
func Spec(flag, home string) string {
	if flag != "" {
		return flag
	}
	if env := os.Getenv(SpecEnv); env != "" {
		return env
	}
	return home
}

// dialect is the database a store is in.
type dialect int

const (
	sqlite dialect = iota
	postgres
)

// ParseSpec tells what a store spec names: a PostgreSQL database (a postgres:// or
// postgresql:// URL, or libpq's keyword/value form beginning with a keyword such as host= or
// dbname=; returned as given) or a state directory (a path, or a sqlite:// URL whose path is
// the directory or the server.db file in it). Anything else is CodeInvalidArgument.
func ParseSpec(spec string) (pg bool, dirOrDSN string, err error) {
	switch {
	case spec == "":
		return false, "", errorf(provider.CodeInvalidArgument, "store is empty: give a state directory, sqlite:///path or postgres://…")
	case strings.HasPrefix(spec, "postgres://"), strings.HasPrefix(spec, "postgresql://"), keywordDSN(spec):
		return true, spec, nil
	case strings.HasPrefix(spec, "sqlite://"):
		u, err := url.Parse(spec)
		if err != nil || u.Host != "" || !filepath.IsAbs(u.Path) || u.RawQuery != "" {
			return false, "", errorf(provider.CodeInvalidArgument, "store %q: a SQLite store is sqlite:///absolute/path (the state directory, or its %s)", spec, FileName)
		}
		return false, sqliteDir(u.Path), nil
	case strings.Contains(spec, "://"):
		return false, "", errorf(provider.CodeInvalidArgument, "store %q: not a state directory, sqlite:///path or postgres://… URL", Redact(spec))
	}
	return false, sqliteDir(spec), nil
}

// pgKeywords are the libpq keywords a keyword/value DSN may begin with.
var pgKeywords = []string{"host", "hostaddr", "port", "dbname", "user", "password", "sslmode", "service", "connect_timeout", "application_name"}

// keywordDSN reports whether spec is libpq's keyword/value form, such as "host=/tmp dbname=t".
func keywordDSN(spec string) bool {
	k, _, ok := strings.Cut(strings.TrimSpace(spec), "=")
	return ok && slices.Contains(pgKeywords, strings.TrimSpace(k))
}

// sqliteDir is the state directory of a path that names it or the database file in it.
func sqliteDir(p string) string {
	if filepath.Base(p) == FileName {
		return filepath.Dir(p)
	}
	return p
}

// Redact returns a store spec fit to show: a PostgreSQL URL's password is replaced by
// "xxxxx" (in the URL's user part and in a password= parameter). Anything that names a
// store in an error or a log passes through it.
func Redact(spec string) string {
	if keywordDSN(spec) {
		return keywordPassword().ReplaceAllString(spec, "${1}xxxxx")
	}
	if !strings.Contains(spec, "://") {
		return spec
	}
	u, err := url.Parse(spec)
	if err != nil {
		// Unparsable: show the scheme only, the rest may hold a password.
		scheme, _, _ := strings.Cut(spec, "://")
		return scheme + "://…"
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	q := u.Query()
	if q.Has("password") {
		q.Set("password", "xxxxx")
		u.RawQuery = q.Encode()
	}
	return u.String()
}

// keywordPassword matches a password in a keyword/value DSN, quoted or not. It is compiled
// on first use, not at the start of every tupper command.
var keywordPassword = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)`)
})

// conn is the store's database: a *sql.DB whose queries it adapts to its dialect.
type conn struct {
	*sql.DB
	dialect dialect
	// m times every statement (Store.Measure); nil: none.
	m atomic.Pointer[metrics.Metrics]
}

// observe records a statement of op that began at start, when the store is measured.
func (c *conn) observe(op string, start time.Time) {
	if m := c.m.Load(); m != nil {
		m.ObserveStore(op, c.dialect.String(), time.Since(start))
	}
}

func (c *conn) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	defer c.observe("exec", time.Now())
	return c.DB.ExecContext(ctx, c.rebind(q), c.args(args)...)
}

func (c *conn) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	defer c.observe("query", time.Now())
	return c.DB.QueryContext(ctx, c.rebind(q), c.args(args)...)
}

func (c *conn) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	defer c.observe("query", time.Now())
	return c.DB.QueryRowContext(ctx, c.rebind(q), c.args(args)...)
}

func (c *conn) BeginTx(ctx context.Context, opts *sql.TxOptions) (*tx, error) {
	defer c.observe("begin", time.Now())
	t, err := c.DB.BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return &tx{Tx: t, c: c}, nil
}

// tx is a transaction of a conn, adapting its queries likewise.
type tx struct {
	*sql.Tx
	c *conn
}

func (t *tx) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	defer t.c.observe("exec", time.Now())
	return t.Tx.ExecContext(ctx, t.c.rebind(q), t.c.args(args)...)
}

func (t *tx) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	defer t.c.observe("query", time.Now())
	return t.Tx.QueryContext(ctx, t.c.rebind(q), t.c.args(args)...)
}

func (t *tx) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	defer t.c.observe("query", time.Now())
	return t.Tx.QueryRowContext(ctx, t.c.rebind(q), t.c.args(args)...)
}

func (t *tx) Commit() error {
	defer t.c.observe("commit", time.Now())
	return t.Tx.Commit()
}

// rebound caches PostgreSQL's text of each query.
var rebound sync.Map // string → string

// rebind rewrites a query's placeholders for the dialect: ? and ?N become $N on PostgreSQL.
// The queries hold no ? in a string literal.
func (c *conn) rebind(q string) string {
	if c.dialect != postgres || !strings.Contains(q, "?") {
		return q
	}
	if r, ok := rebound.Load(q); ok {
		return r.(string)
	}
	var b strings.Builder
	n := 0
	for i := 0; i < len(q); i++ {
		if q[i] != '?' {
			b.WriteByte(q[i])
			continue
		}
		j := i + 1
		for j < len(q) && q[j] >= '0' && q[j] <= '9' {
			j++
		}
		b.WriteByte('$')
		if j > i+1 {
			b.WriteString(q[i+1 : j])
		} else {
			n++
			b.WriteString(strconv.Itoa(n))
		}
		i = j - 1
	}
	rebound.Store(q, b.String())
	return b.String()
}

// args passes booleans as integers on PostgreSQL, where the flag columns are integers as on
// SQLite (and scanning an integer into a bool works on both).
func (c *conn) args(args []any) []any {
	if c.dialect != postgres {
		return args
	}
	var out []any
	for i, a := range args {
		if b, ok := a.(bool); ok {
			if out == nil {
				out = append([]any(nil), args...)
			}
			out[i] = boolInt(b)
		}
	}
	if out == nil {
		return args
	}
	return out
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// openPostgres opens the PostgreSQL database dsn names, and checks that it answers.
func openPostgres(ctx context.Context, dsn string) (*conn, error) {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return nil, errorf(provider.CodeInvalidArgument, "store %s: %v", Redact(dsn), redactErr(err, dsn))
	}
	// As many kept idle as may be open: database/sql keeps 2 by default, so a burst closed
	// every other connection after its statement and opened a new one (a new backend
	// process) for the next: 155 connections in one bench run of 50 concurrent creates.
	db.SetMaxOpenConns(16)
	db.SetMaxIdleConns(16)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, unreachable(dsn, err)
	}
	return &conn{DB: db, dialect: postgres}, nil
}

// unreachable is the error of a PostgreSQL database dsn names that could not be reached.
func unreachable(dsn string, err error) error {
	return errorf(provider.CodeUnavailable, "store %s: cannot reach PostgreSQL: %v (is it running, and are the URL's host, user and password right?)", Redact(dsn), redactErr(err, dsn))
}

// redactErr is err's message without dsn's password, should the driver quote it.
func redactErr(err error, dsn string) string {
	msg := err.Error()
	if keywordDSN(dsn) {
		for _, m := range keywordPassword().FindAllStringSubmatch(dsn, -1) {
			if p := strings.Trim(m[2], "'"); p != "" {
				msg = strings.ReplaceAll(msg, p, "xxxxx")
			}
		}
	} else if u, perr := url.Parse(dsn); perr == nil {
		if p, ok := u.User.Password(); ok && p != "" {
			msg = strings.ReplaceAll(msg, p, "xxxxx")
		}
		if p := u.Query().Get("password"); p != "" {
			msg = strings.ReplaceAll(msg, p, "xxxxx")
		}
	}
	return msg
}

// pgLockID is the advisory lock migrations on PostgreSQL hold: "tupper" in ASCII.
const pgLockID = 0x747570706572

// migratePostgres is migrate on PostgreSQL: the version in schema_version, one process at a
// time by an advisory lock held to the transaction's end.
func (s *Store) migratePostgres(ctx context.Context) error {
	t, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return dbErr(err)
	}
	defer t.Rollback()
	if _, err := t.ExecContext(ctx, `SELECT pg_advisory_xact_lock(?)`, int64(pgLockID)); err != nil {
		return dbErr(err)
	}
	if _, err := t.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_version (version BIGINT NOT NULL)`); err != nil {
		return errorf(provider.CodeUnavailable, "store %s: creating schema_version: %v", s.path, err)
	}
	var v int
	err = t.QueryRowContext(ctx, `SELECT version FROM schema_version`).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		_, err = t.ExecContext(ctx, `INSERT INTO schema_version(version) VALUES(0)`)
	}
	if err != nil {
		return errorf(provider.CodeUnavailable, "store %s: reading schema version: %v", s.path, err)
	}
	if v > len(migrations) {
		return errorf(provider.CodeUnavailable, "%s has schema version %d, newer than this tupper knows (%d): upgrade tupper", s.path, v, len(migrations))
	}
	for i := v; i < len(migrations); i++ {
		if _, err := t.ExecContext(ctx, migrations[i].postgres); err != nil {
			return errorf(provider.CodeInternal, "migration %d: %v", i+1, err)
		}
		if _, err := t.ExecContext(ctx, `UPDATE schema_version SET version = ?`, i+1); err != nil {
			return errorf(provider.CodeInternal, "migration %d: %v", i+1, err)
		}
	}
	return dbErr(t.Commit())
}

// isPgConnErr reports whether err is PostgreSQL's connection failing or the server going
// away (connection exceptions, class 08, and operator interventions such as a shutdown,
// class 57P; or the connection's socket failing under a query, as when PostgreSQL stops
// between two of them), not a query's error.
func isPgConnErr(err error) bool {
	var ce *pgconn.ConnectError
	var pe *pgconn.PgError
	var ne *net.OpError
	return errors.As(err, &ce) || errors.As(err, &pe) && (strings.HasPrefix(pe.Code, "08") || strings.HasPrefix(pe.Code, "57P")) ||
		errors.As(err, &ne) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, driver.ErrBadConn)
}
