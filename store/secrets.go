package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/tupper-dev/tupper/provider"
)

// Stored secrets: named values an API key keeps in the server (E2B's /secrets), which the
// server writes into its sandboxes' egress (bound secrets) and never returns. Each belongs
// to the API key that made it: another key can neither see nor use it, and revoking the key
// deletes them. Names are unique per key; the store takes them as given (the API that serves
// them checks and canonicalizes them). Values are stored as they are, like webhook secrets:
// the server needs them; the database's files are readable by their owner only.

// SecretIDPrefix begins every stored secret's id.
const SecretIDPrefix = "sec_"

// Secret is a stored secret's metadata: never its value.
type Secret struct {
	ID        string
	Name      string
	Version   int64 // 1 when made, one more at each update
	Metadata  map[string]string
	CreatedAt time.Time
	UpdatedAt time.Time
}

// CreateSecret stores a new secret of API key keyID. CodeConflict when the key has one of
// that name.
func (s *Store) CreateSecret(ctx context.Context, keyID, name, value string, metadata map[string]string) (Secret, error) {
	md, err := metadataJSON(metadata)
	if err != nil {
		return Secret{}, err
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	sec := Secret{ID: SecretIDPrefix + RandomString(16), Name: name, Version: 1, Metadata: nonNil(metadata), CreatedAt: now, UpdatedAt: now}
	res, err := s.db.ExecContext(ctx, `INSERT INTO secrets(id, api_key_id, name, value, version, metadata, created_at, updated_at)
		VALUES(?, ?, ?, ?, 1, ?, ?, ?) ON CONFLICT(api_key_id, name) DO NOTHING`,
		sec.ID, keyID, name, value, md, unixMilli(now), unixMilli(now))
	if err != nil {
		return Secret{}, dbErr(err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return Secret{}, provider.Errorf(provider.CodeConflict, "a secret named %q exists", name)
	}
	return sec, nil
}

// UpdateSecret stores value as the new version of keyID's secret idOrName (its id, or its
// name), and replaces its metadata when metadata is not nil. CodeNotFound when the key has
// no such secret.
func (s *Store) UpdateSecret(ctx context.Context, keyID, idOrName, value string, metadata map[string]string) (Secret, error) {
	now := unixMilli(time.Now())
	q := `UPDATE secrets SET value = ?, version = version + 1, updated_at = ? WHERE api_key_id = ? AND (id = ? OR name = ?)`
	args := []any{value, now, keyID, idOrName, idOrName}
	if metadata != nil {
		md, err := metadataJSON(metadata)
		if err != nil {
			return Secret{}, err
		}
		q = `UPDATE secrets SET value = ?, version = version + 1, updated_at = ?, metadata = ? WHERE api_key_id = ? AND (id = ? OR name = ?)`
		args = []any{value, now, md, keyID, idOrName, idOrName}
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return Secret{}, dbErr(err)
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, q, args...)
	if err != nil {
		return Secret{}, dbErr(err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return Secret{}, secretNotFound(idOrName)
	}
	sec, err := secretTx(ctx, tx, keyID, idOrName)
	if err != nil {
		return Secret{}, err
	}
	return sec, dbErr(tx.Commit())
}

// GetSecret returns the metadata of keyID's secret idOrName (its id, or its name).
func (s *Store) GetSecret(ctx context.Context, keyID, idOrName string) (Secret, error) {
	return secretTx(ctx, s.db, keyID, idOrName)
}

type queryer interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func secretTx(ctx context.Context, q queryer, keyID, idOrName string) (Secret, error) {
	row := q.QueryRowContext(ctx, `SELECT seq, id, name, version, metadata, created_at, updated_at FROM secrets
		WHERE api_key_id = ? AND (id = ? OR name = ?)`, keyID, idOrName, idOrName)
	sec, _, err := scanSecret(row.Scan)
	if errors.Is(err, sql.ErrNoRows) {
		return Secret{}, secretNotFound(idOrName)
	}
	return sec, err
}

// Secrets lists keyID's secrets, oldest first: at most limit, from the one after cursor
// (0: the first). next is the cursor of the following page, 0 when this is the last.
func (s *Store) Secrets(ctx context.Context, keyID string, cursor int64, limit int) (list []Secret, next int64, err error) {
	rows, err := s.db.QueryContext(ctx, `SELECT seq, id, name, version, metadata, created_at, updated_at FROM secrets
		WHERE api_key_id = ? AND seq > ? ORDER BY seq LIMIT ?`, keyID, cursor, limit+1)
	if err != nil {
		return nil, 0, dbErr(err)
	}
	defer rows.Close()
	var seqs []int64
	for rows.Next() {
		sec, seq, err := scanSecret(rows.Scan)
		if err != nil {
			return nil, 0, err
		}
		list, seqs = append(list, sec), append(seqs, seq)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, dbErr(err)
	}
	if len(list) > limit {
		list, next = list[:limit], seqs[limit-1]
	}
	return list, next, nil
}

// DeleteSecret deletes keyID's secret idOrName. CodeNotFound when there is none.
func (s *Store) DeleteSecret(ctx context.Context, keyID, idOrName string) error {
	res, err := s.db.ExecContext(ctx, `DELETE FROM secrets WHERE api_key_id = ? AND (id = ? OR name = ?)`, keyID, idOrName, idOrName)
	if err != nil {
		return dbErr(err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return secretNotFound(idOrName)
	}
	return nil
}

// SecretValues returns the current values of keyID's secrets of these names: the one read
// of values, for the server to bind them into a sandbox's egress. A name the key has no
// secret of is CodeNotFound, naming it.
func (s *Store) SecretValues(ctx context.Context, keyID string, names []string) (map[string]string, error) {
	out := make(map[string]string, len(names))
	for _, n := range names {
		if _, ok := out[n]; ok {
			continue
		}
		var v string
		err := s.db.QueryRowContext(ctx, `SELECT value FROM secrets WHERE api_key_id = ? AND name = ?`, keyID, n).Scan(&v)
		if errors.Is(err, sql.ErrNoRows) {
			return nil, secretNotFound(n)
		}
		if err != nil {
			return nil, dbErr(err)
		}
		out[n] = v
	}
	return out, nil
}

func secretNotFound(idOrName string) error {
	return provider.Errorf(provider.CodeNotFound, "secret %q not found", idOrName)
}

func scanSecret(scan func(...any) error) (Secret, int64, error) {
	var sec Secret
	var seq, created, updated int64
	var md string
	if err := scan(&seq, &sec.ID, &sec.Name, &sec.Version, &md, &created, &updated); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return Secret{}, 0, err
		}
		return Secret{}, 0, dbErr(err)
	}
	if err := json.Unmarshal([]byte(md), &sec.Metadata); err != nil {
		return Secret{}, 0, errorf(provider.CodeInternal, "secret %s: metadata: %v", sec.ID, err)
	}
	sec.Metadata = nonNil(sec.Metadata)
	sec.CreatedAt, sec.UpdatedAt = fromMilli(created), fromMilli(updated)
	return sec, seq, nil
}

func metadataJSON(md map[string]string) (string, error) {
	b, err := json.Marshal(nonNil(md))
	if err != nil {
		return "", errorf(provider.CodeInvalidArgument, "metadata: %v", err)
	}
	return string(b), nil
}

func nonNil(md map[string]string) map[string]string {
	if md == nil {
		return map[string]string{}
	}
	return md
}

// IsSecretID reports whether s has the form of a stored secret's id.
func IsSecretID(s string) bool { return strings.HasPrefix(s, SecretIDPrefix) }
