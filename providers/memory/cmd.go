package memory

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"mvdan.cc/sh/v3/expand"
	"mvdan.cc/sh/v3/interp"
	"mvdan.cc/sh/v3/syntax"
)

// cmd is one running utility: its arguments' context, streams and environment.
type cmd struct {
	ctx    context.Context
	sh     *shell
	name   string // for messages
	dir    string
	env    expand.Environ
	stdin  io.Reader // nil: empty
	stdout io.Writer
	stderr io.Writer
}

// utilFunc is a utility: it gets the arguments after the name and returns the exit status.
type utilFunc func(c *cmd, args []string) int

// utilities are the commands implemented in Go over the memory file system. Filled in init,
// since some of them (sh, env) start others.
var utilities map[string]utilFunc

// externalBuiltins are interpreter builtins that also exist as programs on a Linux system,
// so which and command -v find them and env can run them.
var externalBuiltins = []string{"echo", "printf", "test", "[", "true", "false", "pwd", "kill"}

func isExternal(name string) bool {
	return utilities[name] != nil || slices.Contains(externalBuiltins, name)
}

func (c *cmd) fs() *memFS { return c.sh.sb.fs }

func (c *cmd) errorf(format string, args ...any) {
	fmt.Fprintf(c.stderr, c.name+": "+format+"\n", args...)
}

func (c *cmd) out() io.Writer {
	if c.stdout == nil {
		return io.Discard
	}
	return c.stdout
}

func (c *cmd) errw() io.Writer {
	if c.stderr == nil {
		return io.Discard
	}
	return c.stderr
}

func (c *cmd) getenv(name string) string { return c.env.Get(name).String() }

func (c *cmd) abs(p string) string { return absIn(c.dir, p) }

// failf prints "NAME: PATH: reason" for a file system error and returns 1.
func (c *cmd) fsFail(p string, err error) int {
	c.errorf("%s: %s", displayName(p), fsErrText(err))
	return 1
}

func displayName(p string) string {
	return "'" + p + "'"
}

// usage reports a bad invocation and returns 2 (1 for utilities that use 1 for everything).
func (c *cmd) usage(code int, format string, args ...any) int {
	c.errorf(format, args...)
	return code
}

// stdinReader returns stdin as a reader that stops when the command is cancelled.
func (c *cmd) stdinReader() io.Reader {
	if c.stdin == nil {
		return strings.NewReader("")
	}
	return ctxReader{c.ctx, c.stdin}
}

type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (r ctxReader) Read(p []byte) (int, error) {
	if err := r.ctx.Err(); err != nil {
		return 0, err
	}
	if f, ok := r.r.(*os.File); ok {
		// A pipe read blocks; a deadline set when the context ends unblocks it.
		stop := context.AfterFunc(r.ctx, func() { f.SetReadDeadline(time.Unix(1, 0)) })
		defer stop()
	}
	n, err := r.r.Read(p)
	if err != nil && r.ctx.Err() != nil {
		return n, r.ctx.Err()
	}
	return n, err
}

// open opens an input operand: "-" is stdin, anything else a file in the memory file system.
func (c *cmd) open(name string) (io.Reader, error) {
	if name == "-" {
		return c.stdinReader(), nil
	}
	switch p := c.abs(name); p {
	case "/dev/stdin", "/dev/fd/0":
		return c.stdinReader(), nil
	default:
		fi, err := c.fs().Stat(p, true)
		if err != nil {
			return nil, err
		}
		if fi.IsDir() {
			return nil, pathErr("read", name, errIsDir)
		}
		if fi.kind == kindDevice {
			h, err := c.fs().Open(p, os.O_RDONLY, 0)
			if err != nil {
				return nil, err
			}
			return ctxReader{c.ctx, h}, nil
		}
		data, err := c.fs().ReadFile(p)
		if err != nil {
			return nil, err
		}
		return strings.NewReader(string(data)), nil
	}
}

// readAll reads an input operand whole.
func (c *cmd) readAll(name string) ([]byte, error) {
	if name != "-" {
		p := c.abs(name)
		if fi, err := c.fs().Stat(p, true); err == nil && fi.kind == kindFile {
			return c.fs().ReadFile(p)
		}
	}
	r, err := c.open(name)
	if err != nil {
		return nil, err
	}
	return io.ReadAll(r)
}

// writeError turns an output error into an exit status: 141 for a closed pipe (what SIGPIPE
// would give), else 1.
func writeError(err error) int {
	if errors.Is(err, syscall.EPIPE) || errors.Is(err, os.ErrClosed) || errors.Is(err, io.ErrClosedPipe) {
		return 128 + 13
	}
	return 1
}

// opts is the result of parsing a utility's options.
type opts struct {
	flags map[byte]int
	vals  map[byte][]string
	long  map[string][]string // "--name" or "--name=value": name → values ("" when none)
	args  []string
}

func (o *opts) has(f byte) bool { return o.flags[f] > 0 }

func (o *opts) val(f byte) (string, bool) {
	v := o.vals[f]
	if len(v) == 0 {
		return "", false
	}
	return v[len(v)-1], true
}

func (o *opts) hasLong(name string) bool { _, ok := o.long[name]; return ok }

func (o *opts) longVal(name string) (string, bool) {
	v, ok := o.long[name]
	if !ok || len(v) == 0 {
		return "", ok
	}
	return v[len(v)-1], true
}

// getopt parses args GNU-style: spec lists the short options, a ':' after a letter meaning it
// takes a value; longVal names the long options that take a value as the next argument.
// Options and operands may mix (unless stopAtOperand); "--" ends the options.
func getopt(args []string, spec string, stopAtOperand bool, longVal ...string) (*opts, error) {
	o := &opts{flags: map[byte]int{}, vals: map[byte][]string{}, long: map[string][]string{}}
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			o.args = append(o.args, args[i+1:]...)
			return o, nil
		case strings.HasPrefix(a, "--"):
			name, val, hasVal := strings.Cut(a[2:], "=")
			if !hasVal && slices.Contains(longVal, name) {
				if i+1 >= len(args) {
					return nil, fmt.Errorf("option '--%s' requires an argument", name)
				}
				i++
				val, hasVal = args[i], true
			}
			if hasVal {
				o.long[name] = append(o.long[name], val)
			} else {
				o.long[name] = append(o.long[name], "")
			}
		case len(a) > 1 && a[0] == '-':
			for j := 1; j < len(a); j++ {
				f := a[j]
				k := strings.IndexByte(spec, f)
				if k < 0 || f == ':' {
					return nil, fmt.Errorf("invalid option -- '%c'", f)
				}
				if k+1 < len(spec) && spec[k+1] == ':' {
					v := a[j+1:]
					if v == "" {
						if i+1 >= len(args) {
							return nil, fmt.Errorf("option requires an argument -- '%c'", f)
						}
						i++
						v = args[i]
					}
					o.vals[f] = append(o.vals[f], v)
					o.flags[f]++
					break
				}
				o.flags[f]++
			}
		default:
			if stopAtOperand {
				o.args = append(o.args, args[i:]...)
				return o, nil
			}
			o.args = append(o.args, a)
		}
	}
	return o, nil
}

// Signals, by number and name.
const (
	sigKILL = 9
	sigTERM = 15
)

var signals = []struct {
	num  int
	name string
}{
	{1, "HUP"}, {2, "INT"}, {3, "QUIT"}, {4, "ILL"}, {5, "TRAP"}, {6, "ABRT"}, {7, "BUS"},
	{8, "FPE"}, {9, "KILL"}, {10, "USR1"}, {11, "SEGV"}, {12, "USR2"}, {13, "PIPE"},
	{14, "ALRM"}, {15, "TERM"}, {17, "CHLD"}, {18, "CONT"}, {19, "STOP"}, {20, "TSTP"},
	{21, "TTIN"}, {22, "TTOU"}, {23, "URG"}, {28, "WINCH"},
}

func signalName(n int) string {
	for _, s := range signals {
		if s.num == n {
			return "SIG" + s.name
		}
	}
	return "SIG" + strconv.Itoa(n)
}

func parseSignal(s string) (int, bool) {
	if n, err := strconv.Atoi(s); err == nil {
		if n == 0 {
			return 0, true
		}
		for _, sg := range signals {
			if sg.num == n {
				return n, true
			}
		}
		return 0, false
	}
	s = strings.TrimPrefix(strings.ToUpper(s), "SIG")
	for _, sg := range signals {
		if sg.name == s {
			return sg.num, true
		}
	}
	return 0, false
}

// ignoredSignal reports whether a signal's default action does not end a process.
func ignoredSignal(n int) bool {
	switch n {
	case 17, 18, 19, 20, 21, 22, 23, 28:
		return true
	}
	return false
}

// builtinOverrides implement the builtins the call handler takes over.
var builtinOverrides = map[string]utilFunc{
	"kill":    utilKill,
	"type":    utilType,
	"which":   utilWhich,
	"command": utilCommandV,
	"pwd":     utilPwdP,
	"fail": func(c *cmd, args []string) int {
		c.name = "sh"
		c.errorf("%s", strings.Join(args, " "))
		return 1
	},
}

// utilKill sends signals to jobs of the sandbox's process table. Every signal that ends a
// process stops the whole job (a negative pid names the same job as its group).
func utilKill(c *cmd, args []string) int {
	sig := sigTERM
	if len(args) == 0 {
		return c.usage(2, "usage: kill [-s sigspec | -n signum | -sigspec] pid ... or kill -l [sigspec]")
	}
	switch a := args[0]; {
	case a == "-l" || a == "-L":
		if len(args) > 1 {
			for _, s := range args[1:] {
				if n, err := strconv.Atoi(s); err == nil {
					if n > 128 {
						n -= 128
					}
					fmt.Fprintln(c.out(), strings.TrimPrefix(signalName(n), "SIG"))
				} else if n, ok := parseSignal(s); ok {
					fmt.Fprintln(c.out(), n)
				} else {
					return c.usage(1, "%s: invalid signal specification", s)
				}
			}
			return 0
		}
		var names []string
		for _, s := range signals {
			names = append(names, s.name)
		}
		fmt.Fprintln(c.out(), strings.Join(names, " "))
		return 0
	case a == "-s" || a == "-n":
		if len(args) < 2 {
			return c.usage(2, "%s: option requires an argument", a)
		}
		n, ok := parseSignal(args[1])
		if !ok {
			return c.usage(1, "%s: invalid signal specification", args[1])
		}
		sig, args = n, args[2:]
	case a == "--":
		args = args[1:]
	case strings.HasPrefix(a, "-") && len(a) > 1:
		n, ok := parseSignal(a[1:])
		if !ok {
			return c.usage(1, "%s: invalid signal specification", a[1:])
		}
		sig, args = n, args[1:]
	}
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	if len(args) == 0 {
		return c.usage(2, "usage: kill [-s sigspec | -n signum | -sigspec] pid ...")
	}
	status := 0
	for _, a := range args {
		pid, err := strconv.Atoi(a)
		if err != nil {
			c.errorf("%s: arguments must be process or job IDs", a)
			status = 1
			continue
		}
		if pid < 0 {
			pid = -pid
		}
		j := c.sh.sb.lookupJob(pid)
		if j == nil || pid == 0 {
			c.errorf("(%s) - No such process", a)
			status = 1
			continue
		}
		if sig == 0 || ignoredSignal(sig) {
			continue
		}
		j.signal(sig)
	}
	return status
}

// resolveCommand says what running name would run: a keyword, a function, a builtin or a
// file, and for the last its path.
func (c *cmd) resolveCommand(name string) (kind, path string) {
	switch {
	case syntax.IsKeyword(name):
		return "keyword", ""
	case c.sh.isFunc(name):
		return "function", ""
	case strings.Contains(name, "/"):
		p := c.abs(name)
		if fi, err := c.fs().Stat(p, true); err == nil && fi.kind == kindFile && fi.mode.Perm()&0o111 != 0 {
			return "file", name
		}
		return "", ""
	case interp.IsBuiltin(name):
		return "builtin", ""
	}
	if p, _ := c.lookPath(name); p != "" {
		return "file", p
	}
	if isExternal(name) {
		return "file", "/usr/bin/" + name
	}
	return "", ""
}

func (c *cmd) externalPath(name string) string {
	if strings.Contains(name, "/") {
		_, p := c.resolveCommand(name)
		return p
	}
	if p, _ := c.lookPath(name); p != "" {
		return p
	}
	if isExternal(name) {
		return "/usr/bin/" + name
	}
	return ""
}

func utilType(c *cmd, args []string) int {
	mode := ""
	for len(args) > 0 && strings.HasPrefix(args[0], "-") {
		switch args[0] {
		case "-t", "-p", "-P":
			mode = args[0]
		case "--":
			args = args[1:]
			goto names
		default:
			return c.usage(2, "%s: invalid option", args[0])
		}
		args = args[1:]
	}
names:
	status := 0
	for _, name := range args {
		kind, p := c.resolveCommand(name)
		if mode == "-p" || mode == "-P" {
			if mode == "-P" && kind != "" && kind != "file" {
				p = c.externalPath(name)
			}
			if p == "" {
				status = 1
			} else if kind == "file" || mode == "-P" {
				fmt.Fprintln(c.out(), p)
			}
			continue
		}
		switch kind {
		case "":
			if mode != "-t" {
				c.errorf("%s: not found", name)
			}
			status = 1
		case "keyword":
			c.typeLine(mode, name, "keyword", name+" is a shell keyword")
		case "function":
			c.typeLine(mode, name, "function", name+" is a function")
		case "builtin":
			c.typeLine(mode, name, "builtin", name+" is a shell builtin")
		case "file":
			c.typeLine(mode, name, "file", name+" is "+p)
		}
	}
	return status
}

func (c *cmd) typeLine(mode, name, kind, long string) {
	if mode == "-t" {
		fmt.Fprintln(c.out(), kind)
		return
	}
	fmt.Fprintln(c.out(), long)
}

func utilCommandV(c *cmd, args []string) int {
	verbose := false
	for len(args) > 0 && strings.HasPrefix(args[0], "-") && args[0] != "-" {
		switch args[0] {
		case "-v":
		case "-V":
			verbose = true
		case "-p":
		case "--":
			args = args[1:]
			goto names
		default:
			return c.usage(2, "%s: invalid option", args[0])
		}
		args = args[1:]
	}
names:
	if verbose {
		c.name = "command"
		return utilType(c, args)
	}
	status := 0
	for _, name := range args {
		switch kind, p := c.resolveCommand(name); kind {
		case "":
			status = 1
		case "file":
			fmt.Fprintln(c.out(), p)
		default:
			fmt.Fprintln(c.out(), name)
		}
	}
	return status
}

func utilWhich(c *cmd, args []string) int {
	all := false
	var names []string
	for _, a := range args {
		if a == "-a" {
			all = true
			continue
		}
		names = append(names, a)
	}
	if len(names) == 0 {
		return 1
	}
	status := 0
	for _, name := range names {
		var found []string
		if strings.Contains(name, "/") {
			if p := c.externalPath(name); p != "" {
				found = append(found, p)
			}
		} else {
			for _, dir := range strings.Split(c.getenv("PATH"), ":") {
				if dir == "" {
					continue
				}
				p := c.abs(dir + "/" + name)
				if fi, err := c.fs().Stat(p, true); err == nil && fi.kind == kindFile && fi.mode.Perm()&0o111 != 0 {
					found = append(found, dir+"/"+name)
				}
			}
			if isExternal(name) && !slices.Contains(found, "/usr/bin/"+name) {
				found = append(found, "/usr/bin/"+name)
			}
		}
		if len(found) == 0 {
			status = 1
			continue
		}
		if !all {
			found = found[:1]
		}
		for _, p := range found {
			fmt.Fprintln(c.out(), p)
		}
	}
	return status
}

func utilPwdP(c *cmd, args []string) int {
	p, err := c.fs().RealPath(c.dir, true)
	if err != nil {
		return c.fsFail(c.dir, err)
	}
	fmt.Fprintln(c.out(), p)
	return 0
}

// cryptoRead fills p from the system's random source (for /dev/random and /dev/urandom).
func cryptoRead(p []byte) (int, error) { return rand.Read(p) }

func isNotExist(err error) bool { return errors.Is(err, fs.ErrNotExist) }

// readLines reads r into lines (without newlines) and reports whether the last line ended
// with a newline.
func readLines(data []byte) ([]string, bool) {
	if len(data) == 0 {
		return nil, true
	}
	s := string(data)
	nl := strings.HasSuffix(s, "\n")
	s = strings.TrimSuffix(s, "\n")
	return strings.Split(s, "\n"), nl
}

func nowTime() time.Time { return time.Now() }
