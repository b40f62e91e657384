package server

import (
	"context"
	"net/http"
	"regexp"

	"github.com/tupper-dev/tupper/sandbox"
	"github.com/tupper-dev/tupper/server/api"
)

func procJSON(ctx context.Context, p *sandbox.Process) (api.Process, error) {
	st, err := p.Status(ctx)
	if err != nil {
		return api.Process{}, err
	}
	return api.Process{Name: p.Name(), Command: p.Command(), Status: string(st), PID: p.PID(), Ready: p.Ready(), URL: p.URL()}, nil
}

func (s *Server) startProcess(w http.ResponseWriter, r *http.Request, _ *caller) {
	var req api.StartProcess
	if err := decode(w, r, &req, false); err != nil {
		writeError(w, err)
		return
	}
	rt, err := durMS("readyTimeoutMs", req.ReadyTimeoutMS)
	if err != nil {
		writeError(w, err)
		return
	}
	opts := sandbox.StartOptions{Name: req.Name, Cwd: req.Cwd, Env: req.Env, ReadyTimeout: rt}
	if rd := req.Ready; rd != nil {
		opts.Ready = &sandbox.Ready{Port: rd.Port, Path: rd.Path, HTTP: rd.HTTP}
		if rd.HTTP && rd.Path == "" {
			opts.Ready.Path = "/"
		}
		if rd.Log != "" {
			re, err := regexp.Compile(rd.Log)
			if err != nil {
				writeError(w, badRequest("ready.log is not a regular expression: %v", err))
				return
			}
			opts.Ready.Log = re
		}
	}
	s.withBox(w, r, func(b *sandbox.Sandbox) error {
		p, err := b.Start(r.Context(), req.Command, opts)
		if err != nil {
			return err
		}
		out, err := procJSON(r.Context(), p)
		if err != nil {
			return err
		}
		s.emit(r.Context(), EventProcessStarted, b.ID, map[string]any{"name": out.Name, "pid": out.PID})
		writeJSON(w, http.StatusCreated, out)
		return nil
	})
}

func (s *Server) listProcesses(w http.ResponseWriter, r *http.Request, _ *caller) {
	s.withBox(w, r, func(b *sandbox.Sandbox) error {
		ps, err := b.Processes(r.Context())
		if err != nil {
			return err
		}
		out := make([]api.Process, 0, len(ps))
		for _, p := range ps {
			out = append(out, api.Process{Name: p.Name, Command: p.Command, Status: string(p.Status), StartedAt: p.StartedAt.UTC()})
		}
		writeJSON(w, http.StatusOK, api.ProcessList{Processes: out})
		return nil
	})
}

// withProcess runs fn with the process named by {name} in the sandbox named by {id}.
func (s *Server) withProcess(w http.ResponseWriter, r *http.Request, fn func(b *sandbox.Sandbox, p *sandbox.Process) error) {
	s.withBox(w, r, func(b *sandbox.Sandbox) error {
		p, err := b.Process(r.Context(), r.PathValue("name"))
		if err != nil {
			return err
		}
		return fn(b, p)
	})
}

func (s *Server) getProcess(w http.ResponseWriter, r *http.Request, _ *caller) {
	s.withProcess(w, r, func(_ *sandbox.Sandbox, p *sandbox.Process) error {
		out, err := procJSON(r.Context(), p)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, out)
		return nil
	})
}

func (s *Server) processLogs(w http.ResponseWriter, r *http.Request, _ *caller) {
	max, err := queryInt(r, "maxBytes", 0)
	if err != nil {
		writeError(w, err)
		return
	}
	s.withProcess(w, r, func(_ *sandbox.Sandbox, p *sandbox.Process) error {
		page, err := p.Logs(r.Context(), sandbox.LogsOptions{After: r.URL.Query().Get("after"), MaxBytes: int(max)})
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, api.LogPage{NextCursor: page.NextCursor, Text: page.Text, Truncated: page.Truncated})
		return nil
	})
}

// processLines streams the process's output line by line (NDJSON by default, or SSE), each
// with the cursor that continues after it, until the process exits or the client leaves.
func (s *Server) processLines(w http.ResponseWriter, r *http.Request, _ *caller) {
	format := wantStream(r)
	if format == "" {
		format = "ndjson"
	}
	s.withProcess(w, r, func(_ *sandbox.Sandbox, p *sandbox.Process) error {
		var sw *streamWriter
		for line, err := range p.Lines(r.Context(), r.URL.Query().Get("after")) {
			if sw == nil {
				if err != nil {
					return err
				}
				sw = startStream(w, format)
			}
			if err != nil {
				if r.Context().Err() == nil {
					sw.sendError(err)
				}
				return nil
			}
			if sw.send("line", api.Line{Cursor: line.Cursor, Stream: line.Stream, Text: line.Text}) != nil {
				return nil
			}
		}
		if sw == nil {
			sw = startStream(w, format)
		}
		_ = sw.send("end", map[string]any{})
		return nil
	})
}

func (s *Server) stopProcess(w http.ResponseWriter, r *http.Request, _ *caller) {
	var req api.StopProcess
	grace, ok := decodeMS(w, r, &req, "graceMs", &req.GraceMS)
	if !ok {
		return
	}
	s.withProcess(w, r, func(b *sandbox.Sandbox, p *sandbox.Process) error {
		if err := p.Stop(r.Context(), sandbox.StopOptions{Grace: grace}); err != nil {
			return err
		}
		s.emit(r.Context(), EventProcessStopped, b.ID, map[string]any{"name": p.Name()})
		out, err := procJSON(r.Context(), p)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, out)
		return nil
	})
}

func (s *Server) restartProcess(w http.ResponseWriter, r *http.Request, _ *caller) {
	s.withProcess(w, r, func(b *sandbox.Sandbox, p *sandbox.Process) error {
		if err := p.Restart(r.Context()); err != nil {
			return err
		}
		out, err := procJSON(r.Context(), p)
		if err != nil {
			return err
		}
		s.emit(r.Context(), EventProcessStarted, b.ID, map[string]any{"name": out.Name, "pid": out.PID, "restart": true})
		writeJSON(w, http.StatusOK, out)
		return nil
	})
}

func (s *Server) waitProcess(w http.ResponseWriter, r *http.Request, _ *caller) {
	var req api.WaitProcess
	timeout, ok := decodeMS(w, r, &req, "timeoutMs", &req.TimeoutMS)
	if !ok {
		return
	}
	s.withProcess(w, r, func(b *sandbox.Sandbox, p *sandbox.Process) error {
		ctx := r.Context()
		if timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, timeout)
			defer cancel()
		}
		es, err := p.Wait(ctx)
		if err != nil {
			if ctx.Err() == context.DeadlineExceeded && r.Context().Err() == nil {
				writeJSON(w, http.StatusOK, api.WaitResult{Status: "running"})
				return nil
			}
			return err
		}
		data := map[string]any{"name": p.Name(), "exitCode": es.ExitCode, "signal": es.Signal}
		if es.OOMKilled {
			data["oomKilled"] = true
		}
		s.emit(r.Context(), EventProcessExited, b.ID, data)
		writeJSON(w, http.StatusOK, api.WaitResult{Status: "exited", ExitCode: &es.ExitCode, Signal: &es.Signal, OOMKilled: es.OOMKilled})
		return nil
	})
}
