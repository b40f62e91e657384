package store

import (
	"context"
	"math"
	"strings"
	"time"

	"github.com/tupper-dev/tupper/provider"
)

// Snapshot is a snapshot made through the server: of which sandbox, for which API key, and
// when it expires (zero: never).
type Snapshot struct {
	ID        string
	SandboxID string
	APIKeyID  string
	CreatedAt time.Time
	ExpiresAt time.Time
}

// SnapshotQuota bounds the unexpired snapshots of one sandbox and of one API key; a negative
// bound is no bound.
type SnapshotQuota struct {
	PerSandbox, PerKey int
}

// reservedPrefix begins the id of a snapshot being made (see ReserveSnapshot).
const reservedPrefix = "reserved-"

// ReserveSnapshot records a snapshot about to be made, within q, and returns the id it is
// recorded under until SetSnapshotID gives the provider's (DeleteSnapshot removes it if the
// snapshot fails). The check and the record are one statement, so two requests at once cannot
// both take the last place. Over a bound it fails with CodeResourceExhausted, saying which.
func (s *Store) ReserveSnapshot(ctx context.Context, sn Snapshot, q SnapshotQuota) (string, error) {
	id := s.reservation()
	now := time.Now().UnixMilli()
	bound := func(n int) int64 {
		if n < 0 {
			return math.MaxInt64
		}
		return int64(n)
	}
	// The casts give PostgreSQL the parameters' types, which a select list does not.
	res, err := s.db.ExecContext(ctx, `INSERT INTO snapshots(id, sandbox_id, api_key_id, created_at, expires_at)
		SELECT CAST(?1 AS TEXT), CAST(?2 AS TEXT), CAST(?3 AS TEXT), CAST(?4 AS BIGINT), CAST(?5 AS BIGINT)
		WHERE (SELECT count(*) FROM snapshots WHERE sandbox_id = ?2 AND (expires_at = 0 OR expires_at > ?4)) < ?6
		  AND (SELECT count(*) FROM snapshots WHERE api_key_id = ?3 AND (expires_at = 0 OR expires_at > ?4)) < ?7`,
		id, sn.SandboxID, sn.APIKeyID, now, unixMilli(sn.ExpiresAt), bound(q.PerSandbox), bound(q.PerKey))
	if err != nil {
		return "", dbErr(err)
	}
	if n, _ := res.RowsAffected(); n == 1 {
		return id, nil
	}
	var perSandbox, perKey int
	err = s.db.QueryRowContext(ctx, `SELECT
		(SELECT count(*) FROM snapshots WHERE sandbox_id = ?1 AND (expires_at = 0 OR expires_at > ?3)),
		(SELECT count(*) FROM snapshots WHERE api_key_id = ?2 AND (expires_at = 0 OR expires_at > ?3))`,
		sn.SandboxID, sn.APIKeyID, now).Scan(&perSandbox, &perKey)
	if err != nil {
		return "", dbErr(err)
	}
	if q.PerSandbox >= 0 && perSandbox >= q.PerSandbox {
		return "", provider.Errorf(provider.CodeResourceExhausted, "sandbox %s has %d unexpired snapshots, the most the server allows per sandbox; wait for one to expire", sn.SandboxID, perSandbox)
	}
	return "", provider.Errorf(provider.CodeResourceExhausted, "the API key has %d unexpired snapshots, the most the server allows per key; wait for one to expire", perKey)
}

// SetSnapshotID replaces a reservation's id by the snapshot's.
func (s *Store) SetSnapshotID(ctx context.Context, reserved, id string) error {
	_, err := s.db.ExecContext(ctx, `UPDATE snapshots SET id = ? WHERE id = ?`, id, reserved)
	return dbErr(err)
}

// DeleteSnapshot forgets a snapshot or a reservation; forgetting one not recorded is no error.
func (s *Store) DeleteSnapshot(ctx context.Context, id string) error {
	_, err := s.db.ExecContext(ctx, `DELETE FROM snapshots WHERE id = ?`, id)
	return dbErr(err)
}

// DropSnapshotReservations forgets the reservations that servers no longer alive left when
// they stopped in the middle of a snapshot (on SQLite, any earlier process). A server calls
// it when it starts, and its reaper as it runs.
func (s *Store) DropSnapshotReservations(ctx context.Context) error {
	live, err := s.liveInstances(ctx)
	if err != nil {
		return err
	}
	rows, err := s.db.QueryContext(ctx, `SELECT id FROM snapshots WHERE substr(id, 1, ?) = ?`, len(reservedPrefix), reservedPrefix)
	if err != nil {
		return dbErr(err)
	}
	var dead []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return dbErr(err)
		}
		if !live[reservationInstance(id)] {
			dead = append(dead, id)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return dbErr(err)
	}
	for _, id := range dead {
		if _, err := s.db.ExecContext(ctx, `DELETE FROM snapshots WHERE id = ?`, id); err != nil {
			return dbErr(err)
		}
	}
	return nil
}

// ExpiredSnapshots lists the snapshots (not reservations) that expired at or before now.
func (s *Store) ExpiredSnapshots(ctx context.Context, now time.Time) ([]Snapshot, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT id, sandbox_id, api_key_id, created_at, expires_at FROM snapshots
		WHERE expires_at != 0 AND expires_at <= ? ORDER BY expires_at`, now.UnixMilli())
	if err != nil {
		return nil, dbErr(err)
	}
	defer rows.Close()
	var out []Snapshot
	for rows.Next() {
		var sn Snapshot
		var created, expires int64
		if err := rows.Scan(&sn.ID, &sn.SandboxID, &sn.APIKeyID, &created, &expires); err != nil {
			return nil, dbErr(err)
		}
		if strings.HasPrefix(sn.ID, reservedPrefix) {
			continue // a snapshot still being made
		}
		sn.CreatedAt, sn.ExpiresAt = time.UnixMilli(created), time.UnixMilli(expires)
		out = append(out, sn)
	}
	return out, dbErr(rows.Err())
}
