//go:build linux

package agent

import (
	"os"
	"os/signal"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// reaper collects the exit statuses of the processes the agent starts.
//
// In "all" mode (the agent is PID 1) one loop calls wait4(-1) on every
// SIGCHLD and so also reaps orphans reparented to the agent; statuses of
// processes the agent started go to their waiters, the rest are dropped.
// spawn holds the lock from before fork until the waiter is registered and
// the loop takes it before looking a pid up, so a child that exits at once
// can never have its status stolen.
//
// Otherwise (a normal process on the host, e.g. in tests) each child is
// waited for by pid, so the agent never reaps children that are not its own.
type reaper struct {
	all     bool
	mu      sync.Mutex
	waiters map[int]chan unix.WaitStatus
	sigs    chan os.Signal
	stop    chan struct{}
	done    chan struct{}
}

func newReaper(all bool) *reaper {
	r := &reaper{all: all, waiters: map[int]chan unix.WaitStatus{}, stop: make(chan struct{}), done: make(chan struct{})}
	if all {
		r.sigs = make(chan os.Signal, 1)
		signal.Notify(r.sigs, syscall.SIGCHLD)
		go r.loop()
	} else {
		close(r.done)
	}
	return r
}

func (r *reaper) close() {
	if r.all {
		signal.Stop(r.sigs)
		close(r.stop)
		<-r.done
	}
}

func (r *reaper) loop() {
	defer close(r.done)
	for {
		r.reapAll()
		select {
		case <-r.sigs:
		case <-r.stop:
			return
		}
	}
}

func (r *reaper) reapAll() {
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil || pid <= 0 {
			return
		}
		r.mu.Lock()
		ch := r.waiters[pid]
		delete(r.waiters, pid)
		r.mu.Unlock()
		if ch != nil {
			ch <- ws
		}
	}
}

// spawn runs start (a fork+exec) and registers a waiter for the new pid.
// The returned channel receives the pid's wait status exactly once.
func (r *reaper) spawn(start func() (int, error)) (int, <-chan unix.WaitStatus, error) {
	r.mu.Lock()
	pid, err := start()
	if err != nil {
		r.mu.Unlock()
		return 0, nil, err
	}
	ch := make(chan unix.WaitStatus, 1)
	r.waiters[pid] = ch
	r.mu.Unlock()
	if !r.all {
		go func() {
			var ws unix.WaitStatus
			for {
				_, err := unix.Wait4(pid, &ws, 0, nil)
				if err != unix.EINTR {
					break
				}
			}
			r.mu.Lock()
			delete(r.waiters, pid)
			r.mu.Unlock()
			ch <- ws
		}()
	}
	return pid, ch, nil
}
