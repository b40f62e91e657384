package store

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"time"

	"github.com/tupper-dev/tupper/provider"
)

// The session advisory locks of servers on a PostgreSQL database. One 32-bit key, "tupp" in
// ASCII (pg_locks shows it as objid with classid 0 and objsubid 1): every server holds it
// shared, and `tupper store migrate` exclusively, so that a copy never runs beside a server.
// Two-key locks in the pgInstances space (classid pgInstances, objsubid 2): objid 0 is held
// by the leader, the one server that runs the work done once per database (the reaper, the
// deadlines, the egress events); any other objid is a server's instance number, held for as
// long as it runs, which is how the others tell a live server's claims from a dead one's.
const (
	pgServerLockID = 0x74757070
	pgInstances    = 0x74757071
	pgLeader       = 0
)

// pgServerLockTimeout bounds connecting and asking for the locks.
const pgServerLockTimeout = 30 * time.Second

// pgServerLockCheck is how often a server checks that it still holds its locks (a PostgreSQL
// restarted, or the connection cut, drops them and keep takes them again) and, when it does
// not lead, tries to: a leader that dies is replaced within about this.
const pgServerLockCheck = time.Second

// pgServerLock is a server's claim on a PostgreSQL database: one connection, kept open for as
// long as the server runs, holding its session advisory locks.
type pgServerLock struct {
	mu        sync.Mutex
	db        *sql.DB
	conn      *sql.Conn
	dsn       string
	exclusive bool          // store migrate's: no instance, no leader
	instance  int64         // this server's number among the database's servers
	name      string        // the connection's application_name, once serving
	done      chan struct{} // closed by unlock: ends keep
	lead      *leadership
}

// lockPostgresServer claims the database dsn names for a server (shared with other servers)
// or, exclusive, for a store copy (alone), or says which process is in the way (its
// application_name, which serving sets).
func lockPostgresServer(dsn string, exclusive bool, lead *leadership) (*pgServerLock, error) {
	ctx, cancel := context.WithTimeout(context.Background(), pgServerLockTimeout)
	defer cancel()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return nil, errorf(provider.CodeInvalidArgument, "store %s: %v", Redact(dsn), redactErr(err, dsn))
	}
	c, err := db.Conn(ctx)
	if err != nil {
		db.Close()
		return nil, unreachable(dsn, err)
	}
	l := &pgServerLock{db: db, conn: c, dsn: dsn, exclusive: exclusive, done: make(chan struct{}), lead: lead}
	take := `SELECT pg_try_advisory_lock_shared($1)`
	if exclusive {
		take = `SELECT pg_try_advisory_lock($1)`
	}
	var got bool
	if err := c.QueryRowContext(ctx, take, int64(pgServerLockID)).Scan(&got); err != nil {
		l.unlock()
		return nil, l.lockErr(err)
	}
	if !got {
		who := "a `tupper store migrate`"
		if exclusive {
			who = "a tupper server"
		}
		var name string
		if err := c.QueryRowContext(ctx, `SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
			WHERE l.locktype = 'advisory' AND l.classid = 0 AND l.objid = $1 AND l.objsubid = 1 AND l.granted AND a.pid != pg_backend_pid()
			ORDER BY a.application_name LIKE '%serving on%' DESC LIMIT 1`,
			int64(pgServerLockID)).Scan(&name); err == nil && name != "" {
			who += " (" + name + ")"
		}
		l.unlock()
		if exclusive {
			return nil, errorf(provider.CodeConflict, "%s is using the PostgreSQL database %s: stop every server on it first", who, Redact(dsn))
		}
		return nil, errorf(provider.CodeConflict, "%s is copying the PostgreSQL database %s: start the server when it is done", who, Redact(dsn))
	}
	if !exclusive {
		// A number no live server holds: a random one, tried until one is free.
		for range 100 {
			l.instance = rand.Int64N(1<<31-2) + 1
			if err := c.QueryRowContext(ctx, `SELECT pg_try_advisory_lock($1, $2)`, int32(pgInstances), int32(l.instance)).Scan(&got); err != nil {
				l.unlock()
				return nil, l.lockErr(err)
			}
			if got {
				break
			}
		}
		if !got {
			l.unlock()
			return nil, errorf(provider.CodeUnavailable, "store %s: no free server number: too many servers on one database", Redact(dsn))
		}
	}
	if err := l.serving(os.Getpid(), ""); err != nil {
		l.unlock()
		return nil, err
	}
	if !exclusive {
		l.tryLead(ctx)
		go l.keep()
	}
	return l, nil
}

func (l *pgServerLock) lockErr(err error) error {
	return errorf(provider.CodeUnavailable, "store %s: server lock: %v", Redact(l.dsn), redactErr(err, l.dsn))
}

// serving names the lock's connection after its holder (its pid, and the address a server
// serves on), which is what a process refused because of it is told.
func (l *pgServerLock) serving(pid int, addr string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conn == nil {
		return nil
	}
	name := fmt.Sprintf("tupper, pid %d", pid)
	if addr != "" {
		name += ", serving on " + addr
	}
	ctx, cancel := context.WithTimeout(context.Background(), pgServerLockTimeout)
	defer cancel()
	if _, err := l.conn.ExecContext(ctx, `SELECT set_config('application_name', $1, false)`, name); err != nil {
		return l.lockErr(err)
	}
	l.name = name
	return nil
}

// unlock releases the locks and ends their connection. Idempotent. The release is asked for,
// not left to the connection's end, which PostgreSQL notices a moment later: the others
// would take this server's claims for a live one's until then.
func (l *pgServerLock) unlock() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conn != nil {
		close(l.done)
		if l.lead != nil {
			l.lead.set(false)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, _ = l.conn.ExecContext(ctx, `SELECT pg_advisory_unlock_all()`)
		cancel()
		l.conn.Close()
		l.conn = nil
	}
	if l.db != nil {
		l.db.Close()
		l.db = nil
	}
}

// keep checks the locks' connection every pgServerLockCheck: when it is lost (PostgreSQL
// restarted, the connection cut) the server stops leading at once and takes its locks again
// on a new one; when it does not lead, it tries to. Until unlock.
func (l *pgServerLock) keep() {
	tick := time.NewTicker(pgServerLockCheck)
	defer tick.Stop()
	for {
		select {
		case <-l.done:
			return
		case <-tick.C:
		}
		l.check()
	}
}

func (l *pgServerLock) check() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conn == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), pgServerLockCheck*5)
	defer cancel()
	if l.conn.PingContext(ctx) != nil {
		// The session, and so every lock of it, is gone: another server may lead already.
		l.lead.set(false)
		if !l.relock(ctx) {
			return // PostgreSQL is still away, or another process holds a lock: next check
		}
	}
	if !l.lead.leading() {
		l.tryLead(ctx)
	}
}

// relock takes the server's locks again on a new connection.
func (l *pgServerLock) relock(ctx context.Context) bool {
	c, err := l.db.Conn(ctx)
	if err != nil {
		return false
	}
	var shared, own bool
	if c.QueryRowContext(ctx, `SELECT pg_try_advisory_lock_shared($1), pg_try_advisory_lock($2, $3)`,
		int64(pgServerLockID), int32(pgInstances), int32(l.instance)).Scan(&shared, &own) != nil || !shared || !own {
		c.Close() // its end releases whichever it took
		return false
	}
	if l.name != "" {
		_, _ = c.ExecContext(ctx, `SELECT set_config('application_name', $1, false)`, l.name)
	}
	l.conn.Close()
	l.conn = c
	return true
}

// tryLead takes the leader's lock if no other server holds it. l.mu is held, or l is not
// shared yet.
func (l *pgServerLock) tryLead(ctx context.Context) {
	var got bool
	if l.conn.QueryRowContext(ctx, `SELECT pg_try_advisory_lock($1, $2)`, int32(pgInstances), int32(pgLeader)).Scan(&got) == nil && got {
		l.lead.set(true)
	}
}

// liveInstancesSQL selects the instance numbers of the servers live on the store's database:
// those whose session holds its instance lock.
var liveInstancesSQL = fmt.Sprintf(`SELECT l.objid::bigint FROM pg_locks l
	WHERE l.locktype = 'advisory' AND l.classid::bigint = %d AND l.objsubid = 2 AND l.objid::bigint != %d AND l.granted
	AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())`, pgInstances, pgLeader)

// PGInstancesLockSpace is the first key of the two-key advisory locks of servers on a
// PostgreSQL store (objid 0: the leader's; any other: a server's instance), for tools and
// tests that ask pg_locks who leads.
const PGInstancesLockSpace = pgInstances
