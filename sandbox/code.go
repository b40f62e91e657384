package sandbox

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/tupper-dev/tupper/provider"
)

// CodeInterpreterPort is the port of the code-interpreter server in a sandbox of the
// built-in code-interpreter template (E2B's, so that E2B's Code Interpreter SDK reaches it
// too; docs/code-interpreter.md).
const CodeInterpreterPort = 49999

// CodeOptions configure RunCode. The zero value runs Python in the sandbox's default Python
// context, with no time limit but ctx's.
type CodeOptions struct {
	// Language picks the default context of a language ("" is python); Context a context
	// of CreateCodeContext instead. Not both.
	Language string
	Context  string
	// Env are environment variables for this run only.
	Env map[string]string
	// Timeout interrupts the run after this long (0: none but ctx's): the cell is stopped,
	// its context and variables stay, and RunCode returns a CodeTimeout error.
	Timeout time.Duration
	// OnStdout, OnStderr, OnResult and OnError, when set, receive the run's output as it
	// comes, from RunCode's goroutine, in order.
	OnStdout func(text string)
	OnStderr func(text string)
	OnResult func(CodeResult)
	OnError  func(CodeError)
}

// CodeResult is a value a cell displayed, or its final value (IsMain): each format the
// value has, as Jupyter gives it (images base64-encoded), and Chart, the data of a
// matplotlib figure (type, title, axes, elements), as E2B's SDKs expose it.
type CodeResult struct {
	IsMain     bool           `json:"is_main_result"`
	Text       string         `json:"text,omitempty"`
	HTML       string         `json:"html,omitempty"`
	Markdown   string         `json:"markdown,omitempty"`
	SVG        string         `json:"svg,omitempty"`
	PNG        string         `json:"png,omitempty"`
	JPEG       string         `json:"jpeg,omitempty"`
	PDF        string         `json:"pdf,omitempty"`
	LaTeX      string         `json:"latex,omitempty"`
	JavaScript string         `json:"javascript,omitempty"`
	JSON       any            `json:"json,omitempty"`
	Chart      map[string]any `json:"chart,omitempty"`
	Extra      map[string]any `json:"extra,omitempty"`
}

// CodeError is the error a cell raised (Name "KernelDied" when its kernel died: the context
// restarts, without its variables, on its next run).
type CodeError struct {
	Name      string `json:"name"`
	Value     string `json:"value"`
	Traceback string `json:"traceback"`
}

// Execution is the outcome of RunCode.
type Execution struct {
	Results        []CodeResult
	Stdout, Stderr []string
	Error          *CodeError
	ExecutionCount int
}

// Text is the text of the cell's final value ("" when it has none).
func (e *Execution) Text() string {
	for _, r := range e.Results {
		if r.IsMain {
			return r.Text
		}
	}
	return ""
}

// CodeContext is a context code runs in: a kernel with its language and working
// directory, whose variables live until it is restarted or removed.
type CodeContext struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
}

// CodeContextOptions configure CreateCodeContext.
type CodeContextOptions struct {
	Language string // "" is python
	Cwd      string // "" is /home/user
}

// codeClient is an HTTP client of the sandbox's code-interpreter server, over DialPort: one
// connection per call, closed with its answer's body.
func (b *Sandbox) codeClient() *http.Client {
	return &http.Client{Transport: &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return b.DialPort(ctx, CodeInterpreterPort)
		},
		DisableCompression: true,
		DisableKeepAlives:  true,
	}}
}

// codeCall sends one request to the code-interpreter server and returns its answer, or the
// error it gave.
func (b *Sandbox) codeCall(ctx context.Context, op, method, path string, body any) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		buf, err := json.Marshal(body)
		if err != nil {
			return nil, errorf(CodeInvalidArgument, op, "%v", err)
		}
		rd = bytes.NewReader(buf)
	}
	// The port is dialed through the provider's tunnel; a provider without one (remote: a
	// server) reaches it over HTTP at its preview URL, a signed URL of the server's proxy.
	base, client := "http://code-interpreter", b.codeClient()
	if _, ok := b.inst.(provider.PortDialer); !ok {
		// The provider's own URL, not b.PreviewURL's, which a server may point at itself.
		u, err := b.inst.PreviewURL(ctx, CodeInterpreterPort)
		if err != nil {
			return nil, wrapProvider(err, op)
		}
		base, client = strings.TrimSuffix(u, "/"), &http.Client{Transport: &http.Transport{Proxy: nil, DisableCompression: true, DisableKeepAlives: true}}
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, rd)
	if err != nil {
		return nil, errorf(CodeInvalidArgument, op, "%v", err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, errorf(CodeTimeout, op, "%v", ctx.Err())
		}
		if pe := (*provider.Error)(nil); errors.As(err, &pe) && pe.Code != CodeUnavailable {
			return nil, pe // DialPort's own error: no such sandbox, no tunnel
		}
		return nil, errorf(CodeUnavailable, op, "nothing answers on port %d, the code-interpreter server's: make the sandbox from the code-interpreter template (%v)", CodeInterpreterPort, err)
	}
	if resp.StatusCode >= 300 {
		defer resp.Body.Close()
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		code := CodeInternal
		switch resp.StatusCode {
		case http.StatusNotFound:
			code = CodeNotFound
		case http.StatusBadRequest:
			code = CodeInvalidArgument
		case http.StatusBadGateway, http.StatusServiceUnavailable: // a proxy's: nothing listens
			return nil, errorf(CodeUnavailable, op, "nothing answers on port %d, the code-interpreter server's: make the sandbox from the code-interpreter template (%s)", CodeInterpreterPort, strings.TrimSpace(b.red.String(string(msg))))
		}
		return nil, errorf(code, op, "%s", strings.TrimSpace(b.red.String(string(msg))))
	}
	return resp, nil
}

// RunCode runs code in a context of the sandbox, which must be of the code-interpreter
// template (or run its server on CodeInterpreterPort), and returns what it printed,
// displayed and raised: variables stay in the context for the next run. An error the code
// raised is Execution.Error, not RunCode's error, which is for a run that could not be
// made or finished (a timeout, an unknown context, an unreachable server). Output is
// redacted of the sandbox's secrets like every output of this handle.
func (b *Sandbox) RunCode(ctx context.Context, code string, opts CodeOptions) (*Execution, error) {
	const op = "run_code"
	if opts.Language != "" && opts.Context != "" {
		return nil, errorf(CodeInvalidArgument, op, "give a language or a context, not both")
	}
	runCtx := ctx
	if opts.Timeout > 0 {
		var cancel context.CancelFunc
		runCtx, cancel = context.WithTimeout(ctx, opts.Timeout)
		defer cancel()
	}
	resp, err := b.codeCall(runCtx, op, "POST", "/execute", map[string]any{
		"code": code, "context_id": opts.Context, "language": opts.Language, "env_vars": opts.Env,
	})
	if err != nil {
		return nil, err
	}
	// Closing the connection is what interrupts the cell (the server sees its client go).
	defer resp.Body.Close()
	ex := &Execution{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	for sc.Scan() {
		var m struct {
			Type  string `json:"type"`
			Text  string `json:"text"`
			Count int    `json:"execution_count"`
			CodeError
		}
		line := sc.Bytes()
		if err := json.Unmarshal(line, &m); err != nil {
			return ex, errorf(CodeInternal, op, "the code-interpreter server sent a line that is not JSON: %v", err)
		}
		switch m.Type {
		case "stdout":
			t := b.red.String(m.Text)
			ex.Stdout = append(ex.Stdout, t)
			if opts.OnStdout != nil {
				opts.OnStdout(t)
			}
		case "stderr":
			t := b.red.String(m.Text)
			ex.Stderr = append(ex.Stderr, t)
			if opts.OnStderr != nil {
				opts.OnStderr(t)
			}
		case "result":
			var r CodeResult
			if err := json.Unmarshal(line, &r); err != nil {
				return ex, errorf(CodeInternal, op, "a result the code-interpreter server sent: %v", err)
			}
			r.Text, r.HTML, r.Markdown = b.red.String(r.Text), b.red.String(r.HTML), b.red.String(r.Markdown)
			ex.Results = append(ex.Results, r)
			if opts.OnResult != nil {
				opts.OnResult(r)
			}
		case "error":
			e := CodeError{Name: m.Name, Value: b.red.String(m.Value), Traceback: b.red.String(m.Traceback)}
			ex.Error = &e
			if opts.OnError != nil {
				opts.OnError(e)
			}
		case "number_of_executions":
			ex.ExecutionCount = m.Count
		}
	}
	if err := sc.Err(); err != nil {
		if runCtx.Err() != nil {
			if ctx.Err() == nil {
				return ex, errorf(CodeTimeout, op, "the cell ran past its timeout of %v and was interrupted; its context stays", opts.Timeout)
			}
			return ex, errorf(CodeTimeout, op, "%v", ctx.Err())
		}
		return ex, errorf(CodeUnavailable, op, "reading the run's output: %v", err)
	}
	return ex, nil
}

// CreateCodeContext makes a new context: a kernel of its own, for RunCode's
// CodeOptions.Context.
func (b *Sandbox) CreateCodeContext(ctx context.Context, opts CodeContextOptions) (CodeContext, error) {
	var c CodeContext
	resp, err := b.codeCall(ctx, "create_code_context", "POST", "/contexts", map[string]string{"language": opts.Language, "cwd": opts.Cwd})
	if err != nil {
		return c, err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&c); err != nil {
		return c, errorf(CodeInternal, "create_code_context", "the answer: %v", err)
	}
	return c, nil
}

// CodeContexts lists the sandbox's contexts, the default ones included.
func (b *Sandbox) CodeContexts(ctx context.Context) ([]CodeContext, error) {
	resp, err := b.codeCall(ctx, "list_code_contexts", "GET", "/contexts", nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var cs []CodeContext
	if err := json.NewDecoder(resp.Body).Decode(&cs); err != nil {
		return nil, errorf(CodeInternal, "list_code_contexts", "the answer: %v", err)
	}
	return cs, nil
}

// RestartCodeContext replaces a context's kernel with a new one: its variables are gone.
func (b *Sandbox) RestartCodeContext(ctx context.Context, id string) error {
	if id == "" || strings.Contains(id, "/") {
		return errorf(CodeInvalidArgument, "restart_code_context", "context id %q", id)
	}
	resp, err := b.codeCall(ctx, "restart_code_context", "POST", "/contexts/"+id+"/restart", nil)
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

// RemoveCodeContext stops a context's kernel and forgets it.
func (b *Sandbox) RemoveCodeContext(ctx context.Context, id string) error {
	if id == "" || strings.Contains(id, "/") {
		return errorf(CodeInvalidArgument, "remove_code_context", "context id %q", id)
	}
	resp, err := b.codeCall(ctx, "remove_code_context", "DELETE", "/contexts/"+id, nil)
	if err != nil {
		return err
	}
	return resp.Body.Close()
}
