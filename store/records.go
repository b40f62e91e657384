package store

import (
	"context"
	"crypto/subtle"
	"database/sql"
	"encoding/json"
	"strings"
	"time"

	"github.com/tupper-dev/tupper/provider"
)

// APIKey is an account API key as stored: never the key itself.
type APIKey struct {
	ID        string    `json:"id"`
	Name      string    `json:"name,omitempty"`
	Prefix    string    `json:"prefix"` // the first characters of the key, for people to tell keys apart
	CreatedAt time.Time `json:"createdAt"`
	RevokedAt time.Time `json:"revokedAt,omitzero"`
}

// Revoked reports whether the key was revoked.
func (k APIKey) Revoked() bool { return !k.RevokedAt.IsZero() }

// KeyPrefix is how account API keys begin.
const KeyPrefix = "ak_"

// E2BKeyPrefix is how API keys made for E2B clients begin: "e2b_" and 40 lowercase hex
// digits is the form some versions of E2B's SDKs insist on (^e2b_[0-9a-f]+$). Such a key is an
// account API key like any other.
const E2BKeyPrefix = "e2b_"

// CreateKey makes a new API key and returns its record and the key, which is not stored and
// cannot be shown again.
func (s *Store) CreateKey(ctx context.Context, name string) (APIKey, string, error) {
	return s.createKey(ctx, name, KeyPrefix)
}

// CreateE2BKey is CreateKey for E2B clients: the key begins with E2BKeyPrefix.
func (s *Store) CreateE2BKey(ctx context.Context, name string) (APIKey, string, error) {
	return s.createKey(ctx, name, E2BKeyPrefix)
}

func (s *Store) createKey(ctx context.Context, name, prefix string) (APIKey, string, error) {
	secret := prefix + RandomString(20)
	k := APIKey{ID: "key_" + RandomString(6), Name: name, Prefix: secret[:len(prefix)+6], CreatedAt: time.Now().UTC().Truncate(time.Millisecond)}
	_, err := s.db.ExecContext(ctx, `INSERT INTO api_keys(id, name, prefix, hash, created_at) VALUES(?, ?, ?, ?, ?)`,
		k.ID, k.Name, k.Prefix, Hash(secret), unixMilli(k.CreatedAt))
	if err != nil {
		return APIKey{}, "", dbErr(err)
	}
	return k, secret, nil
}

// Keys lists every API key, oldest first.
func (s *Store) Keys(ctx context.Context) ([]APIKey, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT id, name, prefix, created_at, revoked_at FROM api_keys ORDER BY created_at, id`)
	if err != nil {
		return nil, dbErr(err)
	}
	defer rows.Close()
	var out []APIKey
	for rows.Next() {
		var k APIKey
		var created int64
		var revoked sql.NullInt64
		if err := rows.Scan(&k.ID, &k.Name, &k.Prefix, &created, &revoked); err != nil {
			return nil, dbErr(err)
		}
		k.CreatedAt, k.RevokedAt = fromMilli(created), nullTime(revoked)
		out = append(out, k)
	}
	return out, dbErr(rows.Err())
}

// RevokeKey revokes the key with this id (or, for convenience, this prefix when unique).
// CodeNotFound when there is none.
func (s *Store) RevokeKey(ctx context.Context, idOrPrefix string) (APIKey, error) {
	keys, err := s.Keys(ctx)
	if err != nil {
		return APIKey{}, err
	}
	var match []APIKey
	for _, k := range keys {
		if k.ID == idOrPrefix || (len(idOrPrefix) >= len(KeyPrefix)+4 && strings.HasPrefix(k.Prefix, idOrPrefix)) {
			match = append(match, k)
		}
	}
	switch len(match) {
	case 0:
		return APIKey{}, provider.Errorf(provider.CodeNotFound, "no API key %q (`tupper keys list` shows them)", idOrPrefix)
	case 1:
	default:
		return APIKey{}, provider.Errorf(provider.CodeInvalidArgument, "%q matches %d keys: give the key id", idOrPrefix, len(match))
	}
	k := match[0]
	if k.Revoked() {
		return k, nil
	}
	k.RevokedAt = time.Now().UTC().Truncate(time.Millisecond)
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return APIKey{}, dbErr(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL`, unixMilli(k.RevokedAt), k.ID); err != nil {
		return APIKey{}, dbErr(err)
	}
	// Nobody can use the key's stored secrets any more: their values go with it.
	if _, err := tx.ExecContext(ctx, `DELETE FROM secrets WHERE api_key_id = ?`, k.ID); err != nil {
		return APIKey{}, dbErr(err)
	}
	return k, dbErr(tx.Commit())
}

// AuthenticateKey returns the live key whose hash is that of secret. A missing or revoked key
// is CodeUnauthorized; the message never holds the secret.
func (s *Store) AuthenticateKey(ctx context.Context, secret string) (APIKey, error) {
	want := Hash(secret)
	var k APIKey
	var hash []byte
	var created int64
	var revoked sql.NullInt64
	err := s.db.QueryRowContext(ctx, `SELECT id, name, prefix, hash, created_at, revoked_at FROM api_keys WHERE hash = ?`, want).
		Scan(&k.ID, &k.Name, &k.Prefix, &hash, &created, &revoked)
	if err == sql.ErrNoRows {
		return APIKey{}, provider.Errorf(provider.CodeUnauthorized, "the API key is not valid")
	}
	if err != nil {
		return APIKey{}, dbErr(err)
	}
	if subtle.ConstantTimeCompare(hash, want) != 1 {
		return APIKey{}, provider.Errorf(provider.CodeUnauthorized, "the API key is not valid")
	}
	k.CreatedAt, k.RevokedAt = fromMilli(created), nullTime(revoked)
	if k.Revoked() {
		return APIKey{}, provider.Errorf(provider.CodeUnauthorized, "the API key was revoked")
	}
	return k, nil
}

// Sandbox is the server's record of a sandbox it made. The provider holds the sandbox itself.
type Sandbox struct {
	ID          string
	Provider    string
	APIKeyID    string // the key that created it
	Key         string // the get-or-create key
	Labels      map[string]string
	CreatedAt   time.Time
	Deadline    time.Time
	State       provider.State
	DestroyedAt time.Time
	// OnTimeout is what the server does at the deadline: OnTimeoutKill ("": the same),
	// OnTimeoutPause or OnTimeoutPauseCold. AutoResume resumes the sandbox when it is used
	// while paused. Timeout is its lifetime, given again from each resume (0: none).
	OnTimeout  string
	AutoResume bool
	Timeout    time.Duration
	// MemoryDropped says the paused sandbox's pause dropped its memory (a cold pause): its
	// resume boots it again, so only an explicit resume may, never a use (AutoResume).
	MemoryDropped bool
	// End is why it ended, once DestroyedAt is set (its Reason is "" for a sandbox that
	// ended before reasons were recorded).
	End End
}

// End is why a sandbox ended. Reason is one of the End* constants; By is the API key id
// that destroyed it (EndDestroyed); Message says more, for EndError above all.
type End struct {
	Reason  string `json:"reason"`
	By      string `json:"by,omitempty"`
	Message string `json:"message,omitempty"`
}

// Why a sandbox ended (End.Reason).
const (
	EndDestroyed = "destroyed"  // a client destroyed it (By: the API key id)
	EndTimeout   = "timeout"    // its deadline passed
	EndIdle      = "idle"       // its idle timeout passed
	EndOOMKilled = "oom_killed" // the kernel's OOM killer ended its init
	EndNodeLost  = "node_lost"  // the machine it ran on was lost (reserved for the cluster)
	EndError     = "error"      // it stopped by itself otherwise (Message says how)
)

// What a sandbox does at its deadline (Sandbox.OnTimeout).
const (
	OnTimeoutKill  = "kill"
	OnTimeoutPause = "pause"
	// OnTimeoutPauseCold pauses it without its memory: its files are kept, its processes
	// end, and a resume boots it again.
	OnTimeoutPauseCold = "pause-cold"
)

// PausesAtTimeout reports whether a sandbox with this OnTimeout is paused at its deadline
// (either way), by the server's reaper, rather than destroyed.
func PausesAtTimeout(onTimeout string) bool {
	return onTimeout == OnTimeoutPause || onTimeout == OnTimeoutPauseCold
}

// TokenPrefix is how sandbox tokens begin.
const TokenPrefix = "sbt_"

// NewToken returns a new sandbox token.
func NewToken() string { return TokenPrefix + RandomString(20) }

// PutSandbox records a sandbox with one token hash (replacing a record of the same id, which
// keeps its other tokens).
func (s *Store) PutSandbox(ctx context.Context, sb Sandbox, tokenHash []byte) error {
	_, err := s.putSandbox(ctx, sb, tokenHash, nil)
	return err
}

// PutSandboxEvent is PutSandbox storing ev, an event about the sandbox (sandbox.created), in
// the same transaction: the record is never there without its event, however the server or
// the database fails.
func (s *Store) PutSandboxEvent(ctx context.Context, sb Sandbox, tokenHash []byte, ev NewEvent) (Event, error) {
	return s.putSandbox(ctx, sb, tokenHash, &ev)
}

func (s *Store) putSandbox(ctx context.Context, sb Sandbox, tokenHash []byte, event *NewEvent) (stored Event, err error) {
	labels, _ := json.Marshal(sb.Labels)
	if sb.State == "" {
		sb.State = provider.StateRunning
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return Event{}, dbErr(err)
	}
	defer tx.Rollback()
	_, err = tx.ExecContext(ctx, `INSERT INTO sandboxes(id, provider, api_key_id, key, labels, created_at, deadline, state,
			on_timeout, auto_resume, timeout_ms)
		VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT(id) DO UPDATE SET key = excluded.key, labels = excluded.labels, deadline = excluded.deadline,
			state = excluded.state, destroyed_at = NULL, end_reason = '', end_by = '', end_message = '', on_timeout = excluded.on_timeout,
			auto_resume = excluded.auto_resume, timeout_ms = excluded.timeout_ms`,
		sb.ID, sb.Provider, sb.APIKeyID, sb.Key, string(labels), unixMilli(sb.CreatedAt), unixMilli(sb.Deadline), string(sb.State),
		sb.OnTimeout, sb.AutoResume, sb.Timeout.Milliseconds())
	if err != nil {
		return Event{}, dbErr(err)
	}
	if tokenHash != nil {
		if _, err := tx.ExecContext(ctx, `INSERT INTO sandbox_tokens(hash, sandbox_id, created_at) VALUES(?, ?, ?)`,
			tokenHash, sb.ID, time.Now().UnixMilli()); err != nil {
			return Event{}, dbErr(err)
		}
	}
	if event != nil {
		if stored, err = addEventTx(ctx, tx, event.Type, sb.ID, event.Data); err != nil {
			return Event{}, err
		}
	}
	if err := tx.Commit(); err != nil {
		return Event{}, dbErr(err)
	}
	s.recorded.Add(1)
	s.deadlineChanged()
	return stored, nil
}

// DeadlineChanged returns a channel that is closed the next time this Store records a
// sandbox or moves a deadline (PutSandbox, SetDeadline): a timer set for the earliest
// deadline is stale then. Writes by another process do not close it.
func (s *Store) DeadlineChanged() <-chan struct{} {
	s.wakeMu.Lock()
	defer s.wakeMu.Unlock()
	if s.wake == nil {
		s.wake = make(chan struct{})
	}
	return s.wake
}

func (s *Store) deadlineChanged() {
	s.wakeMu.Lock()
	defer s.wakeMu.Unlock()
	if s.wake != nil {
		close(s.wake)
		s.wake = nil
	}
}

// Recorded counts the sandboxes this Store has recorded (PutSandbox) since it was opened: a
// cache of Sandboxes is stale once it changes. Records written by another process do not
// count.
func (s *Store) Recorded() uint64 { return s.recorded.Load() }

// AddToken records another token for a live sandbox (a get-or-create that found it).
func (s *Store) AddToken(ctx context.Context, id string, tokenHash []byte) error {
	_, err := s.db.ExecContext(ctx, `INSERT INTO sandbox_tokens(hash, sandbox_id, created_at) VALUES(?, ?, ?)`, tokenHash, id, time.Now().UnixMilli())
	return dbErr(err)
}

// RemoveToken forgets one token of a sandbox; a token the store does not hold is no error.
func (s *Store) RemoveToken(ctx context.Context, tokenHash []byte) error {
	_, err := s.db.ExecContext(ctx, `DELETE FROM sandbox_tokens WHERE hash = ?`, tokenHash)
	return dbErr(err)
}

// SandboxForToken returns the id of the live sandbox the token belongs to, or CodeUnauthorized.
func (s *Store) SandboxForToken(ctx context.Context, token string) (string, error) {
	want := Hash(token)
	var id string
	var hash []byte
	err := s.db.QueryRowContext(ctx, `SELECT t.sandbox_id, t.hash FROM sandbox_tokens t JOIN sandboxes s ON s.id = t.sandbox_id
		WHERE t.hash = ? AND s.destroyed_at IS NULL`, want).Scan(&id, &hash)
	if err == sql.ErrNoRows {
		return "", provider.Errorf(provider.CodeUnauthorized, "the sandbox token is not valid")
	}
	if err != nil {
		return "", dbErr(err)
	}
	if subtle.ConstantTimeCompare(hash, want) != 1 {
		return "", provider.Errorf(provider.CodeUnauthorized, "the sandbox token is not valid")
	}
	return id, nil
}

const sandboxCols = `id, provider, api_key_id, key, labels, created_at, deadline, state, destroyed_at,
	on_timeout, auto_resume, timeout_ms, memory_dropped, end_reason, end_by, end_message`

func scanSandbox(sc interface{ Scan(...any) error }) (Sandbox, error) {
	var sb Sandbox
	var labels, state string
	var created, deadline, timeoutMS int64
	var destroyed sql.NullInt64
	if err := sc.Scan(&sb.ID, &sb.Provider, &sb.APIKeyID, &sb.Key, &labels, &created, &deadline, &state, &destroyed,
		&sb.OnTimeout, &sb.AutoResume, &timeoutMS, &sb.MemoryDropped, &sb.End.Reason, &sb.End.By, &sb.End.Message); err != nil {
		return Sandbox{}, err
	}
	sb.Timeout = time.Duration(timeoutMS) * time.Millisecond
	_ = json.Unmarshal([]byte(labels), &sb.Labels)
	sb.CreatedAt, sb.Deadline, sb.DestroyedAt = fromMilli(created), fromMilli(deadline), nullTime(destroyed)
	sb.State = provider.State(state)
	return sb, nil
}

// Sandbox returns the record of a live sandbox, or CodeNotFound.
func (s *Store) Sandbox(ctx context.Context, id string) (Sandbox, error) {
	sb, err := scanSandbox(s.db.QueryRowContext(ctx, `SELECT `+sandboxCols+` FROM sandboxes WHERE id = ? AND destroyed_at IS NULL`, id))
	if err == sql.ErrNoRows {
		return Sandbox{}, provider.Errorf(provider.CodeNotFound, "no sandbox %q", id)
	}
	return sb, dbErr(err)
}

// SandboxByKey returns the live sandbox made with key, or CodeNotFound.
func (s *Store) SandboxByKey(ctx context.Context, key string) (Sandbox, error) {
	sb, err := scanSandbox(s.db.QueryRowContext(ctx, `SELECT `+sandboxCols+` FROM sandboxes WHERE key = ? AND key != '' AND destroyed_at IS NULL
		ORDER BY created_at DESC LIMIT 1`, key))
	if err == sql.ErrNoRows {
		return Sandbox{}, provider.Errorf(provider.CodeNotFound, "no sandbox with that key")
	}
	return sb, dbErr(err)
}

// Sandboxes lists the live sandboxes, oldest first.
func (s *Store) Sandboxes(ctx context.Context) ([]Sandbox, error) {
	return s.sandboxes(ctx, `SELECT `+sandboxCols+` FROM sandboxes WHERE destroyed_at IS NULL ORDER BY created_at, id`)
}

// sandboxes runs query, which selects sandboxCols, and scans its rows.
func (s *Store) sandboxes(ctx context.Context, query string, args ...any) ([]Sandbox, error) {
	rows, err := s.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, dbErr(err)
	}
	defer rows.Close()
	var out []Sandbox
	for rows.Next() {
		sb, err := scanSandbox(rows)
		if err != nil {
			return nil, dbErr(err)
		}
		out = append(out, sb)
	}
	return out, dbErr(rows.Err())
}

// EndedSandboxes lists the records of sandboxes that ended, the latest to end first, at most
// limit of them.
func (s *Store) EndedSandboxes(ctx context.Context, limit int) ([]Sandbox, error) {
	return s.sandboxes(ctx, `SELECT `+sandboxCols+` FROM sandboxes WHERE destroyed_at IS NOT NULL
		ORDER BY destroyed_at DESC, id LIMIT ?`, limit)
}

// MarkDestroyed records that a sandbox is gone, and why, and drops its tokens. It reports
// whether the sandbox was live, so exactly one caller emits the event (and the first reason
// is the one kept).
func (s *Store) MarkDestroyed(ctx context.Context, id string, end End) (bool, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return false, dbErr(err)
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, `UPDATE sandboxes SET destroyed_at = ?, state = 'stopped', end_reason = ?, end_by = ?, end_message = ?
		WHERE id = ? AND destroyed_at IS NULL`, time.Now().UnixMilli(), end.Reason, end.By, end.Message, id)
	if err != nil {
		return false, dbErr(err)
	}
	n, _ := res.RowsAffected()
	if _, err := tx.ExecContext(ctx, `DELETE FROM sandbox_tokens WHERE sandbox_id = ?`, id); err != nil {
		return false, dbErr(err)
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM ports WHERE sandbox_id = ?`, id); err != nil {
		return false, dbErr(err)
	}
	return n == 1, dbErr(tx.Commit())
}

// SetState records a live sandbox's state (and that no pause of it dropped its memory: see
// SetPaused).
func (s *Store) SetState(ctx context.Context, id string, st provider.State) error {
	_, err := s.db.ExecContext(ctx, `UPDATE sandboxes SET state = ?, memory_dropped = 0 WHERE id = ? AND destroyed_at IS NULL`, string(st), id)
	return dbErr(err)
}

// SetPaused records a live sandbox paused, and whether its pause dropped its memory
// (Sandbox.MemoryDropped).
func (s *Store) SetPaused(ctx context.Context, id string, memoryDropped bool) error {
	_, err := s.db.ExecContext(ctx, `UPDATE sandboxes SET state = ?, memory_dropped = ? WHERE id = ? AND destroyed_at IS NULL`,
		string(provider.StatePaused), memoryDropped, id)
	return dbErr(err)
}

// SetDeadline records a live sandbox's hard deadline (zero: none).
func (s *Store) SetDeadline(ctx context.Context, id string, d time.Time) error {
	_, err := s.db.ExecContext(ctx, `UPDATE sandboxes SET deadline = ? WHERE id = ? AND destroyed_at IS NULL`, unixMilli(d), id)
	if err == nil {
		s.deadlineChanged()
	}
	return dbErr(err)
}

// Port is an exposed port of a sandbox.
type Port struct {
	Port      int
	Public    bool
	CreatedAt time.Time
}

// ExposePort records an exposed port (replacing its public flag).
func (s *Store) ExposePort(ctx context.Context, id string, port int, public bool) error {
	_, err := s.db.ExecContext(ctx, `INSERT INTO ports(sandbox_id, port, public, created_at) VALUES(?, ?, ?, ?)
		ON CONFLICT(sandbox_id, port) DO UPDATE SET public = excluded.public`, id, port, public, time.Now().UnixMilli())
	return dbErr(err)
}

// UnexposePort forgets an exposed port; CodeNotFound when it was not exposed.
func (s *Store) UnexposePort(ctx context.Context, id string, port int) error {
	res, err := s.db.ExecContext(ctx, `DELETE FROM ports WHERE sandbox_id = ? AND port = ?`, id, port)
	if err != nil {
		return dbErr(err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return provider.Errorf(provider.CodeNotFound, "port %d is not exposed", port)
	}
	return nil
}

// Ports lists a sandbox's exposed ports.
func (s *Store) Ports(ctx context.Context, id string) ([]Port, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT port, public, created_at FROM ports WHERE sandbox_id = ? ORDER BY port`, id)
	if err != nil {
		return nil, dbErr(err)
	}
	defer rows.Close()
	var out []Port
	for rows.Next() {
		var p Port
		var created int64
		if err := rows.Scan(&p.Port, &p.Public, &created); err != nil {
			return nil, dbErr(err)
		}
		p.CreatedAt = fromMilli(created)
		out = append(out, p)
	}
	return out, dbErr(rows.Err())
}

// PortExposure returns whether the port is exposed and whether it is public.
func (s *Store) PortExposure(ctx context.Context, id string, port int) (exposed, public bool, err error) {
	err = s.db.QueryRowContext(ctx, `SELECT public FROM ports WHERE sandbox_id = ? AND port = ?`, id, port).Scan(&public)
	if err == sql.ErrNoRows {
		return false, false, nil
	}
	return err == nil, public, dbErr(err)
}
