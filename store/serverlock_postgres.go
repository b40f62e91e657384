package store

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/tupper-dev/tupper/provider"
)

// pgServerLockID is the session advisory lock a server holds on its PostgreSQL database:
// "tupp" in ASCII (one 32-bit key, so pg_locks shows it as objid with classid 0).
const pgServerLockID = 0x74757070

// pgServerLockTimeout bounds connecting and asking for the lock.
const pgServerLockTimeout = 30 * time.Second

// pgServerLock is a server's claim on a PostgreSQL database: one connection, kept open for as
// long as the server runs, holding a session advisory lock.
type pgServerLock struct {
	mu   sync.Mutex
	db   *sql.DB
	conn *sql.Conn
	dsn  string
	name string        // the connection's application_name, once serving
	done chan struct{} // closed by unlock: ends keep
}

// pgServerLockCheck is how often a server checks that it still holds its lock: a PostgreSQL
// restarted (or the lock's connection cut) drops it, and keep takes it again.
const pgServerLockCheck = time.Second

// lockPostgresServer takes the server lock of the database dsn names, or says which server
// holds it (its application_name, which serving sets).
func lockPostgresServer(dsn string) (*pgServerLock, error) {
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
	l := &pgServerLock{db: db, conn: c, dsn: dsn, done: make(chan struct{})}
	var got bool
	if err := c.QueryRowContext(ctx, `SELECT pg_try_advisory_lock($1)`, int64(pgServerLockID)).Scan(&got); err != nil {
		l.unlock()
		return nil, errorf(provider.CodeUnavailable, "store %s: server lock: %v", Redact(dsn), redactErr(err, dsn))
	}
	if !got {
		who := "another tupper server"
		var name string
		if err := c.QueryRowContext(ctx, `SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
			WHERE l.locktype = 'advisory' AND l.classid = 0 AND l.objid = $1 AND l.objsubid = 1 AND l.granted LIMIT 1`,
			int64(pgServerLockID)).Scan(&name); err == nil && name != "" {
			who += " (" + name + ")"
		}
		l.unlock()
		return nil, errorf(provider.CodeConflict, "%s is using the PostgreSQL database %s: stop it, or give this server another database (several servers on one database are not supported yet)", who, Redact(dsn))
	}
	if err := l.serving(os.Getpid(), ""); err != nil {
		l.unlock()
		return nil, err
	}
	go l.keep()
	return l, nil
}

// serving names the lock's connection after its holder (its pid, and the address a server
// serves on), which is what a second claimant's error quotes.
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
		return errorf(provider.CodeUnavailable, "store %s: server lock: %v", Redact(l.dsn), redactErr(err, l.dsn))
	}
	l.name = name
	return nil
}

// unlock releases the lock and ends its connection. Idempotent. The release is asked for,
// not left to the connection's end, which PostgreSQL notices a moment later: a server
// started again at once would be refused.
func (l *pgServerLock) unlock() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conn != nil {
		close(l.done)
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

// keep takes the lock again whenever its connection is lost (PostgreSQL restarted, the
// connection cut), so that a database that went away and came back stays claimed: without
// it a second server would be let in beside this one. Until unlock.
func (l *pgServerLock) keep() {
	tick := time.NewTicker(pgServerLockCheck)
	defer tick.Stop()
	for {
		select {
		case <-l.done:
			return
		case <-tick.C:
		}
		l.relock()
	}
}

// relock checks the lock's connection and, when it is lost, takes the lock on a new one. If
// another server took it meanwhile, it tries again at the next check.
func (l *pgServerLock) relock() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conn == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), pgServerLockCheck*5)
	defer cancel()
	if l.conn.PingContext(ctx) == nil {
		return // the session, and so its lock, lives
	}
	c, err := l.db.Conn(ctx)
	if err != nil {
		return // PostgreSQL is still away
	}
	var got bool
	if err := c.QueryRowContext(ctx, `SELECT pg_try_advisory_lock($1)`, int64(pgServerLockID)).Scan(&got); err != nil || !got {
		c.Close()
		return
	}
	if l.name != "" {
		_, _ = c.ExecContext(ctx, `SELECT set_config('application_name', $1, false)`, l.name)
	}
	l.conn.Close()
	l.conn = c
}
