package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"slices"
	"strconv"
	"time"

	"github.com/tupper-dev/tupper/provider"
)

// Event is one lifecycle transition.
type Event struct {
	Seq       int64           `json:"-"`
	ID        string          `json:"id"`
	Type      string          `json:"type"`
	SandboxID string          `json:"sandboxId,omitempty"`
	CreatedAt time.Time       `json:"createdAt"`
	Data      json.RawMessage `json:"data,omitempty"`
}

// AddEvent stores an event and, in the same transaction, queues a delivery of it to every
// webhook whose filter takes its type, so no event is ever lost between the two.
func (s *Store) AddEvent(ctx context.Context, typ, sandboxID string, data any) (Event, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return Event{}, dbErr(err)
	}
	defer tx.Rollback()
	ev, err := addEventTx(ctx, tx, typ, sandboxID, data)
	if err != nil {
		return Event{}, err
	}
	return ev, dbErr(tx.Commit())
}

// NewEvent is an event to store in the transaction of the write it is about (PutSandbox),
// so that the write is never acknowledged without it.
type NewEvent struct {
	Type string
	Data any
}

// addEventTx is AddEvent in the caller's transaction.
func addEventTx(ctx context.Context, tx *tx, typ, sandboxID string, data any) (Event, error) {
	raw := json.RawMessage(`{}`)
	if data != nil {
		b, err := json.Marshal(data)
		if err != nil {
			return Event{}, provider.Errorf(provider.CodeInternal, "event data: %v", err)
		}
		raw = b
	}
	ev := Event{ID: "evt_" + RandomString(12), Type: typ, SandboxID: sandboxID, CreatedAt: time.Now().UTC().Truncate(time.Millisecond), Data: raw}
	// RETURNING, not LastInsertId, which PostgreSQL's driver lacks.
	if err := tx.QueryRowContext(ctx, `INSERT INTO events(id, type, sandbox_id, created_at, data) VALUES(?, ?, ?, ?, ?) RETURNING seq`,
		ev.ID, ev.Type, ev.SandboxID, unixMilli(ev.CreatedAt), string(raw)).Scan(&ev.Seq); err != nil {
		return Event{}, dbErr(err)
	}
	hooks, err := webhooksTx(ctx, tx)
	if err != nil {
		return Event{}, err
	}
	for _, h := range hooks {
		if !h.Wants(typ) {
			continue
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO deliveries(webhook_id, event_seq, next_attempt) VALUES(?, ?, ?)`,
			h.ID, ev.Seq, unixMilli(ev.CreatedAt)); err != nil {
			return Event{}, dbErr(err)
		}
	}
	return ev, nil
}

// EventFilter selects events. Zero fields select everything.
type EventFilter struct {
	SandboxID string
	Type      string
	Since     time.Time // created at or after
	After     string    // an event id: only events after it
	Limit     int       // 0: 1000
}

// Events lists events, oldest first.
func (s *Store) Events(ctx context.Context, f EventFilter) ([]Event, error) {
	q := `SELECT seq, id, type, sandbox_id, created_at, data FROM events WHERE 1=1`
	var args []any
	if f.SandboxID != "" {
		q += ` AND sandbox_id = ?`
		args = append(args, f.SandboxID)
	}
	if f.Type != "" {
		q += ` AND type = ?`
		args = append(args, f.Type)
	}
	if !f.Since.IsZero() {
		q += ` AND created_at >= ?`
		args = append(args, unixMilli(f.Since))
	}
	if f.After != "" {
		var seq int64
		if err := s.db.QueryRowContext(ctx, `SELECT seq FROM events WHERE id = ?`, f.After).Scan(&seq); err != nil {
			if err == sql.ErrNoRows {
				return nil, provider.Errorf(provider.CodeInvalidArgument, "no event %q", f.After)
			}
			return nil, dbErr(err)
		}
		q += ` AND seq > ?`
		args = append(args, seq)
	}
	limit := f.Limit
	if limit <= 0 || limit > 1000 {
		limit = 1000
	}
	q += ` ORDER BY seq LIMIT ` + strconv.Itoa(limit)
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, dbErr(err)
	}
	defer rows.Close()
	out := []Event{}
	for rows.Next() {
		var ev Event
		var created int64
		var data string
		if err := rows.Scan(&ev.Seq, &ev.ID, &ev.Type, &ev.SandboxID, &created, &data); err != nil {
			return nil, dbErr(err)
		}
		ev.CreatedAt, ev.Data = fromMilli(created), json.RawMessage(data)
		out = append(out, ev)
	}
	return out, dbErr(rows.Err())
}

// Webhook is a registered receiver of events.
type Webhook struct {
	ID        string    `json:"id"`
	URL       string    `json:"url"`
	Secret    string    `json:"-"`
	Events    []string  `json:"events"` // empty: every event
	CreatedAt time.Time `json:"createdAt"`
}

// Wants reports whether the webhook takes events of type typ.
func (h Webhook) Wants(typ string) bool { return len(h.Events) == 0 || slices.Contains(h.Events, typ) }

// SecretPrefix is how webhook secrets begin.
const SecretPrefix = "whsec_"

// CreateWebhook registers a webhook with a new secret.
func (s *Store) CreateWebhook(ctx context.Context, url string, events []string) (Webhook, error) {
	if events == nil {
		events = []string{}
	}
	h := Webhook{ID: "wh_" + RandomString(8), URL: url, Secret: SecretPrefix + RandomString(24), Events: events, CreatedAt: time.Now().UTC().Truncate(time.Millisecond)}
	evs, _ := json.Marshal(h.Events)
	_, err := s.db.ExecContext(ctx, `INSERT INTO webhooks(id, url, secret, events, created_at) VALUES(?, ?, ?, ?, ?)`,
		h.ID, h.URL, h.Secret, string(evs), unixMilli(h.CreatedAt))
	return h, dbErr(err)
}

type querier interface {
	QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error)
}

func webhooksTx(ctx context.Context, q querier) ([]Webhook, error) {
	rows, err := q.QueryContext(ctx, `SELECT id, url, secret, events, created_at FROM webhooks ORDER BY created_at, id`)
	if err != nil {
		return nil, dbErr(err)
	}
	defer rows.Close()
	out := []Webhook{}
	for rows.Next() {
		var h Webhook
		var evs string
		var created int64
		if err := rows.Scan(&h.ID, &h.URL, &h.Secret, &evs, &created); err != nil {
			return nil, dbErr(err)
		}
		_ = json.Unmarshal([]byte(evs), &h.Events)
		h.CreatedAt = fromMilli(created)
		out = append(out, h)
	}
	return out, dbErr(rows.Err())
}

// Webhooks lists the webhooks, oldest first.
func (s *Store) Webhooks(ctx context.Context) ([]Webhook, error) { return webhooksTx(ctx, s.db) }

// DeleteWebhook removes a webhook and its pending deliveries. CodeNotFound when there is none.
func (s *Store) DeleteWebhook(ctx context.Context, id string) error {
	res, err := s.db.ExecContext(ctx, `DELETE FROM webhooks WHERE id = ?`, id)
	if err != nil {
		return dbErr(err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return provider.Errorf(provider.CodeNotFound, "no webhook %q", id)
	}
	return nil
}

// Delivery is one event to send to one webhook.
type Delivery struct {
	ID       int64
	Webhook  Webhook
	Event    Event
	Attempts int // attempts made before this one
}

// ClaimDeliveries returns up to limit deliveries due at now, claimed for this store's
// instance, and pushes their next attempt to now+lease, so a delivery in flight is not picked
// again; if the server dies, another releases it at once (ReleaseClaims), or it becomes due
// again when the lease runs out.
//
// A webhook gets a sandbox's events in order: a delivery is claimed only when every earlier
// delivery of the same sandbox's events to the same webhook is done (delivered, or given up),
// so no two of them are ever in flight at once. Servers sharing a PostgreSQL store claim at
// the same time without waiting for each other (FOR UPDATE SKIP LOCKED) and never claim one
// delivery twice.
func (s *Store) ClaimDeliveries(ctx context.Context, now time.Time, lease time.Duration, limit int) ([]Delivery, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, dbErr(err)
	}
	defer tx.Rollback()
	lock := ""
	if s.db.dialect == postgres {
		lock = " FOR UPDATE OF d SKIP LOCKED"
	}
	rows, err := tx.QueryContext(ctx, `SELECT d.id, d.attempts, w.id, w.url, w.secret, e.seq, e.id, e.type, e.sandbox_id, e.created_at, e.data
		FROM deliveries d JOIN webhooks w ON w.id = d.webhook_id JOIN events e ON e.seq = d.event_seq
		WHERE d.delivered_at IS NULL AND d.failed_at IS NULL AND d.next_attempt <= ?
		AND (e.sandbox_id = '' OR NOT EXISTS (SELECT 1 FROM deliveries p JOIN events pe ON pe.seq = p.event_seq
			WHERE p.webhook_id = d.webhook_id AND p.id < d.id AND p.delivered_at IS NULL AND p.failed_at IS NULL
			AND pe.sandbox_id = e.sandbox_id))
		ORDER BY d.next_attempt, d.id LIMIT ?`+lock, unixMilli(now), limit)
	if err != nil {
		return nil, dbErr(err)
	}
	var out []Delivery
	for rows.Next() {
		var d Delivery
		var created int64
		var data string
		if err := rows.Scan(&d.ID, &d.Attempts, &d.Webhook.ID, &d.Webhook.URL, &d.Webhook.Secret,
			&d.Event.Seq, &d.Event.ID, &d.Event.Type, &d.Event.SandboxID, &created, &data); err != nil {
			rows.Close()
			return nil, dbErr(err)
		}
		d.Event.CreatedAt, d.Event.Data = fromMilli(created), json.RawMessage(data)
		out = append(out, d)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, dbErr(err)
	}
	for _, d := range out {
		if _, err := tx.ExecContext(ctx, `UPDATE deliveries SET next_attempt = ?, claimed = ? WHERE id = ?`, unixMilli(now.Add(lease)), s.Instance(), d.ID); err != nil {
			return nil, dbErr(err)
		}
	}
	return out, dbErr(tx.Commit())
}

// DeliverySucceeded records a delivery as done.
func (s *Store) DeliverySucceeded(ctx context.Context, id int64) error {
	_, err := s.db.ExecContext(ctx, `UPDATE deliveries SET delivered_at = ?, attempts = attempts + 1, last_error = '', claimed = 0 WHERE id = ?`, time.Now().UnixMilli(), id)
	return dbErr(err)
}

// DeliveryFailed records a failed attempt: retried at next, or given up when next is zero.
func (s *Store) DeliveryFailed(ctx context.Context, id int64, msg string, next time.Time) error {
	if next.IsZero() {
		_, err := s.db.ExecContext(ctx, `UPDATE deliveries SET failed_at = ?, attempts = attempts + 1, last_error = ?, claimed = 0 WHERE id = ?`, time.Now().UnixMilli(), msg, id)
		return dbErr(err)
	}
	_, err := s.db.ExecContext(ctx, `UPDATE deliveries SET next_attempt = ?, attempts = attempts + 1, last_error = ?, claimed = 0 WHERE id = ?`, unixMilli(next), msg, id)
	return dbErr(err)
}

// DeliveryStatus is a delivery's progress, for tests and operators.
type DeliveryStatus struct {
	ID        int64
	WebhookID string
	EventID   string
	Attempts  int
	Delivered bool
	Failed    bool
	LastError string
}

// Deliveries lists every delivery of a webhook, oldest first.
func (s *Store) Deliveries(ctx context.Context, webhookID string) ([]DeliveryStatus, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT d.id, d.webhook_id, e.id, d.attempts, d.delivered_at IS NOT NULL, d.failed_at IS NOT NULL, d.last_error
		FROM deliveries d JOIN events e ON e.seq = d.event_seq WHERE d.webhook_id = ? ORDER BY d.id`, webhookID)
	if err != nil {
		return nil, dbErr(err)
	}
	defer rows.Close()
	var out []DeliveryStatus
	for rows.Next() {
		var d DeliveryStatus
		if err := rows.Scan(&d.ID, &d.WebhookID, &d.EventID, &d.Attempts, &d.Delivered, &d.Failed, &d.LastError); err != nil {
			return nil, dbErr(err)
		}
		out = append(out, d)
	}
	return out, dbErr(rows.Err())
}

// ReleaseClaims makes every delivery claimed by a server no longer alive due now: on SQLite
// (one server to a store) the claims of an earlier process, on PostgreSQL those of a server
// whose instance lock is gone (it died, or lost its connection). A server calls it when it
// starts and as it delivers. Returns how many it released.
func (s *Store) ReleaseClaims(ctx context.Context) (int, error) {
	res, err := s.db.ExecContext(ctx, `UPDATE deliveries SET claimed = 0, next_attempt = ?
		WHERE delivered_at IS NULL AND failed_at IS NULL AND `+s.deadClaim("claimed"), time.Now().UnixMilli(), s.Instance())
	if err != nil {
		return 0, dbErr(err)
	}
	n, _ := res.RowsAffected()
	return int(n), nil
}
