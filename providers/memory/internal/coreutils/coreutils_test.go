package coreutils_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/providers/memory"
)

// shellCase is one script, run in /workspace of a memory sandbox holding the fixture, with
// the stdout and exit status it must give.
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

// runCases runs the cases in one sandbox, through the memory provider's shell: the
// utilities' real caller, on the real file system.
func runCases(t *testing.T, cases []shellCase) {
	t.Helper()
	p := memory.New()
	in, err := p.Create(context.Background(), provider.CreateSpec{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Destroy(context.Background(), in.(*memory.Instance).ID()) })
	run := func(script string) (stdout, stderr string, code int) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var out, errb bytes.Buffer
		res, err := in.Exec(ctx, provider.ExecRequest{Command: script, Cwd: "/workspace", Stdout: &out, Stderr: &errb})
		if err != nil {
			t.Fatalf("exec %q: %v", script, err)
		}
		return out.String(), errb.String(), res.ExitCode
	}
	if _, stderr, code := run(fixture); code != 0 {
		t.Fatalf("fixture: exit %d: %s", code, stderr)
	}
	for _, c := range cases {
		if out, stderr, code := run(c.script); out != c.out || code != c.code {
			t.Errorf("%s\n got: %q (exit %d, stderr %q)\nwant: %q (exit %d)", c.script, out, code, stderr, c.out, c.code)
		}
	}
}

func TestFileUtilities(t *testing.T) {
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
		// The long options take no value: the directory after them is an operand.
		{"mkdir -p g/h; rmdir --ignore-fail-on-non-empty g; echo $?; rmdir --parents g/h; echo $?; test -e g || echo gone", "0\n0\ngone\n", 0},
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

func TestTextUtilities(t *testing.T) {
	runCases(t, []shellCase{
		{"head -n 2 d/words.txt; head -c 3 d/words.txt; echo; head -2 d/words.txt", "alpha\nbeta\nalp\nalpha\nbeta\n", 0},
		{"head -n -3 d/words.txt", "alpha\n", 0},
		{"printf 'a\\nb\\nc' | head -n -1; echo; printf '' | head -n -1 | wc -c", "a\nb\n\n0\n", 0},
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
