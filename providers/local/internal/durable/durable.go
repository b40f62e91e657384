// Package durable writes files that survive a crash of the machine: a file is synced
// before it is closed, and a directory after an entry is added to it, so that a rename
// that commits a write (a snapshot's, a boot image's) never makes visible what the disk
// does not hold yet.
package durable

import (
	"errors"
	"os"
)

// WriteFile writes a new file (it must not exist), mode 0600, and syncs it before closing
// it. Its name is durable once its directory is synced (SyncDir).
func WriteFile(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	return errors.Join(err, f.Close())
}

// SyncDir syncs the directory dir: the entries added to it, removed or renamed are durable.
func SyncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	serr := f.Sync()
	return errors.Join(serr, f.Close())
}
