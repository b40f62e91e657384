package memory

import (
	"context"
	"errors"
	"io"
	"maps"
	"strings"
	"sync"
	"time"

	"github.com/tupper-dev/tupper/provider"
)

// killGrace is how long Exec waits for a cancelled command's interpreter to unwind before it
// returns anyway. Every utility honours its context, so this is rarely reached.
const killGrace = 2 * time.Second

// Exec runs req.Command in a fresh shell. See provider.Instance.
//
// Attached commands are registered in the process table too, so `kill` in another command
// reaches them; a command stopped that way returns 128+signal and the signal's name.
// Background jobs a script starts with & end with the script.
func (in *Instance) Exec(ctx context.Context, req provider.ExecRequest) (provider.ExecResult, error) {
	sb := in.sb
	if err := sb.use(); err != nil {
		return provider.ExecResult{}, err
	}
	if req.User != "" && req.User != "root" {
		return provider.ExecResult{}, provider.Errorf(provider.CodeUnsupported, "the memory provider runs every command as root; it cannot run as %q", req.User)
	}
	cwd := req.Cwd
	switch {
	case cwd == "":
		cwd = "/workspace"
	case !strings.HasPrefix(cwd, "/"):
		return provider.ExecResult{}, provider.Errorf(provider.CodeInvalidArgument, "cwd %q is not absolute", cwd)
	}
	if err := ctx.Err(); err != nil {
		return provider.ExecResult{}, ctxError(ctx)
	}
	env := sb.execEnv(req.Env)
	s := script{src: req.Command, name: "sh", dir: cwd, env: env}

	if req.Detach {
		j, jctx, err := sb.startJob(true)
		if err != nil {
			return provider.ExecResult{}, err
		}
		sh := newShell(sb, j)
		go func() {
			defer sb.endJob(j)
			sh.run(jctx, s)
		}()
		return provider.ExecResult{PID: j.pid}, nil
	}

	j, jctx, err := sb.startJob(false)
	if err != nil {
		return provider.ExecResult{}, err
	}
	defer sb.endJob(j)
	stop := context.AfterFunc(ctx, func() { j.cancel(context.Cause(ctx)) })
	defer stop()

	out := &outputs{}
	s.stdin = req.Stdin
	s.stdout = out.writer(req.Stdout)
	s.stderr = out.writer(req.Stderr)
	sh := newShell(sb, j)
	done := make(chan int, 1)
	go func() { done <- sh.run(jctx, s) }()
	var code int
	select {
	case code = <-done:
	case <-jctx.Done():
		select {
		case code = <-done:
		case <-time.After(killGrace):
			code = 128 + sigKILL
		}
	}
	out.close() // nothing reaches the caller's writers after Exec returns

	if ctx.Err() != nil {
		return provider.ExecResult{ExitCode: 128 + sigKILL, Signal: "SIGKILL"}, ctxError(ctx)
	}
	if sig := int(j.sig.Load()); sig != 0 {
		return provider.ExecResult{ExitCode: 128 + sig, Signal: signalName(sig)}, nil
	}
	if sb.ctx.Err() != nil {
		return provider.ExecResult{}, provider.Errorf(provider.CodeNotFound, "sandbox %q was destroyed while the command ran", sb.id)
	}
	return provider.ExecResult{ExitCode: code}, nil
}

func newShell(sb *sandbox, j *job) *shell {
	return &shell{sb: sb, job: j, funcs: map[string]bool{}}
}

// ctxError is the error Exec returns when its ctx ends first; it wraps ctx.Err().
func ctxError(ctx context.Context) error {
	err := ctx.Err()
	code := provider.CodeAborted
	if errors.Is(err, context.DeadlineExceeded) {
		code = provider.CodeTimeout
	}
	return &provider.Error{Code: code, Op: "exec", Message: "command stopped: " + err.Error(), Err: err}
}

// execEnv is the environment of a command: defaults, the sandbox's Env and Secrets, then
// the request's.
func (sb *sandbox) execEnv(extra map[string]string) map[string]string {
	env := map[string]string{
		"PATH":    defaultPath,
		"HOME":    "/root",
		"USER":    "root",
		"LOGNAME": "root",
		"SHELL":   "/bin/sh",
		"LANG":    "C.UTF-8",
	}
	maps.Copy(env, sb.env)
	maps.Copy(env, extra)
	return env
}

// outputs serialises a command's writes to the caller's writers (background jobs of a
// script write concurrently) and cuts them off once Exec has returned.
type outputs struct {
	mu     sync.Mutex
	closed bool
}

type gatedWriter struct {
	o *outputs
	w io.Writer
}

func (o *outputs) writer(w io.Writer) io.Writer {
	if w == nil {
		return nil
	}
	return &gatedWriter{o: o, w: w}
}

func (o *outputs) close() {
	o.mu.Lock()
	o.closed = true
	o.mu.Unlock()
}

func (g *gatedWriter) Write(p []byte) (int, error) {
	g.o.mu.Lock()
	defer g.o.mu.Unlock()
	if g.o.closed {
		return len(p), nil
	}
	return g.w.Write(p)
}
