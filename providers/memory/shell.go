package memory

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"mvdan.cc/sh/v3/expand"
	"mvdan.cc/sh/v3/interp"
	"mvdan.cc/sh/v3/syntax"

	"github.com/tupper-dev/tupper/providers/memory/internal/coreutils"
)

// How commands run
//
// Every Exec parses its script with mvdan.cc/sh's parser and interprets it with a fresh
// interp.Runner whose handlers all point at the sandbox: opening, stat, directory reading and
// access checks go to the memory file system, and every command that is not a shell builtin
// goes to the exec handler, which runs a Go implementation of the utility (package
// coreutils, or the shell's own: see utilities) or a script file from the memory file system.
// The interpreter has a few paths that would touch the host; each is closed here:
//
//   - process substitution makes FIFOs in a host temporary directory: scripts using it are
//     rejected, and the interpreter's temporary directory is set to a path no host call can
//     open (it holds a NUL byte), which also disarms its FIFO short-cut in redirections;
//   - `type`, `command -v`, `source` and `pwd -P` look at host paths: the call handler
//     replaces them with versions that look in the memory file system;
//   - `kill` is not implemented by the interpreter: the call handler routes it to the
//     sandbox's process table;
//   - the working directory, HOME, UID, EUID and GID would default to the host's: all are set.
//
// The interpreter uses OS pipes (not files) for pipelines, here-documents and stdin.

// defaultPath is the PATH of every command.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// internal is the prefix of the names the call handler rewrites builtins to. A NUL byte cannot
// appear in a word a script spells out, so no script can call these names by accident.
const internal = "\x00"

// noHostTempDir is the interpreter's temporary directory: absolute, so the interpreter does
// not fall back to the host's, and holding a NUL byte, so no host call can open anything in it.
var noHostTempDir = func() string {
	if runtime.GOOS == "windows" {
		return "C:\\\x00tupper-memory"
	}
	return "/\x00tupper-memory"
}()

// environ is a shell environment: exported string variables, plus UID, EUID and GID, which
// the interpreter would otherwise take from the host process.
type environ struct {
	vars map[string]string
	// resetting is set while the runner is reset, when it reads TMPDIR for its own use.
	resetting atomic.Bool
}

func newEnviron(vars map[string]string) *environ { return &environ{vars: vars} }

func (e *environ) Get(name string) expand.Variable {
	if name == "TMPDIR" && e.resetting.Load() {
		return expand.Variable{Set: true, Kind: expand.String, Str: noHostTempDir}
	}
	if v, ok := e.vars[name]; ok {
		return expand.Variable{Set: true, Exported: true, Kind: expand.String, Str: v}
	}
	switch name {
	case "UID", "EUID", "GID":
		return expand.Variable{Set: true, ReadOnly: true, Kind: expand.String, Str: "0"}
	}
	return expand.Variable{}
}

func (e *environ) Each(fn func(name string, vr expand.Variable) bool) {
	for _, name := range slices.Sorted(maps.Keys(e.vars)) {
		if !fn(name, e.Get(name)) {
			return
		}
	}
}

// exported returns the exported string variables of env.
func exported(env expand.Environ) map[string]string {
	out := map[string]string{}
	env.Each(func(name string, vr expand.Variable) bool {
		if vr.Exported && vr.IsSet() && vr.Kind == expand.String {
			out[name] = vr.Str
		} else if !vr.IsSet() {
			delete(out, name)
		}
		return true
	})
	return out
}

// job is a running command in the sandbox's process table: an Exec, attached or detached.
// Its pid is also its process group id; everything its script runs belongs to it.
type job struct {
	pid      int
	detached bool
	cancel   context.CancelCauseFunc
	sig      atomic.Int32 // the signal that stopped it, 0 if none
}

var errKilled = errors.New("killed by a signal")

// signal stops the job, recording sig (the first signal wins).
func (j *job) signal(sig int) {
	j.sig.CompareAndSwap(0, int32(sig))
	j.cancel(errKilled)
}

// startJob registers a job whose context derives from the sandbox's.
func (sb *sandbox) startJob(detached bool) (*job, context.Context, error) {
	ctx, cancel := context.WithCancelCause(sb.ctx)
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if sb.stopped {
		cancel(nil)
		return nil, nil, notFound(sb.id)
	}
	j := &job{pid: sb.nextPID, detached: detached, cancel: cancel}
	sb.nextPID++
	sb.procs[j.pid] = j
	sb.lastUse = nowTime()
	return j, ctx, nil
}

func (sb *sandbox) endJob(j *job) {
	j.cancel(nil)
	sb.mu.Lock()
	delete(sb.procs, j.pid)
	sb.lastUse = nowTime()
	sb.mu.Unlock()
}

func (sb *sandbox) lookupJob(pid int) *job {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	return sb.procs[pid]
}

// shell is the interpreter state shared by one job and the shells it starts.
type shell struct {
	sb  *sandbox
	job *job

	mu    sync.Mutex
	funcs map[string]bool // names of functions declared by scripts of this job
}

// script is one program to interpret.
type script struct {
	src    string
	name   string   // $0
	params []string // $1...
	opts   []string // shell options, e.g. "-e"
	dir    string
	env    map[string]string
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
}

// run interprets s and returns its exit status.
func (sh *shell) run(ctx context.Context, s script) int {
	if fi, err := sh.sb.fs.Stat(s.dir, true); err != nil || !fi.IsDir() {
		reason := "No such file or directory"
		if err == nil {
			reason = "Not a directory"
		} else if errors.Is(err, errNotDir) {
			reason = errNotDir.msg
		}
		fmt.Fprintf(s.stderr, "sh: cd: %s: %s\n", s.dir, reason)
		return 1
	}
	file, err := parseScript(s.src, s.name)
	if err != nil {
		fmt.Fprintf(s.stderr, "sh: %v\n", err)
		return 2
	}
	if err := sh.prepare(file); err != nil {
		fmt.Fprintf(s.stderr, "sh: %v\n", err)
		return 2
	}
	return sh.runNode(ctx, file, s)
}

// runArgv runs one simple command, the way env and find -exec start theirs.
func (sh *shell) runArgv(ctx context.Context, argv []string, s script) int {
	call := &syntax.CallExpr{}
	for _, a := range argv {
		call.Args = append(call.Args, &syntax.Word{Parts: []syntax.WordPart{&syntax.SglQuoted{Value: a}}})
	}
	return sh.runNode(ctx, call, s)
}

func (sh *shell) runNode(ctx context.Context, node syntax.Node, s script) int {
	env := map[string]string{}
	maps.Copy(env, s.env)
	if _, isFile := node.(*syntax.File); isFile {
		env["PWD"] = s.dir
	}
	e := newEnviron(env)
	params := slices.Clone(s.opts)
	params = append(params, "--")
	params = append(params, s.params...)
	r, err := interp.New(
		interp.Env(e),
		func(r *interp.Runner) error { r.Dir = s.dir; return nil }, // interp.Dir would stat the host
		interp.StdIO(nil, s.stdout, s.stderr),
		interp.Params(params...),
		interp.OpenHandler(sh.open),
		interp.StatHandler(sh.stat),
		interp.ReadDirHandler2(sh.readDir),
		interp.AccessHandler(sh.access),
		interp.CallHandler(sh.call),
		interp.ExecHandlers(func(interp.ExecHandlerFunc) interp.ExecHandlerFunc { return sh.exec }),
	)
	if err != nil {
		fmt.Fprintf(s.stderr, "sh: %v\n", err)
		return 2
	}
	var stdin *os.File
	if s.stdin != nil {
		if f, ok := s.stdin.(*os.File); ok {
			stdin = f
		} else {
			pr, pw, err := os.Pipe()
			if err != nil {
				fmt.Fprintf(s.stderr, "sh: %v\n", err)
				return 2
			}
			go func() {
				io.Copy(pw, s.stdin)
				pw.Close()
			}()
			defer pr.Close()
			stdin = pr
		}
		if err := interp.StdIO(stdin, s.stdout, s.stderr)(r); err != nil {
			fmt.Fprintf(s.stderr, "sh: %v\n", err)
			return 2
		}
	}
	e.resetting.Store(true)
	r.Reset()
	e.resetting.Store(false)
	if f, ok := node.(*syntax.File); ok && s.name != "" {
		f.Name = s.name
	}
	err = r.Run(ctx, node)
	return sh.exitCode(ctx, err, s.stderr)
}

// exitCode turns the interpreter's result into an exit status.
func (sh *shell) exitCode(ctx context.Context, err error, stderr io.Writer) int {
	if err == nil {
		return 0
	}
	var st interp.ExitStatus
	if errors.As(err, &st) {
		return int(st)
	}
	if ctx.Err() != nil {
		if sig := sh.job.sig.Load(); sig != 0 {
			return 128 + int(sig)
		}
		return 128 + sigKILL
	}
	fmt.Fprintf(stderr, "sh: %v\n", err)
	return 1
}

// crSentinel stands for a carriage return while a script is parsed: the parser drops a CR
// before a newline even inside quotes, where bash keeps it.
const crSentinel = "\U0010FFFD"

// parseScript parses src, keeping every carriage return as bash does.
func parseScript(src, name string) (*syntax.File, error) {
	protect := strings.Contains(src, "\r\n") && !strings.Contains(src, crSentinel)
	if protect {
		src = strings.ReplaceAll(src, "\r", crSentinel)
	}
	file, err := syntax.NewParser().Parse(strings.NewReader(src), name)
	if err != nil || !protect {
		return file, err
	}
	syntax.Walk(file, func(n syntax.Node) bool {
		switch n := n.(type) {
		case *syntax.Lit:
			n.Value = strings.ReplaceAll(n.Value, crSentinel, "\r")
		case *syntax.SglQuoted:
			n.Value = strings.ReplaceAll(n.Value, crSentinel, "\r")
		}
		return true
	})
	return file, nil
}

// prepare checks a parsed program and adapts it to the sandbox: it rejects process
// substitution, replaces $$ with the job's pid and records declared function names.
func (sh *shell) prepare(node syntax.Node) error {
	var bad error
	pid := strconv.Itoa(sh.job.pid)
	replace := func(parts []syntax.WordPart) {
		for i, p := range parts {
			if pe, ok := p.(*syntax.ParamExp); ok && isDollarDollar(pe) {
				parts[i] = &syntax.Lit{ValuePos: pe.Pos(), ValueEnd: pe.End(), Value: pid}
			}
		}
	}
	syntax.Walk(node, func(n syntax.Node) bool {
		switch n := n.(type) {
		case *syntax.ProcSubst:
			bad = errors.New("process substitution is not supported by the memory provider")
		case *syntax.Word:
			replace(n.Parts)
		case *syntax.DblQuoted:
			replace(n.Parts)
		case *syntax.FuncDecl:
			if n.Name != nil {
				sh.mu.Lock()
				sh.funcs[n.Name.Value] = true
				sh.mu.Unlock()
			}
		}
		return bad == nil
	})
	return bad
}

func isDollarDollar(pe *syntax.ParamExp) bool {
	return pe.Param != nil && pe.Param.Value == "$" && !pe.Excl && !pe.Length && !pe.Width &&
		pe.Index == nil && pe.Slice == nil && pe.Repl == nil && pe.Exp == nil && pe.NestedParam == nil
}

func (sh *shell) isFunc(name string) bool {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.funcs[name]
}

// nopCloser adds a no-op Close to a reader or writer for /dev/std*.
type nopCloser struct {
	io.Reader
	io.Writer
}

func (nopCloser) Close() error { return nil }

func (sh *shell) open(ctx context.Context, p string, flag int, perm os.FileMode) (io.ReadWriteCloser, error) {
	hc := interp.HandlerCtx(ctx)
	abs := coreutils.AbsIn(hc.Dir, p)
	switch abs {
	case "/dev/stdin", "/dev/fd/0":
		if hc.Stdin == nil {
			return nopCloser{Reader: strings.NewReader("")}, nil
		}
		return nopCloser{Reader: hc.Stdin}, nil
	case "/dev/stdout", "/dev/fd/1":
		return nopCloser{Writer: hc.Stdout}, nil
	case "/dev/stderr", "/dev/fd/2":
		return nopCloser{Writer: hc.Stderr}, nil
	}
	h, err := sh.sb.fs.Open(abs, flag, uint32(perm.Perm()))
	if err != nil {
		return nil, pathErrAs(p, err)
	}
	return h, nil
}

// pathErrAs re-labels a file system error with the path the script used.
func pathErrAs(p string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return &fs.PathError{Op: pe.Op, Path: p, Err: pe.Err}
	}
	return err
}

func (sh *shell) stat(ctx context.Context, name string, follow bool) (fs.FileInfo, error) {
	fi, err := sh.sb.fs.Stat(coreutils.SlashPath(name), follow)
	if err != nil {
		return nil, err
	}
	return fi, nil
}

func (sh *shell) readDir(ctx context.Context, p string) ([]fs.DirEntry, error) {
	entries, err := sh.sb.fs.ReadDir(coreutils.SlashPath(p))
	if err != nil {
		return nil, err
	}
	out := make([]fs.DirEntry, len(entries))
	for i, e := range entries {
		out[i] = e
	}
	return out, nil
}

func (sh *shell) access(ctx context.Context, p string, mode interp.AccessMode) error {
	fi, err := sh.sb.fs.Stat(coreutils.SlashPath(p), true)
	if err != nil {
		return err
	}
	// Everything runs as root: reading and writing are always allowed, executing needs an
	// execute bit (or a directory).
	if mode&interp.AccessExec != 0 && !fi.IsDir() && fi.mode.Perm()&0o111 == 0 {
		return pathErr("access", p, errPerm)
	}
	return nil
}

// call rewrites the builtins that would look at the host or that the interpreter lacks.
func (sh *shell) call(ctx context.Context, args []string) ([]string, error) {
	switch args[0] {
	case "kill", "type", "which":
		return append([]string{internal + args[0]}, args[1:]...), nil
	case "command":
		if len(args) > 1 && (args[1] == "-v" || args[1] == "-V") {
			return append([]string{internal + "command"}, args[1:]...), nil
		}
	case "pwd":
		if slices.Contains(args[1:], "-P") {
			return []string{internal + "pwd", "-P"}, nil
		}
	case "source", ".":
		return sh.source(ctx, args)
	case "eval":
		src := strings.Join(args[1:], " ")
		if file, err := syntax.NewParser().Parse(strings.NewReader(src), ""); err == nil {
			if err := sh.prepare(file); err != nil {
				return []string{internal + "fail", "eval: " + err.Error()}, nil
			}
		}
	}
	return args, nil
}

// source reads the script from the memory file system and hands it to eval.
func (sh *shell) source(ctx context.Context, args []string) ([]string, error) {
	hc := interp.HandlerCtx(ctx)
	if len(args) < 2 {
		return []string{internal + "fail", args[0] + ": filename argument required"}, nil
	}
	name := args[1]
	p := coreutils.AbsIn(hc.Dir, name)
	if !strings.Contains(name, "/") {
		for _, dir := range strings.Split(hc.Env.Get("PATH").String(), ":") {
			if dir == "" {
				continue
			}
			if fi, err := sh.sb.fs.Stat(coreutils.AbsIn(hc.Dir, dir+"/"+name), true); err == nil && fi.kind == kindFile {
				p = coreutils.AbsIn(hc.Dir, dir+"/"+name)
				break
			}
		}
	}
	data, err := sh.sb.fs.ReadFile(p)
	if err != nil {
		return []string{internal + "fail", args[0] + ": " + name + ": " + coreutils.ErrText(err)}, nil
	}
	file, err := syntax.NewParser().Parse(strings.NewReader(string(data)), name)
	if err != nil {
		return []string{internal + "fail", args[0] + ": " + err.Error()}, nil
	}
	if err := sh.prepare(file); err != nil {
		return []string{internal + "fail", args[0] + ": " + err.Error()}, nil
	}
	return []string{"eval", string(data)}, nil
}

// exec runs every command that is not a function or a builtin.
func (sh *shell) exec(ctx context.Context, args []string) error {
	hc := interp.HandlerCtx(ctx)
	c := &cmd{
		Cmd: coreutils.Cmd{
			Ctx:    ctx,
			FS:     utilFS{sh.sb.fs},
			Name:   args[0],
			Dir:    coreutils.SlashPath(hc.Dir),
			Stdin:  hc.Stdin,
			Stdout: hc.Stdout,
			Stderr: hc.Stderr,
		},
		sh:  sh,
		env: hc.Env,
	}
	c.Exec = func(argv []string, dir string) int {
		s := c.script()
		s.dir = dir
		return sh.runArgv(ctx, argv, s)
	}
	code := c.dispatch(args)
	if code != 0 {
		return interp.ExitStatus(uint8(code))
	}
	return nil
}

// dispatch finds and runs args[0].
func (c *cmd) dispatch(args []string) int {
	name := args[0]
	if strings.HasPrefix(name, internal) {
		c.Name = strings.TrimPrefix(name, internal)
		return builtinOverrides[c.Name](c, args[1:])
	}
	if strings.Contains(name, "/") {
		p := c.Abs(name)
		fi, err := c.sh.sb.fs.Stat(p, true)
		if err == nil {
			return c.runFile(p, fi, args)
		}
		// /bin/ls and the like name the built-in utilities.
		if dir, base := splitDirBase(name); slices.Contains(strings.Split(defaultPath, ":"), dir) && isExternal(base) {
			return c.runUtility(base, args[1:])
		}
		c.Name = "sh"
		c.Errorf("%s: %s", name, coreutils.ErrText(err))
		if errors.Is(err, errNotExist) {
			return 127
		}
		return 126
	}
	if p, fi := c.lookPath(name); fi != nil {
		return c.runFile(p, fi, args)
	}
	if isExternal(name) {
		return c.runUtility(name, args[1:])
	}
	c.Name = "sh"
	c.Errorf("%s: command not found", name)
	return 127
}

// runUtility runs a built-in utility, or an interpreter builtin when it is one of those
// (echo, printf, test, …) reached through env or a path like /bin/echo.
func (c *cmd) runUtility(name string, args []string) int {
	if u := utilities[name]; u != nil {
		c.Name = name
		return u(c, args)
	}
	if code, ok := coreutils.Run(&c.Cmd, name, args); ok {
		return code
	}
	return c.sh.runArgv(c.Ctx, append([]string{name}, args...), c.script())
}

// script returns a script template that inherits c's directory, environment and streams.
func (c *cmd) script() script {
	return script{
		name:   "sh",
		dir:    c.Dir,
		env:    exported(c.env),
		stdin:  c.Stdin,
		stdout: c.Stdout,
		stderr: c.Stderr,
	}
}

// lookPath searches PATH in the memory file system for an executable regular file.
func (c *cmd) lookPath(name string) (string, *fileInfo) {
	for _, dir := range strings.Split(c.getenv("PATH"), ":") {
		if dir == "" {
			dir = "."
		}
		p := c.Abs(dir + "/" + name)
		if fi, err := c.sh.sb.fs.Stat(p, true); err == nil && fi.kind == kindFile && fi.mode.Perm()&0o111 != 0 {
			return p, fi
		}
	}
	return "", nil
}

// runFile runs a script file: a shell script, with or without a #! line naming a shell.
func (c *cmd) runFile(p string, fi *fileInfo, args []string) int {
	c.Name = "sh"
	switch {
	case fi.IsDir():
		c.Errorf("%s: Is a directory", args[0])
		return 126
	case fi.kind != kindFile || fi.mode.Perm()&0o111 == 0:
		c.Errorf("%s: Permission denied", args[0])
		return 126
	}
	data, err := c.sh.sb.fs.ReadFile(p)
	if err != nil {
		c.Errorf("%s: %s", args[0], coreutils.ErrText(err))
		return 126
	}
	src := string(data)
	opts := []string(nil)
	if strings.HasPrefix(src, "#!") {
		line, _, _ := strings.Cut(src[2:], "\n")
		fields := strings.Fields(line)
		if len(fields) > 0 && (fields[0] == "/usr/bin/env" || fields[0] == "/bin/env") {
			fields = fields[1:]
		}
		interpName := ""
		if len(fields) > 0 {
			_, interpName = splitDirBase(fields[0])
		}
		switch interpName {
		case "sh", "bash", "dash", "ash":
			for _, f := range fields[1:] {
				if strings.HasPrefix(f, "-") || strings.HasPrefix(f, "+") {
					opts = append(opts, f)
				}
			}
		default:
			c.Errorf("%s: %s: bad interpreter: No such file or directory", args[0], strings.TrimSpace(line))
			return 126
		}
	}
	s := c.script()
	s.src, s.name, s.params, s.opts = src, args[0], args[1:], opts
	return c.sh.run(c.Ctx, s)
}

func splitDirBase(p string) (string, string) {
	i := strings.LastIndex(p, "/")
	if i < 0 {
		return "", p
	}
	dir := p[:i]
	if dir == "" {
		dir = "/"
	}
	return dir, p[i+1:]
}
