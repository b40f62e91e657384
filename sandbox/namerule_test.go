package sandbox

import (
	"regexp"
	"strings"
	"testing"
)

// TestNameRulesMatchTheirRegexps checks each hand-written name rule against the regular
// expression it stands for, over every short string of an alphabet that exercises each
// class boundary, and over lengths around each limit.
func TestNameRulesMatchTheirRegexps(t *testing.T) {
	rules := []struct {
		name string
		rule nameRule
		re   *regexp.Regexp
	}{
		{"shellName", shellName, regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)},
		{"labelKey", labelKey, regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._/-]{0,62}$`)},
		{"procName", procName, regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)},
		{"markName", markName, regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)},
	}
	alphabet := []string{"a", "Z", "0", "9", "_", "-", ".", "/", " ", "\n", "$", "é", "\x00", "\xff", "@", "`", "[", "{", ":"}
	var inputs []string
	var grow func(prefix string, depth int)
	grow = func(prefix string, depth int) {
		inputs = append(inputs, prefix)
		if depth == 0 {
			return
		}
		for _, a := range alphabet {
			grow(prefix+a, depth-1)
		}
	}
	grow("", 3)
	for _, n := range []int{61, 62, 63, 64, 65, 127, 128, 129, 300} {
		inputs = append(inputs, strings.Repeat("a", n), "a"+strings.Repeat("-", n-1), strings.Repeat("a", n-1)+" ")
	}
	for _, r := range rules {
		for _, in := range inputs {
			if got, want := r.rule.MatchString(in), r.re.MatchString(in); got != want {
				t.Errorf("%s(%q) = %v, the regexp says %v", r.name, in, got, want)
			}
		}
	}
	if len(inputs) < 6000 {
		t.Fatalf("only %d inputs", len(inputs))
	}
}

func TestDefaultProcNameKeepsOnlyNameBytes(t *testing.T) {
	got := defaultProcName("/usr/bin/py.th-on_3 -m http.server")
	if !strings.HasPrefix(got, "pyth-on_3") {
		t.Fatalf("defaultProcName = %q", got)
	}
	if !procName.MatchString(got) {
		t.Fatalf("defaultProcName = %q, not a valid process name", got)
	}
}
