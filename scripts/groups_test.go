package scripts

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestGroups runs scripts/groups.sh, the groups of scripts/test.sh, on made-up groups: a
// failing group stops at its first failing command but not the run, a group in the
// background is counted, the summary lists every group with its result, and the run fails
// at the end if any group did — and passes when none did.
func TestGroups(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	lib, err := filepath.Abs("groups.sh")
	if err != nil {
		t.Fatal(err)
	}
	run := func(body string) (string, int) {
		t.Helper()
		script := `set -uo pipefail
start=$SECONDS
. "$1"
results=$(mktemp -d)
` + body + `
summary
`
		cmd := exec.Command(bash, "-c", script, "test", lib)
		cmd.Env = append(os.Environ(), "TMPDIR="+t.TempDir())
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return string(out), code
	}

	out, code := run(`
half() { echo first-half; false; echo second-half; }
group "passes" true
group "fails halfway" half
( group "in the background" sh -c 'exit 3'; group "after it" true ) &
wait $!
group "last" true
`)
	if code != 1 {
		t.Errorf("a run with failing groups exited %d, want 1:\n%s", code, out)
	}
	if !strings.Contains(out, "first-half") || strings.Contains(out, "second-half") {
		t.Errorf("a failing group went on past its failing command (set -e ignored):\n%s", out)
	}
	for _, want := range []string{
		`(?m)^  pass +\d+s  passes$`,
		`(?m)^  FAIL +\d+s  fails halfway \(exit 1\)$`,
		`(?m)^  FAIL +\d+s  in the background \(exit 3\)$`,
		`(?m)^  pass +\d+s  after it$`,
		`(?m)^  pass +\d+s  last$`,
		`(?m)^FAILED: 2 group\(s\), listed above$`,
	} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("summary lacks %s:\n%s", want, out)
		}
	}

	out, code = run(`
group "one" true
group "two" sh -c 'echo fine'
`)
	if code != 0 || !strings.Contains(out, "all groups passed") {
		t.Errorf("a run whose groups all pass: exit %d:\n%s", code, out)
	}
}
