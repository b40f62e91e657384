package store

import (
	"context"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"
)

// NewInstance returns a random instance number (see ServerLock.Instance), for a store used
// without a ServerLock: by a server embedded in a program or a test, whose claims no other
// server can tell from a dead one's.
func NewInstance() int64 { return rand.Int64N(1<<31-2) + 1 }

// SetInstance makes n, the ServerLock's Instance, the number this Store's claims carry. A
// server calls it before it uses the store; until then a Store has a number of its own.
func (s *Store) SetInstance(n int64) { s.instance.Store(n) }

// Instance is the number this Store's claims carry.
func (s *Store) Instance() int64 {
	if n := s.instance.Load(); n != 0 {
		return n
	}
	s.instance.CompareAndSwap(0, NewInstance())
	return s.instance.Load()
}

// deadClaim is the SQL condition, on column col holding an instance number (0: none), that a
// claim is void: made by another server no longer alive. On SQLite every other server's is
// (the store is one server's); on PostgreSQL one whose instance lock no session holds. Its
// one parameter is this store's instance.
func (s *Store) deadClaim(col string) string {
	if s.db.dialect == postgres {
		return col + " != 0 AND " + col + " != ? AND " + col + " NOT IN (" + liveInstancesSQL + ")"
	}
	return col + " != 0 AND " + col + " != ?"
}

// liveInstances returns the instance numbers of the servers alive on the store, this one's
// among them.
func (s *Store) liveInstances(ctx context.Context) (map[int64]bool, error) {
	live := map[int64]bool{s.Instance(): true}
	if s.db.dialect != postgres {
		return live, nil
	}
	rows, err := s.db.QueryContext(ctx, liveInstancesSQL)
	if err != nil {
		return nil, dbErr(err)
	}
	defer rows.Close()
	for rows.Next() {
		var n int64
		if err := rows.Scan(&n); err != nil {
			return nil, dbErr(err)
		}
		live[n] = true
	}
	return live, dbErr(rows.Err())
}

// lockLease bounds how long a store lock stays held by a live server that did not release
// it (its release failed while the database was away): after it, the lock is free again.
const lockLease = 10 * time.Minute

// Lock takes the store-wide lock called name, for this store's instance, waiting (until ctx
// ends) while another holds it, and returns its release. Servers on one PostgreSQL database
// serialize get-or-create by key with it. A holder that dies loses it at once, as its
// other claims; one that lives keeps it until it releases it, or lockLease.
func (s *Store) Lock(ctx context.Context, name string) (unlock func(), err error) {
	self := s.Instance()
	wait := 5 * time.Millisecond
	for {
		now := time.Now()
		res, err := s.db.ExecContext(ctx, `INSERT INTO locks(name, instance, acquired_at) VALUES(?, ?, ?) ON CONFLICT(name) DO NOTHING`,
			name, self, now.UnixMilli())
		if err != nil {
			return nil, dbErr(err)
		}
		if n, _ := res.RowsAffected(); n == 1 {
			return func() {
				ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
				defer cancel()
				_, _ = s.db.ExecContext(ctx, `DELETE FROM locks WHERE name = ? AND instance = ? AND acquired_at = ?`, name, self, now.UnixMilli())
			}, nil
		}
		// Held: by a server that died, or past its lease, it is void; else wait.
		res, err = s.db.ExecContext(ctx, `DELETE FROM locks WHERE name = ? AND (acquired_at < ? OR (`+s.deadClaim("instance")+`))`,
			name, now.Add(-lockLease).UnixMilli(), self)
		if err != nil {
			return nil, dbErr(err)
		}
		if n, _ := res.RowsAffected(); n == 1 {
			continue
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, 100*time.Millisecond)
	}
}

// reservation is the id of a snapshot reservation this store's instance makes.
func (s *Store) reservation() string {
	return reservedPrefix + strconv.FormatInt(s.Instance(), 16) + "-" + RandomString(16)
}

// reservationInstance is the instance that made a reservation, or 0 for one made by a
// tupper before instances.
func reservationInstance(id string) int64 {
	rest, ok := strings.CutPrefix(id, reservedPrefix)
	if !ok {
		return 0
	}
	hexn, _, ok := strings.Cut(rest, "-")
	if !ok {
		return 0
	}
	n, _ := strconv.ParseInt(hexn, 16, 64)
	return n
}

// leadership is whether a server leads its store, and a channel that each change closes.
type leadership struct {
	mu      sync.Mutex
	on      bool
	changed chan struct{}
}

func newLeadership() *leadership { return &leadership{changed: make(chan struct{})} }

func (ld *leadership) set(on bool) {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	if ld.on != on {
		ld.on = on
		close(ld.changed)
		ld.changed = make(chan struct{})
	}
}

func (ld *leadership) leading() bool {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	return ld.on
}

func (ld *leadership) watch() (bool, <-chan struct{}) {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	return ld.on, ld.changed
}

// Shared reports whether other servers may use the store at once (PostgreSQL): what they
// record, this Store's process is not told of, and claims may be another's.
func (s *Store) Shared() bool { return s.db.dialect == postgres }
