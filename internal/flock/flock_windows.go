package flock

import (
	"errors"
	"os"

	"golang.org/x/sys/windows"
)

// mode is how a lock is held: LockFileEx's flags.
type mode uint32

const (
	exclusive mode = windows.LOCKFILE_EXCLUSIVE_LOCK
	shared    mode = 0
)

// try takes the lock without waiting; it reports false and no error when another holds it.
// The lock covers the file's first byte range of maximal length, as flock(2) covers the whole
// file; Windows releases it when the handle is closed, as the kernel does flock's.
func try(f *os.File, how mode) (bool, error) {
	ol := new(windows.Overlapped)
	err := windows.LockFileEx(windows.Handle(f.Fd()), uint32(how)|windows.LOCKFILE_FAIL_IMMEDIATELY, 0, ^uint32(0), ^uint32(0), ol)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, windows.ERROR_LOCK_VIOLATION):
		return false, nil
	}
	return false, err
}
