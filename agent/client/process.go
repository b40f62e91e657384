package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"time"

	"connectrpc.com/connect"

	"github.com/tupper-dev/tupper/agent/spec/process"
)

// ExecRequest describes a command to run.
type ExecRequest struct {
	// Command is run as /bin/sh -c Command when Argv is empty.
	Command string
	// Argv, when set, is the program and its arguments, run directly
	// (searched in PATH when the program has no slash).
	Argv []string
	// Env is added after the agent's environment (PATH, HOME, USER, the
	// sandbox env).
	Env map[string]string
	// Cwd is the working directory; relative to the user's home; empty is
	// the agent's default workdir.
	Cwd string
	// User runs the command as this OS user; empty uses the client's user.
	User string
	// Timeout, when positive, makes the agent kill the process group at the
	// deadline (the result then has TimedOut set). It applies to detached
	// processes too.
	Timeout time.Duration
	// Stdin, when non-nil, is copied to the process's stdin, which is closed
	// at EOF. Nil means a closed stdin. Exec does not wait for a Read that
	// is blocked when the process ends.
	Stdin io.Reader
	// Stdout and Stderr receive the output as it arrives; nil discards it.
	Stdout, Stderr io.Writer
	// Tag names the process for Attach and List.
	Tag string
}

// ExecResult is how a process ended.
type ExecResult struct {
	PID int
	// ExitCode is the exit status, or -1 when a signal ended the process.
	ExitCode int
	// Exited is false when a signal ended the process.
	Exited bool
	// Status is envd's text: "exit status 1", "signal: killed".
	Status string
	// TimedOut is set when the agent killed the process at its Timeout.
	TimedOut bool
	// OOMKilled is set when the kernel's OOM killer ended the process (the end event's
	// error begins with agent.OOMKilledError).
	OOMKilled bool
}

// oomKilled reports whether an end event says the OOM killer ended the process.
func oomKilled(end *process.ProcessEvent_EndEvent) bool {
	return strings.HasPrefix(end.GetError(), "oom_killed")
}

func (r *ExecRequest) config() (*process.ProcessConfig, error) {
	cfg := &process.ProcessConfig{Envs: r.Env}
	switch {
	case len(r.Argv) > 0:
		cfg.Cmd, cfg.Args = r.Argv[0], r.Argv[1:]
	case r.Command != "":
		cfg.Cmd, cfg.Args = "/bin/sh", []string{"-c", r.Command}
	default:
		return nil, &Error{Code: CodeInvalidArgument, Message: "empty command"}
	}
	if r.Cwd != "" {
		cfg.Cwd = &r.Cwd
	}
	return cfg, nil
}

// startOpts are what a Start request carries beyond an ExecRequest.
type startOpts struct {
	stdin bool
	pty   *process.PTY // nil: pipes
	// startOnly: ctx bounds the start only; once the start event has arrived, only the
	// returned release ends the stream. If ctx ends as the start event arrives, the process
	// is killed and ctx's error returned.
	startOnly bool
}

func (c *Client) startStream(ctx context.Context, r *ExecRequest, o startOpts) (*connect.ServerStreamForClient[process.StartResponse], int, func(), error) {
	cfg, err := r.config()
	if err != nil {
		return nil, 0, nil, err
	}
	stdin := o.stdin
	msg := &process.StartRequest{Process: cfg, Stdin: &stdin, Pty: o.pty}
	if r.Tag != "" {
		msg.Tag = &r.Tag
	}
	req := connect.NewRequest(msg)
	if r.Timeout > 0 {
		// Sent by hand rather than as a ctx deadline: the agent enforces it
		// and reports the end; the client must not hang up first.
		req.Header().Set("Connect-Timeout-Ms", strconv.FormatInt(max(1, r.Timeout.Milliseconds()), 10))
	}
	c.setUser(req.Header(), r.User)
	// The stream must outlive a ctx deadline (connect-go would send it as
	// the process timeout and hang up at it), but not a cancellation.
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, cancel)
	release := func() {
		stop()
		cancel()
	}
	stream, err := c.procRPC().Start(sctx, req)
	if err != nil {
		release()
		return nil, 0, nil, rpcErr(err)
	}
	if !stream.Receive() {
		err := stream.Err()
		stream.Close()
		release()
		if err == nil {
			err = errors.New("agent closed the stream before the start event")
		}
		return nil, 0, nil, rpcErr(err)
	}
	start := stream.Msg().GetEvent().GetStart()
	if start == nil || start.GetPid() == 0 {
		stream.Close()
		release()
		return nil, 0, nil, errors.New("agent: expected a start event")
	}
	if o.startOnly && !stop() {
		// ctx ended while the start event was on its way; the process is running.
		c.kill(start.GetPid())
		stream.Close()
		cancel()
		return nil, 0, nil, ctx.Err()
	}
	return stream, int(start.GetPid()), release, nil
}

func basicAuth(user string) string {
	r := http.Request{Header: http.Header{}}
	r.SetBasicAuth(user, "")
	return r.Header.Get("Authorization")
}

// Exec runs a command and waits for it. A non-zero exit, a signal or a
// timeout is a result, not an error. If ctx ends first, the process group
// is killed (SIGKILL) and ctx's error is returned with the PID filled in.
func (c *Client) Exec(ctx context.Context, r ExecRequest) (ExecResult, error) {
	stream, pid, release, err := c.startStream(ctx, &r, startOpts{stdin: r.Stdin != nil})
	if err != nil {
		return ExecResult{}, err
	}
	defer release()
	defer stream.Close()
	if r.Stdin != nil {
		inCtx, cancel := context.WithCancel(ctx)
		defer cancel()
		go c.pumpStdin(inCtx, uint32(pid), r.Stdin)
	}
	return c.follow(ctx, pid, stream.Receive, func() *process.ProcessEvent { return stream.Msg().GetEvent() }, stream.Err, r.Stdout, r.Stderr)
}

// follow reads events until the end event.
func (c *Client) follow(ctx context.Context, pid int, recv func() bool, msg func() *process.ProcessEvent, errf func() error, stdout, stderr io.Writer) (ExecResult, error) {
	res := ExecResult{PID: pid}
	gotEnd := false
	for recv() {
		ev := msg()
		switch e := ev.GetEvent().(type) {
		case *process.ProcessEvent_Data:
			var w io.Writer
			var b []byte
			switch o := e.Data.GetOutput().(type) {
			case *process.ProcessEvent_DataEvent_Stdout:
				w, b = stdout, o.Stdout
			case *process.ProcessEvent_DataEvent_Stderr:
				w, b = stderr, o.Stderr
			case *process.ProcessEvent_DataEvent_Pty:
				w, b = stdout, o.Pty
			}
			if w != nil {
				_, _ = w.Write(b)
			}
		case *process.ProcessEvent_End:
			gotEnd = true
			res.ExitCode = int(e.End.GetExitCode())
			res.Exited = e.End.GetExited()
			res.Status = bounded(e.End.GetStatus())
			res.OOMKilled = oomKilled(e.End)
		}
	}
	err := errf()
	if gotEnd {
		if CodeOf(rpcErr(err)) == CodeDeadlineExceeded {
			res.TimedOut = true
		}
		return res, nil
	}
	if ctx.Err() != nil {
		c.kill(uint32(pid))
		return res, ctx.Err()
	}
	if err == nil {
		err = errors.New("agent: process stream ended without an end event")
	}
	err = rpcErr(err)
	if CodeOf(err) == CodeDeadlineExceeded {
		res.TimedOut = true
		res.ExitCode = -1
		return res, nil
	}
	return res, err
}

// kill SIGKILLs pid's group with a fresh context (the caller's has ended).
func (c *Client) kill(pid uint32) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = c.Signal(ctx, int(pid), syscall.SIGKILL)
}

func (c *Client) pumpStdin(ctx context.Context, pid uint32, r io.Reader) {
	buf := make([]byte, 64<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if c.SendInput(ctx, int(pid), buf[:n]) != nil {
				return
			}
		}
		if err != nil {
			_ = c.CloseStdin(ctx, int(pid))
			return
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// Detach starts a command and returns its PID without waiting; its output
// is discarded until someone Attaches. Stdin is closed unless r.Stdin is
// set, in which case it is kept open for SendInput (r.Stdin itself is not
// read). The process runs until it exits, is signalled or hits r.Timeout.
func (c *Client) Detach(ctx context.Context, r ExecRequest) (int, error) {
	stream, pid, release, err := c.startStream(ctx, &r, startOpts{stdin: r.Stdin != nil})
	if err != nil {
		return 0, err
	}
	stream.Close()
	release()
	return pid, nil
}

// Attach follows a running (or recently ended) process by PID, like Exec
// after its start: output goes to stdout and stderr until it ends. When
// ctx ends, Attach returns ctx's error and the process keeps running.
func (c *Client) Attach(ctx context.Context, pid int, stdout, stderr io.Writer) (ExecResult, error) {
	return c.attach(ctx, &process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: uint32(pid)}}, stdout, stderr)
}

// AttachTag is Attach for the process started with Tag tag.
func (c *Client) AttachTag(ctx context.Context, tag string, stdout, stderr io.Writer) (ExecResult, error) {
	return c.attach(ctx, &process.ProcessSelector{Selector: &process.ProcessSelector_Tag{Tag: tag}}, stdout, stderr)
}

func (c *Client) attach(ctx context.Context, sel *process.ProcessSelector, stdout, stderr io.Writer) (ExecResult, error) {
	req := connect.NewRequest(&process.ConnectRequest{Process: sel})
	c.setUser(req.Header(), "")
	stream, err := c.procRPC().Connect(ctx, req)
	if err != nil {
		return ExecResult{}, rpcErr(err)
	}
	defer stream.Close()
	if !stream.Receive() {
		err := stream.Err()
		if err == nil {
			err = errors.New("agent closed the stream before the start event")
		}
		return ExecResult{}, rpcErr(err)
	}
	pid := int(stream.Msg().GetEvent().GetStart().GetPid())
	if pid == 0 {
		return ExecResult{}, errors.New("agent: expected a start event")
	}
	res := ExecResult{PID: pid}
	gotEnd := false
	for stream.Receive() {
		switch e := stream.Msg().GetEvent().GetEvent().(type) {
		case *process.ProcessEvent_Data:
			switch o := e.Data.GetOutput().(type) {
			case *process.ProcessEvent_DataEvent_Stdout:
				write(stdout, o.Stdout)
			case *process.ProcessEvent_DataEvent_Stderr:
				write(stderr, o.Stderr)
			case *process.ProcessEvent_DataEvent_Pty:
				write(stdout, o.Pty)
			}
		case *process.ProcessEvent_End:
			gotEnd = true
			res.ExitCode, res.Exited, res.Status = int(e.End.GetExitCode()), e.End.GetExited(), bounded(e.End.GetStatus())
			res.OOMKilled = oomKilled(e.End)
		}
	}
	if gotEnd {
		return res, nil
	}
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	if err := stream.Err(); err != nil {
		return res, rpcErr(err)
	}
	return res, errors.New("agent: process stream ended without an end event")
}

func write(w io.Writer, b []byte) {
	if w != nil {
		_, _ = w.Write(b)
	}
}

func pidSel(pid int) *process.ProcessSelector {
	return &process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: uint32(pid)}}
}

// Signal sends sig to the whole process group of pid.
func (c *Client) Signal(ctx context.Context, pid int, sig syscall.Signal) error {
	if sig <= 0 || sig > 64 {
		return &Error{Code: CodeInvalidArgument, Message: fmt.Sprintf("invalid signal %d", sig)}
	}
	_, err := c.procRPC().SendSignal(ctx, connect.NewRequest(&process.SendSignalRequest{Process: pidSel(pid), Signal: process.Signal(sig)}))
	return rpcErr(err)
}

// SendInput writes data to the stdin of pid (started with stdin open).
func (c *Client) SendInput(ctx context.Context, pid int, data []byte) error {
	_, err := c.procRPC().SendInput(ctx, connect.NewRequest(&process.SendInputRequest{Process: pidSel(pid), Input: &process.ProcessInput{Input: &process.ProcessInput_Stdin{Stdin: data}}}))
	return rpcErr(err)
}

// CloseStdin closes the stdin of pid: the process reads EOF.
func (c *Client) CloseStdin(ctx context.Context, pid int) error {
	_, err := c.procRPC().CloseStdin(ctx, connect.NewRequest(&process.CloseStdinRequest{Process: pidSel(pid)}))
	return rpcErr(err)
}

// ProcessInfo describes a running process.
type ProcessInfo struct {
	PID  int
	Tag  string
	Cmd  string
	Args []string
	Cwd  string
}

// List returns the running processes started through the agent.
func (c *Client) List(ctx context.Context) ([]ProcessInfo, error) {
	resp, err := c.procRPC().List(ctx, connect.NewRequest(&process.ListRequest{}))
	if err != nil {
		return nil, rpcErr(err)
	}
	var out []ProcessInfo
	for _, p := range resp.Msg.GetProcesses() {
		out = append(out, ProcessInfo{PID: int(p.GetPid()), Tag: p.GetTag(), Cmd: p.GetConfig().GetCmd(), Args: p.GetConfig().GetArgs(), Cwd: p.GetConfig().GetCwd()})
	}
	return out, nil
}
