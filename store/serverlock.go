package store

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/tupper-dev/tupper/internal/flock"
	"github.com/tupper-dev/tupper/provider"
)

// ServerLockName is the file in a state directory that the server using it holds locked.
const ServerLockName = "server.lock"

// ServerLock is a server's claim on a state directory: while one server holds it, another
// that asks for it gets an error at once, not a server that shares its store (each would
// take the other's sandboxes for its own). It is a lock on the file ServerLockName, which
// the kernel releases when the server's process ends, however it ends; the file stays, and
// holds the pid and address of the server holding it.
type ServerLock struct {
	lk  *flock.Lock
	pid int
	pg  *pgServerLock // a PostgreSQL store's, instead of lk
}

// serverLockInfo is what the lock file holds.
type serverLockInfo struct {
	PID  int    `json:"pid"`
	Addr string `json:"addr,omitempty"`
}

// LockServer claims the store spec names (a state directory, or a store as OpenURL takes it)
// for the calling process's server: a SQLite store's directory is created as Open does and
// locked, and when another process holds it the error is CodeConflict and names that
// process and its address.
//
// A PostgreSQL store is claimed the same way, by a session advisory lock that one connection
// of the server holds (the database releases it when that connection ends, however the
// server ends): several servers on one database are where the design goes, but their claims
// on each other's work (webhook deliveries, the reaper's, get-or-create keys) are not built
// yet, so a second server is refused rather than allowed to be subtly wrong.
func LockServer(spec string) (*ServerLock, error) {
	if spec == "" {
		return nil, errorf(provider.CodeInvalidArgument, "store directory is empty")
	}
	pg, dir, err := ParseSpec(spec)
	if err != nil {
		return nil, err
	}
	if pg {
		l, err := lockPostgresServer(dir)
		if err != nil {
			return nil, err
		}
		return &ServerLock{pg: l, pid: os.Getpid()}, nil
	}
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return nil, errorf(provider.CodeUnavailable, "store directory: %v (set TUPPER_HOME to a writable directory)", err)
	}
	path := filepath.Join(dir, ServerLockName)
	lk, err := flock.TryAcquire(path)
	if err != nil {
		return nil, errorf(provider.CodeUnavailable, "%v", err)
	}
	if lk == nil {
		who := "another tupper server"
		var in serverLockInfo
		if f, err := os.Open(path); err == nil {
			_ = json.NewDecoder(f).Decode(&in)
			f.Close()
		}
		if in.PID > 0 {
			who += fmt.Sprintf(" (pid %d", in.PID)
			if in.Addr != "" {
				who += ", serving on " + in.Addr
			}
			who += ")"
		}
		return nil, errorf(provider.CodeConflict, "%s is using the state directory %s: stop it, or give this server another --home", who, dir)
	}
	l := &ServerLock{lk: lk, pid: os.Getpid()}
	if err := l.write(""); err != nil {
		lk.Unlock()
		return nil, err
	}
	return l, nil
}

// Serving records the address the server listens on, for the error a second server gets.
func (l *ServerLock) Serving(addr string) error {
	if l.pg != nil {
		return l.pg.serving(l.pid, addr)
	}
	return l.write(addr)
}

func (l *ServerLock) write(addr string) error {
	b, _ := json.Marshal(serverLockInfo{PID: l.pid, Addr: addr})
	b = append(b, '\n')
	// Written over the old content, then cut to length: a second server reading meanwhile
	// finds a JSON value first in the file, this one or the last holder's.
	f := l.lk.File()
	_, err := f.WriteAt(b, 0)
	if err == nil {
		err = f.Truncate(int64(len(b)))
	}
	if err != nil {
		return errorf(provider.CodeUnavailable, "server lock: %v", err)
	}
	return nil
}

// Unlock gives the state directory up. It is idempotent.
func (l *ServerLock) Unlock() {
	if l.lk != nil {
		l.lk.Unlock()
	}
	if l.pg != nil {
		l.pg.unlock()
	}
}
