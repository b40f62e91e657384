package coreutils

import (
	"bytes"
	"fmt"
	"io"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"
)

// headTailCount parses the count of head: N, +N (from the start) or -N (all but).
func parseCount(s string) (n int64, plus, minus bool, ok bool) {
	switch {
	case strings.HasPrefix(s, "+"):
		plus, s = true, s[1:]
	case strings.HasPrefix(s, "-"):
		minus, s = true, s[1:]
	}
	mult := int64(1)
	for suf, m := range map[string]int64{"k": 1024, "K": 1024, "M": 1 << 20, "G": 1 << 30, "b": 512, "kB": 1000, "MB": 1000 * 1000} {
		if strings.HasSuffix(s, suf) && len(s) > len(suf) {
			if _, err := strconv.ParseInt(strings.TrimSuffix(s, suf), 10, 64); err == nil {
				s, mult = strings.TrimSuffix(s, suf), m
				break
			}
		}
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < 0 {
		return 0, false, false, false
	}
	return v * mult, plus, minus, true
}

// numericShorthand turns head -5 into the -n form.
func numericShorthand(args []string, allowPlus bool) []string {
	out := make([]string, 0, len(args))
	for i, a := range args {
		if a == "--" {
			return append(out, args[i:]...)
		}
		if i > 0 && (args[i-1] == "-n" || args[i-1] == "-c") {
			out = append(out, a)
			continue
		}
		if len(a) > 1 && (a[0] == '-' || (allowPlus && a[0] == '+' && i == 0)) {
			if _, err := strconv.Atoi(a[1:]); err == nil {
				if a[0] == '+' {
					out = append(out, "-n", a)
				} else {
					out = append(out, "-n", a[1:])
				}
				continue
			}
		}
		out = append(out, a)
	}
	return out
}

func (c *Cmd) header(i, total int, name string, quiet, verbose bool) {
	if (total > 1 && !quiet) || verbose {
		if i > 0 {
			io.WriteString(c.Out(), "\n")
		}
		if name == "-" {
			name = "standard input"
		}
		fmt.Fprintf(c.Out(), "==> %s <==\n", name)
	}
}

// utilHead is head [-n [-]N] [-c [-]N] [-q] [-v] [FILE...].
func utilHead(c *Cmd, args []string) int {
	o, err := getopt(numericShorthand(args, false), "n:c:qv", false, "lines", "bytes", "quiet", "silent", "verbose")
	if err != nil {
		return c.Usage(1, "%v", err)
	}
	nArg, bytesMode := "10", false
	if v, ok := o.val('n'); ok {
		nArg = v
	}
	if v, ok := o.longVal("lines"); ok {
		nArg = v
	}
	if v, ok := o.val('c'); ok {
		nArg, bytesMode = v, true
	}
	if v, ok := o.longVal("bytes"); ok {
		nArg, bytesMode = v, true
	}
	n, _, allBut, ok := parseCount(nArg)
	if !ok {
		return c.Usage(1, "invalid number of lines: '%s'", nArg)
	}
	files := o.args
	if len(files) == 0 {
		files = []string{"-"}
	}
	status := 0
	for i, f := range files {
		if !bytesMode && !allBut {
			// stream: stop reading once enough lines have passed (head of an endless pipe)
			r, err := c.open(f)
			if err != nil {
				c.Errorf("cannot open '%s' for reading: %s", f, ErrText(err))
				status = 1
				continue
			}
			c.header(i, len(files), f, o.has('q'), o.has('v'))
			if code := c.headLines(r, n); code != 0 {
				return code
			}
			continue
		}
		var data []byte
		if bytesMode && !allBut {
			r, err := c.open(f)
			if err != nil {
				c.Errorf("cannot open '%s' for reading: %s", f, ErrText(err))
				status = 1
				continue
			}
			data, _ = io.ReadAll(io.LimitReader(r, n))
		} else {
			data, err = c.readAll(f)
			if err != nil {
				c.Errorf("cannot open '%s' for reading: %s", f, ErrText(err))
				status = 1
				continue
			}
			if bytesMode {
				data = data[:max(0, int64(len(data))-n)]
			} else {
				lines := slices.Collect(bytes.Lines(data))
				lines = lines[:max(0, len(lines)-int(n))]
				data = bytes.Join(lines, nil)
			}
		}
		c.header(i, len(files), f, o.has('q'), o.has('v'))
		if _, err := c.Out().Write(data); err != nil {
			return writeError(err)
		}
	}
	return status
}

func (c *Cmd) headLines(r io.Reader, n int64) int {
	if n == 0 {
		return 0
	}
	buf := make([]byte, 32*1024)
	var pending []byte
	for n > 0 {
		k, err := r.Read(buf)
		chunk := buf[:k]
		for len(chunk) > 0 && n > 0 {
			i := bytes.IndexByte(chunk, '\n')
			if i < 0 {
				pending = append(pending, chunk...)
				break
			}
			pending = append(pending, chunk[:i+1]...)
			chunk = chunk[i+1:]
			n--
		}
		if n == 0 || err != nil {
			break
		}
		if len(pending) > 64*1024 {
			if _, err := c.Out().Write(pending); err != nil {
				return writeError(err)
			}
			pending = pending[:0]
		}
	}
	if _, err := c.Out().Write(pending); err != nil {
		return writeError(err)
	}
	return 0
}

// utilWc is wc [-l] [-w] [-c] [-m] [-L] [FILE...].
func utilWc(c *Cmd, args []string) int {
	o, err := getopt(args, "lwcmL", false, "lines", "words", "bytes", "chars")
	if err != nil {
		return c.Usage(1, "%v", err)
	}
	show := []bool{o.has('l') || o.hasLong("lines"), o.has('w') || o.hasLong("words"), o.has('m') || o.hasLong("chars"), o.has('c') || o.hasLong("bytes"), o.has('L')}
	if !slices.Contains(show, true) {
		show = []bool{true, true, false, true, false}
	}
	files := o.args
	fromStdin := len(files) == 0
	if fromStdin {
		files = []string{"-"}
	}
	type counts [5]int64
	var rows []counts
	var names []string
	var total counts
	status := 0
	for _, f := range files {
		data, err := c.readAll(f)
		if err != nil {
			c.Errorf("%s: %s", f, ErrText(err))
			status = 1
			continue
		}
		var k counts
		k[0] = int64(bytes.Count(data, []byte{'\n'}))
		k[1] = int64(len(bytes.Fields(data)))
		k[2] = int64(utf8.RuneCount(data))
		k[3] = int64(len(data))
		for _, l := range bytes.Split(data, []byte{'\n'}) {
			k[4] = max(k[4], int64(utf8.RuneCount(l)))
		}
		for i := range k {
			if i == 4 {
				total[i] = max(total[i], k[i])
			} else {
				total[i] += k[i]
			}
		}
		rows = append(rows, k)
		if f == "-" && fromStdin {
			names = append(names, "")
		} else {
			names = append(names, f)
		}
	}
	if len(rows) > 1 {
		rows = append(rows, total)
		names = append(names, "total")
	}
	ncols := 0
	for _, s := range show {
		if s {
			ncols++
		}
	}
	width := 1
	if ncols > 1 || len(rows) > 1 {
		width = len(strconv.FormatInt(total[3], 10))
		if fromStdin {
			width = max(width, 7)
		}
	}
	var b strings.Builder
	for i, k := range rows {
		var fields []string
		for j, s := range show {
			if s {
				fields = append(fields, fmt.Sprintf("%*d", width, k[j]))
			}
		}
		line := strings.Join(fields, " ")
		if names[i] != "" {
			line += " " + names[i]
		}
		b.WriteString(line + "\n")
	}
	if _, err := io.WriteString(c.Out(), b.String()); err != nil {
		return writeError(err)
	}
	return status
}

// breToRE2 converts a POSIX regular expression (basic unless extended) to Go's syntax.
func breToRE2(s string, extended bool) string {
	var b strings.Builder
	atStart := true
	for i := 0; i < len(s); i++ {
		ch := s[i]
		switch {
		case ch == '[':
			// copy a bracket expression, escaping backslashes, which are literal in POSIX
			j := i + 1
			if j < len(s) && s[j] == '^' {
				j++
			}
			if j < len(s) && s[j] == ']' {
				j++
			}
			for j < len(s) && s[j] != ']' {
				if s[j] == '[' && j+1 < len(s) && (s[j+1] == ':' || s[j+1] == '.' || s[j+1] == '=') {
					end := strings.Index(s[j+2:], string(s[j+1])+"]")
					if end >= 0 {
						j += end + 4
						continue
					}
				}
				j++
			}
			if j >= len(s) {
				b.WriteString(regexp.QuoteMeta(s[i:]))
				return b.String()
			}
			body := s[i+1 : j]
			b.WriteByte('[')
			for k := 0; k < len(body); k++ {
				if body[k] == '\\' {
					b.WriteString(`\\`)
				} else {
					b.WriteByte(body[k])
				}
			}
			b.WriteByte(']')
			i = j
			atStart = false
			continue
		case ch == '\\' && i+1 < len(s):
			i++
			n := s[i]
			switch {
			case n == '<' || n == '>':
				b.WriteString(`\b`)
			case !extended && strings.IndexByte("(){}|+?", n) >= 0:
				b.WriteByte(n)
				atStart = n == '(' || n == '|'
				continue
			case strings.IndexByte("wWsSbB", n) >= 0:
				b.WriteByte('\\')
				b.WriteByte(n)
			case n >= '1' && n <= '9':
				b.WriteString(`\` + string(n)) // back-references are not supported by RE2
			case n == 'n':
				b.WriteString(`\n`)
			case n == 't':
				b.WriteString(`\t`)
			default:
				b.WriteString(regexp.QuoteMeta(string(n)))
			}
		case !extended && strings.IndexByte("(){}|+?", ch) >= 0:
			b.WriteByte('\\')
			b.WriteByte(ch)
		case ch == '*' && atStart:
			b.WriteString(`\*`)
		case ch == '{' && extended && !validInterval(s[i:]):
			b.WriteString(`\{`)
		default:
			b.WriteByte(ch)
		}
		atStart = ch == '^' && atStart || (extended && (ch == '(' || ch == '|'))
	}
	return b.String()
}

var intervalRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^\{[0-9]+(,[0-9]*)?\}`) })

func validInterval(s string) bool { return intervalRE().MatchString(s) }

// globToRegexp converts a shell glob to an anchored regexp; with slash, * matches '/' too.
func globToRegexp(glob string, slash bool) (*regexp.Regexp, error) {
	var b strings.Builder
	b.WriteString("^")
	star := "[^/]*"
	q := "[^/]"
	if slash {
		star, q = ".*", "."
	}
	for i := 0; i < len(glob); i++ {
		switch ch := glob[i]; ch {
		case '*':
			b.WriteString(star)
		case '?':
			b.WriteString(q)
		case '[':
			j := strings.IndexByte(glob[i+1:], ']')
			if j < 0 {
				b.WriteString(`\[`)
				continue
			}
			body := glob[i+1 : i+1+j]
			if strings.HasPrefix(body, "!") {
				body = "^" + body[1:]
			}
			b.WriteString("[" + strings.ReplaceAll(body, `\`, `\\`) + "]")
			i += j + 1
		case '\\':
			if i+1 < len(glob) {
				i++
				b.WriteString(regexp.QuoteMeta(string(glob[i])))
			}
		default:
			b.WriteString(regexp.QuoteMeta(string(ch)))
		}
	}
	b.WriteString("$")
	return regexp.Compile(b.String())
}

type grepOpts struct {
	re                              *regexp.Regexp
	invert, count, list, listNot    bool
	quiet, number, onlyMatching     bool
	withName                        bool
	maxCount                        int
	before, after                   int
	includes, excludes, excludeDirs []string
	text                            bool
}

// utilGrep is grep with -r -R -n -F -E -G -P -i -v -l -L -c -q -s -w -x -o -h -H -a -m N
// -A N -B N -C N -e PATTERN -f FILE --include=GLOB --exclude=GLOB --exclude-dir=GLOB.
func utilGrep(c *Cmd, args []string) int {
	o, err := getopt(args, "rRnFEGPivlLcqsHhwxoae:f:m:A:B:C:zIU", false,
		"regexp", "file", "include", "exclude", "exclude-dir", "max-count", "after-context", "before-context", "context", "color", "colour")
	if err != nil {
		c.Errorf("%v", err)
		return 2
	}
	var patterns []string
	patterns = append(patterns, o.vals['e']...)
	patterns = append(patterns, o.long["regexp"]...)
	pfiles := append(slices.Clone(o.vals['f']), o.long["file"]...)
	for _, pf := range pfiles {
		data, err := c.readAll(pf)
		if err != nil {
			c.Errorf("%s: %s", pf, ErrText(err))
			return 2
		}
		lines, _ := readLines(data)
		patterns = append(patterns, lines...)
	}
	operands := o.args
	if len(patterns) == 0 && len(pfiles) == 0 {
		if len(operands) == 0 {
			c.Errorf("usage: grep [OPTION]... PATTERNS [FILE]...")
			return 2
		}
		patterns = strings.Split(operands[0], "\n")
		operands = operands[1:]
	}
	g := &grepOpts{
		invert: o.has('v') || o.hasLong("invert-match"), count: o.has('c') || o.hasLong("count"),
		list: o.has('l') || o.hasLong("files-with-matches"), listNot: o.has('L') || o.hasLong("files-without-match"),
		quiet: o.has('q') || o.hasLong("quiet") || o.hasLong("silent"), number: o.has('n') || o.hasLong("line-number"),
		onlyMatching: o.has('o') || o.hasLong("only-matching"), maxCount: -1, text: o.has('a'),
		includes: o.long["include"], excludes: o.long["exclude"], excludeDirs: o.long["exclude-dir"],
	}
	for f, name := range map[byte]string{'m': "max-count", 'A': "after-context", 'B': "before-context", 'C': "context"} {
		v, ok := o.val(f)
		if lv, lok := o.longVal(name); lok {
			v, ok = lv, true
		}
		if !ok {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			c.Errorf("invalid %s argument", name)
			return 2
		}
		switch f {
		case 'm':
			g.maxCount = n
		case 'A':
			g.after = n
		case 'B':
			g.before = n
		case 'C':
			if !o.has('A') {
				g.after = n
			}
			if !o.has('B') {
				g.before = n
			}
		}
	}
	var alts []string
	for _, p := range patterns {
		switch {
		case o.has('F') || o.hasLong("fixed-strings"):
			p = regexp.QuoteMeta(p)
		case o.has('E') || o.has('P') || o.hasLong("extended-regexp"):
			p = breToRE2(p, true)
		default:
			p = breToRE2(p, false)
		}
		if o.has('x') || o.hasLong("line-regexp") {
			p = "^(?:" + p + ")$"
		} else if o.has('w') || o.hasLong("word-regexp") {
			p = `\b(?:` + p + `)\b`
		}
		alts = append(alts, "(?:"+p+")")
	}
	expr := strings.Join(alts, "|")
	if o.has('i') || o.hasLong("ignore-case") || o.has('y') {
		expr = "(?i)" + expr
	}
	if len(alts) == 0 {
		expr = "$^" // -f with an empty file matches nothing
	}
	g.re, err = regexp.Compile("(?m)" + expr)
	if err != nil {
		c.Errorf("invalid regular expression: %v", err)
		return 2
	}
	recursive := o.has('r') || o.has('R') || o.hasLong("recursive") || o.hasLong("dereference-recursive")
	defaulted := false
	if len(operands) == 0 {
		if recursive {
			operands, defaulted = []string{"."}, true
		} else {
			operands = []string{"-"}
		}
	}
	g.withName = (len(operands) > 1 || recursive) && !o.has('h') || o.has('H')
	matched, trouble := false, false
	for _, op := range operands {
		if c.Ctx.Err() != nil {
			return 2
		}
		if op == "-" {
			data, err := io.ReadAll(c.StdinReader())
			if err != nil {
				return 2
			}
			m, stop := c.grepData(g, "(standard input)", data)
			matched = matched || m
			if stop {
				return 0
			}
			continue
		}
		p := c.Abs(op)
		fi, err := c.FS.Stat(p, true)
		if err != nil {
			if !o.has('s') {
				c.Errorf("%s: %s", op, ErrText(err))
			}
			trouble = true
			continue
		}
		if !fi.IsDir() {
			if !g.included(path.Base(op)) {
				continue
			}
			data, err := c.readAll(op)
			if err != nil {
				trouble = true
				continue
			}
			m, stop := c.grepData(g, op, data)
			matched = matched || m
			if stop {
				return 0
			}
			continue
		}
		if !recursive {
			if !o.has('s') {
				c.Errorf("%s: Is a directory", op)
			}
			trouble = true
			continue
		}
		entries, err := c.FS.Walk(p, true)
		if err != nil {
			trouble = true
			continue
		}
		var skipDirs []string
		for _, e := range entries {
			if c.Ctx.Err() != nil {
				return 2
			}
			if slices.ContainsFunc(skipDirs, func(d string) bool { return strings.HasPrefix(e.Rel, d) }) {
				continue
			}
			if e.Info.IsDir() {
				if e.Rel != "" && slices.ContainsFunc(g.excludeDirs, func(gl string) bool { return globMatch(gl, e.Info.Name, false) }) {
					skipDirs = append(skipDirs, e.Rel+"/")
				}
				continue
			}
			if e.Info.kind() == kindSymlink && o.has('R') {
				if t, err := c.FS.Stat(e.Path, true); err == nil && t.kind() == kindFile {
					e.Info = t
				}
			}
			if e.Info.kind() != kindFile || !g.included(e.Info.Name) {
				continue
			}
			name := joinPath(op, e.Rel)
			if defaulted {
				name = e.Rel
			}
			data, err := c.FS.ReadFile(e.Path)
			if err != nil {
				continue
			}
			m, stop := c.grepData(g, name, data)
			matched = matched || m
			if stop {
				return 0
			}
		}
	}
	switch {
	case trouble && !(g.quiet && matched):
		return 2
	case matched:
		return 0
	}
	return 1
}

func (g *grepOpts) included(name string) bool {
	if len(g.includes) > 0 && !slices.ContainsFunc(g.includes, func(gl string) bool { return globMatch(gl, name, false) }) {
		return false
	}
	return !slices.ContainsFunc(g.excludes, func(gl string) bool { return globMatch(gl, name, false) })
}

// grepData searches one file; it reports whether a line was selected and whether to stop
// everything (-q after a match).
func (c *Cmd) grepData(g *grepOpts, name string, data []byte) (bool, bool) {
	binary := !g.text && bytes.IndexByte(data, 0) >= 0
	lines, _ := readLines(data)
	var b strings.Builder
	prefix := func(n int, sep string) {
		if g.withName {
			b.WriteString(name + sep)
		}
		if g.number {
			b.WriteString(strconv.Itoa(n) + sep)
		}
	}
	count := 0
	lastPrinted := -1
	afterLeft := 0
	for i, line := range lines {
		if g.maxCount >= 0 && count >= g.maxCount {
			break
		}
		sel := g.re.MatchString(line) != g.invert
		if !sel {
			if afterLeft > 0 && !g.count && !g.list && !g.listNot && !g.quiet && !binary {
				prefix(i+1, "-")
				b.WriteString(line + "\n")
				lastPrinted = i
				afterLeft--
			}
			continue
		}
		count++
		if g.quiet {
			return true, true
		}
		if g.count || g.list || g.listNot || binary {
			continue
		}
		if g.before > 0 || g.after > 0 {
			start := max(0, i-g.before, lastPrinted+1)
			if lastPrinted >= 0 && start > lastPrinted+1 {
				b.WriteString("--\n")
			}
			for j := start; j < i; j++ {
				prefix(j+1, "-")
				b.WriteString(lines[j] + "\n")
			}
		}
		if g.onlyMatching && !g.invert {
			for _, m := range g.re.FindAllString(line, -1) {
				if m == "" {
					continue
				}
				prefix(i+1, ":")
				b.WriteString(m + "\n")
			}
		} else {
			prefix(i+1, ":")
			b.WriteString(line + "\n")
		}
		lastPrinted = i
		afterLeft = g.after
		if b.Len() > 64*1024 {
			if _, err := io.WriteString(c.Out(), b.String()); err != nil {
				return count > 0, true
			}
			b.Reset()
		}
	}
	switch {
	case g.count:
		if g.withName {
			b.WriteString(name + ":")
		}
		b.WriteString(strconv.Itoa(count) + "\n")
	case g.list:
		if count > 0 {
			b.WriteString(name + "\n")
		}
	case g.listNot:
		if count == 0 {
			b.WriteString(name + "\n")
		}
	case binary && count > 0:
		fmt.Fprintf(c.errw(), "grep: %s: binary file matches\n", name)
	}
	if _, err := io.WriteString(c.Out(), b.String()); err != nil {
		return count > 0, true
	}
	return count > 0, false
}

type sortKey struct {
	startField, startChar int
	endField, endChar     int // endField 0: to the end of the line
	numeric, reverse      bool
	fold, blanks, general bool
	human, version        bool
}

// utilSort is sort [-n] [-g] [-h] [-V] [-r] [-u] [-f] [-b] [-s] [-t SEP] [-k KEY]... [-o FILE] [FILE...].
func utilSort(c *Cmd, args []string) int {
	o, err := getopt(args, "nrufbst:k:o:ghVcCzmdiM", false, "key", "field-separator", "output", "reverse", "unique", "numeric-sort")
	if err != nil {
		return c.Usage(2, "%v", err)
	}
	global := sortKey{
		numeric: o.has('n') || o.hasLong("numeric-sort"), reverse: o.has('r') || o.hasLong("reverse"),
		fold: o.has('f'), blanks: o.has('b'), general: o.has('g'), human: o.has('h'), version: o.has('V'),
	}
	sep := ""
	if t, ok := o.val('t'); ok {
		sep = unescape(t)
	}
	var keys []sortKey
	for _, k := range append(slices.Clone(o.vals['k']), o.long["key"]...) {
		key, ok := parseSortKey(k, global)
		if !ok {
			return c.Usage(2, "invalid key '%s'", k)
		}
		keys = append(keys, key)
	}
	files := o.args
	if len(files) == 0 {
		files = []string{"-"}
	}
	var lines []string
	for _, f := range files {
		data, err := c.readAll(f)
		if err != nil {
			c.Errorf("cannot read: %s: %s", f, ErrText(err))
			return 2
		}
		l, _ := readLines(data)
		lines = append(lines, l...)
	}
	cmpLine := func(a, b string) int {
		if len(keys) == 0 {
			return compareKey(global, a, b)
		}
		for _, k := range keys {
			if r := compareKey(k, extractKey(k, a, sep), extractKey(k, b, sep)); r != 0 {
				return r
			}
		}
		return 0
	}
	full := func(a, b string) int {
		if r := cmpLine(a, b); r != 0 {
			return r
		}
		if o.has('s') || o.has('u') {
			return 0
		}
		r := strings.Compare(a, b)
		if global.reverse {
			r = -r
		}
		return r
	}
	if o.has('c') || o.has('C') {
		for i := 1; i < len(lines); i++ {
			if full(lines[i-1], lines[i]) > 0 {
				if o.has('c') {
					c.Errorf("-:%d: disorder: %s", i+1, lines[i])
				}
				return 1
			}
		}
		return 0
	}
	slices.SortStableFunc(lines, full)
	if o.has('u') || o.hasLong("unique") {
		lines = slices.CompactFunc(lines, func(a, b string) bool { return cmpLine(a, b) == 0 })
	}
	var b strings.Builder
	for _, l := range lines {
		b.WriteString(l + "\n")
	}
	out, ok := o.val('o')
	if v, lok := o.longVal("output"); lok {
		out, ok = v, true
	}
	if ok {
		if err := c.FS.WriteFile(c.Abs(out), []byte(b.String()), nil, false); err != nil {
			c.Errorf("open failed: %s: %s", out, ErrText(err))
			return 2
		}
		return 0
	}
	if _, err := io.WriteString(c.Out(), b.String()); err != nil {
		return writeError(err)
	}
	return 0
}

func parseSortKey(s string, global sortKey) (sortKey, bool) {
	k := sortKey{}
	start, end, hasEnd := strings.Cut(s, ",")
	parse := func(p string) (field, char int, flags string, ok bool) {
		i := 0
		for i < len(p) && (p[i] >= '0' && p[i] <= '9' || p[i] == '.') {
			i++
		}
		num, flags := p[:i], p[i:]
		f, ch, _ := strings.Cut(num, ".")
		field, err := strconv.Atoi(f)
		if err != nil {
			return 0, 0, "", false
		}
		if ch != "" {
			if char, err = strconv.Atoi(ch); err != nil {
				return 0, 0, "", false
			}
		}
		return field, char, flags, true
	}
	var flags string
	var ok bool
	if k.startField, k.startChar, flags, ok = parse(start); !ok || k.startField < 1 {
		return k, false
	}
	if hasEnd {
		var f2 string
		if k.endField, k.endChar, f2, ok = parse(end); !ok {
			return k, false
		}
		flags += f2
	}
	if flags == "" {
		k.numeric, k.reverse, k.fold, k.blanks = global.numeric, global.reverse, global.fold, global.blanks
		k.general, k.human, k.version = global.general, global.human, global.version
	}
	for _, f := range flags {
		switch f {
		case 'n':
			k.numeric = true
		case 'r':
			k.reverse = true
		case 'f':
			k.fold = true
		case 'b':
			k.blanks = true
		case 'g':
			k.general = true
		case 'h':
			k.human = true
		case 'V':
			k.version = true
		}
	}
	return k, true
}

// fields splits a line into sort fields: at sep, or where blanks start (leading blanks stay
// with the field, as in POSIX sort).
func sortFields(line, sep string) []string {
	if sep != "" {
		return strings.Split(line, sep)
	}
	var out []string
	i := 0
	for i < len(line) {
		j := i
		for j < len(line) && (line[j] == ' ' || line[j] == '\t') {
			j++
		}
		for j < len(line) && line[j] != ' ' && line[j] != '\t' {
			j++
		}
		out = append(out, line[i:j])
		i = j
	}
	return out
}

func extractKey(k sortKey, line, sep string) string {
	fields := sortFields(line, sep)
	if k.startField > len(fields) {
		return ""
	}
	first := fields[k.startField-1]
	if k.blanks || sep == "" && (k.numeric || k.general || k.human) {
		first = strings.TrimLeft(first, " \t")
	}
	if k.startChar > 1 {
		first = first[min(len(first), k.startChar-1):]
	}
	end := len(fields)
	if k.endField > 0 {
		end = min(k.endField, len(fields))
	}
	if end < k.startField {
		return ""
	}
	parts := []string{first}
	parts = append(parts, fields[k.startField:end]...)
	joiner := sep
	key := strings.Join(parts, joiner)
	if k.endField > 0 && k.endChar > 0 && end == k.endField {
		last := fields[end-1]
		cut := len(last) - k.endChar
		if k.endField == k.startField {
			cut = len(fields[end-1]) - (k.endChar - (k.startChar - 1))
		}
		if cut > 0 && cut <= len(key) {
			key = key[:len(key)-cut]
		}
	}
	return key
}

func leadingNumber(s string) float64 {
	s = strings.TrimLeft(s, " \t")
	i := 0
	if i < len(s) && (s[i] == '-' || s[i] == '+') {
		i++
	}
	for i < len(s) && (s[i] >= '0' && s[i] <= '9' || s[i] == '.' || s[i] == ',') {
		i++
	}
	f, err := strconv.ParseFloat(strings.ReplaceAll(s[:i], ",", ""), 64)
	if err != nil {
		return 0
	}
	return f
}

func humanNumber(s string) float64 {
	f := leadingNumber(s)
	s = strings.TrimSpace(s)
	for i, u := range "KMGTPE" {
		if strings.ContainsRune(strings.TrimLeft(s, "+-0123456789.,"), u) {
			for range i + 1 {
				f *= 1024
			}
			break
		}
	}
	return f
}

func compareKey(k sortKey, a, b string) int {
	var r int
	switch {
	case k.numeric || k.general:
		fa, fb := leadingNumber(a), leadingNumber(b)
		r = cmpFloat(fa, fb)
	case k.human:
		r = cmpFloat(humanNumber(a), humanNumber(b))
	case k.version:
		r = naturalCompare(a, b)
	default:
		if k.blanks {
			a, b = strings.TrimLeft(a, " \t"), strings.TrimLeft(b, " \t")
		}
		if k.fold {
			a, b = strings.ToUpper(a), strings.ToUpper(b)
		}
		r = strings.Compare(a, b)
	}
	if k.reverse {
		r = -r
	}
	return r
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// naturalCompare orders strings with embedded numbers by value (sort -V).
func naturalCompare(a, b string) int {
	for a != "" && b != "" {
		da, db := unicode.IsDigit(rune(a[0])), unicode.IsDigit(rune(b[0]))
		if da && db {
			i, j := 0, 0
			for i < len(a) && a[i] >= '0' && a[i] <= '9' {
				i++
			}
			for j < len(b) && b[j] >= '0' && b[j] <= '9' {
				j++
			}
			na, _ := strconv.ParseUint(a[:i], 10, 64)
			nb, _ := strconv.ParseUint(b[:j], 10, 64)
			if na != nb {
				if na < nb {
					return -1
				}
				return 1
			}
			a, b = a[i:], b[j:]
			continue
		}
		if a[0] != b[0] {
			if a[0] < b[0] {
				return -1
			}
			return 1
		}
		a, b = a[1:], b[1:]
	}
	return strings.Compare(a, b)
}

// expandTrSet expands tr's SET notation: ranges, escapes and [:class:].
func expandTrSet(s string) ([]rune, bool) {
	classes := map[string]func(rune) bool{
		"alpha": unicode.IsLetter, "digit": unicode.IsDigit, "alnum": func(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) },
		"upper": unicode.IsUpper, "lower": unicode.IsLower, "space": unicode.IsSpace, "blank": func(r rune) bool { return r == ' ' || r == '\t' },
		"punct": unicode.IsPunct, "cntrl": unicode.IsControl, "print": unicode.IsPrint, "graph": func(r rune) bool { return unicode.IsPrint(r) && r != ' ' },
		"xdigit": func(r rune) bool { return strings.ContainsRune("0123456789abcdefABCDEF", r) },
	}
	src := []rune(unescape(s))
	var out []rune
	for i := 0; i < len(src); i++ {
		if src[i] == '[' && i+1 < len(src) && src[i+1] == ':' {
			end := strings.Index(string(src[i:]), ":]")
			if end > 0 {
				name := string(src[i+2 : i+end])
				f, ok := classes[name]
				if !ok {
					return nil, false
				}
				for r := rune(0); r < 128; r++ {
					if f(r) {
						out = append(out, r)
					}
				}
				i += end + 1
				continue
			}
		}
		if i+2 < len(src) && src[i+1] == '-' {
			lo, hi := src[i], src[i+2]
			if hi < lo {
				return nil, false
			}
			for r := lo; r <= hi; r++ {
				out = append(out, r)
			}
			i += 2
			continue
		}
		out = append(out, src[i])
	}
	return out, true
}

// utilTr is tr [-c] [-d] [-s] SET1 [SET2].
func utilTr(c *Cmd, args []string) int {
	o, err := getopt(args, "cdsCt", false, "delete", "squeeze-repeats", "complement")
	if err != nil {
		return c.Usage(1, "%v", err)
	}
	del := o.has('d') || o.hasLong("delete")
	squeeze := o.has('s') || o.hasLong("squeeze-repeats")
	complement := o.has('c') || o.has('C') || o.hasLong("complement")
	if len(o.args) == 0 || (!del && !squeeze && len(o.args) < 2) {
		return c.Usage(1, "missing operand")
	}
	set1, ok := expandTrSet(o.args[0])
	if !ok {
		return c.Usage(1, "invalid set '%s'", o.args[0])
	}
	var set2 []rune
	if len(o.args) > 1 {
		if set2, ok = expandTrSet(o.args[1]); !ok {
			return c.Usage(1, "invalid set '%s'", o.args[1])
		}
	}
	in1 := map[rune]bool{}
	for _, r := range set1 {
		in1[r] = true
	}
	inSet1 := func(r rune) bool { return in1[r] != complement }
	mapping := map[rune]rune{}
	if !del && len(set2) > 0 && !complement {
		for i, r := range set1 {
			mapping[r] = set2[min(i, len(set2)-1)]
		}
	}
	squeezeSet := map[rune]bool{}
	sq := set1
	if len(set2) > 0 {
		sq = set2
	}
	for _, r := range sq {
		squeezeSet[r] = true
	}
	data, err := io.ReadAll(c.StdinReader())
	if err != nil {
		return 1
	}
	var b strings.Builder
	var last rune = -1
	for _, r := range string(data) {
		if del && inSet1(r) {
			continue
		}
		if !del && len(set2) > 0 {
			if complement && inSet1(r) {
				r = set2[len(set2)-1]
			} else if m, ok := mapping[r]; ok {
				r = m
			}
		}
		inSq := squeezeSet[r]
		if len(set2) == 0 && squeeze {
			inSq = inSet1(r)
		}
		if squeeze && r == last && inSq {
			continue
		}
		b.WriteRune(r)
		last = r
	}
	if _, err := io.WriteString(c.Out(), b.String()); err != nil {
		return writeError(err)
	}
	return 0
}
