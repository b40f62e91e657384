//go:build linux

package local

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/tupper-dev/tupper/internal/osthread"
)

// A sandbox's mounts — the tmpfs of its disk and the overlay of its root file system, and
// under runsc with network "all" the bind of its network namespace — are made in a mount
// namespace of their own, never in the host's. Every mount in the host's namespace is copied
// into each new container's namespace, and runc and crun then walk the copy (rslave,
// pivot_root, detaching the old root): with two mounts per live sandbox in the host's
// namespace, creating a sandbox among 2,000 others took twice as long as among none.
//
// Create makes that namespace on a dedicated thread of its process (nsWorker): the thread
// unshares its mount namespace, makes every mount in it private (nothing propagates back to
// the host) and runs the steps that must see the sandbox's mounts — mounting them, and
// starting the runtime, whose container copies the namespace as it was before (the host's
// mounts plus this sandbox's). A holder process forked from that thread (holder.go) keeps
// the namespace, and so the mounts, after Create; the thread ends with Create, success or
// failure. The host's namespace never sees the mounts.

// nsWorker is a thread in a new mount namespace, for the length of one Create.
type nsWorker struct{ t *osthread.Thread }

// newNSWorker starts the thread and its namespace: a copy of the calling process's, every
// mount private.
func newNSWorker() (*nsWorker, error) {
	t, err := osthread.Start(func() error {
		// CLONE_NEWNS unshares the thread's file-system context (CLONE_FS) as well: its
		// root and working directory are its own from now on.
		if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
			return fmt.Errorf("unshare the mount namespace: %w", err)
		}
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			return fmt.Errorf("make the namespace's mounts private: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &nsWorker{t: t}, nil
}

// do runs fn on the thread: the paths fn resolves and the processes it starts are the
// namespace's. Calls run one at a time.
func (w *nsWorker) do(fn func() error) error {
	var err error
	if terr := w.t.Do(func() { err = fn() }); terr != nil {
		return terr
	}
	return err
}

// close ends the thread. The namespace lives on while a process is in it (the holder).
func (w *nsWorker) close() { w.t.Close() }

// joinNSWorker starts a thread in the mount namespace of a live sandbox, the one its holder
// keeps (holder.go), for steps after Create that must see the sandbox's mounts: restoring a
// sandbox whose memory was saved to disk (pausesaved.go). The namespace is opened through the
// holder's pid and the holder checked to be the one recorded after the open, so a reused
// pid never leads into another process's namespace.
func joinNSWorker(rec *record) (*nsWorker, error) {
	if rec.HolderPID <= 0 {
		return nil, fmt.Errorf("sandbox %s has no holder", rec.ID)
	}
	t, err := osthread.Start(func() error {
		// setns into a mount namespace needs a file-system context of the thread's own.
		if err := unix.Unshare(unix.CLONE_FS); err != nil {
			return fmt.Errorf("unshare the file-system context: %w", err)
		}
		fd, err := unix.Open(fmt.Sprintf("/proc/%d/ns/mnt", rec.HolderPID), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open the mount namespace of sandbox %s: %w", rec.ID, err)
		}
		defer unix.Close(fd)
		if !holderAlive(rec) {
			return fmt.Errorf("the process holding sandbox %s's mounts (pid %d) is gone", rec.ID, rec.HolderPID)
		}
		if err := unix.Setns(fd, unix.CLONE_NEWNS); err != nil {
			return fmt.Errorf("enter the mount namespace of sandbox %s: %w", rec.ID, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &nsWorker{t: t}, nil
}
