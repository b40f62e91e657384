package client

import "testing"

func TestLstatPerm(t *testing.T) {
	for _, tc := range []struct {
		perm string
		mode uint32
		want uint32
	}{
		{"Lrwxrwxrwx", 0o640, 0o777},  // a symlink: its own bits, not its target's
		{"-rw-r-----", 0o640, 0o640},  // a file
		{"drwx------", 0o700, 0o700},  // a directory
		{"urwxr-xr-x", 0o755, 0o755},  // setuid prints as a type letter
		{"", 0o644, 0o644},            // an envd that sends none
		{"-rwSr--r--", 0o4644, 0o644}, // not rwx letters: trust mode
	} {
		if got := LstatPerm(tc.perm, tc.mode); got != tc.want {
			t.Errorf("LstatPerm(%q, %o) = %o, want %o", tc.perm, tc.mode, got, tc.want)
		}
	}
}
