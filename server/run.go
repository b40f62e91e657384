package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"sync"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/sandbox"
	"github.com/tupper-dev/tupper/server/api"
)

// resultJSON is r on the wire.
func resultJSON(r *sandbox.RunResult) api.RunResult {
	return api.RunResult{
		OK: r.OK, ExitCode: r.ExitCode, Stdout: r.Stdout, Stderr: r.Stderr, Output: r.Output,
		DurationMS: r.Duration.Milliseconds(), Truncated: r.Truncated, TimedOut: r.TimedOut,
		Aborted: r.Aborted, Signal: r.Signal, OOMKilled: r.OOMKilled, Cwd: r.Cwd, Command: r.Command,
	}
}

// run runs a command through the SDK (fresh shell, timeout, output caps, redaction) and
// answers with its result, or streams its output first when the client accepts
// application/x-ndjson or text/event-stream.
func (s *Server) run(w http.ResponseWriter, r *http.Request, _ *caller) {
	var req api.RunRequest
	if err := decode(w, r, &req, false); err != nil {
		writeError(w, err)
		return
	}
	if req.Command == "" {
		writeError(w, badRequest("command is empty"))
		return
	}
	timeout, err := durMS("timeoutMs", req.TimeoutMS)
	if err != nil {
		writeError(w, err)
		return
	}
	opts := sandbox.RunOptions{Cwd: req.Cwd, Env: req.Env, Timeout: timeout, MaxOutputBytes: req.MaxOutputBytes}
	if req.Stdin != nil {
		opts.Stdin = []byte(*req.Stdin)
	}
	format := wantStream(r)
	s.withBox(w, r, func(b *sandbox.Sandbox) error {
		h := b.Stream(r.Context(), req.Command, opts)
		if format == "" {
			res, err := h.Wait()
			if err != nil {
				return err
			}
			writeJSON(w, http.StatusOK, resultJSON(res))
			return nil
		}
		sw := startStream(w, format)
		for c := range h.Chunks() {
			if err := sw.send(c.Stream, api.Output{Text: c.Text}); err != nil {
				break // the client left; r.Context() ends the command
			}
		}
		res, err := h.Wait()
		if err != nil {
			sw.sendError(err)
			return nil
		}
		_ = sw.send("result", resultJSON(res))
		return nil
	})
}

// frameWriter serializes frames from the command's two output streams.
type frameWriter struct {
	mu  sync.Mutex
	w   io.Writer
	rc  *http.ResponseController
	err error
}

func (f *frameWriter) send(fr api.ExecFrame) error {
	line, _ := json.Marshal(fr)
	line = append(line, '\n')
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return f.err
	}
	if _, err := f.w.Write(line); err != nil {
		f.err = err
		return err
	}
	if err := f.rc.Flush(); err != nil {
		f.err = err
	}
	return f.err
}

type streamOut struct {
	f    *frameWriter
	name string
}

func (s streamOut) Write(p []byte) (int, error) {
	if err := s.f.send(api.ExecFrame{Type: s.name, Data: bytes.Clone(p)}); err != nil {
		return 0, err
	}
	return len(p), nil
}

// exec is the raw provider primitive, for providers/remote: the command runs as the provider
// runs it (no SDK defaults, caps or redaction: the client's SDK applies those), with output
// streamed as NDJSON frames and stdin streamed from the request body.
func (s *Server) exec(w http.ResponseWriter, r *http.Request, _ *caller) {
	br := bufio.NewReaderSize(r.Body, 64<<10)
	line, err := readLine(br, MaxJSONBody)
	if err != nil {
		writeError(w, err)
		return
	}
	var h api.ExecHeader
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&h); err != nil {
		writeError(w, badRequest("malformed exec header: %v", err))
		return
	}
	if h.Command == "" || h.Cwd == "" || h.Cwd[0] != '/' {
		writeError(w, badRequest("exec needs a command and an absolute cwd"))
		return
	}
	timeout, err := durMS("timeoutMs", h.TimeoutMS)
	if err != nil {
		writeError(w, err)
		return
	}
	s.withBox(w, r, func(b *sandbox.Sandbox) error {
		ctx := r.Context()
		if timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, timeout)
			defer cancel()
		}
		req := provider.ExecRequest{Command: h.Command, Cwd: h.Cwd, Env: h.Env, User: h.User, Detach: h.Detach}
		if h.Detach {
			res, err := b.Native.Exec(ctx, req)
			if err != nil {
				return err
			}
			w.Header().Set("Content-Type", "application/x-ndjson")
			line, _ := json.Marshal(api.ExecFrame{Type: "exit", PID: res.PID})
			_, _ = w.Write(append(line, '\n'))
			return nil
		}
		rc := http.NewResponseController(w)
		if h.Stdin {
			if err := rc.EnableFullDuplex(); err != nil {
				return provider.Errorf(provider.CodeInternal, "streamed stdin: %v", err)
			}
			req.Stdin = br
		}
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.WriteHeader(http.StatusOK)
		fw := &frameWriter{w: w, rc: rc}
		_ = rc.Flush()
		req.Stdout = streamOut{fw, "stdout"}
		req.Stderr = streamOut{fw, "stderr"}
		res, err := b.Native.Exec(ctx, req)
		if err != nil {
			e := toAPIError(err)
			_ = fw.send(api.ExecFrame{Type: "error", Code: e.Code, Message: e.Message})
			return nil
		}
		_ = fw.send(api.ExecFrame{Type: "exit", ExitCode: res.ExitCode, Signal: res.Signal, OOMKilled: res.OOMKilled, PID: res.PID})
		return nil
	})
}

// readLine reads one line of at most max bytes.
func readLine(br *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > max {
			return nil, &http.MaxBytesError{Limit: int64(max)}
		}
		if err == nil {
			return line, nil
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if errors.Is(err, io.EOF) && len(line) > 0 {
			return line, nil
		}
		return nil, badRequest("reading the exec header: %v", err)
	}
}
