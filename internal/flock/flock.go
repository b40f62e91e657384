// Package flock is an advisory lock on a file (flock(2); LockFileEx on Windows), for tupper
// processes that share a state directory.
//
// The kernel releases a lock when the file that holds it is closed or its process dies, however
// it dies, so a crash never leaves one behind. A lock belongs to an open file, not to a process:
// two Locks on one path exclude each other within one process too.
package flock

import (
	"context"
	"fmt"
	"os"
	"time"
)

// Lock is a held lock on a file.
type Lock struct{ f *os.File }

// Acquire takes the lock on path, creating the file with mode 0600 when it is missing, and
// waits until the lock is free or ctx is done.
func Acquire(ctx context.Context, path string) (*Lock, error) {
	return acquire(ctx, path, exclusive)
}

// AcquireShared takes a shared lock on path, which any number of holders may share while no
// one holds the exclusive lock (Acquire), and waits like Acquire.
func AcquireShared(ctx context.Context, path string) (*Lock, error) {
	return acquire(ctx, path, shared)
}

func acquire(ctx context.Context, path string, how mode) (*Lock, error) {
	f, err := open(path)
	if err != nil {
		return nil, err
	}
	delay := time.Millisecond
	for {
		ok, err := try(f, how)
		if ok {
			return &Lock{f: f}, nil
		}
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(delay):
		}
		delay = min(2*delay, 20*time.Millisecond)
	}
}

// TryAcquire takes the lock on path if it is free, creating the file with mode 0600 when it is
// missing. It returns (nil, nil) when another file holds the lock.
func TryAcquire(path string) (*Lock, error) {
	f, err := open(path)
	if err != nil {
		return nil, err
	}
	ok, err := try(f, exclusive)
	if !ok {
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		return nil, nil
	}
	return &Lock{f: f}, nil
}

// File is the locked file, open for reading and writing: its holder may write in it what others
// should read (who holds it).
func (l *Lock) File() *os.File { return l.f }

// Unlock releases the lock. It is idempotent; it must not run concurrently with itself.
func (l *Lock) Unlock() {
	if l != nil && l.f != nil {
		l.f.Close() // closing the only descriptor of the open file releases the lock
		l.f = nil
	}
}

func open(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
}
