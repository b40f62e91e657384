package memory

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/tupper-dev/tupper/provider"
)

// shellCase is one script, run in /workspace of a sandbox prepared by setup, with the stdout
// and exit status it must give.
type shellCase struct {
	script string
	out    string
	code   int
}

const fixture = `mkdir -p /workspace/d/sub /workspace/d/.hid
printf 'alpha\nbeta\ngamma\nbeta\n' > /workspace/d/words.txt
printf 'one two three\nfour five\n' > /workspace/d/sub/nums.md
printf 'x\000y\n' > /workspace/d/bin.dat
echo hidden > /workspace/d/.hid/h.txt
ln -s words.txt /workspace/d/link`

func runCases(t *testing.T, cases []shellCase) {
	t.Helper()
	in := newInstance(t, provider.CreateSpec{})
	if r := sh(t, in, fixture); r.code != 0 {
		t.Fatalf("fixture: exit %d: %s", r.code, r.err)
	}
	for _, c := range cases {
		expect(t, in, c.script, c.out, c.code)
	}
}

func TestShellBasics(t *testing.T) {
	runCases(t, []shellCase{
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
	})
}

func TestShellFileUtilities(t *testing.T) {
	runCases(t, []shellCase{
		{"cat d/words.txt", "alpha\nbeta\ngamma\nbeta\n", 0},
		{"cat -n d/sub/nums.md", "     1\tone two three\n     2\tfour five\n", 0},
		{"cat nope; echo $?", "1\n", 0},
		{"cat d; echo $?", "1\n", 0},
		{"ls d", "bin.dat\nlink\nsub\nwords.txt\n", 0},
		{"ls -a d | head -3", ".\n..\n.hid\n", 0},
		{"ls -1 d/sub d/words.txt", "d/words.txt\n\nd/sub:\nnums.md\n", 0},
		{"ls -R d/sub", "d/sub:\nnums.md\n", 0},
		{"ls -l d/link | grep -c '^lrwxrwxrwx'; ls -l d/link | grep -o 'link -> words.txt'", "1\nlink -> words.txt\n", 0},
		{"ls -ld d | grep -c '^drwxr-xr-x '", "1\n", 0},
		{"ln -s /etc/hostname hn; stat -c %F hn; cat hn", "symbolic link\nsandbox\n", 0},
		{"ln -s nothere lnk; ln -s y lnk; echo $?; ln -sf y lnk; ls -l lnk | grep -o 'lnk -> y'", "1\nlnk -> y\n", 0},
		{"for i in $(seq 3); do echo $i; done | wc -l", "3\n", 0},
		{"ls nope; echo $?", "2\n", 0},
		{"mkdir x; mkdir x; echo $?; mkdir -p x/y/z && ls x/y", "1\nz\n", 0},
		{"mkdir a/b 2>/dev/null; echo $?", "1\n", 0},
		{"touch t1 && ls t1 && rm t1 && ls t1 2>/dev/null; echo $?", "t1\n2\n", 0},
		{"rm nope; echo $?; rm -f nope; echo $?", "1\n0\n", 0},
		{"mkdir rd; rm rd; echo $?; rm -r rd; echo $?", "1\n0\n", 0},
		{"mkdir -p e/f; rmdir e; echo $?; rmdir e/f e; echo $?", "1\n0\n", 0},
		{"rm -rf /; echo $?; ls / | grep -c workspace", "1\n1\n", 0},
		{"echo 1 > m1; mv m1 m2; cat m2; mkdir md; mv m2 md; ls md", "1\nm2\n", 0},
		{"mkdir mv1; mv mv1 mv1/sub; echo $?", "1\n", 0},
		{"chmod 640 d/words.txt; stat -c '%a %s %n' d/words.txt", "640 22 d/words.txt\n", 0},
		{"touch cm; chmod u+x,g+w cm; stat -c %a cm; chmod a-w cm; stat -c %A cm", "764\n-r-xr--r--\n", 0},
		{"stat -c '%F' d d/link d/words.txt; stat -L -c %F d/link", "directory\nsymbolic link\nregular file\nregular file\n", 0},
		{"stat nope; echo $?", "1\n", 0},
		{"ln -s ../../../../etc esc; ls esc/hostname; cat esc/hostname", "esc/hostname\nsandbox\n", 0},
		{"echo h > hl1; ln hl1 hl2; echo more >> hl2; cat hl1", "h\nmore\n", 0},
		{"find d -name '*.txt' | sort", "d/.hid/h.txt\nd/words.txt\n", 0},
		{"find d -maxdepth 1 -type d", "d\nd/.hid\nd/sub\n", 0},
		{"find d -type l; find d -type f -name 'n*'", "d/link\nd/sub/nums.md\n", 0},
		{"cd d && find . -path './sub*' && find . -name sub -prune -o -type f -print | sort", "./sub\n./sub/nums.md\n./.hid/h.txt\n./bin.dat\n./words.txt\n", 0},
		{"find d -name '*.md' -exec cat {} \\;", "one two three\nfour five\n", 0},
		{"find d -name '*.md' -exec echo {} +", "d/sub/nums.md\n", 0},
		{"mkdir -p del/x; touch del/x/f; find del -delete; ls del 2>/dev/null; echo $?", "2\n", 0},
		{"find nope; echo $?", "1\n", 0},
	})
}

func TestShellTextUtilities(t *testing.T) {
	runCases(t, []shellCase{
		{"head -n 2 d/words.txt; head -c 3 d/words.txt; echo; head -2 d/words.txt", "alpha\nbeta\nalp\nalpha\nbeta\n", 0},
		{"head -n -3 d/words.txt", "alpha\n", 0},
		{"head -n1 d/words.txt d/sub/nums.md", "==> d/words.txt <==\nalpha\n\n==> d/sub/nums.md <==\none two three\n", 0},
		{"wc -l d/words.txt; wc -l < d/words.txt; wc -w d/sub/nums.md; wc -c d/words.txt", "4 d/words.txt\n4\n5 d/sub/nums.md\n22 d/words.txt\n", 0},
		{"printf 'a b\\n' | wc", "      1       2       4\n", 0},
		{"grep beta d/words.txt", "beta\nbeta\n", 0},
		{"grep -n beta d/words.txt; grep -c beta d/words.txt", "2:beta\n4:beta\n2\n", 0},
		{"grep -v beta d/words.txt; grep -i ALPHA d/words.txt", "alpha\ngamma\nalpha\n", 0},
		{"grep -q gamma d/words.txt && echo found; grep -q nope d/words.txt; echo $?", "found\n1\n", 0},
		{"grep nope nofile; echo $?; grep -s nope nofile; echo $?", "2\n2\n", 0},
		{"grep -F 'a.b' d/words.txt; echo $?; grep 'a.p' d/words.txt", "1\nalpha\n", 0},
		{"grep -e alpha -e gamma d/words.txt", "alpha\ngamma\n", 0},
		{"grep 'b\\(et\\)a' d/words.txt | head -1; grep -E 'b(et)a|gam+a' d/words.txt", "beta\nbeta\ngamma\nbeta\n", 0},
		{"grep -w 'one' d/sub/nums.md; grep -x 'beta' d/words.txt | wc -l", "one two three\n2\n", 0},
		{"grep -o 'ta' d/words.txt", "ta\nta\n", 0},
		{"grep -rn five d", "d/sub/nums.md:2:four five\n", 0},
		{"cd d && grep -r five", "sub/nums.md:four five\n", 0},
		{"grep -rl a d | sort; grep -rL a d | sort", "d/words.txt\nd/.hid/h.txt\nd/bin.dat\nd/sub/nums.md\n", 0},
		{"grep -r --include='*.md' o d", "d/sub/nums.md:one two three\nd/sub/nums.md:four five\n", 0},
		{"grep -r --exclude-dir=sub -c a d | sort", "d/.hid/h.txt:0\nd/bin.dat:0\nd/words.txt:4\n", 0},
		{"grep x d/bin.dat 2>&1", "grep: d/bin.dat: binary file matches\n", 0},
		{"grep beta d; echo $?", "2\n", 0},
		{"grep -A1 alpha d/words.txt; grep -B1 gamma d/words.txt; grep -C1 -n gamma d/words.txt", "alpha\nbeta\nbeta\ngamma\n2-beta\n3:gamma\n4-beta\n", 0},
		{"printf 'x\\nfoo\\n' | grep foo; printf 'x\\n' | grep -c foo", "foo\n0\n", 1},
		{"sort d/words.txt; sort -r d/words.txt | head -1; sort -u d/words.txt | wc -l", "alpha\nbeta\nbeta\ngamma\ngamma\n3\n", 0},
		{"printf '10\\n9\\n100\\n' | sort -n; printf '10\\n9\\n100\\n' | sort", "9\n10\n100\n10\n100\n9\n", 0},
		{"printf 'b 2\\na 10\\nc 1\\n' | sort -k2 -n; printf 'x:3\\ny:1\\n' | sort -t: -k2", "c 1\nb 2\na 10\ny:1\nx:3\n", 0},
		{"echo hello | tr a-z A-Z; echo hello | tr -d l; echo 'aa  bb' | tr -s ' '", "HELLO\nheo\naa bb\n", 0},
		{"echo 'a1b2' | tr -cd '0-9'; echo; echo abc | tr '[:lower:]' '[:upper:]'", "12\nABC\n", 0},
	})
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
	got := slices.Sorted(maps.Keys(utilities))
	if strings.Join(got, " ") != want {
		t.Errorf("utilities: %s\nwant:      %s", strings.Join(got, " "), want)
	}
}
