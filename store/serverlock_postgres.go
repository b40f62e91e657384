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
}

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
		return nil, errorf(provider.CodeUnavailable, "store %s: cannot reach PostgreSQL: %v (is it running, and are the URL's host, user and password right?)", Redact(dsn), redactErr(err, dsn))
	}
	l := &pgServerLock{db: db, conn: c, dsn: dsn}
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
	return nil
}

// unlock ends the lock's connection, which releases the lock. Idempotent.
func (l *pgServerLock) unlock() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conn != nil {
		l.conn.Close()
		l.conn = nil
	}
	if l.db != nil {
		l.db.Close()
		l.db = nil
	}
}
