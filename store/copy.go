package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/tupper-dev/tupper/provider"
)

// copyTable is a table Copy copies: its name, the columns that order its rows (so a copy
// reads them in a fixed order), and its column numbered by the database (AUTOINCREMENT on
// SQLite, an identity on PostgreSQL), whose counter the copy carries over.
type copyTable struct {
	name, order, serial string
}

// copyTables are every table of the schema, parents before the tables that refer to them.
// A migration that adds a table adds it here: Copy refuses a store holding a table this list
// lacks, and TestCopyTablesAreTheSchema compares it with both databases' catalogues.
var copyTables = []copyTable{
	{name: "api_keys", order: "id"},
	{name: "sandboxes", order: "id"},
	{name: "sandbox_tokens", order: "hash"},
	{name: "ports", order: "sandbox_id, port"},
	{name: "events", order: "seq", serial: "seq"},
	{name: "webhooks", order: "id"},
	{name: "deliveries", order: "id", serial: "id"},
	{name: "settings", order: "name"},
	{name: "snapshots", order: "id"},
	{name: "secrets", order: "seq", serial: "seq"},
	{name: "locks", order: "name"},
	{name: "audit", order: "id", serial: "id"},
}

// TableRows is how many rows Copy copied into a table.
type TableRows struct {
	Table string
	Rows  int
}

// CopyStats are the rows Copy copied, table by table in copy order.
type CopyStats []TableRows

// Total is the number of rows copied.
func (c CopyStats) Total() int {
	n := 0
	for _, t := range c {
		n += t.Rows
	}
	return n
}

// OpenAsIs opens the store spec names as it is, to read it (Copy's source): unlike OpenURL it
// creates nothing and applies no migration, so a store of another schema version stays as it
// was (Copy refuses it). A SQLite store is opened read-only.
func OpenAsIs(ctx context.Context, spec string) (*Store, error) {
	pg, target, err := ParseSpec(spec)
	if err != nil {
		return nil, err
	}
	if pg {
		db, err := openPostgres(ctx, target)
		if err != nil {
			return nil, err
		}
		s := &Store{db: db, path: Redact(target)}
		var has bool
		if err := db.QueryRowContext(ctx, `SELECT to_regclass('schema_version') IS NOT NULL`).Scan(&has); err != nil {
			db.Close()
			return nil, errorf(provider.CodeUnavailable, "store %s: %v", s.path, redactErr(err, target))
		}
		if !has {
			db.Close()
			return nil, errorf(provider.CodeInvalidArgument, "store %s holds no tupper store (no schema_version table)", s.path)
		}
		return s, nil
	}
	path := filepath.Join(target, FileName)
	if _, err := os.Stat(path); err != nil {
		return nil, errorf(provider.CodeInvalidArgument, "no store in %s: %v", target, err)
	}
	q := url.Values{}
	q.Set("mode", "ro")
	q.Add("_pragma", "busy_timeout(10000)")
	q.Set("_txlock", "deferred")
	db, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, errorf(provider.CodeUnavailable, "open store %s: %v", path, err)
	}
	db.SetMaxOpenConns(4)
	return &Store{db: &conn{DB: db, dialect: sqlite}, path: path}, nil
}

// Copy copies every row of every table of from into to, which must be empty, keeping ids,
// sequence numbers and credential hashes as they are (keys and tokens keep working) and the
// counters of numbered columns (later rows get later numbers on to, never a copied one's).
// Both stores must be at this tupper's schema version: open a store with OpenURL first,
// which migrates it. It reads from in one transaction and writes to in one: on any error
// to is left as it was. Nothing else may write to either meanwhile (see LockServer).
func Copy(ctx context.Context, from, to *Store) (CopyStats, error) {
	return copyStore(ctx, from, to, nil)
}

// copyStore is Copy, calling hook (when set) after each table's rows are written to the
// target's transaction: tests fail a copy halfway through it.
func copyStore(ctx context.Context, from, to *Store, hook func(table string) error) (CopyStats, error) {
	for _, s := range []*Store{from, to} {
		v, err := s.Version(ctx)
		if err != nil {
			return nil, errorf(provider.CodeUnavailable, "store %s: reading schema version: %v", s.path, err)
		}
		if v > len(migrations) {
			return nil, errorf(provider.CodeConflict, "store %s has schema version %d, newer than this tupper knows (%d): copy it with a tupper that knows it", s.path, v, len(migrations))
		}
		if v != len(migrations) {
			return nil, errorf(provider.CodeConflict, "store %s has schema version %d, this tupper's is %d: open it with this tupper first (for instance `tupper keys list --store …`), which migrates it, then copy it", s.path, v, len(migrations))
		}
		if err := s.knownTables(ctx); err != nil {
			return nil, err
		}
	}
	var srcOpts *sql.TxOptions
	if from.db.dialect == postgres {
		// One snapshot of the whole store.
		srcOpts = &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true}
	}
	src, err := from.db.BeginTx(ctx, srcOpts)
	if err != nil {
		return nil, errorf(provider.CodeUnavailable, "store %s: %v", from.path, err)
	}
	defer src.Rollback()
	dst, err := to.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, errorf(provider.CodeUnavailable, "store %s: %v", to.path, err)
	}
	defer dst.Rollback()
	if err := refuseNonEmpty(ctx, dst, to.path); err != nil {
		return nil, err
	}
	var stats CopyStats
	for _, t := range copyTables {
		n, err := copyRows(ctx, src, dst, t)
		if err != nil {
			return nil, errorf(provider.CodeUnavailable, "copying table %s from %s to %s: %v (%s is left as it was)", t.name, from.path, to.path, err, to.path)
		}
		if t.serial != "" {
			if err := copyCounter(ctx, src, dst, t); err != nil {
				return nil, errorf(provider.CodeUnavailable, "copying the counter of %s.%s from %s to %s: %v (%s is left as it was)", t.name, t.serial, from.path, to.path, err, to.path)
			}
		}
		stats = append(stats, TableRows{Table: t.name, Rows: n})
		if hook != nil {
			if err := hook(t.name); err != nil {
				return nil, err
			}
		}
	}
	if err := dst.Commit(); err != nil {
		return nil, errorf(provider.CodeUnavailable, "store %s: committing the copy: %v", to.path, err)
	}
	return stats, nil
}

// refuseNonEmpty fails when any table of the target holds a row, naming those that do.
func refuseNonEmpty(ctx context.Context, t *tx, path string) error {
	var full []string
	for _, c := range copyTables {
		var n int
		if err := t.QueryRowContext(ctx, `SELECT count(*) FROM `+quoteIdent(c.name)).Scan(&n); err != nil {
			return errorf(provider.CodeUnavailable, "store %s: counting %s: %v", path, c.name, err)
		}
		if n > 0 {
			full = append(full, fmt.Sprintf("%d in %s", n, c.name))
		}
	}
	if len(full) > 0 {
		return errorf(provider.CodeConflict, "store %s is not empty (rows: %s): a store is copied into an empty one only; give a new database or state directory", path, strings.Join(full, ", "))
	}
	return nil
}

// copyRows copies table t's rows, every column by name, and returns how many.
func copyRows(ctx context.Context, src, dst *tx, t copyTable) (int, error) {
	rows, err := src.QueryContext(ctx, `SELECT * FROM `+quoteIdent(t.name)+` ORDER BY `+t.order)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return 0, err
	}
	quoted := make([]string, len(cols))
	marks := make([]string, len(cols))
	for i, c := range cols {
		quoted[i], marks[i] = quoteIdent(c), "?"
	}
	insert := `INSERT INTO ` + quoteIdent(t.name) + ` (` + strings.Join(quoted, ", ") + `) VALUES (` + strings.Join(marks, ", ") + `)`
	vals := make([]any, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	n := 0
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			return n, err
		}
		if _, err := dst.ExecContext(ctx, insert, vals...); err != nil {
			return n, err
		}
		n++
	}
	return n, rows.Err()
}

// copyCounter makes the target's counter of t's numbered column the source's (or the
// largest number copied, should that be more), so the next row either store gets has the
// same number and no copied number is given again.
func copyCounter(ctx context.Context, src, dst *tx, t copyTable) error {
	counter := func(tx *tx) (int64, error) {
		var n sql.NullInt64
		var err error
		if tx.c.dialect == postgres {
			// NULL when the sequence was never used.
			err = tx.QueryRowContext(ctx, `SELECT pg_sequence_last_value(pg_get_serial_sequence(?, ?)::regclass)`, t.name, t.serial).Scan(&n)
		} else {
			err = tx.QueryRowContext(ctx, `SELECT seq FROM sqlite_sequence WHERE name = ?`, t.name).Scan(&n)
			if errors.Is(err, sql.ErrNoRows) {
				err = nil
			}
		}
		return n.Int64, err
	}
	n, err := counter(src)
	if err != nil {
		return err
	}
	var max sql.NullInt64
	if err := dst.QueryRowContext(ctx, `SELECT max(`+quoteIdent(t.serial)+`) FROM `+quoteIdent(t.name)).Scan(&max); err != nil {
		return err
	}
	n = maxInt64(n, max.Int64)
	if n == 0 {
		return nil
	}
	if dst.c.dialect == postgres {
		_, err := dst.ExecContext(ctx, `SELECT setval(pg_get_serial_sequence(?, ?), ?, true)`, t.name, t.serial, n)
		return err
	}
	res, err := dst.ExecContext(ctx, `UPDATE sqlite_sequence SET seq = ? WHERE name = ?`, n, t.name)
	if err != nil {
		return err
	}
	if k, err := res.RowsAffected(); err != nil || k > 0 {
		return err
	}
	_, err = dst.ExecContext(ctx, `INSERT INTO sqlite_sequence(name, seq) VALUES(?, ?)`, t.name, n)
	return err
}

func maxInt64(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}

// tables are the tables of the store's schema, from the database's own catalogue, sorted
// (SQLite's internal tables and PostgreSQL's schema_version left out).
func (s *Store) tables(ctx context.Context) ([]string, error) {
	q := `SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite\_%' ESCAPE '\'`
	if s.db.dialect == postgres {
		q = `SELECT table_name FROM information_schema.tables
			WHERE table_schema = current_schema() AND table_type = 'BASE TABLE' AND table_name != 'schema_version'`
	}
	rows, err := s.db.QueryContext(ctx, q)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, err
		}
		names = append(names, n)
	}
	slices.Sort(names)
	return names, rows.Err()
}

// knownTables fails when the store holds a table Copy does not know, which it would not copy.
func (s *Store) knownTables(ctx context.Context) error {
	names, err := s.tables(ctx)
	if err != nil {
		return errorf(provider.CodeUnavailable, "store %s: listing its tables: %v", s.path, err)
	}
	for _, n := range names {
		if !slices.ContainsFunc(copyTables, func(t copyTable) bool { return t.name == n }) {
			return errorf(provider.CodeInternal, "store %s has a table %s that this tupper does not know how to copy: nothing copied (a bug of tupper: report it)", s.path, n)
		}
	}
	return nil
}

// quoteIdent quotes a table or column name, the same way for both databases.
func quoteIdent(name string) string {
	return `"` + strings.ReplaceAll(name, `"`, `""`) + `"`
}
