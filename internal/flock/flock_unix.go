//go:build unix

package flock

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// mode is how a lock is held: flock(2)'s LOCK_EX or LOCK_SH.
type mode int

const (
	exclusive mode = unix.LOCK_EX
	shared    mode = unix.LOCK_SH
)

// try takes the lock without waiting; it reports false and no error when another holds it.
func try(f *os.File, how mode) (bool, error) {
	for {
		err := unix.Flock(int(f.Fd()), int(how)|unix.LOCK_NB)
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.EWOULDBLOCK):
			return false, nil
		}
		return false, err
	}
}
