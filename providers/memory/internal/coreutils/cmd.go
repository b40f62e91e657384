package coreutils

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"
)

// Errorf prints "NAME: message" on stderr.
func (c *Cmd) Errorf(format string, args ...any) {
	fmt.Fprintf(c.Stderr, c.Name+": "+format+"\n", args...)
}

// Out is stdout, io.Discard when there is none.
func (c *Cmd) Out() io.Writer {
	if c.Stdout == nil {
		return io.Discard
	}
	return c.Stdout
}

func (c *Cmd) errw() io.Writer {
	if c.Stderr == nil {
		return io.Discard
	}
	return c.Stderr
}

// Abs is p, relative to c's directory.
func (c *Cmd) Abs(p string) string { return AbsIn(c.Dir, p) }

// FSFail prints "NAME: 'PATH': reason" for a file system error and returns 1.
func (c *Cmd) FSFail(p string, err error) int {
	c.Errorf("%s: %s", displayName(p), ErrText(err))
	return 1
}

func displayName(p string) string {
	return "'" + p + "'"
}

// Usage reports a bad invocation and returns 2 (1 for utilities that use 1 for everything).
func (c *Cmd) Usage(code int, format string, args ...any) int {
	c.Errorf(format, args...)
	return code
}

// StdinReader returns stdin as a reader that stops when the command is cancelled.
func (c *Cmd) StdinReader() io.Reader {
	if c.Stdin == nil {
		return strings.NewReader("")
	}
	return ctxReader{c.Ctx, c.Stdin}
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
func (c *Cmd) open(name string) (io.Reader, error) {
	if name == "-" {
		return c.StdinReader(), nil
	}
	switch p := c.Abs(name); p {
	case "/dev/stdin", "/dev/fd/0":
		return c.StdinReader(), nil
	default:
		fi, err := c.FS.Stat(p, true)
		if err != nil {
			return nil, err
		}
		if fi.IsDir() {
			return nil, pathErr("read", name, errIsDir)
		}
		if fi.kind() == kindDevice {
			h, err := c.FS.Open(p, os.O_RDONLY, 0)
			if err != nil {
				return nil, err
			}
			return ctxReader{c.Ctx, h}, nil
		}
		data, err := c.FS.ReadFile(p)
		if err != nil {
			return nil, err
		}
		return strings.NewReader(string(data)), nil
	}
}

// readAll reads an input operand whole.
func (c *Cmd) readAll(name string) ([]byte, error) {
	if name != "-" {
		p := c.Abs(name)
		if fi, err := c.FS.Stat(p, true); err == nil && fi.kind() == kindFile {
			return c.FS.ReadFile(p)
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

// SlashPath converts a path the interpreter built with the host's separator back to a
// sandbox path (only Windows differs).
func SlashPath(p string) string {
	if runtime.GOOS == "windows" {
		p = strings.ReplaceAll(p, `\`, "/")
		if len(p) >= 2 && p[1] == ':' {
			p = p[2:]
		}
	}
	return p
}

// AbsIn joins p to dir unless it is absolute. It does not clean, so ".." is resolved
// physically by the file system, as a Unix kernel does.
func AbsIn(dir, p string) string {
	p = SlashPath(p)
	if strings.HasPrefix(p, "/") {
		return p
	}
	dir = SlashPath(dir)
	if dir == "/" {
		return "/" + p
	}
	return dir + "/" + p
}

// ErrText is the C library wording of a file system error.
func ErrText(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

func pathErr(op, p string, err error) error {
	return &fs.PathError{Op: op, Path: p, Err: err}
}

// errText is an error the utilities make themselves, worded as the C library words it.
type errText string

func (e errText) Error() string { return string(e) }

const (
	errIsDir  errText = "Is a directory"
	errNotDir errText = "Not a directory"
)

// sigTERM is the signal that ends a cancelled sleep.
const sigTERM = 15
