package filemode

import (
	"io/fs"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		unix uint32
		mode fs.FileMode
	}{
		{0, 0},
		{0o644, 0o644},
		{0o4755, fs.ModeSetuid | 0o755},
		{0o2750, fs.ModeSetgid | 0o750},
		{0o1777, fs.ModeSticky | 0o777},
		{0o7000, fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky},
	} {
		if got := FromUnix(tc.unix); got != tc.mode {
			t.Errorf("FromUnix(%#o) = %v, want %v", tc.unix, got, tc.mode)
		}
		if got := Unix(tc.mode); got != tc.unix {
			t.Errorf("Unix(%v) = %#o, want %#o", tc.mode, got, tc.unix)
		}
	}
	if got := FromUnix(0o100644); got != 0o644 {
		t.Errorf("FromUnix(0o100644) = %v: the file type is not a permission", got)
	}
	if got := Unix(fs.ModeDir | 0o755); got != 0o755 {
		t.Errorf("Unix(ModeDir|0755) = %#o: the file type is not a permission", got)
	}
}
