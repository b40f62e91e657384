package template

import (
	"regexp"
	"strings"
	"testing"
)

// nameRe is what validNameChars writes out by hand (so that no tupper command compiles it
// at start-up); the test and the fuzz target hold the two to the same answers.
var nameRe = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,127}$`)

func TestValidNameChars(t *testing.T) {
	for _, name := range []string{
		"", "a", "0", "debian", "my-template_1.2", ".a", "-a", "_a", "A", "aB", "a b", "a/b", "a:b",
		"é", "a\x00", strings.Repeat("a", 128), strings.Repeat("a", 129), "a..b", "a.",
	} {
		if got, want := validNameChars(name), nameRe.MatchString(name); got != want {
			t.Errorf("validNameChars(%q) = %v, the pattern says %v", name, got, want)
		}
	}
	if ValidName("a..b") == nil || ValidName("debian") != nil {
		t.Error("ValidName")
	}
}

func FuzzValidNameChars(f *testing.F) {
	f.Add("debian")
	f.Add("-x")
	f.Fuzz(func(t *testing.T, name string) {
		if got, want := validNameChars(name), nameRe.MatchString(name); got != want {
			t.Errorf("validNameChars(%q) = %v, the pattern says %v", name, got, want)
		}
	})
}
