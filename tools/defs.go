package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path"
	"regexp"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/sandbox"
)

// sandboxID is the optional sandbox_id of every tool that works in one sandbox.
var sandboxID = str("Id of the sandbox to use, from create_sandbox or list_sandboxes. Omit it to use this session's default sandbox, which is created on first use.")

// withID adds sandbox_id to props.
func withID(props map[string]*Schema) map[string]*Schema {
	props["sandbox_id"] = sandboxID
	return props
}

const (
	procNamePattern = `^[A-Za-z0-9_-]{1,128}$`
	gitDirDesc      = "Repository directory, absolute or relative to /workspace. Default: app (where git_clone puts a repository by default)."
)

// allTools builds the definitions on first use, so programs that link this package but
// never serve tools (tupper exec, for one) do not pay for them at start-up.
var allTools = sync.OnceValue(func() []Tool {
	return []Tool{
		{
			Name: "create_sandbox",
			Description: "Create a new, empty Linux sandbox and return its id. Most work needs no call to this: " +
				"every tool uses this session's default sandbox when sandbox_id is omitted. Create another " +
				"sandbox to work on something in isolation or in parallel; pass its id as sandbox_id. It lives " +
				"until destroy_sandbox.",
			InputSchema: object(nil, map[string]*Schema{
				"network":       enum("Network access: all (the default) or none (loopback only).", "all", "none"),
				"env":           stringMap("Environment variables set for every command in the sandbox."),
				"from_snapshot": str("Start from a snapshot id returned by the snapshot tool, instead of an empty sandbox."),
			}),
			Handler: createSandbox,
		},
		{
			Name:        "list_sandboxes",
			Description: "List the sandboxes this session can use: id, state, creation time, and which one is the default.",
			InputSchema: object(nil, map[string]*Schema{}),
			ReadOnly:    true,
			Handler:     listSandboxes,
		},
		{
			Name: "destroy_sandbox",
			Description: "Destroy a sandbox and everything in it, including running processes. Destroying the " +
				"default sandbox makes the next call without sandbox_id start a fresh one.",
			InputSchema: object([]string{"sandbox_id"}, map[string]*Schema{
				"sandbox_id": nonEmpty("Id of the sandbox to destroy."),
			}),
			Destructive: true,
			Handler:     destroySandbox,
		},
		{
			Name: "run_command",
			Description: "Run a shell command (/bin/sh -c) in the sandbox and wait for it to finish. Returns the exit " +
				"code, stdout and stderr; long output is shortened to its beginning and end. A non-zero exit " +
				"is reported as an error. Each call starts a fresh shell in /workspace: a cd does not carry " +
				"over, use cwd or `cd dir && …`. Stdin is closed, so interactive programs must be given " +
				"flags such as -y. For servers and other long-running programs use start_process.",
			InputSchema: object([]string{"command"}, withID(map[string]*Schema{
				"command":    nonEmpty("The shell command line, e.g. `go test ./...` or `ls -la`."),
				"cwd":        str("Working directory, absolute or relative to /workspace. Default: /workspace."),
				"timeout_ms": integer("Kill the command after this many milliseconds. Default: 120000 (2 minutes).", 1, 600000),
			})),
			Destructive: true,
			Handler:     runCommand,
		},
		{
			Name: "start_process",
			Description: "Start a long-running command in the background (a dev server, a watcher, a database) and " +
				"return once it is ready. With ready_port it waits until the port accepts connections and " +
				"returns a URL for it; with ready_log it waits for a matching output line. Starting the same " +
				"command under the same name again returns the running process. Read its output with " +
				"process_logs and stop it with stop_process.",
			InputSchema: object([]string{"command"}, withID(map[string]*Schema{
				"command":          nonEmpty("The shell command line, e.g. `npm run dev`."),
				"name":             pattern("Name to refer to the process by: letters, digits, - and _. Default: derived from the command.", procNamePattern),
				"cwd":              str("Working directory, absolute or relative to /workspace. Default: /workspace."),
				"ready_port":       integer("Wait until this TCP port accepts connections.", 1, 65535),
				"ready_log":        str("Wait until a line of output matches this regular expression (RE2 syntax)."),
				"ready_timeout_ms": integer("Give up waiting for readiness after this many milliseconds. Default: 60000.", 1, 600000),
			})),
			Destructive: true,
			Handler:     startProcess,
		},
		{
			Name: "process_logs",
			Description: "Read the output of a background process started with start_process: a page of stdout then " +
				"stderr, its status (running or exited with a code), and a cursor. Pass the cursor back to " +
				"read only what was written since.",
			InputSchema: object([]string{"name"}, withID(map[string]*Schema{
				"name":      pattern("The process name returned by start_process.", procNamePattern),
				"cursor":    str("The cursor returned by an earlier process_logs call. Omit it to read from the beginning."),
				"max_bytes": integer("Most bytes of output to return. Default: 16384.", 1, 65536),
			})),
			ReadOnly: true,
			Handler:  processLogs,
		},
		{
			Name:        "stop_process",
			Description: "Stop a background process started with start_process: SIGTERM, then SIGKILL after 5 seconds. Stopping a process that has already exited does nothing.",
			InputSchema: object([]string{"name"}, withID(map[string]*Schema{
				"name": pattern("The process name returned by start_process.", procNamePattern),
			})),
			Destructive: true,
			Handler:     stopProcess,
		},
		{
			Name: "read_file",
			Description: "Read a text file from the sandbox. Long files are cut at 64 KiB; read a range of lines with " +
				"start_line and end_line. Line numbers start at 1.",
			InputSchema: object([]string{"path"}, withID(map[string]*Schema{
				"path":       nonEmpty("File path, absolute or relative to /workspace."),
				"start_line": integer("First line to return. Default: 1.", 1, 1<<31-1),
				"end_line":   integer("Last line to return, inclusive. Default: the end of the file.", 1, 1<<31-1),
			})),
			ReadOnly: true,
			Handler:  readFile,
		},
		{
			Name:        "write_file",
			Description: "Create or replace a file in the sandbox with the given content, creating parent directories. To change part of an existing file, edit_file is safer.",
			InputSchema: object([]string{"path", "content"}, withID(map[string]*Schema{
				"path":    nonEmpty("File path, absolute or relative to /workspace."),
				"content": str("The complete new content of the file."),
			})),
			Destructive: true,
			Handler:     writeFile,
		},
		{
			Name: "edit_file",
			Description: "Replace one exact occurrence of find with replace in a file. find must occur exactly once, " +
				"whitespace included: if it does not occur, or occurs more than once, nothing changes and " +
				"the error says which; then read the file again, or include more surrounding lines.",
			InputSchema: object([]string{"path", "find", "replace"}, withID(map[string]*Schema{
				"path":    nonEmpty("File path, absolute or relative to /workspace."),
				"find":    nonEmpty("The exact text to replace, as it appears in the file."),
				"replace": str("The text to put in its place (empty to delete it)."),
			})),
			Destructive: true,
			Handler:     editFile,
		},
		{
			Name:        "list_files",
			Description: "List a directory in the sandbox: one entry per line with its type, size and path. Directories end in /.",
			InputSchema: object(nil, withID(map[string]*Schema{
				"path":      str("Directory, absolute or relative to /workspace. Default: /workspace."),
				"recursive": boolean("List everything below the directory, not just its entries. Default: false."),
				"glob":      str("Only entries whose name matches this pattern, e.g. *.go (with a /, the pattern matches the path relative to the directory; ** matches any depth)."),
			})),
			ReadOnly: true,
			Handler:  listFiles,
		},
		{
			Name:        "search_files",
			Description: "Search the text files below a directory for lines containing a literal string (not a regular expression). Returns path:line: text for each match.",
			InputSchema: object([]string{"query"}, withID(map[string]*Schema{
				"query":       nonEmpty("The text to look for, on one line."),
				"path":        str("Directory to search, absolute or relative to /workspace. Default: /workspace."),
				"glob":        str("Only files whose name matches this pattern, e.g. *.go."),
				"max_matches": integer("Most matches to return. Default: 100.", 1, 1000),
			})),
			ReadOnly: true,
			Handler:  searchFiles,
		},
		{
			Name: "file_changes",
			Description: "Show what changed under /workspace since the sandbox was created: files added, modified " +
				"and removed, and a unified diff. Useful to review your own work before reporting it.",
			InputSchema: object(nil, withID(map[string]*Schema{})),
			ReadOnly:    true,
			Handler:     fileChanges,
		},
		{
			Name:        "git_clone",
			Description: "Clone a git repository into the sandbox (by default into /workspace/app). Needs network access.",
			InputSchema: object([]string{"url"}, withID(map[string]*Schema{
				"url":    nonEmpty("Repository URL, e.g. https://github.com/owner/repo.git."),
				"dir":    str("Target directory, absolute or relative to /workspace. Default: app."),
				"branch": str("Branch or tag to check out. Default: the remote's default branch."),
				"depth":  integer("Clone only this many recent commits. Default: full history.", 1, 1<<31-1),
			})),
			Handler: gitClone,
		},
		{
			Name:        "git_status",
			Description: "Run git status in a repository in the sandbox.",
			InputSchema: object(nil, withID(map[string]*Schema{"dir": str(gitDirDesc)})),
			ReadOnly:    true,
			Handler:     gitStatus,
		},
		{
			Name:        "git_diff",
			Description: "Show the unstaged changes of a repository in the sandbox (git diff).",
			InputSchema: object(nil, withID(map[string]*Schema{"dir": str(gitDirDesc)})),
			ReadOnly:    true,
			Handler:     gitDiff,
		},
		{
			Name:        "git_commit",
			Description: "Commit in a repository in the sandbox. By default every change is staged first (git add -A).",
			InputSchema: object([]string{"message"}, withID(map[string]*Schema{
				"message": nonEmpty("The commit message."),
				"dir":     str(gitDirDesc),
				"all":     boolean("Stage every change, new files included, before committing. Default: true."),
			})),
			Handler: gitCommit,
		},
		{
			Name:        "snapshot",
			Description: "Save the sandbox's files as a snapshot and return its id; create_sandbox with from_snapshot starts a new sandbox from it. Not every sandbox provider can snapshot.",
			InputSchema: object(nil, withID(map[string]*Schema{})),
			Handler:     snapshot,
		},
		{
			Name:        "expose_port",
			Description: "Return a URL at which a server listening on a TCP port inside the sandbox can be reached, e.g. one started with start_process.",
			InputSchema: object([]string{"port"}, withID(map[string]*Schema{
				"port": integer("The TCP port the server listens on inside the sandbox.", 1, 65535),
			})),
			ReadOnly: true,
			Handler:  exposePort,
		},
	}
})

// decode unmarshals validated arguments.
func decode[T any](tool string, raw json.RawMessage) (T, error) {
	var v T
	if err := json.Unmarshal(raw, &v); err != nil {
		return v, &ArgumentError{Tool: tool, Message: err.Error()}
	}
	return v, nil
}

func ms(n int64) time.Duration { return time.Duration(n) * time.Millisecond }

// --- sandboxes ---

func createSandbox(ctx context.Context, s *Session, raw json.RawMessage) (Result, error) {
	a, err := decode[struct {
		Network      string            `json:"network"`
		Env          map[string]string `json:"env"`
		FromSnapshot string            `json:"from_snapshot"`
	}]("create_sandbox", raw)
	if err != nil {
		return Result{}, err
	}
	opts := s.opts.Create
	switch a.Network {
	case "all":
		if opts.Network.Mode == provider.NetworkNone {
			return Result{Text: "this session's sandboxes have no network (network none), and create_sandbox cannot ask for more", IsError: true}, nil
		}
		opts.Network = sandbox.NetworkAll
	case "none":
		opts.Network = sandbox.NetworkNone
	}
	if len(a.Env) > 0 {
		env := map[string]string{}
		for k, v := range opts.Env {
			env[k] = v
		}
		for k, v := range a.Env {
			env[k] = v
		}
		opts.Env = env
	}
	if a.FromSnapshot != "" {
		opts.From = a.FromSnapshot
	}
	b, err := s.createExtra(ctx, opts)
	if err != nil {
		return Result{}, err
	}
	return Result{
		Text: fmt.Sprintf("created sandbox %s; pass sandbox_id %q to use it", b.ID, b.ID),
		Data: map[string]any{"sandbox_id": b.ID},
	}, nil
}

func listSandboxes(ctx context.Context, s *Session, _ json.RawMessage) (Result, error) {
	infos, err := sandbox.List(ctx, s.prov, sandbox.ListOptions{Labels: s.opts.Labels})
	if err != nil {
		return Result{}, err
	}
	def := s.DefaultID()
	var b strings.Builder
	items := []map[string]any{}
	for i, in := range infos {
		if i == MaxListEntries {
			fmt.Fprintf(&b, "[… %d more not shown]\n", len(infos)-i)
			break
		}
		mark := ""
		if in.ID == def {
			mark = " (default)"
		}
		fmt.Fprintf(&b, "%s %s created %s%s\n", in.ID, in.State, in.CreatedAt.UTC().Format(time.RFC3339), mark)
		items = append(items, map[string]any{"sandbox_id": in.ID, "state": string(in.State), "created_at": in.CreatedAt.UTC().Format(time.RFC3339), "default": in.ID == def})
	}
	if len(infos) == 0 {
		b.WriteString("no sandboxes yet; tools create the default sandbox on first use\n")
	}
	return Result{Text: b.String(), Data: map[string]any{"sandboxes": items}}, nil
}

func destroySandbox(ctx context.Context, s *Session, raw json.RawMessage) (Result, error) {
	a, err := decode[struct {
		ID string `json:"sandbox_id"`
	}]("destroy_sandbox", raw)
	if err != nil {
		return Result{}, err
	}
	if err := s.destroySandbox(ctx, a.ID); err != nil {
		return Result{}, err
	}
	return Result{Text: "destroyed sandbox " + a.ID, Data: map[string]any{"sandbox_id": a.ID}}, nil
}

// --- commands and processes ---

func runCommand(ctx context.Context, s *Session, raw json.RawMessage) (Result, error) {
	a, err := decode[struct {
		Command   string `json:"command"`
		Cwd       string `json:"cwd"`
		TimeoutMS int64  `json:"timeout_ms"`
		SandboxID string `json:"sandbox_id"`
	}]("run_command", raw)
	if err != nil {
		return Result{}, err
	}
	b, err := s.Sandbox(ctx, a.SandboxID)
	if err != nil {
		return Result{}, err
	}
	timeout := sandbox.DefaultRunTimeout
	if a.TimeoutMS > 0 {
		timeout = ms(a.TimeoutMS)
	}
	res, err := b.Run(ctx, a.Command, sandbox.RunOptions{Cwd: a.Cwd, Timeout: timeout, MaxOutputBytes: maxRunOutput})
	if err != nil {
		return Result{}, err
	}
	return runResult(res, timeout), nil
}

func startProcess(ctx context.Context, s *Session, raw json.RawMessage) (Result, error) {
	a, err := decode[struct {
		Command        string `json:"command"`
		Name           string `json:"name"`
		Cwd            string `json:"cwd"`
		ReadyPort      int    `json:"ready_port"`
		ReadyLog       string `json:"ready_log"`
		ReadyTimeoutMS int64  `json:"ready_timeout_ms"`
		SandboxID      string `json:"sandbox_id"`
	}]("start_process", raw)
	if err != nil {
		return Result{}, err
	}
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

func processLogs(ctx context.Context, s *Session, raw json.RawMessage) (Result, error) {
	a, err := decode[struct {
		Name      string `json:"name"`
		Cursor    string `json:"cursor"`
		MaxBytes  int    `json:"max_bytes"`
		SandboxID string `json:"sandbox_id"`
	}]("process_logs", raw)
	if err != nil {
		return Result{}, err
	}
	b, err := s.Sandbox(ctx, a.SandboxID)
	if err != nil {
		return Result{}, err
	}
	p, err := b.Process(ctx, a.Name)
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

func stopProcess(ctx context.Context, s *Session, raw json.RawMessage) (Result, error) {
	a, err := decode[struct {
		Name      string `json:"name"`
		SandboxID string `json:"sandbox_id"`
	}]("stop_process", raw)
	if err != nil {
		return Result{}, err
	}
	b, err := s.Sandbox(ctx, a.SandboxID)
	if err != nil {
		return Result{}, err
	}
	p, err := b.Process(ctx, a.Name)
	if err != nil {
		return Result{}, err
	}
	if err := p.Stop(ctx, sandbox.StopOptions{}); err != nil {
		return Result{}, err
	}
	return Result{Text: fmt.Sprintf("stopped process %q", p.Name()), Data: map[string]any{"name": p.Name()}}, nil
}

// --- files ---

// maxReadBytes is how much of a file read_file loads to pick lines from.
const maxReadBytes = 8 << 20

func readFile(ctx context.Context, s *Session, raw json.RawMessage) (Result, error) {
	a, err := decode[struct {
		Path      string `json:"path"`
		StartLine int    `json:"start_line"`
		EndLine   int    `json:"end_line"`
		SandboxID string `json:"sandbox_id"`
	}]("read_file", raw)
	if err != nil {
		return Result{}, err
	}
	if a.EndLine != 0 && a.StartLine > a.EndLine {
		return Result{}, &ArgumentError{Tool: "read_file", Message: "start_line is after end_line"}
	}
	b, err := s.Sandbox(ctx, a.SandboxID)
	if err != nil {
		return Result{}, err
	}
	rc, err := b.Files.Open(ctx, a.Path)
	if err != nil {
		return Result{}, err
	}
	data, err := io.ReadAll(io.LimitReader(rc, maxReadBytes+1))
	rc.Close()
	if err != nil {
		return Result{}, err
	}
	partial := len(data) > maxReadBytes
	if partial {
		data = data[:maxReadBytes]
	}
	if bytes.IndexByte(data, 0) >= 0 || !utf8.Valid(trimPartialRune(data)) {
		return Result{
			Text:    fmt.Sprintf("%s is a binary file; read_file shows text only (try run_command with `file` or `xxd | head`)", a.Path),
			IsError: true,
		}, nil
	}
	text := string(data)
	var notes []string
	if a.StartLine > 0 || a.EndLine > 0 {
		lines := strings.SplitAfter(text, "\n")
		if lines[len(lines)-1] == "" {
			lines = lines[:len(lines)-1]
		}
		start := max(a.StartLine, 1)
		end := a.EndLine
		if end == 0 || end > len(lines) {
			end = len(lines)
		}
		if start > len(lines) {
			return Result{Text: fmt.Sprintf("%s has only %d lines", a.Path, len(lines)), IsError: true}, nil
		}
		text = strings.Join(lines[start-1:end], "")
		notes = append(notes, fmt.Sprintf("lines %d-%d of %d", start, end, len(lines)))
	}
	if len(text) > MaxFileBytes {
		cut := text[:MaxFileBytes]
		if i := strings.LastIndexByte(cut, '\n'); i > 0 {
			cut = cut[:i+1]
		}
		for len(cut) > 0 && !utf8.ValidString(cut) {
			cut = cut[:len(cut)-1]
		}
		shown := strings.Count(cut, "\n")
		notes = append(notes, fmt.Sprintf("cut at %d bytes (%d lines shown): pass start_line to read further", len(cut), shown))
		text = cut
	} else if partial {
		notes = append(notes, fmt.Sprintf("only the first %d MiB of the file were read", maxReadBytes>>20))
	}
	out := text
	if len(notes) > 0 {
		out += "\n[" + strings.Join(notes, "; ") + "]"
	}
	return Result{Text: out, Data: map[string]any{"path": a.Path, "content": text}}, nil
}

// trimPartialRune drops an incomplete UTF-8 sequence at the end of data (cut by a limit).
func trimPartialRune(data []byte) []byte {
	for i := 0; i < utf8.UTFMax && len(data) > 0; i++ {
		r, size := utf8.DecodeLastRune(data)
		if r != utf8.RuneError || size != 1 {
			break
		}
		data = data[:len(data)-1]
	}
	return data
}

func writeFile(ctx context.Context, s *Session, raw json.RawMessage) (Result, error) {
	a, err := decode[struct {
		Path      string `json:"path"`
		Content   string `json:"content"`
		SandboxID string `json:"sandbox_id"`
	}]("write_file", raw)
	if err != nil {
		return Result{}, err
	}
	b, err := s.Sandbox(ctx, a.SandboxID)
	if err != nil {
		return Result{}, err
	}
	if err := b.Files.Write(ctx, a.Path, []byte(a.Content), sandbox.WriteOptions{}); err != nil {
		return Result{}, err
	}
	return Result{Text: fmt.Sprintf("wrote %d bytes to %s", len(a.Content), a.Path), Data: map[string]any{"path": a.Path, "bytes": len(a.Content)}}, nil
}

func editFile(ctx context.Context, s *Session, raw json.RawMessage) (Result, error) {
	a, err := decode[struct {
		Path      string `json:"path"`
		Find      string `json:"find"`
		Replace   string `json:"replace"`
		SandboxID string `json:"sandbox_id"`
	}]("edit_file", raw)
	if err != nil {
		return Result{}, err
	}
	b, err := s.Sandbox(ctx, a.SandboxID)
	if err != nil {
		return Result{}, err
	}
	if err := b.Files.Edit(ctx, a.Path, a.Find, a.Replace); err != nil {
		return Result{}, err
	}
	return Result{Text: "edited " + a.Path, Data: map[string]any{"path": a.Path}}, nil
}

func listFiles(ctx context.Context, s *Session, raw json.RawMessage) (Result, error) {
	a, err := decode[struct {
		Path      string `json:"path"`
		Recursive bool   `json:"recursive"`
		Glob      string `json:"glob"`
		SandboxID string `json:"sandbox_id"`
	}]("list_files", raw)
	if err != nil {
		return Result{}, err
	}
	b, err := s.Sandbox(ctx, a.SandboxID)
	if err != nil {
		return Result{}, err
	}
	infos, err := b.Files.List(ctx, a.Path, sandbox.FileListOptions{Recursive: a.Recursive, Glob: a.Glob})
	if err != nil {
		return Result{}, err
	}
	var t strings.Builder
	items := []map[string]any{}
	for i, fi := range infos {
		if i == MaxListEntries {
			fmt.Fprintf(&t, "[… %d more entries not shown: list a subdirectory or use glob]\n", len(infos)-i)
			break
		}
		p := fi.Path
		if fi.Type == provider.TypeDir {
			p += "/"
		}
		fmt.Fprintf(&t, "%-7s %10d  %s\n", fi.Type, fi.Size, p)
		items = append(items, map[string]any{"path": fi.Path, "type": string(fi.Type), "size": fi.Size})
	}
	if len(infos) == 0 {
		t.WriteString("(empty)\n")
	}
	return Result{Text: t.String(), Data: map[string]any{"entries": items}}, nil
}

func searchFiles(ctx context.Context, s *Session, raw json.RawMessage) (Result, error) {
	a, err := decode[struct {
		Query      string `json:"query"`
		Path       string `json:"path"`
		Glob       string `json:"glob"`
		MaxMatches int    `json:"max_matches"`
		SandboxID  string `json:"sandbox_id"`
	}]("search_files", raw)
	if err != nil {
		return Result{}, err
	}
	if strings.ContainsAny(a.Query, "\n\x00") {
		return Result{}, &ArgumentError{Tool: "search_files", Message: "query must be one line"}
	}
	maxMatches := a.MaxMatches
	if maxMatches == 0 {
		maxMatches = 100
	}
	b, err := s.Sandbox(ctx, a.SandboxID)
	if err != nil {
		return Result{}, err
	}
	matches, err := b.Files.Search(ctx, a.Query, sandbox.SearchOptions{Path: a.Path, Glob: a.Glob, MaxMatches: maxMatches + 1})
	if err != nil {
		return Result{}, err
	}
	more := len(matches) > maxMatches
	if more {
		matches = matches[:maxMatches]
	}
	var t strings.Builder
	items := []map[string]any{}
	for _, m := range matches {
		line := m.Text
		if len(line) > maxLineChars {
			line = line[:maxLineChars]
			for len(line) > 0 && !utf8.ValidString(line) {
				line = line[:len(line)-1]
			}
			line += "…"
		}
		fmt.Fprintf(&t, "%s:%d: %s\n", m.Path, m.Line, line)
		items = append(items, map[string]any{"path": m.Path, "line": m.Line, "text": line})
	}
	text, cut := clip(t.String(), MaxStreamBytes)
	switch {
	case len(matches) == 0:
		text = "no matches\n"
	case more || cut:
		text += fmt.Sprintf("[more matches exist: narrow path or glob, or raise max_matches (now %d)]\n", maxMatches)
	}
	return Result{Text: text, Data: map[string]any{"matches": items, "more": more}}, nil
}

func fileChanges(ctx context.Context, s *Session, raw json.RawMessage) (Result, error) {
	a, err := decode[struct {
		SandboxID string `json:"sandbox_id"`
	}]("file_changes", raw)
	if err != nil {
		return Result{}, err
	}
	b, err := s.Sandbox(ctx, a.SandboxID)
	if err != nil {
		return Result{}, err
	}
	ch, err := b.Files.Changes(ctx, sandbox.ChangesOptions{})
	if err != nil {
		if terr := s.trackErr(b.ID); terr != nil {
			return Result{Text: "file_changes is unavailable in this sandbox: recording its starting point failed: " + terr.Error(), IsError: true}, nil
		}
		return Result{}, err
	}
	var t strings.Builder
	for _, g := range []struct {
		label string
		paths []string
	}{{"added", ch.Added}, {"modified", ch.Modified}, {"removed", ch.Removed}} {
		for i, p := range g.paths {
			if i == MaxListEntries {
				fmt.Fprintf(&t, "[… %d more %s]\n", len(g.paths)-i, g.label)
				break
			}
			fmt.Fprintf(&t, "%s %s\n", g.label, p)
		}
	}
	patch, _ := clip(ch.Patch, MaxStreamBytes)
	if t.Len() == 0 {
		t.WriteString("no changes under /workspace since the sandbox was created\n")
	} else if patch != "" {
		block(&t, "diff", patch)
	}
	data := map[string]any{"added": nonNil(ch.Added), "modified": nonNil(ch.Modified), "removed": nonNil(ch.Removed), "patch": patch}
	return Result{Text: t.String(), Data: data}, nil
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// --- git ---

func gitClone(ctx context.Context, s *Session, raw json.RawMessage) (Result, error) {
	a, err := decode[struct {
		URL       string `json:"url"`
		Dir       string `json:"dir"`
		Branch    string `json:"branch"`
		Depth     int    `json:"depth"`
		SandboxID string `json:"sandbox_id"`
	}]("git_clone", raw)
	if err != nil {
		return Result{}, err
	}
	b, err := s.Sandbox(ctx, a.SandboxID)
	if err != nil {
		return Result{}, err
	}
	res, err := b.Git.Clone(ctx, a.URL, sandbox.CloneOptions{Dir: a.Dir, Branch: a.Branch, Depth: a.Depth})
	if err != nil {
		return Result{}, err
	}
	r := runResult(res, sandbox.DefaultRunTimeout)
	if res.OK {
		dir := a.Dir
		if dir == "" {
			dir = "app"
		}
		if !path.IsAbs(dir) {
			dir = path.Join(sandbox.DefaultCwd, dir)
		}
		r.Text = "cloned into " + dir + "\n" + r.Text
	}
	return r, nil
}

type gitDirArgs struct {
	Dir       string `json:"dir"`
	SandboxID string `json:"sandbox_id"`
}

func gitStatus(ctx context.Context, s *Session, raw json.RawMessage) (Result, error) {
	return gitSimple(ctx, s, raw, "git_status", (*sandbox.Git).Status)
}

func gitDiff(ctx context.Context, s *Session, raw json.RawMessage) (Result, error) {
	return gitSimple(ctx, s, raw, "git_diff", (*sandbox.Git).Diff)
}

func gitSimple(ctx context.Context, s *Session, raw json.RawMessage, tool string, run func(*sandbox.Git, context.Context, string) (*sandbox.RunResult, error)) (Result, error) {
	a, err := decode[gitDirArgs](tool, raw)
	if err != nil {
		return Result{}, err
	}
	b, err := s.Sandbox(ctx, a.SandboxID)
	if err != nil {
		return Result{}, err
	}
	res, err := run(b.Git, ctx, a.Dir)
	if err != nil {
		return Result{}, err
	}
	return runResult(res, sandbox.DefaultRunTimeout), nil
}

func gitCommit(ctx context.Context, s *Session, raw json.RawMessage) (Result, error) {
	a, err := decode[struct {
		Message   string `json:"message"`
		Dir       string `json:"dir"`
		All       *bool  `json:"all"`
		SandboxID string `json:"sandbox_id"`
	}]("git_commit", raw)
	if err != nil {
		return Result{}, err
	}
	b, err := s.Sandbox(ctx, a.SandboxID)
	if err != nil {
		return Result{}, err
	}
	all := a.All == nil || *a.All
	res, err := b.Git.Commit(ctx, a.Dir, sandbox.CommitOptions{Message: a.Message, All: all})
	if err != nil {
		return Result{}, err
	}
	return runResult(res, sandbox.DefaultRunTimeout), nil
}

// --- snapshots and ports ---

func snapshot(ctx context.Context, s *Session, raw json.RawMessage) (Result, error) {
	a, err := decode[struct {
		SandboxID string `json:"sandbox_id"`
	}]("snapshot", raw)
	if err != nil {
		return Result{}, err
	}
	b, err := s.Sandbox(ctx, a.SandboxID)
	if err != nil {
		return Result{}, err
	}
	id, err := b.Snapshot(ctx, sandbox.SnapshotOptions{})
	if err != nil {
		return Result{}, err
	}
	return Result{
		Text: fmt.Sprintf("snapshot %s saved; create_sandbox with from_snapshot %q starts a sandbox from it", id, id),
		Data: map[string]any{"snapshot_id": id},
	}, nil
}

func exposePort(ctx context.Context, s *Session, raw json.RawMessage) (Result, error) {
	a, err := decode[struct {
		Port      int    `json:"port"`
		SandboxID string `json:"sandbox_id"`
	}]("expose_port", raw)
	if err != nil {
		return Result{}, err
	}
	b, err := s.Sandbox(ctx, a.SandboxID)
	if err != nil {
		return Result{}, err
	}
	u, err := s.previewURL(ctx, b, a.Port)
	if err != nil {
		return Result{}, err
	}
	return Result{Text: fmt.Sprintf("port %d is reachable at %s", a.Port, u), Data: map[string]any{"port": a.Port, "url": u}}, nil
}

// previewURL asks SessionOptions.PreviewURL, else the sandbox.
func (s *Session) previewURL(ctx context.Context, b *sandbox.Sandbox, port int) (string, error) {
	if s.opts.PreviewURL != nil {
		return s.opts.PreviewURL(ctx, b.ID, port)
	}
	return b.PreviewURL(ctx, port)
}
