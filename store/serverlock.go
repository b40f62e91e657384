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

// ServerLock is a server's claim on its store.
//
// A SQLite store is one server's: while one holds its directory, another that asks for it
// gets an error at once, not a server that shares its store (each would take the other's
// sandboxes for its own). It is a lock on the file ServerLockName, which the kernel releases
// when the server's process ends, however it ends; the file stays, and holds the pid and
// address of the server holding it.
//
// A PostgreSQL store is shared by every server on it: each holds session advisory locks on
// one connection (which the database releases when that connection ends, however the server
// ends) that tell the others it is alive, by its Instance number, and whether it leads
// (Leading). Claims on shared work (a webhook delivery in flight, a get-or-create key) carry
// the claimant's instance, and a claim of an instance no longer alive is void at once.
type ServerLock struct {
	lk       *flock.Lock
	pid      int
	pg       *pgServerLock // a PostgreSQL store's, instead of lk
	instance int64
	lead     *leadership
}

// serverLockInfo is what the lock file holds.
type serverLockInfo struct {
	PID  int    `json:"pid"`
	Addr string `json:"addr,omitempty"`
}

// LockServer claims the store spec names (a state directory, or a store as OpenURL takes it)
// for the calling process's server: a SQLite store's directory is created as Open does and
// locked, and when another process holds it the error is CodeConflict and names that
// process and its address. A PostgreSQL store is joined, beside the servers already on it;
// only a store copy (LockStore) in progress refuses it.
func LockServer(spec string) (*ServerLock, error) { return lockServer(spec, false) }

// LockStore claims the store spec names for the calling process alone (`tupper store
// migrate`): as LockServer for a SQLite store, and refused while any server is on a
// PostgreSQL one.
func LockStore(spec string) (*ServerLock, error) { return lockServer(spec, true) }

func lockServer(spec string, exclusive bool) (*ServerLock, error) {
	if spec == "" {
		return nil, errorf(provider.CodeInvalidArgument, "store directory is empty")
	}
	pg, dir, err := ParseSpec(spec)
	if err != nil {
		return nil, err
	}
	lead := newLeadership()
	if pg {
		l, err := lockPostgresServer(dir, exclusive, lead)
		if err != nil {
			return nil, err
		}
		return &ServerLock{pg: l, pid: os.Getpid(), instance: l.instance, lead: lead}, nil
	}
	// The only server on its store leads it.
	lead.set(true)
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
	l := &ServerLock{lk: lk, pid: os.Getpid(), instance: NewInstance(), lead: lead}
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
	l.lead.set(false)
	if l.lk != nil {
		l.lk.Unlock()
	}
	if l.pg != nil {
		l.pg.unlock()
	}
}

// Instance is the server's number among the servers of its store, which its claims carry.
func (l *ServerLock) Instance() int64 { return l.instance }

// Leading reports whether the server leads its store now (the one server that does the work
// done once per store: always, on SQLite), and returns a channel closed at the next change.
// A PostgreSQL store's leader loses the lead within a lock check (a second) of losing its
// locks' connection, and another server takes it up within a check of the database ending
// that connection: for a moment two may lead, so what a leader does must be safe to do
// twice (each act records its outcome once, in the store).
func (l *ServerLock) Leading() (bool, <-chan struct{}) { return l.lead.watch() }
