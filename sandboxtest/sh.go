package sandboxtest

import (
	"strings"
	"time"

	"github.com/tupper-dev/tupper/sandbox"
)

func shCases() []testCase {
	return []testCase{
		{"QuotesSingle", shWords("'", "it's", "a'b'c", "''", "'\\''")},
		{"QuotesDouble", shWords(`"`, `"double"`, `a"b`, `\"`)},
		{"CommandSubstitution", shWords("$(echo pwned)", "`echo pwned`", "$((1+1))", "${HOME}", "$HOME", "$0", "$$")},
		{"Newlines", shWords("a\nb", "\n", "line1\nline2\n", "a\r\nb", "\ttab")},
		{"Globs", shGlobs},
		{"LeadingDashes", shWords("-n", "-e", "--", "--help", "-")},
		{"Metacharacters", shWords("; rm -rf /", "a && b", "a || b", "a | b", "a > /tmp/x", "< /etc/passwd", "a & b", "(sub)", "{a,b}", "~", "!", "#comment", "a\\b", "\\", "=", "x=1")},
		{"Unicode", shWords("ünïcødé", "日本語", "emoji 😀", "\u200bzero-width", "\u00a0nbsp")},
		{"EmptyAndSpaces", shWords("", " ", "  lead and trail  ", "a  b")},
		{"Slices", shSlices},
		{"Percent", shPercent},
		{"Verbs", shVerbs},
		{"Chained", shChained},
		{"ChainedTimeout", shChainedTimeout},
		{"NULRejected", shNUL},
		{"ArgumentCount", shArgCount},
		{"Unbound", shUnbound},
		{"Stream", shStream},
	}
}

// shWords returns a case that passes each string through Sh as one argument and checks the
// shell sees exactly it, as one word.
func shWords(words ...string) caseFunc {
	return func(c *C) {
		b := c.Box()
		for _, w := range words {
			cmd := b.Sh("printf '[%%s]' %s; printf '<%%s>' \"$#\"", w)
			// $# is for sh -c's own arguments: it must stay 0; a word that escaped its quotes
			// would change output, the count, or run something.
			res, err := cmd.Run(c.Ctx)
			if err != nil {
				c.Errorf("Sh(%q): %v", w, err)
				continue
			}
			want := "[" + w + "]<0>"
			if res.Stdout != want || !res.OK {
				c.Errorf("Sh(%q) ran %q: stdout %q, exit %d; want %q", w, cmd.String(), res.Stdout, res.ExitCode, want)
			}
			// And as an argument count: exactly one word.
			res, err = b.Sh("set -- %s; echo $#", w).Run(c.Ctx)
			if err == nil {
				Eq(c, "words in "+cmd.String(), res.Stdout, "1\n")
			}
		}
		if out := c.Out(b, "ls /tmp"); strings.Contains(out, "pwned") {
			c.Errorf("a quoted argument ran a command")
		}
	}
}

func shGlobs(c *C) {
	b := c.Box()
	c.MustRun(b, "mkdir -p g && touch g/a1 g/a2 g/b")
	for _, w := range []string{"*", "a*", "?", "[ab]*", "g/*", "**"} {
		res, err := b.Sh("printf '[%%s]' %s", w).Cwd("g").Run(c.Ctx)
		c.NoErr("Sh", err)
		Eq(c, "glob "+w, res.Stdout, "["+w+"]")
	}
	// The words are file names, not patterns.
	res, err := b.Sh("ls %s", "a*").Cwd("g").Run(c.Ctx)
	c.NoErr("Sh", err)
	if res.OK {
		c.Errorf("ls 'a*' found %q; the glob was expanded", res.Stdout)
	}
}

func shSlices(c *C) {
	b := c.Box()
	res, err := b.Sh("printf '[%%s]' %s", []string{"a b", "c'd", "*", "", "$(x)"}).Run(c.Ctx)
	c.NoErr("Sh", err)
	Eq(c, "slice", res.Stdout, "[a b][c'd][*][][$(x)]")
	res, err = b.Sh("printf '[%%s]' x %s", []string{}).Run(c.Ctx)
	c.NoErr("Sh", err)
	Eq(c, "empty slice", res.Stdout, "[x]")
	res, err = b.Sh("printf '[%%s]' %d", []int{1, 2, 3}).Run(c.Ctx)
	c.NoErr("Sh", err)
	Eq(c, "int slice", res.Stdout, "[1][2][3]")
	res, err = b.Sh("printf '[%%s]' %s", []byte("bytes as one word")).Run(c.Ctx)
	c.NoErr("Sh", err)
	Eq(c, "[]byte", res.Stdout, "[bytes as one word]")
}

func shPercent(c *C) {
	b := c.Box()
	res, err := b.Sh("echo 100%% %s%%", "x").Run(c.Ctx)
	c.NoErr("Sh", err)
	Eq(c, "%%", res.Stdout, "100% x%\n")
	res, err = b.Sh("printf '%%s' %s", "50%").Run(c.Ctx)
	c.NoErr("Sh", err)
	Eq(c, "percent inside an argument", res.Stdout, "50%")
}

func shVerbs(c *C) {
	b := c.Box()
	res, err := b.Sh("echo %d %v %q %05d %.2f", 42, true, "q", 7, 3.14159).Run(c.Ctx)
	c.NoErr("Sh", err)
	Eq(c, "verbs", res.Stdout, "42 true \"q\" 00007 3.14\n")
}

func shChained(c *C) {
	b := c.Box()
	c.MustRun(b, "mkdir -p /tmp/chain")
	base := b.Sh("pwd; printf '%%s|%%s\\n' \"$X\" \"$Y\"")
	cmd := base.Cwd("/tmp/chain").Env(map[string]string{"X": "x1"}).Env(map[string]string{"Y": "y1"})
	res, err := cmd.Run(c.Ctx)
	c.NoErr("chained Run", err)
	Eq(c, "chained", res.Stdout, "/tmp/chain\nx1|y1\n")
	Eq(c, "Cwd", res.Cwd, "/tmp/chain")
	// Chaining returns a new command; the base is unchanged.
	res, err = base.Run(c.Ctx)
	c.NoErr("base Run", err)
	Eq(c, "base after chaining", res.Stdout, "/workspace\n|\n")
	res, err = b.RunCmd(c.Ctx, sandbox.Sh("echo %s", "via RunCmd").Cwd("/tmp"))
	c.NoErr("RunCmd", err)
	Eq(c, "RunCmd", res.Stdout, "via RunCmd\n")
	Eq(c, "RunCmd Cwd", res.Cwd, "/tmp")
}

func shChainedTimeout(c *C) {
	b := c.Box()
	start := time.Now()
	res, err := b.Sh("sleep %s", "30").Timeout(300 * time.Millisecond).Run(c.Ctx)
	c.NoErr("Run", err)
	Eq(c, "TimedOut", res.TimedOut, true)
	if time.Since(start) > 10*time.Second {
		c.Errorf("a 300 ms timeout took %v", time.Since(start))
	}
}

func shNUL(c *C) {
	b := c.Box()
	cmd := b.Sh("echo %s", "a\x00b")
	c.WantCode("Cmd.Err", cmd.Err(), sandbox.CodeInvalidArgument)
	_, err := cmd.Run(c.Ctx)
	c.WantCode("Run with a NUL argument", err, sandbox.CodeInvalidArgument)
	_, err = b.Sh("echo %s", []string{"ok", "x\x00"}).Run(c.Ctx)
	c.WantCode("Run with a NUL slice element", err, sandbox.CodeInvalidArgument)
}

func shArgCount(c *C) {
	b := c.Box()
	_, err := b.Sh("echo %s %s", "one").Run(c.Ctx)
	c.WantCode("too few arguments", err, sandbox.CodeInvalidArgument)
	_, err = b.Sh("echo %s", "one", "two").Run(c.Ctx)
	c.WantCode("too many arguments", err, sandbox.CodeInvalidArgument)
	_, err = b.Sh("echo %", "x").Run(c.Ctx)
	c.WantCode("format ending in a verb", err, sandbox.CodeInvalidArgument)
}

func shUnbound(c *C) {
	_, err := sandbox.Sh("echo %s", "x").Run(c.Ctx)
	c.WantCode("Run of a Cmd not made with Sandbox.Sh", err, sandbox.CodeInvalidArgument)
	Eq(c, "String", sandbox.Sh("echo %s %s", "a b", "c").String(), "echo 'a b' c")
}

func shStream(c *C) {
	b := c.Box()
	h := b.Sh("echo %s; echo %s >&2", "out word", "err word").Stream(c.Ctx)
	out, errs, _, _ := collect(h)
	_, err := h.Wait()
	c.NoErr("Wait", err)
	Eq(c, "stdout", out, "out word\n")
	Eq(c, "stderr", errs, "err word\n")
}
