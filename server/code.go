package server

import (
	"net/http"

	"github.com/tupper-dev/tupper/sandbox"
	"github.com/tupper-dev/tupper/server/api"
)

func codeResultJSON(r sandbox.CodeResult) api.CodeResult {
	return api.CodeResult{
		IsMainResult: r.IsMain, Text: r.Text, HTML: r.HTML, Markdown: r.Markdown, SVG: r.SVG, PNG: r.PNG,
		JPEG: r.JPEG, PDF: r.PDF, LaTeX: r.LaTeX, JavaScript: r.JavaScript, JSON: r.JSON, Chart: r.Chart, Extra: r.Extra,
	}
}

// executionJSON is ex on the wire, its lists never null.
func executionJSON(ex *sandbox.Execution) api.Execution {
	out := api.Execution{Results: []api.CodeResult{}, Stdout: ex.Stdout, Stderr: ex.Stderr, ExecutionCount: ex.ExecutionCount}
	for _, r := range ex.Results {
		out.Results = append(out.Results, codeResultJSON(r))
	}
	if out.Stdout == nil {
		out.Stdout = []string{}
	}
	if out.Stderr == nil {
		out.Stderr = []string{}
	}
	if ex.Error != nil {
		out.Error = &api.CodeError{Name: ex.Error.Name, Value: ex.Error.Value, Traceback: ex.Error.Traceback}
	}
	return out
}

// runCode runs a cell through the SDK's RunCode (the sandbox's code-interpreter server,
// redaction) and answers with its Execution, or, when the client accepts
// application/x-ndjson or text/event-stream, streams stdout, stderr, result and error frames
// as they come and an "end" frame with the execution count. The stream starts with the
// run's first output, so a run that cannot start (no such context, no code-interpreter
// server) is still an ordinary error status; one that fails later ends with a "failure"
// frame ({code, message}).
func (s *Server) runCode(w http.ResponseWriter, r *http.Request, _ *caller) {
	var req api.CodeRequest
	if err := decode(w, r, &req, false); err != nil {
		writeError(w, err)
		return
	}
	if req.Code == "" {
		writeError(w, badRequest("code is empty"))
		return
	}
	if req.Language != "" && req.ContextID != "" {
		writeError(w, badRequest("give a language or a contextId, not both"))
		return
	}
	timeout, err := durMS("timeoutMs", req.TimeoutMS)
	if err != nil {
		writeError(w, err)
		return
	}
	opts := sandbox.CodeOptions{Language: req.Language, Context: req.ContextID, Env: req.Env, Timeout: timeout}
	format := wantStream(r)
	s.withBox(w, r, func(b *sandbox.Sandbox) error {
		if format == "" {
			ex, err := b.RunCode(r.Context(), req.Code, opts)
			if err != nil {
				return err
			}
			writeJSON(w, http.StatusOK, executionJSON(ex))
			return nil
		}
		var sw *streamWriter
		send := func(typ string, v any) {
			if sw == nil {
				sw = startStream(w, format)
			}
			_ = sw.send(typ, v) // a client that left ends r.Context(), which interrupts the cell
		}
		opts.OnStdout = func(t string) { send("stdout", api.Output{Text: t}) }
		opts.OnStderr = func(t string) { send("stderr", api.Output{Text: t}) }
		opts.OnResult = func(res sandbox.CodeResult) { send("result", codeResultJSON(res)) }
		opts.OnError = func(e sandbox.CodeError) {
			send("error", api.CodeError{Name: e.Name, Value: e.Value, Traceback: e.Traceback})
		}
		ex, err := b.RunCode(r.Context(), req.Code, opts)
		if err != nil {
			if sw == nil {
				return err
			}
			send("failure", toAPIError(err))
			return nil
		}
		send("end", api.CodeEnd{ExecutionCount: ex.ExecutionCount})
		return nil
	})
}

// codeContexts lists the sandbox's code contexts, the default ones included.
func (s *Server) codeContexts(w http.ResponseWriter, r *http.Request, _ *caller) {
	s.withBox(w, r, func(b *sandbox.Sandbox) error {
		cs, err := b.CodeContexts(r.Context())
		if err != nil {
			return err
		}
		out := api.CodeContextList{Contexts: []api.CodeContext{}}
		for _, c := range cs {
			out.Contexts = append(out.Contexts, api.CodeContext(c))
		}
		writeJSON(w, http.StatusOK, out)
		return nil
	})
}

// createCodeContext starts a new context: a kernel of its own.
func (s *Server) createCodeContext(w http.ResponseWriter, r *http.Request, _ *caller) {
	var req api.CodeContextRequest
	if err := decode(w, r, &req, true); err != nil {
		writeError(w, err)
		return
	}
	s.withBox(w, r, func(b *sandbox.Sandbox) error {
		c, err := b.CreateCodeContext(r.Context(), sandbox.CodeContextOptions{Language: req.Language, Cwd: req.Cwd})
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusCreated, api.CodeContext(c))
		return nil
	})
}

// restartCodeContext gives a context a new kernel: its variables are gone.
func (s *Server) restartCodeContext(w http.ResponseWriter, r *http.Request, _ *caller) {
	s.withBox(w, r, func(b *sandbox.Sandbox) error {
		if err := b.RestartCodeContext(r.Context(), r.PathValue("context")); err != nil {
			return err
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	})
}

// removeCodeContext stops a context's kernel and forgets it.
func (s *Server) removeCodeContext(w http.ResponseWriter, r *http.Request, _ *caller) {
	s.withBox(w, r, func(b *sandbox.Sandbox) error {
		if err := b.RemoveCodeContext(r.Context(), r.PathValue("context")); err != nil {
			return err
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	})
}
