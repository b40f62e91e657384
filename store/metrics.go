package store

import (
	"context"
	"database/sql"
	"time"

	"github.com/tupper-dev/tupper/internal/metrics"
)

// Measure makes the store time each of its statements into m (tupper_store_query_seconds);
// nil stops it. It may be called while the store is in use.
func (s *Store) Measure(m *metrics.Metrics) { s.db.m.Store(m) }

func (d dialect) String() string {
	if d == postgres {
		return "postgres"
	}
	return "sqlite"
}

// Ping checks that the database answers (the server's readiness probe).
func (s *Store) Ping(ctx context.Context) error { return dbErr(s.db.PingContext(ctx)) }

// Outbox counts the webhook deliveries neither delivered nor given up, and returns when the
// event of the oldest of them happened (zero when there is none): how far behind the
// deliveries are.
func (s *Store) Outbox(ctx context.Context) (pending int, oldest time.Time, err error) {
	var first sql.NullInt64
	err = s.db.QueryRowContext(ctx, `SELECT count(*), min(e.created_at) FROM deliveries d JOIN events e ON e.seq = d.event_seq
		WHERE d.delivered_at IS NULL AND d.failed_at IS NULL`).Scan(&pending, &first)
	if err != nil {
		return 0, time.Time{}, dbErr(err)
	}
	if first.Valid {
		oldest = fromMilli(first.Int64)
	}
	return pending, oldest, nil
}
