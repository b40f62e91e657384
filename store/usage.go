package store

import (
	"context"
	"encoding/json"
	"time"
)

// UsageSample is one reading of a live sandbox's counters for the usage ledger, with what
// the server knows of it beyond its record: template, runtime and the node it runs on (""
// keeps what the ledger has).
type UsageSample struct {
	SandboxID, Template, Runtime, Node string
	At                                 time.Time
	CPUUsec, MemPeak, DiskUsed         int64
	NetRx, NetTx                       int64
}

// UsageRecord is one sandbox's line of the usage ledger. Its key, labels and start are its
// record's when the line was first written; its end and end reason, once it ended.
type UsageRecord struct {
	SandboxID, APIKeyID        string
	Labels                     map[string]string
	Template, Runtime, Node    string
	StartedAt, EndedAt         time.Time // EndedAt is zero while it lives
	SampledAt                  time.Time // the last reading of its counters (zero: none)
	CPUUsec, MemPeak, DiskPeak int64
	NetRx, NetTx               int64
	EndReason                  string
}

// usageUpsert writes a sample into the ledger: the line is made from the sandbox's record
// the first time (nothing is written for a sandbox the store has no record of), and later
// samples only raise its counters, so that samples from two servers, or a late one after
// the end's, never lower a figure.
const usageUpsert = `INSERT INTO usage_ledger(sandbox_id, api_key_id, labels, template, runtime, node, started_at,
	sampled_at, cpu_usec, mem_peak, disk_peak, net_rx, net_tx)
SELECT id, api_key_id, labels, CAST(?2 AS TEXT), CAST(?3 AS TEXT), CAST(?4 AS TEXT), created_at,
	CAST(?5 AS BIGINT), CAST(?6 AS BIGINT), CAST(?7 AS BIGINT), CAST(?8 AS BIGINT), CAST(?9 AS BIGINT), CAST(?10 AS BIGINT)
FROM sandboxes WHERE id = ?1
ON CONFLICT(sandbox_id) DO UPDATE SET
	template = CASE WHEN excluded.template != '' THEN excluded.template ELSE usage_ledger.template END,
	runtime = CASE WHEN excluded.runtime != '' THEN excluded.runtime ELSE usage_ledger.runtime END,
	node = CASE WHEN excluded.node != '' THEN excluded.node ELSE usage_ledger.node END,
	sampled_at = CASE WHEN excluded.sampled_at > usage_ledger.sampled_at THEN excluded.sampled_at ELSE usage_ledger.sampled_at END,
	cpu_usec = CASE WHEN excluded.cpu_usec > usage_ledger.cpu_usec THEN excluded.cpu_usec ELSE usage_ledger.cpu_usec END,
	mem_peak = CASE WHEN excluded.mem_peak > usage_ledger.mem_peak THEN excluded.mem_peak ELSE usage_ledger.mem_peak END,
	disk_peak = CASE WHEN excluded.disk_peak > usage_ledger.disk_peak THEN excluded.disk_peak ELSE usage_ledger.disk_peak END,
	net_rx = CASE WHEN excluded.net_rx > usage_ledger.net_rx THEN excluded.net_rx ELSE usage_ledger.net_rx END,
	net_tx = CASE WHEN excluded.net_tx > usage_ledger.net_tx THEN excluded.net_tx ELSE usage_ledger.net_tx END`

func upsertUsage(ctx context.Context, tx *tx, u UsageSample) error {
	_, err := tx.ExecContext(ctx, usageUpsert, u.SandboxID, u.Template, u.Runtime, u.Node,
		unixMilli(u.At), u.CPUUsec, u.MemPeak, u.DiskUsed, u.NetRx, u.NetTx)
	return dbErr(err)
}

// RecordUsage writes samples into the usage ledger, in one transaction.
func (s *Store) RecordUsage(ctx context.Context, samples ...UsageSample) error {
	if len(samples) == 0 {
		return nil
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return dbErr(err)
	}
	defer tx.Rollback()
	for _, u := range samples {
		if err := upsertUsage(ctx, tx, u); err != nil {
			return err
		}
	}
	return dbErr(tx.Commit())
}

// EndUsage closes sandbox id's ledger line with its record's end (MarkDestroyed first), after
// writing last, its final sample (nil: the samples so far stand). A sandbox with no line yet
// gets one, with 0 for what was never sampled.
func (s *Store) EndUsage(ctx context.Context, id string, last *UsageSample) error {
	u := UsageSample{SandboxID: id}
	if last != nil {
		u = *last
		u.SandboxID = id
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return dbErr(err)
	}
	defer tx.Rollback()
	if err := upsertUsage(ctx, tx, u); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `UPDATE usage_ledger SET
		ended_at = (SELECT COALESCE(destroyed_at, 0) FROM sandboxes WHERE id = ?1),
		end_reason = (SELECT end_reason FROM sandboxes WHERE id = ?1)
		WHERE sandbox_id = ?1 AND ended_at = 0`, id); err != nil {
		return dbErr(err)
	}
	return dbErr(tx.Commit())
}

// UsageFilter selects ledger lines: the sandboxes that lived during [From, To) (zero: no
// bound on that side).
type UsageFilter struct {
	From, To time.Time
}

// Usage lists the ledger's lines that f selects, oldest start first.
func (s *Store) Usage(ctx context.Context, f UsageFilter) ([]UsageRecord, error) {
	q := `SELECT sandbox_id, api_key_id, labels, template, runtime, node, started_at, ended_at, sampled_at,
		cpu_usec, mem_peak, disk_peak, net_rx, net_tx, end_reason FROM usage_ledger WHERE 1 = 1`
	var args []any
	if !f.To.IsZero() {
		q += ` AND started_at < ?`
		args = append(args, f.To.UnixMilli())
	}
	if !f.From.IsZero() {
		q += ` AND (ended_at = 0 OR ended_at >= ?)`
		args = append(args, f.From.UnixMilli())
	}
	q += ` ORDER BY started_at, sandbox_id`
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, dbErr(err)
	}
	defer rows.Close()
	out := []UsageRecord{}
	for rows.Next() {
		var r UsageRecord
		var labels string
		var started, ended, sampled int64
		if err := rows.Scan(&r.SandboxID, &r.APIKeyID, &labels, &r.Template, &r.Runtime, &r.Node, &started, &ended, &sampled,
			&r.CPUUsec, &r.MemPeak, &r.DiskPeak, &r.NetRx, &r.NetTx, &r.EndReason); err != nil {
			return nil, dbErr(err)
		}
		_ = json.Unmarshal([]byte(labels), &r.Labels)
		r.StartedAt = time.UnixMilli(started).UTC()
		r.EndedAt = fromMilli(ended)
		r.SampledAt = fromMilli(sampled)
		out = append(out, r)
	}
	return out, dbErr(rows.Err())
}
