package sandbox

import (
	"bytes"
	"context"
	"errors"
	"io"
	"iter"
	"maps"
	"path"
	"sync"
	"time"

	"github.com/tupper-dev/tupper/provider"
)

// envSDKRun marks every command and background process the SDK starts, so Reap can tell a
// busy sandbox from an idle one.
const envSDKRun = "SANDBOX_SDK_RUN"

// nonInteractive is the environment every SDK command gets, so nothing waits for a person:
// no pager, no prompts for git, apt, pip or npm. RunOptions.Env overrides it.
var nonInteractive = map[string]string{
	"DEBIAN_FRONTEND":     "noninteractive",
	"GIT_TERMINAL_PROMPT": "0",
	"GIT_PAGER":           "cat",
	"PAGER":               "cat",
	"TERM":                "dumb",
	"PIP_NO_INPUT":        "1",
	"npm_config_yes":      "true",
	"GCM_INTERACTIVE":     "never",
	envSDKRun:             "1",
}

// Stream names.
const (
	Stdout = "stdout"
	Stderr = "stderr"
)

// Chunk is a piece of a command's output, already redacted.
type Chunk struct {
	Stream string // Stdout or Stderr
	Text   string
}

// RunResult is how a command ended. A non-zero exit, a timeout and a cancellation are all
// results: check OK.
type RunResult struct {
	OK       bool          // exit code 0, not timed out, not aborted
	ExitCode int           // -1 when the command did not exit by itself (timeout, abort)
	Stdout   string        // up to MaxOutputBytes, redacted
	Stderr   string        // up to MaxOutputBytes, redacted
	Output   string        // stdout and stderr interleaved as they arrived, up to twice MaxOutputBytes
	Duration time.Duration // wall time
	// Truncated is true when a stream went past MaxOutputBytes; the rest was discarded.
	Truncated bool
	TimedOut  bool   // killed, with its process group, at the timeout
	Aborted   bool   // the caller's ctx ended first; the command was killed
	Signal    string // the signal that ended it, if any
	// OOMKilled is set when the kernel's OOM killer ended it: the sandbox reached its memory
	// limit (ExitCode 137, Signal SIGKILL). See docs/sandboxes.md.
	OOMKilled bool
	Cwd       string // the absolute working directory
	Command   string // the command, redacted
}

// RunHandle is a running command: range over Chunks for output as it arrives, and Wait for
// the result. Chunks need not be consumed; they are kept (up to the output cap) for late
// readers.
type RunHandle struct {
	mu     sync.Mutex
	cond   *sync.Cond
	chunks []Chunk
	done   bool
	res    *RunResult
	err    error
}

func newRunHandle() *RunHandle {
	h := &RunHandle{}
	h.cond = sync.NewCond(&h.mu)
	return h
}

// Chunks yields the command's output chunks in order, from the first, until the command
// ends. It may be called more than once, each time from the start.
func (h *RunHandle) Chunks() iter.Seq[Chunk] {
	return func(yield func(Chunk) bool) {
		i := 0
		for {
			h.mu.Lock()
			for i >= len(h.chunks) && !h.done {
				h.cond.Wait()
			}
			if i >= len(h.chunks) {
				h.mu.Unlock()
				return
			}
			c := h.chunks[i]
			i++
			h.mu.Unlock()
			if !yield(c) {
				return
			}
		}
	}
}

// Wait blocks until the command ends and returns its result.
func (h *RunHandle) Wait() (*RunResult, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for !h.done {
		h.cond.Wait()
	}
	return h.res, h.err
}

func (h *RunHandle) emit(c Chunk) {
	h.mu.Lock()
	h.chunks = append(h.chunks, c)
	h.mu.Unlock()
	h.cond.Broadcast()
}

func (h *RunHandle) finish(res *RunResult, err error) {
	h.mu.Lock()
	h.res, h.err, h.done = res, err, true
	h.mu.Unlock()
	h.cond.Broadcast()
}

// Run runs command with /bin/sh -c in a fresh shell and returns its result. See RunOptions for
// the defaults.
func (b *Sandbox) Run(ctx context.Context, command string, opts RunOptions) (*RunResult, error) {
	return b.Stream(ctx, command, opts).Wait()
}

// Stream starts command and returns at once; the handle streams its output.
func (b *Sandbox) Stream(ctx context.Context, command string, opts RunOptions) *RunHandle {
	return b.streamWith(ctx, command, opts, b.red)
}

func (b *Sandbox) streamWith(ctx context.Context, command string, opts RunOptions, red *redactor) *RunHandle {
	h := newRunHandle()
	if err := opts.validate("run"); err != nil {
		h.finish(nil, err)
		return h
	}
	if containsNUL(command) {
		h.finish(nil, errorf(CodeInvalidArgument, "run", "command contains a NUL byte"))
		return h
	}
	if err := b.ensureSecrets(ctx); err != nil {
		h.finish(nil, err)
		return h
	}
	go b.run(ctx, command, opts, h, red)
	return h
}

// resolvePath makes p absolute against the sandbox's working directory (b.Workdir: the
// template's, else /workspace) and cleans it; "" is that directory.
func (b *Sandbox) resolvePath(p string) string {
	if p == "" {
		return b.Workdir
	}
	if !path.IsAbs(p) {
		p = path.Join(b.Workdir, p)
	}
	return path.Clean(p)
}

// outputCollector applies redaction and the cap to one command's two streams.
type outputCollector struct {
	mu        sync.Mutex
	h         *RunHandle
	limit     int
	stdout    bytes.Buffer
	stderr    bytes.Buffer
	output    bytes.Buffer
	truncated bool
	red       map[string]*streamRedactor
}

func (c *outputCollector) writer(stream string) io.Writer {
	return writerFunc(func(p []byte) (int, error) {
		c.mu.Lock()
		clean := c.red[stream].write(p)
		c.add(stream, clean)
		c.mu.Unlock()
		return len(p), nil
	})
}

// add appends clean bytes to stream; callers hold c.mu.
func (c *outputCollector) add(stream string, clean []byte) {
	if len(clean) == 0 {
		return
	}
	buf := &c.stdout
	if stream == Stderr {
		buf = &c.stderr
	}
	room := c.limit - buf.Len()
	if room <= 0 {
		c.truncated = true
		return
	}
	if len(clean) > room {
		clean = clean[:room]
		c.truncated = true
	}
	buf.Write(clean)
	c.output.Write(clean)
	if c.h != nil {
		c.h.emit(Chunk{Stream: stream, Text: string(clean)})
	}
}

func (c *outputCollector) flush() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range []string{Stdout, Stderr} {
		c.add(s, c.red[s].flush())
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func (b *Sandbox) run(ctx context.Context, command string, opts RunOptions, h *RunHandle, red *redactor) {
	timeout := opts.Timeout
	if timeout == 0 {
		timeout = DefaultRunTimeout
	}
	limit := opts.MaxOutputBytes
	if limit == 0 {
		limit = DefaultMaxOutputBytes
	}
	cwd := b.resolvePath(opts.Cwd)
	env := maps.Clone(nonInteractive)
	maps.Copy(env, opts.Env)
	env[envSDKRun] = "1"

	col := &outputCollector{h: h, limit: limit, red: map[string]*streamRedactor{
		Stdout: red.stream(), Stderr: red.stream(),
	}}
	var stdin io.Reader
	if opts.Stdin != nil {
		stdin = bytes.NewReader(opts.Stdin)
	} else if opts.StdinReader != nil {
		stdin = opts.StdinReader
	}

	runCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	res, err := b.inst.Exec(runCtx, provider.ExecRequest{
		Command: command,
		Cwd:     cwd,
		Env:     env,
		Stdin:   stdin,
		Stdout:  col.writer(Stdout),
		Stderr:  col.writer(Stderr),
	})
	dur := time.Since(start)
	col.flush()

	out := &RunResult{
		ExitCode:  res.ExitCode,
		Signal:    res.Signal,
		OOMKilled: res.OOMKilled,
		Duration:  dur,
		Cwd:       cwd,
		Command:   red.String(command),
	}
	if err != nil {
		switch {
		case ctx.Err() != nil:
			out.Aborted = true
			out.ExitCode = -1
		case runCtx.Err() != nil:
			out.TimedOut = true
			out.ExitCode = -1
		default:
			h.finish(nil, red.Err(wrapProvider(err, "run")))
			return
		}
	}
	col.mu.Lock()
	out.Stdout = col.stdout.String()
	out.Stderr = col.stderr.String()
	out.Output = col.output.String()
	out.Truncated = col.truncated
	col.mu.Unlock()
	out.OK = err == nil && out.ExitCode == 0
	h.finish(out, nil)
}

// errAs is errors.As for *Error.
func errAs(err error) (*Error, bool) {
	var e *Error
	ok := errors.As(err, &e)
	return e, ok
}
