package memory

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/providers/memory/internal/coreutils"
)

// basicsFixture is what TestShellBasics's scripts look at.
const basicsFixture = `mkdir -p /workspace/d/sub
printf 'alpha\nbeta\ngamma\nbeta\n' > /workspace/d/words.txt
ln -s words.txt /workspace/d/link`

func TestShellBasics(t *testing.T) {
	in := newInstance(t, provider.CreateSpec{})
	if r := sh(t, in, basicsFixture); r.code != 0 {
		t.Fatalf("fixture: exit %d: %s", r.code, r.err)
	}
	for _, c := range []struct {
		script, out string
		code        int
	}{
		{"echo hello world", "hello world\n", 0},
		{"printf '%s-%d\\n' a 1 b 2", "a-1\nb-2\n", 0},
		{"true; echo $?; false; echo $?", "0\n1\n", 0},
		{"exit 3", "", 3},
		{"sh -c 'exit 7'; echo $?", "7\n", 0},
		{"sh -c 'echo $0:$1:$2' name a b", "name:a:b\n", 0},
		{"echo 'echo from file $1' > s.sh; sh s.sh arg", "from file arg\n", 0},
		{"printf '#!/bin/sh\\necho run $1\\n' > x.sh; chmod +x x.sh; ./x.sh A", "run A\n", 0},
		{"printf 'echo noexec\\n' > n.sh; ./n.sh; echo $?", "126\n", 0},
		{"mkdir -p /usr/local/bin; printf 'echo mine\\n' > /usr/local/bin/tool; chmod 755 /usr/local/bin/tool; tool", "mine\n", 0},
		{"nosuchcmd; echo $?", "127\n", 0},
		{"/bin/echo via path; /usr/bin/env echo via env", "via path\nvia env\n", 0},
		{"pwd; cd d && pwd; cd sub; pwd -P", "/workspace\n/workspace/d\n/workspace/d/sub\n", 0},
		{"echo $HOME $USER; echo ${PATH%%:*}", "/root root\n/usr/local/sbin\n", 0},
		{"f() { echo in f $1; }; f x; type f | head -1", "in f x\nf is a function\n", 0},
		{"command -v ls echo nosuch; echo $?", "/usr/bin/ls\necho\n1\n", 0},
		{"type -t cd; type -t if; type ls", "builtin\nkeyword\nls is /usr/bin/ls\n", 0},
		{"which ls sh; which nosuch; echo $?", "/usr/bin/ls\n/usr/bin/sh\n1\n", 0},
		{"x=$(echo sub); echo \"[$x]\"", "[sub]\n", 0},
		{"cat <<EOF\nline $((1+2))\nEOF", "line 3\n", 0},
		{"echo a | { read v; echo got $v; }", "got a\n", 0},
		{"set -e; false; echo not reached", "", 1},
		{"echo $((7 * 6))", "42\n", 0},
		{"[ -d d ] && [ -f d/words.txt ] && [ -L d/link ] && [ ! -e nope ] && echo ok", "ok\n", 0},
		{"test -x d/words.txt; echo $?; chmod 755 d/words.txt; test -x d/words.txt; echo $?", "1\n0\n", 0},
		{"echo $$ | grep -c '^[0-9][0-9]*$'", "1\n", 0},
		{"echo one > /dev/null; echo two > /dev/stderr; echo three", "three\n", 0},
		{"printf 'a\\r\\nb' | od -c 2>/dev/null || printf 'a\\r\\nb' | wc -c", "4\n", 0},
		{"echo start & wait; echo end", "start\nend\n", 0},
		{". ./s.sh dot 2>/dev/null; echo $?", "from file\n0\n", 0},
		{"echo 'v=sourced' > env.sh; . ./env.sh; echo $v", "sourced\n", 0},
		{"cat < <(echo x)", "", 2},
		{"eval 'echo evaluated'", "evaluated\n", 0},
		{"env -i FOO=bar env", "FOO=bar\n", 0},
		{"FOO=1 printenv FOO; printenv NOPE; echo $?", "1\n1\n", 0},
		{"uname; uname -s", "Linux\nLinux\n", 0},
		{"seq 3; seq 5 -2 1; seq -s, 3", "1\n2\n3\n5\n3\n1\n1,2,3\n", 0},
		{"sleep 0.01 && echo slept", "slept\n", 0},
		{"sleep abc; echo $?", "1\n", 0},
	} {
		expect(t, in, c.script, c.out, c.code)
	}
}

func TestShellStdin(t *testing.T) {
	in := newInstance(t, provider.CreateSpec{})
	input := "line one\nline two\n"
	r := shIn(t, in, "cat; echo done", "/workspace", &input)
	if r.out != input+"done\n" || r.code != 0 {
		t.Errorf("cat of stdin: %q exit %d", r.out, r.code)
	}
	r = shIn(t, in, "wc -l", "/workspace", nil)
	if strings.TrimSpace(r.out) != "0" {
		t.Errorf("nil stdin is not empty: %q", r.out)
	}
	r = shIn(t, in, "read x; echo \"[$x]\"", "/workspace", &input)
	if r.out != "[line one]\n" {
		t.Errorf("read: %q", r.out)
	}
}

func TestShellErrors(t *testing.T) {
	in := newInstance(t, provider.CreateSpec{})
	r := sh(t, in, "nosuchcmd arg")
	if r.code != 127 || r.err != "sh: nosuchcmd: command not found\n" {
		t.Errorf("unknown command: exit %d, stderr %q", r.code, r.err)
	}
	r = shIn(t, in, "echo hi", "/nope", nil)
	if r.code == 0 || !strings.Contains(r.err, "/nope") || r.out != "" {
		t.Errorf("missing cwd: exit %d, stdout %q, stderr %q", r.code, r.out, r.err)
	}
	r = sh(t, in, "echo 'unterminated")
	if r.code != 2 || !strings.Contains(r.err, "sh:") {
		t.Errorf("syntax error: exit %d, stderr %q", r.code, r.err)
	}
	r = sh(t, in, "cat /etc/nope")
	if r.code != 1 || r.err != "cat: /etc/nope: No such file or directory\n" {
		t.Errorf("cat missing: exit %d, stderr %q", r.code, r.err)
	}
	r = sh(t, in, "echo x > /nodir/f")
	if r.code != 1 || !strings.Contains(r.err, "No such file or directory") {
		t.Errorf("redirect into a missing dir: exit %d, stderr %q", r.code, r.err)
	}
}

// TestShellHostUntouched checks the paths where the interpreter would reach the host.
func TestShellHostUntouched(t *testing.T) {
	in := newInstance(t, provider.CreateSpec{})
	// /etc/hostname of the sandbox, not of the host; /usr/bin is empty in the sandbox.
	expect(t, in, "cat /etc/hostname; ls /usr/bin | wc -l", "sandbox\n0\n", 0)
	// The interpreter's FIFO short-cut must not open host paths, whatever TMPDIR says.
	expect(t, in, "TMPDIR=/tmp; echo x > /tmp/sh-interp-1; cat /tmp/sh-interp-1", "x\n", 0)
	// type -p, command -v and source look in the memory file system only.
	expect(t, in, "command -v go gcc python3; echo $?", "1\n", 0)
	expect(t, in, "echo $UID $EUID", "0 0\n", 0)
}

// The command set is frozen to what the SDK's fallbacks and the conformance suite run (see
// the package documentation): a new utility needs a user there first.
func TestCommandSetIsFrozen(t *testing.T) {
	want := "bash cat chmod env find grep head hostname ln ls mkdir mv printenv rm rmdir seq sh sleep sort stat touch tr uname wc"
	got := slices.Concat(slices.Collect(maps.Keys(utilities)), coreutils.Names())
	slices.Sort(got)
	if strings.Join(got, " ") != want {
		t.Errorf("utilities: %s\nwant:      %s", strings.Join(got, " "), want)
	}
}
