package memory

import (
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
		// shells and the environment
		"sh": utilSh, "bash": utilSh, "env": utilEnv, "printenv": utilPrintenv, "sleep": utilSleep,
		// system information
		"uname": utilUname, "hostname": utilHostname, "seq": utilSeq,
		// files
		"cat": utilCat, "ls": utilLs, "mkdir": utilMkdir, "rm": utilRm, "rmdir": utilRmdir,
		"mv": utilMv, "touch": utilTouch, "chmod": utilChmod, "stat": utilStat, "ln": utilLn,
		"find": utilFind,
		// text
		"head": utilHead, "wc": utilWc, "grep": utilGrep, "sort": utilSort, "tr": utilTr,
	}
}

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

// commandArgs starts a command as env does.
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

// parseDuration reads sleep's NUMBER[smhd].
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

// unescape interprets the backslash escapes of tr.
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
