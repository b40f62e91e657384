// Package filemode converts between a unix mode's permission bits (0o7777: rwx for owner,
// group and others, with setuid, setgid and sticky), as the agent's wire and the memory
// provider carry them, and Go's fs.FileMode, which keeps the three special bits elsewhere.
package filemode

import "io/fs"

// FromUnix returns the permission and special bits of the unix mode n as an fs.FileMode;
// n's other bits (the file type) are ignored.
func FromUnix(n uint32) fs.FileMode {
	m := fs.FileMode(n & 0o777)
	if n&0o4000 != 0 {
		m |= fs.ModeSetuid
	}
	if n&0o2000 != 0 {
		m |= fs.ModeSetgid
	}
	if n&0o1000 != 0 {
		m |= fs.ModeSticky
	}
	return m
}

// Unix returns m's permission and special bits as a unix mode (0o7777 at most).
func Unix(m fs.FileMode) uint32 {
	n := uint32(m.Perm())
	if m&fs.ModeSetuid != 0 {
		n |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		n |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		n |= 0o1000
	}
	return n
}
