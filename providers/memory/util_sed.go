package memory

import (
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
)

// sed supports: -n, -e SCRIPT, -f FILE, -i[SUFFIX], -E/-r, -s; addresses N, $, /RE/, \cREc,
// ADDR1,ADDR2, ADDR,+N, FIRST~STEP and !; commands s (flags g, p, N, i/I), y, d, p, n, N, q,
// Q, =, a, i, c, h, H, g, G, x, l-less blocks { … }. Labels and branches are not supported.

type sedAddr struct {
	kind  byte // 'n' line, '$' last, 'r' regexp, '+' relative, '~' step
	line  int
	step  int
	re    *regexp.Regexp
	empty bool // an empty regexp: the last one used
}

type sedCmd struct {
	a1, a2  *sedAddr
	negate  bool
	name    byte
	re      *regexp.Regexp
	reEmpty bool
	repl    []sedPart
	global  bool
	nth     int
	print   bool
	text    string
	from    []rune
	to      []rune
	exit    int
	block   []*sedCmd
	active  bool // inside a range
	endLine int  // for ADDR,+N
}

type sedPart struct {
	lit   string
	group int // -1: literal
}

type sedParser struct {
	s        string
	i        int
	extended bool
}

func (p *sedParser) eof() bool { return p.i >= len(p.s) }

func (p *sedParser) skipSpace() {
	for !p.eof() && (p.s[p.i] == ' ' || p.s[p.i] == '\t') {
		p.i++
	}
}

// delimited reads up to the unescaped delimiter d, keeping escapes except for \d.
func (p *sedParser) delimited(d byte) (string, error) {
	var b strings.Builder
	for !p.eof() {
		ch := p.s[p.i]
		if ch == '\\' && p.i+1 < len(p.s) {
			if p.s[p.i+1] == d {
				b.WriteByte(d)
			} else if p.s[p.i+1] == 'n' {
				b.WriteString(`\n`)
			} else {
				b.WriteByte('\\')
				b.WriteByte(p.s[p.i+1])
			}
			p.i += 2
			continue
		}
		if ch == '\n' && d != '\n' {
			return "", fmt.Errorf("unterminated address regex")
		}
		p.i++
		if ch == d {
			return b.String(), nil
		}
		b.WriteByte(ch)
	}
	return "", fmt.Errorf("unterminated `s' command")
}

func (p *sedParser) compile(re string, flags string) (*regexp.Regexp, error) {
	return regexp.Compile(flags + breToRE2(re, p.extended))
}

func (p *sedParser) address() (*sedAddr, error) {
	if p.eof() {
		return nil, nil
	}
	ch := p.s[p.i]
	switch {
	case ch >= '0' && ch <= '9':
		j := p.i
		for j < len(p.s) && p.s[j] >= '0' && p.s[j] <= '9' {
			j++
		}
		n, _ := strconv.Atoi(p.s[p.i:j])
		p.i = j
		if !p.eof() && p.s[p.i] == '~' {
			k := p.i + 1
			for k < len(p.s) && p.s[k] >= '0' && p.s[k] <= '9' {
				k++
			}
			step, _ := strconv.Atoi(p.s[p.i+1 : k])
			p.i = k
			return &sedAddr{kind: '~', line: n, step: step}, nil
		}
		return &sedAddr{kind: 'n', line: n}, nil
	case ch == '$':
		p.i++
		return &sedAddr{kind: '$'}, nil
	case ch == '/' || ch == '\\':
		d := byte('/')
		if ch == '\\' {
			if p.i+1 >= len(p.s) {
				return nil, fmt.Errorf("unexpected end of script")
			}
			d = p.s[p.i+1]
			p.i++
		}
		p.i++
		src, err := p.delimited(d)
		if err != nil {
			return nil, err
		}
		flags := "(?m)"
		if !p.eof() && (p.s[p.i] == 'I') {
			flags = "(?mi)"
			p.i++
		}
		if src == "" {
			return &sedAddr{kind: 'r', empty: true}, nil
		}
		re, err := p.compile(src, flags)
		if err != nil {
			return nil, err
		}
		return &sedAddr{kind: 'r', re: re}, nil
	case ch == '+':
		j := p.i + 1
		for j < len(p.s) && p.s[j] >= '0' && p.s[j] <= '9' {
			j++
		}
		n, _ := strconv.Atoi(p.s[p.i+1 : j])
		p.i = j
		return &sedAddr{kind: '+', line: n}, nil
	}
	return nil, nil
}

// text reads the argument of a, i and c: GNU's one-line form or the classic "a\" form.
func (p *sedParser) text() string {
	p.skipSpace()
	if !p.eof() && p.s[p.i] == '\\' {
		p.i++
		if !p.eof() && p.s[p.i] == '\n' {
			p.i++
		}
	}
	var b strings.Builder
	for !p.eof() && p.s[p.i] != '\n' {
		if p.s[p.i] == '\\' && p.i+1 < len(p.s) {
			p.i++
			if p.s[p.i] == 'n' {
				b.WriteByte('\n')
			} else {
				b.WriteByte(p.s[p.i])
			}
			p.i++
			continue
		}
		b.WriteByte(p.s[p.i])
		p.i++
	}
	return b.String()
}

func (p *sedParser) commands(inBlock bool) ([]*sedCmd, error) {
	var out []*sedCmd
	for {
		for !p.eof() && strings.IndexByte(" \t\n;", p.s[p.i]) >= 0 {
			p.i++
		}
		if p.eof() {
			if inBlock {
				return nil, fmt.Errorf("unmatched `{'")
			}
			return out, nil
		}
		if p.s[p.i] == '}' {
			if !inBlock {
				return nil, fmt.Errorf("unexpected `}'")
			}
			p.i++
			return out, nil
		}
		if p.s[p.i] == '#' {
			for !p.eof() && p.s[p.i] != '\n' {
				p.i++
			}
			continue
		}
		c := &sedCmd{}
		var err error
		if c.a1, err = p.address(); err != nil {
			return nil, err
		}
		if c.a1 != nil && !p.eof() && p.s[p.i] == ',' {
			p.i++
			if c.a2, err = p.address(); err != nil {
				return nil, err
			}
			if c.a2 == nil {
				return nil, fmt.Errorf("unexpected `,'")
			}
		}
		p.skipSpace()
		for !p.eof() && p.s[p.i] == '!' {
			c.negate = true
			p.i++
			p.skipSpace()
		}
		if p.eof() {
			return nil, fmt.Errorf("missing command")
		}
		c.name = p.s[p.i]
		p.i++
		switch c.name {
		case '{':
			if c.block, err = p.commands(true); err != nil {
				return nil, err
			}
		case 's':
			if p.eof() {
				return nil, fmt.Errorf("unterminated `s' command")
			}
			d := p.s[p.i]
			p.i++
			src, err := p.delimited(d)
			if err != nil {
				return nil, err
			}
			repl, err := p.delimited(d)
			if err != nil {
				return nil, err
			}
			flags := "(?m)"
			for !p.eof() && strings.IndexByte("gpiIm0123456789", p.s[p.i]) >= 0 {
				switch f := p.s[p.i]; {
				case f == 'g':
					c.global = true
				case f == 'p':
					c.print = true
				case f == 'i' || f == 'I':
					flags = "(?mi)"
				case f >= '0' && f <= '9':
					c.nth = c.nth*10 + int(f-'0')
				}
				p.i++
			}
			if src == "" {
				c.reEmpty = true
			} else if c.re, err = p.compile(src, flags); err != nil {
				return nil, err
			}
			c.repl = parseReplacement(repl, p.extended)
		case 'y':
			d := p.s[p.i]
			p.i++
			from, err := p.delimited(d)
			if err != nil {
				return nil, err
			}
			to, err := p.delimited(d)
			if err != nil {
				return nil, err
			}
			c.from, c.to = []rune(unescape(from)), []rune(unescape(to))
			if len(c.from) != len(c.to) {
				return nil, fmt.Errorf("strings for `y' command are different lengths")
			}
		case 'a', 'i', 'c':
			c.text = p.text()
		case 'q', 'Q':
			p.skipSpace()
			j := p.i
			for j < len(p.s) && p.s[j] >= '0' && p.s[j] <= '9' {
				j++
			}
			c.exit, _ = strconv.Atoi(p.s[p.i:j])
			p.i = j
		case 'd', 'D', 'p', 'P', 'n', 'N', '=', 'h', 'H', 'g', 'G', 'x':
		default:
			return nil, fmt.Errorf("unknown command: `%c'", c.name)
		}
		out = append(out, c)
	}
}

func parseReplacement(s string, extended bool) []sedPart {
	var parts []sedPart
	var lit strings.Builder
	flush := func() {
		if lit.Len() > 0 {
			parts = append(parts, sedPart{lit: lit.String(), group: -1})
			lit.Reset()
		}
	}
	for i := 0; i < len(s); i++ {
		switch ch := s[i]; {
		case ch == '&':
			flush()
			parts = append(parts, sedPart{group: 0})
		case ch == '\\' && i+1 < len(s):
			i++
			n := s[i]
			switch {
			case n >= '0' && n <= '9':
				flush()
				parts = append(parts, sedPart{group: int(n - '0')})
			case n == 'n':
				lit.WriteByte('\n')
			case n == 't':
				lit.WriteByte('\t')
			default:
				lit.WriteByte(n)
			}
		default:
			lit.WriteByte(ch)
		}
	}
	flush()
	return parts
}

type sedRun struct {
	c        *cmd
	quiet    bool
	out      strings.Builder
	lineNo   int
	last     bool
	lastRE   *regexp.Regexp
	hold     string
	lines    []string
	next     int // index of the next unread line
	quit     bool
	exitCode int
	appended []string
}

func (r *sedRun) matchAddr(a *sedAddr, ps string) bool {
	switch a.kind {
	case 'n':
		return r.lineNo == a.line
	case '$':
		return r.last
	case '~':
		if a.step <= 0 {
			return r.lineNo == a.line
		}
		return r.lineNo >= a.line && (r.lineNo-a.line)%a.step == 0
	case 'r':
		re := a.re
		if a.empty {
			re = r.lastRE
		}
		if re == nil {
			return false
		}
		r.lastRE = re
		return re.MatchString(ps)
	}
	return false
}

func (r *sedRun) selected(c *sedCmd, ps string) bool {
	sel := false
	switch {
	case c.a1 == nil:
		sel = true
	case c.a2 == nil:
		sel = r.matchAddr(c.a1, ps)
	case c.active:
		sel = true
		switch c.a2.kind {
		case 'n':
			if r.lineNo >= c.a2.line {
				c.active = false
			}
		case '+':
			if r.lineNo >= c.endLine {
				c.active = false
			}
		default:
			if r.matchAddr(c.a2, ps) {
				c.active = false
			}
		}
	case r.matchAddr(c.a1, ps):
		sel = true
		switch c.a2.kind {
		case 'n':
			c.active = c.a2.line > r.lineNo
		case '+':
			c.endLine = r.lineNo + c.a2.line
			c.active = c.a2.line > 0
		case '$':
			c.active = !r.last
		default:
			c.active = true
		}
	}
	return sel != c.negate
}

// exec runs cmds on the pattern space; it returns the new pattern space and whether the
// cycle ends early (d) without auto-printing.
func (r *sedRun) exec(cmds []*sedCmd, ps string) (string, bool) {
	for _, c := range cmds {
		if r.quit {
			return ps, false
		}
		if !r.selected(c, ps) {
			continue
		}
		switch c.name {
		case '{':
			var stop bool
			if ps, stop = r.exec(c.block, ps); stop {
				return ps, true
			}
		case 's':
			re := c.re
			if c.reEmpty {
				re = r.lastRE
			}
			if re == nil {
				continue
			}
			r.lastRE = re
			matches := re.FindAllStringSubmatchIndex(ps, -1)
			var b strings.Builder
			pos, replaced := 0, false
			for k, m := range matches {
				if c.nth > 0 && k+1 < c.nth {
					continue
				}
				if replaced && !c.global {
					break
				}
				b.WriteString(ps[pos:m[0]])
				for _, part := range c.repl {
					if part.group < 0 {
						b.WriteString(part.lit)
					} else if 2*part.group+1 < len(m) && m[2*part.group] >= 0 {
						b.WriteString(ps[m[2*part.group]:m[2*part.group+1]])
					}
				}
				pos, replaced = m[1], true
			}
			if !replaced {
				continue
			}
			b.WriteString(ps[pos:])
			ps = b.String()
			if c.print {
				r.out.WriteString(ps + "\n")
			}
		case 'y':
			ps = strings.Map(func(ch rune) rune {
				for i, f := range c.from {
					if f == ch {
						return c.to[i]
					}
				}
				return ch
			}, ps)
		case 'd':
			return ps, true
		case 'D':
			if i := strings.IndexByte(ps, '\n'); i >= 0 {
				ps = ps[i+1:]
				continue
			}
			return ps, true
		case 'p':
			r.out.WriteString(ps + "\n")
		case 'P':
			line, _, _ := strings.Cut(ps, "\n")
			r.out.WriteString(line + "\n")
		case 'n':
			if r.next >= len(r.lines) {
				if !r.quiet {
					r.out.WriteString(ps + "\n")
				}
				r.quit = true
				return ps, true
			}
			if !r.quiet {
				r.out.WriteString(ps + "\n")
			}
			r.flushAppended()
			ps = r.readLine()
		case 'N':
			if r.next >= len(r.lines) {
				if !r.quiet {
					r.out.WriteString(ps + "\n")
				}
				r.quit = true
				return ps, true
			}
			ps += "\n" + r.readLine()
		case '=':
			r.out.WriteString(strconv.Itoa(r.lineNo) + "\n")
		case 'a':
			r.appended = append(r.appended, c.text)
		case 'i':
			r.out.WriteString(c.text + "\n")
		case 'c':
			if c.a2 == nil || !c.active {
				r.out.WriteString(c.text + "\n")
			}
			return ps, true
		case 'q':
			r.quit, r.exitCode = true, c.exit
			return ps, false
		case 'Q':
			r.quit, r.exitCode = true, c.exit
			return ps, true
		case 'h':
			r.hold = ps
		case 'H':
			r.hold += "\n" + ps
		case 'g':
			ps = r.hold
		case 'G':
			ps += "\n" + r.hold
		case 'x':
			ps, r.hold = r.hold, ps
		}
	}
	return ps, false
}

func (r *sedRun) readLine() string {
	l := r.lines[r.next]
	r.next++
	r.lineNo++
	r.last = r.next == len(r.lines)
	return l
}

func (r *sedRun) flushAppended() {
	for _, t := range r.appended {
		r.out.WriteString(t + "\n")
	}
	r.appended = r.appended[:0]
}

func (r *sedRun) run(cmds []*sedCmd, data []byte) string {
	r.lines, _ = readLines(data)
	r.next, r.lineNo = 0, 0
	for r.next < len(r.lines) && !r.quit {
		ps := r.readLine()
		ps, deleted := r.exec(cmds, ps)
		if !deleted && !r.quiet {
			r.out.WriteString(ps + "\n")
		}
		r.flushAppended()
	}
	s := r.out.String()
	r.out.Reset()
	return s
}

// utilSed is sed [-n] [-E|-r] [-i[SUFFIX]] [-s] (-e SCRIPT | -f FILE)... | SCRIPT [FILE...].
func utilSed(c *cmd, args []string) int {
	var scripts []string
	var files []string
	quiet, extended, inPlace, separate := false, false, false, false
	suffix := ""
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			files = append(files, args[i+1:]...)
			i = len(args)
		case a == "-e" || a == "--expression":
			if i+1 >= len(args) {
				return c.usage(1, "option requires an argument -- 'e'")
			}
			i++
			scripts = append(scripts, args[i])
		case strings.HasPrefix(a, "--expression="):
			scripts = append(scripts, strings.TrimPrefix(a, "--expression="))
		case a == "-f" || a == "--file":
			if i+1 >= len(args) {
				return c.usage(1, "option requires an argument -- 'f'")
			}
			i++
			data, err := c.readAll(args[i])
			if err != nil {
				c.errorf("couldn't open file %s: %s", args[i], fsErrText(err))
				return 1
			}
			scripts = append(scripts, strings.TrimSuffix(string(data), "\n"))
		case strings.HasPrefix(a, "--in-place"):
			inPlace, separate = true, true
			suffix = strings.TrimPrefix(strings.TrimPrefix(a, "--in-place"), "=")
		case a == "-n" || a == "--quiet" || a == "--silent":
			quiet = true
		case a == "-E" || a == "-r" || a == "--regexp-extended":
			extended = true
		case a == "-s" || a == "--separate":
			separate = true
		case a == "-u" || a == "-z" || a == "--posix":
		case strings.HasPrefix(a, "-i"):
			inPlace, separate = true, true
			suffix = a[2:]
		case strings.HasPrefix(a, "-") && len(a) > 1 && !strings.HasPrefix(a, "--"):
			// combined short flags such as -ne or -nE
			rest := a[1:]
			for j := 0; j < len(rest); j++ {
				switch rest[j] {
				case 'n':
					quiet = true
				case 'E', 'r':
					extended = true
				case 's':
					separate = true
				case 'e':
					if j+1 < len(rest) {
						scripts = append(scripts, rest[j+1:])
					} else if i+1 < len(args) {
						i++
						scripts = append(scripts, args[i])
					}
					j = len(rest)
				case 'i':
					inPlace, separate = true, true
					suffix = rest[j+1:]
					j = len(rest)
				default:
					return c.usage(1, "invalid option -- '%c'", rest[j])
				}
			}
		default:
			files = append(files, a)
		}
	}
	if len(scripts) == 0 {
		if len(files) == 0 {
			return c.usage(1, "no script specified")
		}
		scripts, files = files[:1], files[1:]
	}
	p := &sedParser{s: strings.Join(scripts, "\n"), extended: extended}
	cmds, err := p.commands(false)
	if err != nil {
		c.errorf("-e expression #1, char %d: %v", p.i, err)
		return 1
	}
	r := &sedRun{c: c, quiet: quiet}
	if inPlace {
		if len(files) == 0 {
			return c.usage(1, "no input files")
		}
		status := 0
		for _, f := range files {
			data, err := c.readAll(f)
			if err != nil {
				c.errorf("can't read %s: %s", f, fsErrText(err))
				status = 2
				continue
			}
			resetRanges(cmds)
			r.quit = false
			out := r.run(cmds, data)
			if suffix != "" {
				backup := f + suffix
				if strings.Contains(suffix, "*") {
					backup = strings.ReplaceAll(suffix, "*", f)
				}
				_ = c.fs().WriteFile(c.abs(backup), data, nil, false)
			}
			if err := c.fs().WriteFile(c.abs(f), []byte(out), nil, false); err != nil {
				c.errorf("couldn't write %s: %s", f, fsErrText(err))
				status = 4
			}
			if r.quit {
				break
			}
		}
		if status != 0 {
			return status
		}
		return r.exitCode
	}
	if len(files) == 0 {
		files = []string{"-"}
	}
	var inputs [][]byte
	status := 0
	for _, f := range files {
		data, err := c.readAll(f)
		if err != nil {
			c.errorf("can't read %s: %s", f, fsErrText(err))
			status = 2
			continue
		}
		inputs = append(inputs, data)
	}
	if !separate {
		var all []byte
		for _, d := range inputs {
			all = append(all, d...)
			if len(d) > 0 && d[len(d)-1] != '\n' {
				all = append(all, '\n')
			}
		}
		inputs = [][]byte{all}
	}
	for _, d := range inputs {
		if _, err := io.WriteString(c.out(), r.run(cmds, d)); err != nil {
			return writeError(err)
		}
		if r.quit {
			break
		}
	}
	if status != 0 {
		return status
	}
	return r.exitCode
}

func resetRanges(cmds []*sedCmd) {
	for _, c := range cmds {
		c.active = false
		resetRanges(c.block)
	}
}
