package tools

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/tupper-dev/tupper/sandbox"
)

// Tools that run commands and background processes.

func processTools() []Tool {
	return []Tool{
		define(Tool{
			Name: "run_command",
			Description: "Run a shell command (/bin/sh -c) in the sandbox and wait for it to finish. Returns the exit " +
				"code, stdout and stderr; long output is shortened to its beginning and end. A non-zero exit " +
				"is reported as an error. Each call starts a fresh shell in the working directory (/workspace unless " +
				"the sandbox's template sets one): a cd does not carry " +
				"over, use cwd or `cd dir && …`. Stdin is closed, so interactive programs must be given " +
				"flags such as -y. For servers and other long-running programs use start_process.",
			Destructive: true,
		}, runCommand),
		define(Tool{
			Name: "start_process",
			Description: "Start a long-running command in the background (a dev server, a watcher, a database) and " +
				"return once it is ready. With ready_port it waits until the port accepts connections and " +
				"returns a URL for it; with ready_log it waits for a matching output line. Starting the same " +
				"command under the same name again returns the running process. Read its output with " +
				"process_logs and stop it with stop_process.",
			Destructive: true,
		}, startProcess),
		define(Tool{
			Name: "process_logs",
			Description: "Read the output of a background process started with start_process: a page of stdout then " +
				"stderr, its status (running or exited with a code), and a cursor. Pass the cursor back to " +
				"read only what was written since.",
			ReadOnly: true,
		}, processLogs),
		define(Tool{
			Name:        "stop_process",
			Description: "Stop a background process started with start_process: SIGTERM, then SIGKILL after 5 seconds. Stopping a process that has already exited does nothing.",
			Destructive: true,
		}, stopProcess),
	}
}

// The tags of these structs are interpreted strings where a description quotes a command in
// backquotes.

type runCommandArgs struct {
	Command   string "json:\"command\" jsonschema:\"The shell command line, e.g. `go test ./...` or `ls -la`.\" minLength:\"1\""
	Cwd       string `json:"cwd,omitempty" jsonschema:"Directory to run in, absolute or relative to the working directory. Default: the working directory (/workspace unless the sandbox's template sets one)."`
	TimeoutMS int64  `json:"timeout_ms,omitempty" jsonschema:"Kill the command after this many milliseconds. Default: 120000 (2 minutes)." minimum:"1" maximum:"600000"`
	inSandbox
}

func runCommand(ctx context.Context, s *Session, a runCommandArgs) (Result, error) {
	b, err := s.Sandbox(ctx, a.SandboxID)
	if err != nil {
		return Result{}, err
	}
	timeout := sandbox.DefaultRunTimeout
	if a.TimeoutMS > 0 {
		timeout = ms(a.TimeoutMS)
	}
	start := time.Now()
	res, err := b.Run(ctx, a.Command, sandbox.RunOptions{Cwd: a.Cwd, Timeout: timeout, MaxOutputBytes: maxRunOutput})
	if err != nil {
		return Result{}, err
	}
	if s.opts.Ran != nil {
		s.opts.Ran(time.Since(start))
	}
	return runResult(res, timeout), nil
}

type startProcessArgs struct {
	Command        string "json:\"command\" jsonschema:\"The shell command line, e.g. `npm run dev`.\" minLength:\"1\""
	Name           string `json:"name,omitempty" jsonschema:"Name to refer to the process by: letters, digits, - and _. Default: derived from the command." pattern:"^[A-Za-z0-9_-]{1,128}$"`
	Cwd            string `json:"cwd,omitempty" jsonschema:"Directory to run in, absolute or relative to the working directory. Default: the working directory (/workspace unless the sandbox's template sets one)."`
	ReadyPort      int    `json:"ready_port,omitempty" jsonschema:"Wait until this TCP port accepts connections." minimum:"1" maximum:"65535"`
	ReadyLog       string `json:"ready_log,omitempty" jsonschema:"Wait until a line of output matches this regular expression (RE2 syntax)."`
	ReadyTimeoutMS int64  `json:"ready_timeout_ms,omitempty" jsonschema:"Give up waiting for readiness after this many milliseconds. Default: 60000." minimum:"1" maximum:"600000"`
	inSandbox
}

func startProcess(ctx context.Context, s *Session, a startProcessArgs) (Result, error) {
	opts := sandbox.StartOptions{Name: a.Name, Cwd: a.Cwd, ReadyTimeout: ms(a.ReadyTimeoutMS)}
	switch {
	case a.ReadyPort != 0 && a.ReadyLog != "":
		return Result{}, &ArgumentError{Tool: "start_process", Message: "give ready_port or ready_log, not both"}
	case a.ReadyPort != 0:
		opts.Ready = sandbox.ReadyPort(a.ReadyPort)
	case a.ReadyLog != "":
		re, err := regexp.Compile(a.ReadyLog)
		if err != nil {
			return Result{}, &ArgumentError{Tool: "start_process", Message: "ready_log is not a valid regular expression: " + err.Error()}
		}
		opts.Ready = sandbox.ReadyLog(re)
	}
	b, err := s.Sandbox(ctx, a.SandboxID)
	if err != nil {
		return Result{}, err
	}
	p, err := b.Start(ctx, a.Command, opts)
	if err != nil {
		return Result{}, err
	}
	var t strings.Builder
	fmt.Fprintf(&t, "started process %q (pid %d)", p.Name(), p.PID())
	if opts.Ready != nil {
		t.WriteString(", ready")
	}
	data := map[string]any{"name": p.Name(), "pid": p.PID()}
	if a.ReadyPort != 0 {
		if u, err := s.previewURL(ctx, b, a.ReadyPort); err == nil {
			fmt.Fprintf(&t, "; port %d is reachable at %s", a.ReadyPort, u)
			data["url"] = u
		}
	}
	t.WriteString("\nread its output with process_logs, stop it with stop_process\n")
	return Result{Text: t.String(), Data: data}, nil
}

// processRef names a process started with start_process.
type processRef struct {
	Name string `json:"name" jsonschema:"The process name returned by start_process." pattern:"^[A-Za-z0-9_-]{1,128}$"`
	inSandbox
}

// find returns the process r names.
func (r processRef) find(ctx context.Context, s *Session) (*sandbox.Process, error) {
	b, err := s.Sandbox(ctx, r.SandboxID)
	if err != nil {
		return nil, err
	}
	return b.Process(ctx, r.Name)
}

type processLogsArgs struct {
	processRef
	Cursor   string `json:"cursor,omitempty" jsonschema:"The cursor returned by an earlier process_logs call. Omit it to read from the beginning."`
	MaxBytes int    `json:"max_bytes,omitempty" jsonschema:"Most bytes of output to return. Default: 16384." minimum:"1" maximum:"65536"`
}

func processLogs(ctx context.Context, s *Session, a processLogsArgs) (Result, error) {
	p, err := a.find(ctx, s)
	if err != nil {
		return Result{}, err
	}
	page, err := p.Logs(ctx, sandbox.LogsOptions{After: a.Cursor, MaxBytes: a.MaxBytes})
	if err != nil {
		return Result{}, err
	}
	st, err := p.Status(ctx)
	if err != nil {
		return Result{}, err
	}
	data := map[string]any{"name": p.Name(), "status": string(st), "output": page.Text, "cursor": page.NextCursor, "more": page.Truncated}
	var t strings.Builder
	status := string(st)
	if st == sandbox.ProcessExited {
		if es, err := p.Wait(ctx); err == nil {
			status = fmt.Sprintf("exited with code %d", es.ExitCode)
			if es.Signal != "" {
				status += " (" + es.Signal + ")"
			}
			data["exit_code"] = es.ExitCode
		}
	}
	fmt.Fprintf(&t, "process %q: %s\n", p.Name(), status)
	if page.Text == "" {
		t.WriteString("(no new output)\n")
	} else {
		block(&t, "output", page.Text)
	}
	if page.Truncated {
		t.WriteString("more output is waiting: call process_logs again with the cursor\n")
	}
	fmt.Fprintf(&t, "cursor: %s\n", page.NextCursor)
	return Result{Text: t.String(), Data: data}, nil
}

func stopProcess(ctx context.Context, s *Session, a processRef) (Result, error) {
	p, err := a.find(ctx, s)
	if err != nil {
		return Result{}, err
	}
	if err := p.Stop(ctx, sandbox.StopOptions{}); err != nil {
		return Result{}, err
	}
	return Result{Text: fmt.Sprintf("stopped process %q", p.Name()), Data: map[string]any{"name": p.Name()}}, nil
}
