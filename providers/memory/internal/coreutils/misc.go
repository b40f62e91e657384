package coreutils

import (
	"fmt"
	"io"
	"math"
	"runtime"
	"strconv"
	"strings"
	"time"
)

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

func utilSleep(c *Cmd, args []string) int {
	if len(args) == 0 {
		return c.Usage(1, "missing operand")
	}
	var total time.Duration
	for _, a := range args {
		d, ok := parseDuration(a)
		if !ok {
			return c.Usage(1, "invalid time interval '%s'", a)
		}
		total += d
	}
	t := time.NewTimer(total)
	defer t.Stop()
	select {
	case <-t.C:
		return 0
	case <-c.Ctx.Done():
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
func utilUname(c *Cmd, args []string) int {
	o, err := getopt(args, "asnrvmpio", false, "all")
	if err != nil {
		return c.Usage(1, "%v", err)
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
	fmt.Fprintln(c.Out(), strings.Join(out, " "))
	return 0
}

func utilHostname(c *Cmd, args []string) int {
	fmt.Fprintln(c.Out(), "sandbox")
	return 0
}

// utilSeq is seq [-s SEP] [-w] [FIRST [INCREMENT]] LAST.
func utilSeq(c *Cmd, args []string) int {
	sep, width := "\n", false
	var nums []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-s":
			if i+1 >= len(args) {
				return c.Usage(1, "option requires an argument -- 's'")
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
		return c.Usage(1, "missing operand")
	}
	vals := make([]float64, len(nums))
	isInt := true
	prec := 0
	for i, n := range nums {
		f, err := strconv.ParseFloat(n, 64)
		if err != nil {
			return c.Usage(1, "invalid floating point argument: '%s'", n)
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
		return c.Usage(1, "invalid Zero increment value: '%s'", nums[1])
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
			if _, err := io.WriteString(c.Out(), b.String()); err != nil {
				return writeError(err)
			}
			b.Reset()
			if c.Ctx.Err() != nil {
				return 1
			}
		}
	}
	if n > 0 {
		b.WriteString("\n")
	}
	if _, err := io.WriteString(c.Out(), b.String()); err != nil {
		return writeError(err)
	}
	return 0
}
