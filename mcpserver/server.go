// Package mcpserver serves Tupper's sandbox tools (package tools) over the Model Context
// Protocol, with the official MCP Go SDK: over stdio for `tupper mcp`, and over streamable
// HTTP for the server's /mcp endpoint.
//
// Each MCP session gets its own tools.Session: tools called without sandbox_id share one
// default sandbox, created on the session's first such call and destroyed when the session
// ends (stdin closes, the HTTP client deletes the session, or it stays idle past
// Options.IdleTimeout).
//
// Failures inside a sandbox — a non-zero exit, a missing file, an ambiguous edit — are tool
// results with isError set; an unknown tool or arguments that do not match the tool's schema
// are JSON-RPC errors (invalid params).
package mcpserver

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/tools"
)

// Options configures ServeStdio, Serve and NewHTTPHandler.
type Options struct {
	// Provider makes the sandboxes. Required.
	Provider provider.Provider
	// Session is the tools.SessionOptions of every MCP session (for HTTP, see also
	// HTTPOptions.SessionFor).
	Session tools.SessionOptions
	// Version is the server version reported to clients. Default: "dev".
	Version string
	// Logger receives the server's diagnostics. Nil: none. Over stdio it must not write to
	// stdout.
	Logger *slog.Logger
}

func (o Options) validate() error {
	if o.Provider == nil {
		return errors.New("mcpserver: Options.Provider is nil")
	}
	return nil
}

// instructions tell the model how the tools fit together.
const instructions = `Tupper gives you disposable Linux sandboxes to run code in.
Tools called without sandbox_id use this session's default sandbox, created on first use and destroyed when the session ends; you rarely need create_sandbox.
Work in the sandbox's working directory, /workspace unless its template sets another: relative paths resolve there. Each run_command starts a fresh shell; use start_process for servers and process_logs to read their output.
Prefer edit_file for changes to existing files, and file_changes to review what you changed.`

// newServer returns an MCP server whose tools run in sess. When the MCP session ends, sess
// is closed and then ended, if not nil, is called.
func newServer(opts Options, sess *tools.Session, ended func()) *mcp.Server {
	version := opts.Version
	if version == "" {
		version = "dev"
	}
	var watch sync.Once
	closeWith := func(ss *mcp.ServerSession) {
		// The tools session ends with the MCP session: destroy the default sandbox.
		watch.Do(func() {
			go func() {
				_ = ss.Wait()
				closeSession(sess, opts.Logger)
				if ended != nil {
					ended()
				}
			}()
		})
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "tupper", Title: "Tupper sandboxes", Version: version}, &mcp.ServerOptions{
		Instructions: instructions,
		Logger:       opts.Logger,
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{}},
		InitializedHandler: func(_ context.Context, req *mcp.InitializedRequest) {
			if req.Session != nil {
				closeWith(req.Session)
			}
		},
	})
	for _, t := range tools.All() {
		schema, err := json.Marshal(t.InputSchema)
		if err != nil {
			panic("mcpserver: " + err.Error()) // static definitions; a failure is a bug
		}
		s.AddTool(&mcp.Tool{
			Name:        t.Name,
			Description: t.Description,
			InputSchema: json.RawMessage(schema),
			Annotations: annotations(t),
		}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			if req.Session != nil {
				closeWith(req.Session)
			}
			res, err := t.Call(ctx, sess, req.Params.Arguments)
			if err != nil {
				var ae *tools.ArgumentError
				if errors.As(err, &ae) {
					return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: ae.Error()}
				}
				return nil, err
			}
			return toMCP(res), nil
		})
	}
	return s
}

func annotations(t tools.Tool) *mcp.ToolAnnotations {
	destructive := t.Destructive
	openWorld := t.Name == "git_clone"
	return &mcp.ToolAnnotations{
		ReadOnlyHint:    t.ReadOnly,
		DestructiveHint: &destructive,
		OpenWorldHint:   &openWorld,
	}
}

func toMCP(r tools.Result) *mcp.CallToolResult {
	content := []mcp.Content{&mcp.TextContent{Text: r.Text}}
	for _, im := range r.Images {
		data, err := base64.StdEncoding.DecodeString(im.Data)
		if err != nil {
			continue // the SDK checked it was base64; nothing to show otherwise
		}
		content = append(content, &mcp.ImageContent{MIMEType: im.MIME, Data: data})
	}
	return &mcp.CallToolResult{
		Content:           content,
		StructuredContent: r.Data,
		IsError:           r.IsError,
	}
}

func closeSession(sess *tools.Session, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	if err := sess.Close(ctx); err != nil && log != nil {
		log.Warn("destroying the session's default sandbox", "err", err)
	}
}

// Serve runs one MCP session over newline-delimited JSON-RPC on in and out until the client
// disconnects or ctx ends, then destroys the session's default sandbox.
func Serve(ctx context.Context, opts Options, in io.ReadCloser, out io.WriteCloser) error {
	if err := opts.validate(); err != nil {
		return err
	}
	sess := tools.NewSession(opts.Provider, opts.Session)
	defer closeSession(sess, opts.Logger)
	err := newServer(opts, sess, nil).Run(ctx, &mcp.IOTransport{Reader: in, Writer: out})
	if errors.Is(err, mcp.ErrConnectionClosed) || errors.Is(err, io.EOF) || (err != nil && ctx.Err() != nil) {
		return nil
	}
	return err
}

// ServeStdio is Serve on the process's standard input and output: `tupper mcp`.
func ServeStdio(ctx context.Context, opts Options) error {
	return Serve(ctx, opts, os.Stdin, os.Stdout)
}
