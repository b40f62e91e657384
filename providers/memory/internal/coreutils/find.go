package coreutils

import (
	"fmt"
	"io"
	"io/fs"
	"path"
	"strconv"
	"strings"
	"time"
)

// find supports: -L/-H/-P; the options -maxdepth, -mindepth, -depth; the tests -name,
// -iname, -path, -ipath, -wholename, -type (f d l c, comma-separated), -empty, -newer,
// -mtime, -mmin, -size, -perm (octal, exact or -/ prefixed), -executable, -true, -false; the
// actions -print, -print0, -printf, -ls, -delete, -exec/-execdir (; and +), -prune, -quit;
// and the operators ( ) ! -not -a -and -o -or.

type findEntry struct {
	WalkEntry
	display string // the path as find prints it
	root    string // the starting point as given
}

type findState struct {
	c       *Cmd
	out     strings.Builder
	status  int
	quit    bool
	prune   bool
	batches []*execBatch
	now     time.Time
}

type execBatch struct {
	argv  []string // with {} where the paths go
	paths []string
}

type findExpr func(st *findState, e *findEntry) bool

type findParser struct {
	c        *Cmd
	toks     []string
	i        int
	action   bool // an action appears; no implicit -print
	depth    bool
	maxDepth int
	minDepth int
	err      error
}

func (p *findParser) peek() string {
	if p.i < len(p.toks) {
		return p.toks[p.i]
	}
	return ""
}

func (p *findParser) next() (string, bool) {
	if p.i < len(p.toks) {
		p.i++
		return p.toks[p.i-1], true
	}
	return "", false
}

func (p *findParser) fail(format string, args ...any) findExpr {
	if p.err == nil {
		p.err = fmt.Errorf(format, args...)
	}
	return func(*findState, *findEntry) bool { return false }
}

func (p *findParser) parseOr() findExpr {
	left := p.parseAnd()
	for p.peek() == "-o" || p.peek() == "-or" {
		p.next()
		right := p.parseAnd()
		l := left
		left = func(st *findState, e *findEntry) bool { return l(st, e) || right(st, e) }
	}
	return left
}

func (p *findParser) parseAnd() findExpr {
	left := p.parseUnary()
	for {
		t := p.peek()
		if t == "" || t == "-o" || t == "-or" || t == ")" || t == "," {
			return left
		}
		if t == "-a" || t == "-and" {
			p.next()
		}
		right := p.parseUnary()
		l := left
		left = func(st *findState, e *findEntry) bool { return l(st, e) && right(st, e) }
	}
}

func (p *findParser) parseUnary() findExpr {
	t, ok := p.next()
	if !ok {
		return p.fail("expected an expression")
	}
	switch t {
	case "!", "-not":
		inner := p.parseUnary()
		return func(st *findState, e *findEntry) bool { return !inner(st, e) }
	case "(":
		inner := p.parseOr()
		if t, _ := p.next(); t != ")" {
			return p.fail("invalid expression; I was expecting to find a ')' somewhere but did not see one.")
		}
		return inner
	}
	return p.primary(t)
}

func (p *findParser) arg(name string) string {
	v, ok := p.next()
	if !ok {
		p.fail("missing argument to '%s'", name)
	}
	return v
}

func globMatch(pattern, name string, fold bool) bool {
	if fold {
		pattern, name = strings.ToLower(pattern), strings.ToLower(name)
	}
	ok, _ := path.Match(pattern, name)
	return ok
}

// fnmatchPath matches a whole path where * also matches '/' (find's -path).
func fnmatchPath(pattern, name string, fold bool) bool {
	if fold {
		pattern, name = strings.ToLower(pattern), strings.ToLower(name)
	}
	re, err := globToRegexp(pattern, true)
	if err != nil {
		return false
	}
	return re.MatchString(name)
}

// cmpNumber evaluates find's numeric arguments: +N (more than), -N (less than), N (exactly).
func cmpNumber(arg string, v int64) bool {
	switch {
	case strings.HasPrefix(arg, "+"):
		n, _ := strconv.ParseInt(arg[1:], 10, 64)
		return v > n
	case strings.HasPrefix(arg, "-"):
		n, _ := strconv.ParseInt(arg[1:], 10, 64)
		return v < n
	}
	n, _ := strconv.ParseInt(arg, 10, 64)
	return v == n
}

func (p *findParser) primary(t string) findExpr {
	c := p.c
	switch t {
	case "-name", "-iname":
		pat := p.arg(t)
		fold := t == "-iname"
		return func(st *findState, e *findEntry) bool {
			name := path.Base(e.display)
			if e.Rel == "" {
				name = baseName(e.display, "")
			}
			return globMatch(pat, name, fold)
		}
	case "-path", "-wholename", "-ipath", "-iwholename":
		pat := p.arg(t)
		fold := strings.HasPrefix(t, "-i")
		return func(st *findState, e *findEntry) bool { return fnmatchPath(pat, e.display, fold) }
	case "-type", "-xtype":
		arg := p.arg(t)
		types := strings.Split(arg, ",")
		for _, ty := range types {
			if len(ty) != 1 || !strings.Contains("fdlcbps", ty) {
				return p.fail("Unknown argument to -type: %s", ty)
			}
		}
		return func(st *findState, e *findEntry) bool {
			var k string
			switch e.Info.kind() {
			case kindFile:
				k = "f"
			case kindDir:
				k = "d"
			case kindSymlink:
				k = "l"
			case kindDevice:
				k = "c"
			}
			for _, ty := range types {
				if ty == k {
					return true
				}
			}
			return false
		}
	case "-maxdepth", "-mindepth":
		n, err := strconv.Atoi(p.arg(t))
		if err != nil || n < 0 {
			return p.fail("Expected a positive decimal integer argument to %s", t)
		}
		if t == "-maxdepth" {
			p.maxDepth = n
		} else {
			p.minDepth = n
		}
		return func(*findState, *findEntry) bool { return true }
	case "-depth", "-d":
		p.depth = true
		return func(*findState, *findEntry) bool { return true }
	case "-xdev", "-mount", "-noleaf", "-ignore_readdir_race", "-follow", "-true":
		return func(*findState, *findEntry) bool { return true }
	case "-false":
		return func(*findState, *findEntry) bool { return false }
	case "-empty":
		return func(st *findState, e *findEntry) bool {
			switch e.Info.kind() {
			case kindFile:
				return e.Info.Size == 0
			case kindDir:
				entries, err := c.FS.ReadDir(e.Path)
				return err == nil && len(entries) == 0
			}
			return false
		}
	case "-executable":
		return func(st *findState, e *findEntry) bool {
			return e.Info.IsDir() || e.Info.Mode.Perm()&0o111 != 0
		}
	case "-newer":
		ref := p.arg(t)
		fi, err := c.FS.Stat(c.Abs(ref), true)
		if err != nil {
			return p.fail("'%s': %s", ref, ErrText(err))
		}
		return func(st *findState, e *findEntry) bool { return e.Info.ModTime.After(fi.ModTime) }
	case "-mtime", "-mmin":
		arg := p.arg(t)
		unit := 24 * time.Hour
		if t == "-mmin" {
			unit = time.Minute
		}
		return func(st *findState, e *findEntry) bool {
			age := int64(st.now.Sub(e.Info.ModTime) / unit)
			return cmpNumber(arg, age)
		}
	case "-size":
		arg := p.arg(t)
		num := strings.TrimRight(arg, "ckMGwb")
		unit := int64(512)
		switch strings.TrimPrefix(arg, num) {
		case "c":
			unit = 1
		case "w":
			unit = 2
		case "k":
			unit = 1024
		case "M":
			unit = 1 << 20
		case "G":
			unit = 1 << 30
		}
		return func(st *findState, e *findEntry) bool {
			return cmpNumber(num, (e.Info.Size+unit-1)/unit)
		}
	case "-perm":
		arg := p.arg(t)
		mode := strings.TrimLeft(arg, "-/")
		m, ok := parseMode(mode, 0, false)
		if !ok {
			return p.fail("invalid mode '%s'", arg)
		}
		return func(st *findState, e *findEntry) bool {
			perm := e.Info.Perm
			switch {
			case strings.HasPrefix(arg, "-"):
				return perm&m == m
			case strings.HasPrefix(arg, "/"):
				return m == 0 || perm&m != 0
			}
			return perm == m
		}
	case "-print", "-print0":
		p.action = true
		end := "\n"
		if t == "-print0" {
			end = "\x00"
		}
		return func(st *findState, e *findEntry) bool {
			st.out.WriteString(e.display + end)
			return true
		}
	case "-printf":
		p.action = true
		format := unescape(p.arg(t))
		return func(st *findState, e *findEntry) bool {
			st.out.WriteString(findPrintf(format, e))
			return true
		}
	case "-ls":
		p.action = true
		return func(st *findState, e *findEntry) bool {
			fmt.Fprintf(&st.out, "%s %d root root %d %s %s\n", modeString(e.Info), e.Info.Nlink, e.Info.Size, lsTime(e.Info.ModTime), e.display)
			return true
		}
	case "-prune":
		return func(st *findState, e *findEntry) bool {
			st.prune = true
			return true
		}
	case "-quit":
		return func(st *findState, e *findEntry) bool {
			st.quit = true
			return true
		}
	case "-delete":
		p.action = true
		p.depth = true
		return func(st *findState, e *findEntry) bool {
			if e.Rel == "" && (e.display == "." || e.display == "./") {
				return true
			}
			if err := c.FS.Remove(e.Path); err != nil {
				c.Errorf("cannot delete '%s': %s", e.display, ErrText(err))
				st.status = 1
				return false
			}
			return true
		}
	case "-exec", "-execdir", "-ok", "-okdir":
		p.action = true
		var argv []string
		batch := false
		for {
			a, ok := p.next()
			if !ok {
				return p.fail("missing argument to '%s'", t)
			}
			if a == ";" {
				break
			}
			if a == "+" && len(argv) > 0 && argv[len(argv)-1] == "{}" {
				batch = true
				break
			}
			argv = append(argv, a)
		}
		if len(argv) == 0 {
			return p.fail("missing argument to '%s'", t)
		}
		inDir := strings.HasSuffix(t, "dir")
		if batch {
			b := &execBatch{argv: argv}
			return func(st *findState, e *findEntry) bool {
				if len(st.batches) == 0 || st.batches[len(st.batches)-1] != b {
					st.batches = append(st.batches, b)
				}
				b.paths = append(b.paths, e.display)
				return true
			}
		}
		return func(st *findState, e *findEntry) bool {
			st.flush()
			args := make([]string, len(argv))
			display := e.display
			dir := c.Dir
			if inDir {
				display = "./" + path.Base(e.Path)
				dir = dirName(e.Path)
			}
			for i, a := range argv {
				args[i] = strings.ReplaceAll(a, "{}", display)
			}
			return c.Exec(args, dir) == 0
		}
	}
	if strings.HasPrefix(t, "-") {
		return p.fail("unknown predicate '%s'", t)
	}
	return p.fail("paths must precede expression: '%s'", t)
}

func (st *findState) flush() {
	if st.out.Len() > 0 {
		if _, err := io.WriteString(st.c.Out(), st.out.String()); err != nil {
			st.status = writeError(err)
			st.quit = true
		}
		st.out.Reset()
	}
}

func findPrintf(format string, e *findEntry) string {
	var b strings.Builder
	for i := 0; i < len(format); i++ {
		if format[i] != '%' || i+1 == len(format) {
			b.WriteByte(format[i])
			continue
		}
		i++
		switch format[i] {
		case 'p':
			b.WriteString(e.display)
		case 'f':
			b.WriteString(path.Base(e.display))
		case 'P':
			b.WriteString(e.Rel)
		case 'h':
			b.WriteString(dirName(e.display))
		case 'H':
			b.WriteString(e.root)
		case 's':
			b.WriteString(strconv.FormatInt(e.Info.Size, 10))
		case 'd':
			b.WriteString(strconv.Itoa(e.Depth))
		case 'm':
			b.WriteString(strconv.FormatUint(uint64(e.Info.Perm), 8))
		case 'M':
			b.WriteString(modeString(e.Info))
		case 'l':
			b.WriteString(e.Info.Target)
		case 'y':
			b.WriteString(map[fs.FileMode]string{kindFile: "f", kindDir: "d", kindSymlink: "l", kindDevice: "c"}[e.Info.kind()])
		case 'T':
			if i+1 < len(format) && format[i+1] == '@' {
				i++
				fmt.Fprintf(&b, "%d.%010d", e.Info.ModTime.Unix(), e.Info.ModTime.Nanosecond()*10)
			}
		case 'u', 'g':
			b.WriteString("root")
		case '%':
			b.WriteByte('%')
		default:
			b.WriteByte('%')
			b.WriteByte(format[i])
		}
	}
	return b.String()
}

// utilFind is find [-L|-H|-P] [PATH...] [EXPRESSION].
func utilFind(c *Cmd, args []string) int {
	follow := false
	for len(args) > 0 && (args[0] == "-L" || args[0] == "-H" || args[0] == "-P") {
		follow = args[0] != "-P"
		args = args[1:]
	}
	var roots []string
	for len(args) > 0 && !strings.HasPrefix(args[0], "-") && args[0] != "(" && args[0] != "!" {
		roots = append(roots, args[0])
		args = args[1:]
	}
	if len(roots) == 0 {
		roots = []string{"."}
	}
	p := &findParser{c: c, toks: args, maxDepth: -1}
	var expr findExpr = func(*findState, *findEntry) bool { return true }
	if len(args) > 0 {
		expr = p.parseOr()
		if p.err == nil && p.i < len(p.toks) {
			p.fail("unexpected '%s'", p.toks[p.i])
		}
	}
	if p.err != nil {
		c.Errorf("%v", p.err)
		return 1
	}
	st := &findState{c: c, now: time.Now()}
	for _, root := range roots {
		entries, err := c.FS.Walk(c.Abs(root), true)
		if err != nil {
			c.Errorf("'%s': %s", root, ErrText(err))
			st.status = 1
			continue
		}
		if !follow && entries[0].Info.kind() != kindDir {
			// without -L a starting point that is a link is not followed
			if lfi, err := c.FS.Stat(c.Abs(root), false); err == nil && lfi.kind() == kindSymlink {
				entries = entries[:1]
				entries[0].Info = lfi
			}
		}
		order := entries
		if p.depth {
			order = postOrder(entries)
		}
		var pruned []string
		for _, we := range order {
			if st.quit || c.Ctx.Err() != nil {
				break
			}
			if p.maxDepth >= 0 && we.Depth > p.maxDepth {
				continue
			}
			skip := false
			for _, pr := range pruned {
				if strings.HasPrefix(we.Rel, pr) {
					skip = true
					break
				}
			}
			if skip {
				continue
			}
			e := &findEntry{WalkEntry: we, root: root, display: root}
			if we.Rel != "" {
				e.display = joinPath(root, we.Rel)
			}
			st.prune = false
			if we.Depth >= p.minDepth {
				ok := expr(st, e)
				if ok && !p.action {
					st.out.WriteString(e.display + "\n")
				}
			}
			if st.prune && we.Info.IsDir() && !p.depth {
				if we.Rel == "" {
					break
				}
				pruned = append(pruned, we.Rel+"/")
			}
			if st.out.Len() > 32*1024 {
				st.flush()
			}
		}
	}
	st.flush()
	for _, b := range st.batches {
		var argv []string
		for _, a := range b.argv {
			if a == "{}" {
				argv = append(argv, b.paths...)
			} else {
				argv = append(argv, a)
			}
		}
		if c.Exec(argv, c.Dir) != 0 {
			st.status = 1
		}
	}
	if c.Ctx.Err() != nil {
		return 1
	}
	return st.status
}

// postOrder reorders a pre-order walk so every directory comes after its contents.
func postOrder(entries []WalkEntry) []WalkEntry {
	out := make([]WalkEntry, 0, len(entries))
	var stack []WalkEntry
	for _, e := range entries {
		for len(stack) > 0 && stack[len(stack)-1].Depth >= e.Depth {
			out = append(out, stack[len(stack)-1])
			stack = stack[:len(stack)-1]
		}
		if e.Info.kind() == kindDir {
			stack = append(stack, e)
		} else {
			out = append(out, e)
		}
	}
	for i := len(stack) - 1; i >= 0; i-- {
		out = append(out, stack[i])
	}
	return out
}
