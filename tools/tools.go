// Package tools defines the sandbox tools a model drives directly, independent of any agent
// framework: each Tool has a name, a description written for models, a JSON Schema for its
// input and a handler over a Session.
//
// The same definitions serve the MCP server (package mcpserver), OpenAI function calling
// (OpenAI) and Anthropic tool use (Anthropic). Run a call with Call:
//
//	s := tools.NewSession(prov, tools.SessionOptions{})
//	defer s.Close(context.Background())
//	res, err := tools.Call(ctx, s, "run_command", json.RawMessage(`{"command":"ls"}`))
//	// err: unknown tool or malformed arguments (a protocol error)
//	// res.IsError: the command failed, a file is missing, an edit is ambiguous, …
//
// # Results and errors
//
// What goes wrong in the sandbox — a non-zero exit, a missing file, an edit whose text occurs
// twice, an unsupported operation — is a Result with IsError set and text the model can act
// on. Only a call the model cannot have meant is an error: an unknown tool (ErrUnknownTool)
// or arguments that do not match the schema (*ArgumentError).
//
// Every Result is bounded: command output, logs, file contents, listings and diffs are cut to
// a few tens of KiB, keeping the head and the tail, with a note saying what was left out.
package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/tupper-dev/tupper/sandbox"
)

// Handler runs a tool. args have been validated against the tool's InputSchema. A failure
// in the sandbox is best returned as an error with a sandbox code: Call turns it into a
// Result with IsError. An *ArgumentError stays an error.
type Handler func(ctx context.Context, s *Session, args json.RawMessage) (Result, error)

// Tool is one tool definition.
type Tool struct {
	Name        string
	Description string  // for models: what it does, what it returns, when to use it
	InputSchema *Schema // an object schema
	ReadOnly    bool    // changes nothing (MCP readOnlyHint)
	Destructive bool    // may destroy data (MCP destructiveHint)
	Handler     Handler
}

// Result is what a tool call returns to the model.
type Result struct {
	// Text is what the model reads.
	Text string
	// IsError says the call failed in a way the model can read and act on.
	IsError bool
	// Data is the same result as a JSON value (MCP structuredContent), or nil.
	Data any
	// Images are images the call made (run_code's charts), for a model that can see them
	// (MCP image content); Text says they are there.
	Images []Image
}

// ErrUnknownTool is returned by Call for a name that is not a tool.
var ErrUnknownTool = errors.New("unknown tool")

// All returns the tool definitions in a fixed order. The slice is new on every call; the
// Tools in it must not be modified.
func All() []Tool { return append([]Tool(nil), allTools()...) }

// Lookup returns the tool named name.
func Lookup(name string) (Tool, bool) {
	for _, t := range allTools() {
		if t.Name == name {
			return t, true
		}
	}
	return Tool{}, false
}

// Call validates args against the named tool's schema and runs it in s. It returns an error
// only for an unknown tool (wrapping ErrUnknownTool), arguments that do not match
// (*ArgumentError), or a ctx that ended; every other failure is a Result with IsError.
func Call(ctx context.Context, s *Session, name string, args json.RawMessage) (Result, error) {
	t, ok := Lookup(name)
	if !ok {
		return Result{}, fmt.Errorf("%w %q", ErrUnknownTool, name)
	}
	return t.Call(ctx, s, args)
}

// Call validates args against t's schema and runs t in s; see the package function Call.
func (t Tool) Call(ctx context.Context, s *Session, args json.RawMessage) (Result, error) {
	args, err := t.InputSchema.Validate(t.Name, args)
	if err != nil {
		return Result{}, err
	}
	res, err := t.Handler(ctx, s, args)
	if s.opts.Called != nil && !t.ReadOnly {
		s.opts.Called(ctx, t.Name, calledIn(s, args, res), failure(res, err))
	}
	if err == nil {
		return res, nil
	}
	var ae *ArgumentError
	if errors.As(err, &ae) {
		return Result{}, err
	}
	if ctx.Err() != nil {
		return Result{}, ctx.Err()
	}
	return errorResult(err), nil
}

// calledIn is the sandbox a call acted in, for SessionOptions.Called: the one it made
// (create_sandbox's result), the one it named, or the session's default.
func calledIn(s *Session, args json.RawMessage, res Result) string {
	if m, ok := res.Data.(map[string]any); ok {
		if id, ok := m["sandbox_id"].(string); ok && id != "" {
			return id
		}
	}
	var in inSandbox
	if json.Unmarshal(args, &in) == nil && in.SandboxID != "" {
		return in.SandboxID
	}
	return s.DefaultID()
}

// failure is a call's failure for SessionOptions.Called: its error, or a refusal the tool
// answered with a Result with IsError. A command that ran and exited non-zero (a Result
// with an exit_code) is no failure of the call, as in the REST API.
func failure(res Result, err error) error {
	if err != nil || !res.IsError {
		return err
	}
	if m, ok := res.Data.(map[string]any); ok {
		if _, ran := m["exit_code"]; ran {
			return nil
		}
	}
	return &sandbox.Error{Code: sandbox.CodeInvalidArgument, Message: "the tool refused the call"}
}

// errorResult turns a failure into text a model can act on.
func errorResult(err error) Result {
	code := sandbox.CodeOf(err)
	msg := err.Error()
	var hint string
	switch code {
	case sandbox.CodeEditNotFound:
		hint = "Read the file again and copy the exact text, including whitespace."
	case sandbox.CodeEditNotUnique:
		hint = "Include more surrounding lines in find so it matches exactly once."
	case sandbox.CodeNotFound:
		hint = "Check the path or id; list_files and list_sandboxes show what exists."
	case sandbox.CodeUnsupported:
		hint = "This sandbox provider cannot do that."
	}
	text := "Error: " + msg
	if hint != "" {
		text += "\n" + hint
	}
	return Result{Text: text, IsError: true, Data: map[string]any{"error": map[string]string{"code": string(code), "message": msg}}}
}

// allTools builds the definitions on first use, so programs that link this package but
// never serve tools (tupper exec, for one) do not pay for them at start-up. Each group of
// tools lives in a file of its own; this is their order.
var allTools = sync.OnceValue(func() []Tool {
	return slices.Concat(sandboxTools(), processTools(), fileTools(), gitTools(), snapshotTools(), codeTools())
})

// define completes t from its handler: the input schema is derived from the argument
// struct A (see schemaFor), and the handler is given the validated arguments decoded into A.
func define[A any](t Tool, run func(ctx context.Context, s *Session, args A) (Result, error)) Tool {
	t.InputSchema = schemaFor[A]()
	t.Handler = func(ctx context.Context, s *Session, raw json.RawMessage) (Result, error) {
		var a A
		if err := json.Unmarshal(raw, &a); err != nil {
			return Result{}, &ArgumentError{Tool: t.Name, Message: err.Error()}
		}
		return run(ctx, s, a)
	}
	return t
}

// inSandbox is the optional sandbox_id of every tool that works in one sandbox.
type inSandbox struct {
	SandboxID string `json:"sandbox_id,omitempty" jsonschema:"Id of the sandbox to use, from create_sandbox or list_sandboxes. Omit it to use this session's default sandbox, which is created on first use."`
}

func ms(n int64) time.Duration { return time.Duration(n) * time.Millisecond }
