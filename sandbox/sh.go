package sandbox

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"strings"
	"time"
)

// Quote returns s as one shell word: single-quoted, with embedded single quotes written as
// '\”. The shell reads it back as exactly s, whatever s holds.
func Quote(s string) string {
	if s == "" {
		return "''"
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == '-' || c == '_' || c == '.' || c == '/' || c == ',' || c == ':' || c == '@' || c == '+') {
			// Anything else (spaces, quotes, $, `, \, globs, ~, =, …) needs quotes.
			return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
		}
	}
	return s
}

// Cmd is a shell command built by Sh, with its run options. Chain Cwd, Env and Timeout; run it
// with Run or Stream (a Cmd from Sandbox.Sh) or with Sandbox.RunCmd.
type Cmd struct {
	box    *Sandbox
	script string
	err    error
	opts   RunOptions
}

// Sh formats a command like fmt.Sprintf, but every argument becomes exactly one shell word:
// it is formatted with its verb and then quoted with Quote. A slice or array argument becomes
// one quoted word per element, separated by spaces. It is the Go form of the $ tag:
//
//	sandbox.Sh("grep -rn %s %s", userQuery, dir)   // no argument can escape its quotes
//
// %% is a literal percent sign. An argument holding a NUL byte cannot be passed to a shell;
// running such a Cmd fails with CodeInvalidArgument.
func Sh(format string, args ...any) *Cmd {
	script, err := shFormat(format, args)
	return &Cmd{script: script, err: err}
}

// Sh is the package-level Sh bound to this sandbox, so the result runs with Run or Stream.
func (b *Sandbox) Sh(format string, args ...any) *Cmd {
	c := Sh(format, args...)
	c.box = b
	return c
}

// String returns the shell script.
func (c *Cmd) String() string { return c.script }

// Err returns the formatting error, if any.
func (c *Cmd) Err() error { return c.err }

// Cwd sets the working directory.
func (c *Cmd) Cwd(dir string) *Cmd { n := c.clone(); n.opts.Cwd = dir; return n }

// Env adds environment variables.
func (c *Cmd) Env(env map[string]string) *Cmd {
	n := c.clone()
	if n.opts.Env == nil {
		n.opts.Env = map[string]string{}
	}
	maps.Copy(n.opts.Env, env)
	return n
}

// Timeout sets the timeout.
func (c *Cmd) Timeout(d time.Duration) *Cmd { n := c.clone(); n.opts.Timeout = d; return n }

// Options returns the run options gathered so far.
func (c *Cmd) Options() RunOptions { return c.opts }

func (c *Cmd) clone() *Cmd {
	n := *c
	n.opts.Env = maps.Clone(c.opts.Env)
	return &n
}

// Run runs the command on the sandbox it was made from (Sandbox.Sh).
func (c *Cmd) Run(ctx context.Context) (*RunResult, error) { return c.Stream(ctx).Wait() }

// Stream starts the command on the sandbox it was made from (Sandbox.Sh).
func (c *Cmd) Stream(ctx context.Context) *RunHandle {
	if c.box == nil {
		h := newRunHandle()
		h.finish(nil, errorf(CodeInvalidArgument, "run", "command was not made with Sandbox.Sh; use Sandbox.RunCmd"))
		return h
	}
	return c.box.StreamCmd(ctx, c)
}

// RunCmd runs a command made with Sh.
func (b *Sandbox) RunCmd(ctx context.Context, c *Cmd) (*RunResult, error) {
	return b.StreamCmd(ctx, c).Wait()
}

// StreamCmd starts a command made with Sh.
func (b *Sandbox) StreamCmd(ctx context.Context, c *Cmd) *RunHandle {
	if c.err != nil {
		h := newRunHandle()
		h.finish(nil, c.err)
		return h
	}
	return b.Stream(ctx, c.script, c.opts)
}

// shFormat implements Sh: it walks format, and for each verb formats the next argument with
// that verb and quotes the result.
func shFormat(format string, args []any) (string, error) {
	var b strings.Builder
	argi := 0
	for i := 0; i < len(format); i++ {
		c := format[i]
		if c != '%' {
			b.WriteByte(c)
			continue
		}
		if i+1 < len(format) && format[i+1] == '%' {
			b.WriteByte('%')
			i++
			continue
		}
		// A verb: flags, width, precision, then the verb letter.
		j := i + 1
		for j < len(format) && strings.IndexByte("+-# 0123456789.", format[j]) >= 0 {
			j++
		}
		if j >= len(format) {
			return "", errorf(CodeInvalidArgument, "sh", "format ends inside a verb")
		}
		verb := format[i : j+1]
		i = j
		if argi >= len(args) {
			return "", errorf(CodeInvalidArgument, "sh", "format has more verbs than arguments")
		}
		arg := args[argi]
		argi++
		words, err := shWords(verb, arg)
		if err != nil {
			return "", err
		}
		b.WriteString(words)
	}
	if argi < len(args) {
		return "", errorf(CodeInvalidArgument, "sh", "format has %d verbs for %d arguments", argi, len(args))
	}
	return b.String(), nil
}

func shWords(verb string, arg any) (string, error) {
	v := reflect.ValueOf(arg)
	if arg != nil && (v.Kind() == reflect.Slice || v.Kind() == reflect.Array) && v.Type().Elem().Kind() != reflect.Uint8 {
		parts := make([]string, v.Len())
		for k := range parts {
			s := fmt.Sprintf(verb, v.Index(k).Interface())
			if containsNUL(s) {
				return "", errorf(CodeInvalidArgument, "sh", "argument contains a NUL byte")
			}
			parts[k] = Quote(s)
		}
		if len(parts) == 0 {
			return "", nil
		}
		return strings.Join(parts, " "), nil
	}
	if b, ok := arg.([]byte); ok {
		arg = string(b)
	}
	s := fmt.Sprintf(verb, arg)
	if containsNUL(s) {
		return "", errorf(CodeInvalidArgument, "sh", "argument contains a NUL byte")
	}
	return Quote(s), nil
}
