package e2b

import "testing"

func TestIDPattern(t *testing.T) {
	for _, good := range []string{"a", "0", "abc123", "zzzz9999"} {
		if !idPattern.MatchString(good) {
			t.Errorf("idPattern rejects %q", good)
		}
	}
	for _, bad := range []string{"", "A", "a-b", "a_b", "a/b", "../x", "a b", "a\n", "é", "a\x00"} {
		if idPattern.MatchString(bad) {
			t.Errorf("idPattern accepts %q", bad)
		}
	}
}
