//go:build linux

// Package osthread runs functions on one dedicated OS thread, for kernel state that Linux
// keeps per thread and that must not reach the rest of the process: a mount namespace (and
// the file-system context unshared with it), capability sets.
//
// The goroutine that owns the thread calls runtime.LockOSThread and never unlocks it: no
// other goroutine ever runs there, and when the goroutine returns (Close) Go terminates the
// thread instead of reusing it, so whatever was changed on it goes with it. The Go runtime
// never clones new threads from a locked one (it asks its template thread), so the state
// cannot leak into the runtime's other threads; and syscall.ForkExec (os/exec included)
// clones the calling thread, so a process started from a function run here inherits it.
// The thread is never the main thread, whose state is the process's as others see it
// (/proc/PID/ns/mnt, setns by PID).
package osthread

import (
	"errors"
	"runtime"
	"sync"

	"golang.org/x/sys/unix"
)

// ErrClosed is returned by Do after Close, or when the thread's setup failed.
var ErrClosed = errors.New("osthread: thread closed")

// Thread is a dedicated OS thread. Its methods may be called concurrently; calls of Do run
// one at a time.
type Thread struct {
	mu    sync.Mutex // one call of Do in flight: req and reply carry it
	req   chan func()
	reply chan struct{}
	done  chan struct{} // closed when the goroutine, and so its thread, ends
	stop  chan struct{}
	once  sync.Once
}

// Start starts the thread and runs setup on it. It returns once setup has returned; when
// setup fails, the thread ends and Start returns setup's error.
func Start(setup func() error) (*Thread, error) {
	t := &Thread{
		req:   make(chan func()),
		reply: make(chan struct{}),
		stop:  make(chan struct{}),
		done:  make(chan struct{}),
	}
	ready := make(chan error, 1)
	go t.loop(setup, ready)
	if err := <-ready; err != nil {
		<-t.done
		return nil, err
	}
	return t, nil
}

func (t *Thread) loop(setup func() error, ready chan<- error) {
	runtime.LockOSThread() // for good: see the package doc
	if unix.Gettid() == unix.Getpid() {
		// The main thread. Keep it occupied (nothing else can run on it while this
		// goroutine holds it) and start over on another thread.
		go t.loop(setup, ready)
		<-t.done
		runtime.UnlockOSThread()
		return
	}
	defer close(t.done)
	if err := setup(); err != nil {
		ready <- err
		return
	}
	ready <- nil
	for {
		select {
		case fn := <-t.req:
			fn()
			t.reply <- struct{}{}
		case <-t.stop:
			return
		}
	}
}

// Do runs fn on the thread and returns when fn has returned. Once Close has returned, Do
// returns ErrClosed without running fn.
func (t *Thread) Do(fn func()) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	select {
	case t.req <- fn:
	case <-t.stop:
		return ErrClosed
	}
	<-t.reply
	return nil
}

// Close ends the thread, after a Do in progress has returned. It is idempotent. It returns
// when the thread's goroutine has returned; the runtime ends the OS thread itself a moment
// later (nothing else ever runs on it meanwhile).
func (t *Thread) Close() {
	t.once.Do(func() { close(t.stop) })
	<-t.done
}
