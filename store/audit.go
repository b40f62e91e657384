package store

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/tupper-dev/tupper/provider"
)

// AuditEntry is one call that changed something: who made it (an API key's id, never the
// key), from where, through which API, what it did to what, and how it ended. It holds no
// request body, file contents, command line or output, and no secret: only identifiers.
type AuditEntry struct {
	ID     int64 // set by the store, increasing
	Time   time.Time
	KeyID  string // the API key that made the call, or that owns the sandbox a token acted in
	Via    string // how the caller proved who it is: "key", "token", "signed", "local"
	Source string // the client's address (host, without its port), or "local" for the CLI
	API    string // "rest", "e2b", "mcp", "cli"
	Action string // what it did: "sandbox.create", "file.write", "key.revoke", …
	Target string // what it did it to: a sandbox, template, key, webhook id; "" for none
	Result string // "ok", or the error's code ("not_found", "forbidden", …)
	Status int    // the HTTP status of the answer; 0 when the call was not HTTP

	// KeyOf, when KeyID is empty, names the sandbox whose owner's key the entry takes: a
	// call made with a sandbox's token or a URL it signed is its owner's doing.
	KeyOf string
}

// AppendAudit stores entries, in one transaction. Entries whose KeyID is empty take the key
// that made the sandbox KeyOf names, when there is one. The audit log is only ever added to
// and pruned by age (PruneAudit): nothing updates an entry.
func (s *Store) AppendAudit(ctx context.Context, entries ...AuditEntry) error {
	if len(entries) == 0 {
		return nil
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return dbErr(err)
	}
	defer tx.Rollback()
	for _, e := range entries {
		if e.Action == "" || e.Result == "" {
			return provider.Errorf(provider.CodeInvalidArgument, "an audit entry needs an action and a result")
		}
		at := e.Time
		if at.IsZero() {
			at = time.Now()
		}
		// The owner's key is looked up in the same statement: no round trip per token call.
		if _, err := tx.ExecContext(ctx, `INSERT INTO audit(at, key_id, via, source, api, action, target, result, status)
			VALUES(?, COALESCE(NULLIF(?, ''), (SELECT api_key_id FROM sandboxes WHERE id = ?), ''), ?, ?, ?, ?, ?, ?, ?)`,
			at.UnixMilli(), e.KeyID, e.KeyOf, e.Via, e.Source, e.API, e.Action, e.Target, e.Result, e.Status); err != nil {
			return dbErr(err)
		}
	}
	return dbErr(tx.Commit())
}

// AuditFilter selects audit entries. Zero fields select everything.
type AuditFilter struct {
	From, To time.Time // at or after From, before To
	KeyID    string
	// Action is an action, or a prefix of actions ending in "*": "sandbox.*", "file.*".
	Action string
	Target string
	After  int64 // only entries after this id: the last id of the previous page
	Limit  int   // 0: 1000; at most 1000
}

// MaxAuditPage is the most entries one Audit call returns.
const MaxAuditPage = 1000

// Audit lists audit entries, oldest (lowest id) first. Page through them with After.
func (s *Store) Audit(ctx context.Context, f AuditFilter) ([]AuditEntry, error) {
	q := `SELECT id, at, key_id, via, source, api, action, target, result, status FROM audit WHERE id > ?`
	args := []any{f.After}
	if !f.From.IsZero() {
		q += ` AND at >= ?`
		args = append(args, f.From.UnixMilli())
	}
	if !f.To.IsZero() {
		q += ` AND at < ?`
		args = append(args, f.To.UnixMilli())
	}
	if f.KeyID != "" {
		q += ` AND key_id = ?`
		args = append(args, f.KeyID)
	}
	if prefix, ok := strings.CutSuffix(f.Action, "*"); ok {
		// A range, not LIKE: no escaping of the prefix, and it uses the index on both.
		q += ` AND action >= ? AND action < ?`
		args = append(args, prefix, prefix+"\U0010FFFF")
	} else if f.Action != "" {
		q += ` AND action = ?`
		args = append(args, f.Action)
	}
	if f.Target != "" {
		q += ` AND target = ?`
		args = append(args, f.Target)
	}
	limit := f.Limit
	if limit <= 0 || limit > MaxAuditPage {
		limit = MaxAuditPage
	}
	q += ` ORDER BY id LIMIT ` + strconv.Itoa(limit)
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, dbErr(err)
	}
	defer rows.Close()
	out := []AuditEntry{}
	for rows.Next() {
		var e AuditEntry
		var at int64
		if err := rows.Scan(&e.ID, &at, &e.KeyID, &e.Via, &e.Source, &e.API, &e.Action, &e.Target, &e.Result, &e.Status); err != nil {
			return nil, dbErr(err)
		}
		e.Time = time.UnixMilli(at).UTC()
		out = append(out, e)
	}
	return out, dbErr(rows.Err())
}

// PruneAudit deletes the audit entries older than before, a few thousand per transaction so
// that writers never wait long behind it, and returns how many it deleted.
func (s *Store) PruneAudit(ctx context.Context, before time.Time) (int64, error) {
	var total int64
	for {
		res, err := s.db.ExecContext(ctx, `DELETE FROM audit WHERE id IN (SELECT id FROM audit WHERE at < ? ORDER BY id LIMIT 5000)`, before.UnixMilli())
		if err != nil {
			return total, dbErr(err)
		}
		n, _ := res.RowsAffected()
		total += n
		if n < 5000 {
			return total, nil
		}
	}
}
