package memory

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"math"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

func init() {
	utilities = map[string]utilFunc{
		// shells and process control
		"sh": utilSh, "bash": utilSh, "dash": utilSh,
		"env": utilEnv, "printenv": utilPrintenv, "sleep": utilSleep, "xargs": utilXargs,
		"timeout": utilTimeout, "nohup": utilNohup, "nice": utilNice, "yes": utilYes,
		// system information
		"date": utilDate, "id": utilID, "whoami": utilWhoami, "uname": utilUname,
		"hostname": utilHostname, "nproc": utilNproc, "seq": utilSeq, "sync": utilTrue,
		// files
		"cat": utilCat, "ls": utilLs, "mkdir": utilMkdir, "rm": utilRm, "rmdir": utilRmdir,
		"mv": utilMv, "cp": utilCp, "touch": utilTouch, "chmod": utilChmod, "chown": utilChown,
		"stat": utilStat, "ln": utilLn, "readlink": utilReadlink, "realpath": utilRealpath,
		"find": utilFind, "basename": utilBasename, "dirname": utilDirname, "tee": utilTee,
		"mktemp": utilMktemp, "du": utilDu,
		// text
		"head": utilHead, "tail": utilTail, "wc": utilWc, "grep": utilGrep, "egrep": utilEgrep,
		"fgrep": utilFgrep, "sort": utilSort, "uniq": utilUniq, "tr": utilTr, "cut": utilCut,
		"base64": utilBase64, "sha256sum": utilSha256sum, "sha1sum": utilSha1sum,
		"md5sum": utilMd5sum, "sed": utilSed, "rev": utilRev, "tac": utilTac, "diff": utilDiff,
		"cmp": utilCmp, "expr": utilExpr,
	}
}

func utilTrue(c *cmd, args []string) int { return 0 }

// utilSh is sh: `sh -c SCRIPT [NAME [ARGS...]]`, `sh FILE [ARGS...]`, or a script on stdin.
// Options -e, -u, -x, -f, -v, -n and -o NAME are passed to the interpreter; -l, -i and -s
// are accepted.
func utilSh(c *cmd, args []string) int {
	var command *string
	var opts []string
	fromStdin := false
	i := 0
loop:
	for ; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--" || a == "-":
			i++
			break loop
		case a == "-o" || a == "+o":
			if i+1 >= len(args) {
				return c.usage(2, "%s: option requires an argument", a)
			}
			opts = append(opts, a, args[i+1])
			i++
		case a == "--login" || a == "--norc" || a == "--noprofile" || a == "--posix":
		case len(a) > 1 && (a[0] == '-' || a[0] == '+'):
			for _, f := range a[1:] {
				switch f {
				case 'c':
					command = new(string)
				case 'l', 'i', 'p':
				case 's':
					fromStdin = true
				case 'e', 'u', 'x', 'f', 'v', 'n', 'a', 'C':
					opts = append(opts, string(a[0])+string(f))
				default:
					return c.usage(2, "-%c: invalid option", f)
				}
			}
		default:
			break loop
		}
	}
	rest := args[i:]
	s := c.script()
	s.opts = opts
	switch {
	case command != nil:
		if len(rest) == 0 {
			return c.usage(2, "-c: option requires an argument")
		}
		s.src, rest = rest[0], rest[1:]
		if len(rest) > 0 {
			s.name, s.params = rest[0], rest[1:]
		}
	case len(rest) > 0 && !fromStdin:
		data, err := c.fs().ReadFile(c.abs(rest[0]))
		if err != nil {
			c.errorf("%s: %s", rest[0], fsErrText(err))
			return 127
		}
		s.src, s.name, s.params = string(data), rest[0], rest[1:]
	default:
		data, err := io.ReadAll(c.stdinReader())
		if err != nil {
			return 1
		}
		s.src, s.params = string(data), rest
		s.stdin = nil
	}
	return c.sh.run(c.ctx, s)
}

// commandArgs starts a command as env, nohup, nice and timeout do.
func (c *cmd) runCommand(argv []string, env map[string]string) int {
	s := c.script()
	if env != nil {
		s.env = env
	}
	return c.sh.runArgv(c.ctx, argv, s)
}

// utilEnv is env: [-i] [-u NAME] [NAME=VALUE...] [COMMAND [ARG...]].
func utilEnv(c *cmd, args []string) int {
	env := exported(c.env)
	i := 0
	for ; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-i" || a == "-" || a == "--ignore-environment":
			env = map[string]string{}
		case a == "-u" || a == "--unset":
			if i+1 >= len(args) {
				return c.usage(125, "option requires an argument -- 'u'")
			}
			delete(env, args[i+1])
			i++
		case strings.HasPrefix(a, "--unset="):
			delete(env, strings.TrimPrefix(a, "--unset="))
		case a == "--":
			i++
			goto assignments
		case strings.HasPrefix(a, "-") && len(a) > 1:
			return c.usage(125, "invalid option -- '%s'", strings.TrimLeft(a, "-"))
		default:
			goto assignments
		}
	}
assignments:
	for ; i < len(args); i++ {
		name, val, ok := strings.Cut(args[i], "=")
		if !ok || name == "" {
			break
		}
		env[name] = val
	}
	if i == len(args) {
		w := c.out()
		for _, k := range slices.Sorted(maps.Keys(env)) {
			fmt.Fprintf(w, "%s=%s\n", k, env[k])
		}
		return 0
	}
	return c.runCommand(args[i:], env)
}

func utilPrintenv(c *cmd, args []string) int {
	env := exported(c.env)
	if len(args) == 0 {
		for _, k := range slices.Sorted(maps.Keys(env)) {
			fmt.Fprintf(c.out(), "%s=%s\n", k, env[k])
		}
		return 0
	}
	status := 0
	for _, name := range args {
		if v, ok := env[name]; ok {
			fmt.Fprintln(c.out(), v)
		} else {
			status = 1
		}
	}
	return status
}

// parseDuration reads sleep's and timeout's NUMBER[smhd].
func parseDuration(s string) (time.Duration, bool) {
	mult := time.Second
	switch {
	case strings.HasSuffix(s, "s"):
		s = s[:len(s)-1]
	case strings.HasSuffix(s, "m"):
		s, mult = s[:len(s)-1], time.Minute
	case strings.HasSuffix(s, "h"):
		s, mult = s[:len(s)-1], time.Hour
	case strings.HasSuffix(s, "d"):
		s, mult = s[:len(s)-1], 24*time.Hour
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f < 0 || math.IsNaN(f) {
		return 0, false
	}
	if f*float64(mult) > math.MaxInt64/2 {
		return math.MaxInt64 / 2, true
	}
	return time.Duration(f * float64(mult)), true
}

func utilSleep(c *cmd, args []string) int {
	if len(args) == 0 {
		return c.usage(1, "missing operand")
	}
	var total time.Duration
	for _, a := range args {
		d, ok := parseDuration(a)
		if !ok {
			return c.usage(1, "invalid time interval '%s'", a)
		}
		total += d
	}
	t := time.NewTimer(total)
	defer t.Stop()
	select {
	case <-t.C:
		return 0
	case <-c.ctx.Done():
		return 128 + sigTERM
	}
}

// utilTimeout is timeout [-s SIG] [-k DURATION] DURATION COMMAND [ARG...]: the command's
// context ends after DURATION and the exit status is 124.
func utilTimeout(c *cmd, args []string) int {
	o, err := getopt(args, "s:k:v", true, "signal", "kill-after")
	if err != nil {
		return c.usage(125, "%v", err)
	}
	if len(o.args) < 2 {
		return c.usage(125, "missing operand")
	}
	d, ok := parseDuration(o.args[0])
	if !ok {
		return c.usage(125, "invalid time interval '%s'", o.args[0])
	}
	ctx, cancel := context.WithTimeout(c.ctx, d)
	defer cancel()
	sub := *c
	sub.ctx = ctx
	code := sub.runCommand(o.args[1:], nil)
	if ctx.Err() != nil && c.ctx.Err() == nil {
		return 124
	}
	return code
}

func utilNohup(c *cmd, args []string) int {
	if len(args) == 0 {
		return c.usage(125, "missing operand")
	}
	return c.runCommand(args, nil)
}

func utilNice(c *cmd, args []string) int {
	o, err := getopt(args, "n:", true, "adjustment")
	if err != nil {
		return c.usage(125, "%v", err)
	}
	if len(o.args) == 0 {
		fmt.Fprintln(c.out(), 0)
		return 0
	}
	return c.runCommand(o.args, nil)
}

func utilYes(c *cmd, args []string) int {
	line := "y"
	if len(args) > 0 {
		line = strings.Join(args, " ")
	}
	buf := bytes.Repeat([]byte(line+"\n"), max(1, 8192/(len(line)+1)))
	for {
		if c.ctx.Err() != nil {
			return 128 + sigTERM
		}
		if _, err := c.out().Write(buf); err != nil {
			return writeError(err)
		}
	}
}

// utilXargs is xargs [-0] [-d DELIM] [-n MAX] [-I REPLACE] [-r] [-t] [COMMAND [ARG...]].
func utilXargs(c *cmd, args []string) int {
	o, err := getopt(args, "0d:n:I:i:rtL:P:s:E:x", true, "null", "delimiter", "max-args", "replace", "no-run-if-empty")
	if err != nil {
		return c.usage(1, "%v", err)
	}
	cmdArgs := o.args
	if len(cmdArgs) == 0 {
		cmdArgs = []string{"echo"}
	}
	data, err := io.ReadAll(c.stdinReader())
	if err != nil {
		return 1
	}
	var items []string
	switch delim, hasDelim := o.val('d'); {
	case o.has('0') || o.hasLong("null"):
		items = strings.Split(string(data), "\x00")
		if len(items) > 0 && items[len(items)-1] == "" {
			items = items[:len(items)-1]
		}
	case hasDelim:
		d := unescape(delim)
		items = strings.Split(string(data), d)
		if len(items) > 0 && items[len(items)-1] == "" {
			items = items[:len(items)-1]
		}
	default:
		items = splitXargs(string(data))
	}
	replace, hasReplace := o.val('I')
	if v, ok := o.val('i'); ok {
		replace, hasReplace = v, true
	}
	if v, ok := o.longVal("replace"); ok {
		replace, hasReplace = v, true
	}
	if hasReplace && replace == "" {
		replace = "{}"
	}
	if hasReplace {
		// -I: one command per input line, with REPLACE substituted.
		lines := items
		if !o.has('0') && !o.hasLong("null") {
			lines, _ = readLines(data)
		}
		status := 0
		for _, line := range lines {
			if strings.TrimSpace(line) == "" {
				continue
			}
			argv := make([]string, len(cmdArgs))
			for i, a := range cmdArgs {
				argv[i] = strings.ReplaceAll(a, replace, strings.TrimLeft(line, " \t"))
			}
			if code := c.xargsRun(o, argv); code != 0 {
				if code == 255 {
					return 124
				}
				status = 123
			}
			if c.ctx.Err() != nil {
				return 125
			}
		}
		return status
	}
	n := len(items)
	if v, ok := o.val('n'); ok {
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			return c.usage(1, "invalid number for -n option")
		}
	} else if v, ok := o.val('L'); ok {
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			return c.usage(1, "invalid number for -L option")
		}
	}
	if len(items) == 0 {
		if o.has('r') || o.hasLong("no-run-if-empty") {
			return 0
		}
		return c.xargsRun(o, cmdArgs)
	}
	status := 0
	for start := 0; start < len(items); start += n {
		end := min(start+n, len(items))
		argv := append(slices.Clone(cmdArgs), items[start:end]...)
		if code := c.xargsRun(o, argv); code != 0 {
			if code == 255 {
				return 124
			}
			if code == 127 || code == 126 {
				return code
			}
			status = 123
		}
		if c.ctx.Err() != nil {
			return 125
		}
	}
	return status
}

func (c *cmd) xargsRun(o *opts, argv []string) int {
	if o.has('t') {
		fmt.Fprintln(c.errw(), strings.Join(argv, " "))
	}
	s := c.script()
	s.stdin = nil
	return c.sh.runArgv(c.ctx, argv, s)
}

// splitXargs splits xargs input at blanks and newlines, honouring quotes and backslashes.
func splitXargs(s string) []string {
	var out []string
	var cur strings.Builder
	inWord := false
	var quote rune
	esc := false
	for _, r := range s {
		switch {
		case esc:
			cur.WriteRune(r)
			esc = false
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				cur.WriteRune(r)
			}
		case r == '\\':
			esc, inWord = true, true
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case r == ' ' || r == '\t' || r == '\n':
			if inWord {
				out = append(out, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if inWord {
		out = append(out, cur.String())
	}
	return out
}

// unescape interprets the backslash escapes of tr, xargs -d and the like.
func unescape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		i++
		switch s[i] {
		case 'n':
			b.WriteByte('\n')
		case 't':
			b.WriteByte('\t')
		case 'r':
			b.WriteByte('\r')
		case '0':
			b.WriteByte(0)
		case '\\':
			b.WriteByte('\\')
		case 'a':
			b.WriteByte('\a')
		case 'b':
			b.WriteByte('\b')
		case 'f':
			b.WriteByte('\f')
		case 'v':
			b.WriteByte('\v')
		default:
			b.WriteByte(s[i])
		}
	}
	return b.String()
}

// utilDate prints the date: date [-u] [-d @SECONDS|TIME] [+FORMAT]. Everything is UTC.
func utilDate(c *cmd, args []string) int {
	t := time.Now().UTC()
	format := "%a %b %e %H:%M:%S %Z %Y"
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-u" || a == "--utc" || a == "-R":
			if a == "-R" {
				format = "%a, %d %b %Y %H:%M:%S %z"
			}
		case a == "-I" || a == "--iso-8601":
			format = "%Y-%m-%d"
		case strings.HasPrefix(a, "-I"):
			format = "%Y-%m-%dT%H:%M:%S%:z"
		case a == "-d" || a == "--date":
			if i+1 >= len(args) {
				return c.usage(1, "option requires an argument -- 'd'")
			}
			i++
			pt, ok := parseDate(args[i])
			if !ok {
				return c.usage(1, "invalid date '%s'", args[i])
			}
			t = pt
		case strings.HasPrefix(a, "--date="):
			pt, ok := parseDate(strings.TrimPrefix(a, "--date="))
			if !ok {
				return c.usage(1, "invalid date '%s'", a)
			}
			t = pt
		case strings.HasPrefix(a, "+"):
			format = a[1:]
		default:
			return c.usage(1, "invalid date '%s'", a)
		}
	}
	fmt.Fprintln(c.out(), strftime(format, t))
	return 0
}

func parseDate(s string) (time.Time, bool) {
	if strings.HasPrefix(s, "@") {
		f, err := strconv.ParseFloat(s[1:], 64)
		if err != nil {
			return time.Time{}, false
		}
		sec, frac := math.Modf(f)
		return time.Unix(int64(sec), int64(frac*1e9)).UTC(), true
	}
	switch s {
	case "now", "":
		return time.Now().UTC(), true
	case "today":
		return time.Now().UTC(), true
	case "yesterday":
		return time.Now().UTC().AddDate(0, 0, -1), true
	case "tomorrow":
		return time.Now().UTC().AddDate(0, 0, 1), true
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02 15:04:05", "2006-01-02T15:04:05", "2006-01-02", time.RFC1123Z, time.RFC1123} {
		if t, err := time.Parse(layout, s); err == nil {
			return t.UTC(), true
		}
	}
	return time.Time{}, false
}

func strftime(format string, t time.Time) string {
	var b strings.Builder
	for i := 0; i < len(format); i++ {
		if format[i] != '%' || i+1 == len(format) {
			b.WriteByte(format[i])
			continue
		}
		i++
		switch format[i] {
		case 's':
			b.WriteString(strconv.FormatInt(t.Unix(), 10))
		case 'N':
			fmt.Fprintf(&b, "%09d", t.Nanosecond())
		case 'Y':
			fmt.Fprintf(&b, "%04d", t.Year())
		case 'y':
			fmt.Fprintf(&b, "%02d", t.Year()%100)
		case 'C':
			fmt.Fprintf(&b, "%02d", t.Year()/100)
		case 'm':
			fmt.Fprintf(&b, "%02d", int(t.Month()))
		case 'd':
			fmt.Fprintf(&b, "%02d", t.Day())
		case 'e':
			fmt.Fprintf(&b, "%2d", t.Day())
		case 'H':
			fmt.Fprintf(&b, "%02d", t.Hour())
		case 'I':
			h := t.Hour() % 12
			if h == 0 {
				h = 12
			}
			fmt.Fprintf(&b, "%02d", h)
		case 'M':
			fmt.Fprintf(&b, "%02d", t.Minute())
		case 'S':
			fmt.Fprintf(&b, "%02d", t.Second())
		case 'p':
			b.WriteString(t.Format("PM"))
		case 'j':
			fmt.Fprintf(&b, "%03d", t.YearDay())
		case 'u':
			wd := int(t.Weekday())
			if wd == 0 {
				wd = 7
			}
			b.WriteString(strconv.Itoa(wd))
		case 'w':
			b.WriteString(strconv.Itoa(int(t.Weekday())))
		case 'a':
			b.WriteString(t.Format("Mon"))
		case 'A':
			b.WriteString(t.Format("Monday"))
		case 'b', 'h':
			b.WriteString(t.Format("Jan"))
		case 'B':
			b.WriteString(t.Format("January"))
		case 'F':
			b.WriteString(t.Format("2006-01-02"))
		case 'T':
			b.WriteString(t.Format("15:04:05"))
		case 'R':
			b.WriteString(t.Format("15:04"))
		case 'D':
			b.WriteString(t.Format("01/02/06"))
		case 'c':
			b.WriteString(t.Format("Mon Jan _2 15:04:05 2006"))
		case 'z':
			b.WriteString(t.Format("-0700"))
		case ':':
			if i+1 < len(format) && format[i+1] == 'z' {
				i++
				b.WriteString(t.Format("-07:00"))
			} else {
				b.WriteString("%:")
			}
		case 'Z':
			b.WriteString(t.Format("MST"))
		case 'n':
			b.WriteByte('\n')
		case 't':
			b.WriteByte('\t')
		case '%':
			b.WriteByte('%')
		default:
			b.WriteByte('%')
			b.WriteByte(format[i])
		}
	}
	return b.String()
}

// utilID reports root: id [-u|-g|-G] [-n].
func utilID(c *cmd, args []string) int {
	o, err := getopt(args, "ugGnr", false)
	if err != nil {
		return c.usage(1, "%v", err)
	}
	switch {
	case o.has('u') || o.has('g') || o.has('G'):
		if o.has('n') {
			fmt.Fprintln(c.out(), "root")
		} else {
			fmt.Fprintln(c.out(), 0)
		}
	default:
		fmt.Fprintln(c.out(), "uid=0(root) gid=0(root) groups=0(root)")
	}
	return 0
}

func utilWhoami(c *cmd, args []string) int {
	fmt.Fprintln(c.out(), "root")
	return 0
}

func machine() string {
	switch runtime.GOARCH {
	case "amd64":
		return "x86_64"
	case "arm64":
		return "aarch64"
	case "386":
		return "i686"
	}
	return runtime.GOARCH
}

// utilUname describes a Linux-like system, since scripts expect one; the release names the
// provider.
func utilUname(c *cmd, args []string) int {
	o, err := getopt(args, "asnrvmpio", false, "all")
	if err != nil {
		return c.usage(1, "%v", err)
	}
	fields := []struct {
		flag byte
		val  string
	}{
		{'s', "Linux"}, {'n', "sandbox"}, {'r', "6.0.0-tupper-memory"}, {'v', "#1 SMP"},
		{'m', machine()}, {'o', "GNU/Linux"},
	}
	var out []string
	all := o.has('a') || o.hasLong("all")
	for _, f := range fields {
		if all || o.has(f.flag) {
			out = append(out, f.val)
		}
	}
	if len(out) == 0 {
		out = []string{"Linux"}
	}
	fmt.Fprintln(c.out(), strings.Join(out, " "))
	return 0
}

func utilHostname(c *cmd, args []string) int {
	fmt.Fprintln(c.out(), "sandbox")
	return 0
}

func utilNproc(c *cmd, args []string) int {
	fmt.Fprintln(c.out(), runtime.NumCPU())
	return 0
}

// utilSeq is seq [-s SEP] [-w] [FIRST [INCREMENT]] LAST.
func utilSeq(c *cmd, args []string) int {
	sep, width := "\n", false
	var nums []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-s":
			if i+1 >= len(args) {
				return c.usage(1, "option requires an argument -- 's'")
			}
			i++
			sep = unescape(args[i])
		case strings.HasPrefix(a, "-s"):
			sep = unescape(a[2:])
		case a == "-w":
			width = true
		default:
			nums = append(nums, a)
		}
	}
	if len(nums) == 0 || len(nums) > 3 {
		return c.usage(1, "missing operand")
	}
	vals := make([]float64, len(nums))
	isInt := true
	prec := 0
	for i, n := range nums {
		f, err := strconv.ParseFloat(n, 64)
		if err != nil {
			return c.usage(1, "invalid floating point argument: '%s'", n)
		}
		vals[i] = f
		if strings.ContainsAny(n, ".eE") {
			isInt = false
			if _, frac, ok := strings.Cut(n, "."); ok {
				prec = max(prec, len(frac))
			}
		}
	}
	first, inc, last := 1.0, 1.0, vals[len(vals)-1]
	switch len(vals) {
	case 2:
		first = vals[0]
	case 3:
		first, inc = vals[0], vals[1]
	}
	if inc == 0 {
		return c.usage(1, "invalid Zero increment value: '%s'", nums[1])
	}
	format := func(f float64) string {
		if isInt {
			return strconv.FormatInt(int64(f), 10)
		}
		return strconv.FormatFloat(f, 'f', prec, 64)
	}
	w := 0
	if width {
		w = max(len(format(first)), len(format(last)))
	}
	var b strings.Builder
	n := 0
	for i := 0; ; i++ {
		v := first + float64(i)*inc
		if (inc > 0 && v > last+1e-9) || (inc < 0 && v < last-1e-9) {
			break
		}
		if n > 0 {
			b.WriteString(sep)
		}
		s := format(v)
		for len(s) < w {
			s = "0" + s
		}
		b.WriteString(s)
		n++
		if b.Len() > 64*1024 {
			if _, err := io.WriteString(c.out(), b.String()); err != nil {
				return writeError(err)
			}
			b.Reset()
			if c.ctx.Err() != nil {
				return 1
			}
		}
	}
	if n > 0 {
		b.WriteString("\n")
	}
	if _, err := io.WriteString(c.out(), b.String()); err != nil {
		return writeError(err)
	}
	return 0
}
