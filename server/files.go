package server

import (
	"context"
	"encoding/base64"
	"errors"
	"io"
	"net/http"
	"strconv"
	"unicode/utf8"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/sandbox"
	"github.com/tupper-dev/tupper/server/api"
)

// fileJSON is fi on the wire.
func fileJSON(fi sandbox.FileInfo) api.FileInfo {
	return api.FileInfo{Path: fi.Path, Type: string(fi.Type), Size: fi.Size, Mode: fi.Mode, ModifiedAt: fi.ModifiedAt.UTC()}
}

func pathParam(r *http.Request) (string, error) {
	p := r.URL.Query().Get("path")
	if p == "" {
		return "", badRequest("query parameter path is required")
	}
	return p, nil
}

func parseMode(s string) (*int, error) {
	if s == "" {
		return nil, nil
	}
	m, err := strconv.ParseUint(s, 8, 32)
	if err != nil || m > 0o7777 {
		return nil, badRequest("mode %q is not an octal number from 0 to 7777", s)
	}
	v := int(m)
	return &v, nil
}

// download streams a file: the whole file, or length bytes from offset (for log cursors and
// resumed downloads). A failure after the first byte aborts the response, so a client never
// mistakes a cut-off file for a whole one.
func (s *Server) download(w http.ResponseWriter, r *http.Request, _ *caller) {
	p, err := pathParam(r)
	if err != nil {
		writeError(w, err)
		return
	}
	off, err := queryInt(r, "offset", 0)
	if err != nil {
		writeError(w, err)
		return
	}
	length, err := queryInt(r, "length", -1)
	if err != nil {
		writeError(w, err)
		return
	}
	if off < 0 {
		writeError(w, badRequest("offset must not be negative"))
		return
	}
	s.withBox(w, r, func(b *sandbox.Sandbox) error {
		return s.serveFile(w, r, b, p, off, length)
	})
}

func (s *Server) serveFile(w http.ResponseWriter, r *http.Request, b *sandbox.Sandbox, p string, off, length int64) error {
	ctx := r.Context()
	rc, err := b.Files.OpenRange(ctx, p, off, length)
	if err != nil {
		return err
	}
	defer rc.Close()
	// Read the first bytes before committing to 200, so an error can still be an error.
	buf := make([]byte, 32<<10)
	n, rerr := io.ReadFull(rc, buf)
	if rerr != nil && !errors.Is(rerr, io.EOF) && !errors.Is(rerr, io.ErrUnexpectedEOF) {
		return provider.Wrap(rerr, provider.CodeProvider, "files.read")
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	if rerr != nil {
		w.Header().Set("Content-Length", strconv.Itoa(n))
	}
	w.WriteHeader(http.StatusOK)
	if _, err := w.Write(buf[:n]); err != nil || rerr != nil {
		return nil
	}
	if _, err := io.Copy(w, rc); err != nil {
		if ctx.Err() == nil {
			s.log.Warn("file download failed midway", "sandbox", b.ID, "err", provider.StripCredentials(err.Error()))
		}
		panic(http.ErrAbortHandler)
	}
	return nil
}

// upload streams the request body into a file, creating parent directories.
func (s *Server) upload(w http.ResponseWriter, r *http.Request, _ *caller) {
	p, err := pathParam(r)
	if err != nil {
		writeError(w, err)
		return
	}
	mode, err := parseMode(r.URL.Query().Get("mode"))
	if err != nil {
		writeError(w, err)
		return
	}
	s.withBox(w, r, func(b *sandbox.Sandbox) error {
		return s.writeBody(w, r, b, p, mode)
	})
}

func (s *Server) writeBody(w http.ResponseWriter, r *http.Request, b *sandbox.Sandbox, p string, mode *int) error {
	body := http.MaxBytesReader(w, r.Body, s.cfg.MaxUploadBytes)
	if err := b.Files.WriteFrom(r.Context(), p, body, sandbox.WriteOptions{Mode: mode}); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return mbe
		}
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// MaxReadBytes bounds POST files/read; larger files are for GET files/content.
const MaxReadBytes = 16 << 20

func (s *Server) readFile(w http.ResponseWriter, r *http.Request, _ *caller) {
	var req api.PathRequest
	if err := decode(w, r, &req, false); err != nil {
		writeError(w, err)
		return
	}
	s.withBox(w, r, func(b *sandbox.Sandbox) error {
		rc, err := b.Files.Open(r.Context(), req.Path)
		if err != nil {
			return err
		}
		defer rc.Close()
		data, err := io.ReadAll(io.LimitReader(rc, MaxReadBytes+1))
		if err != nil {
			return provider.Wrap(err, provider.CodeProvider, "files.read")
		}
		if len(data) > MaxReadBytes {
			return provider.Errorf(provider.CodeResourceExhausted, "file is larger than %d bytes: use GET files/content", MaxReadBytes)
		}
		out := api.FileContent{Path: req.Path, Encoding: "utf-8", Content: string(data)}
		if !utf8.Valid(data) {
			out.Encoding, out.Content = "base64", base64.StdEncoding.EncodeToString(data)
		}
		writeJSON(w, http.StatusOK, out)
		return nil
	})
}

func (s *Server) writeFile(w http.ResponseWriter, r *http.Request, _ *caller) {
	var req api.WriteFile
	if err := decode(w, r, &req, false); err != nil {
		writeError(w, err)
		return
	}
	data := []byte(req.Content)
	switch req.Encoding {
	case "", "utf-8", "utf8":
	case "base64":
		var err error
		if data, err = base64.StdEncoding.DecodeString(req.Content); err != nil {
			writeError(w, badRequest("content is not base64: %v", err))
			return
		}
	default:
		writeError(w, badRequest("encoding %q is not utf-8 or base64", req.Encoding))
		return
	}
	mode, err := parseMode(req.Mode)
	if err != nil {
		writeError(w, err)
		return
	}
	s.withBox(w, r, func(b *sandbox.Sandbox) error {
		if err := b.Files.Write(r.Context(), req.Path, data, sandbox.WriteOptions{Mode: mode}); err != nil {
			return err
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	})
}

func (s *Server) editFile(w http.ResponseWriter, r *http.Request, _ *caller) {
	var req api.EditRequest
	if err := decode(w, r, &req, false); err != nil {
		writeError(w, err)
		return
	}
	s.withBox(w, r, func(b *sandbox.Sandbox) error {
		if err := b.Files.Edit(r.Context(), req.Path, req.Find, req.Replace); err != nil {
			return err
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	})
}

func (s *Server) listFiles(w http.ResponseWriter, r *http.Request, _ *caller) {
	rec, err := queryBool(r, "recursive")
	if err != nil {
		writeError(w, err)
		return
	}
	s.withBox(w, r, func(b *sandbox.Sandbox) error {
		infos, err := b.Files.List(r.Context(), r.URL.Query().Get("path"), sandbox.FileListOptions{Recursive: rec, Glob: r.URL.Query().Get("glob")})
		if err != nil {
			return err
		}
		out := make([]api.FileInfo, 0, len(infos))
		for _, fi := range infos {
			out = append(out, fileJSON(fi))
		}
		writeJSON(w, http.StatusOK, api.FileList{Entries: out})
		return nil
	})
}

// withPath is withBox for a request whose query names a file (pathParam): a bad path is
// answered before the sandbox is looked up.
func (s *Server) withPath(w http.ResponseWriter, r *http.Request, fn func(b *sandbox.Sandbox, p string) error) {
	p, err := pathParam(r)
	if err != nil {
		writeError(w, err)
		return
	}
	s.withBox(w, r, func(b *sandbox.Sandbox) error { return fn(b, p) })
}

func (s *Server) statFile(w http.ResponseWriter, r *http.Request, _ *caller) {
	s.withPath(w, r, func(b *sandbox.Sandbox, p string) error {
		fi, err := b.Files.Stat(r.Context(), p)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, fileJSON(fi))
		return nil
	})
}

func (s *Server) existsFile(w http.ResponseWriter, r *http.Request, _ *caller) {
	s.withPath(w, r, func(b *sandbox.Sandbox, p string) error {
		ok, err := b.Files.Exists(r.Context(), p)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, api.Exists{Exists: ok})
		return nil
	})
}

func (s *Server) removeFile(w http.ResponseWriter, r *http.Request, _ *caller) {
	var req api.RemoveRequest
	if err := decode(w, r, &req, false); err != nil {
		writeError(w, err)
		return
	}
	s.withBox(w, r, func(b *sandbox.Sandbox) error {
		if err := b.Files.Remove(r.Context(), req.Path, sandbox.RemoveOptions{Recursive: req.Recursive}); err != nil {
			return err
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	})
}

func (s *Server) makeDir(w http.ResponseWriter, r *http.Request, _ *caller) {
	var req api.PathRequest
	if err := decode(w, r, &req, false); err != nil {
		writeError(w, err)
		return
	}
	s.withBox(w, r, func(b *sandbox.Sandbox) error {
		if err := b.Files.MakeDir(r.Context(), req.Path); err != nil {
			return err
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	})
}

func (s *Server) renameFile(w http.ResponseWriter, r *http.Request, _ *caller) {
	var req api.RenameRequest
	if err := decode(w, r, &req, false); err != nil {
		writeError(w, err)
		return
	}
	s.withBox(w, r, func(b *sandbox.Sandbox) error {
		if err := b.Files.Rename(r.Context(), req.From, req.To); err != nil {
			return err
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	})
}

func (s *Server) searchFiles(w http.ResponseWriter, r *http.Request, _ *caller) {
	var req api.SearchRequest
	if err := decode(w, r, &req, false); err != nil {
		writeError(w, err)
		return
	}
	s.withBox(w, r, func(b *sandbox.Sandbox) error {
		ms, err := b.Files.Search(r.Context(), req.Query, sandbox.SearchOptions{Path: req.Path, Glob: req.Glob, MaxMatches: req.MaxMatches})
		if err != nil {
			return err
		}
		out := api.Matches{Matches: make([]api.Match, 0, len(ms))}
		for _, m := range ms {
			out.Matches = append(out.Matches, api.Match{Path: m.Path, Line: m.Line, Text: m.Text})
		}
		writeJSON(w, http.StatusOK, out)
		return nil
	})
}

func (s *Server) markFiles(w http.ResponseWriter, r *http.Request, _ *caller) {
	var req api.MarkRequest
	if err := decode(w, r, &req, true); err != nil {
		writeError(w, err)
		return
	}
	s.withBox(w, r, func(b *sandbox.Sandbox) error {
		name, err := b.Files.Mark(r.Context(), req.Name)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, api.Marked{Name: name})
		return nil
	})
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func (s *Server) changes(w http.ResponseWriter, r *http.Request, _ *caller) {
	s.withBox(w, r, func(b *sandbox.Sandbox) error {
		c, err := b.Files.Changes(r.Context(), sandbox.ChangesOptions{Since: r.URL.Query().Get("since")})
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, api.Changes{Added: nonNil(c.Added), Modified: nonNil(c.Modified), Removed: nonNil(c.Removed), Patch: c.Patch})
		return nil
	})
}

// watch streams file events (NDJSON by default, or SSE) until the client goes away.
func (s *Server) watch(w http.ResponseWriter, r *http.Request, _ *caller) {
	rec, err := queryBool(r, "recursive")
	if err != nil {
		writeError(w, err)
		return
	}
	ms, err := queryInt(r, "intervalMs", 0)
	if err != nil {
		writeError(w, err)
		return
	}
	interval, err := durMS("intervalMs", ms)
	if err != nil {
		writeError(w, err)
		return
	}
	format := wantStream(r)
	if format == "" {
		format = "ndjson"
	}
	s.withBox(w, r, func(b *sandbox.Sandbox) error {
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		events := make(chan sandbox.WatchEvent, 256)
		errs := make(chan error, 16)
		stop, err := b.Files.Watch(ctx, r.URL.Query().Get("path"), func(ev sandbox.WatchEvent) {
			select {
			case events <- ev:
			case <-ctx.Done():
			}
		}, sandbox.WatchOptions{Recursive: rec, Interval: interval, OnError: func(err error) {
			select {
			case errs <- err:
			default:
			}
		}})
		if err != nil {
			return err
		}
		defer stop()
		sw := startStream(w, format)
		for {
			select {
			case <-ctx.Done():
				return nil
			case ev := <-events:
				if sw.send(string(ev.Type), map[string]string{"path": ev.Path}) != nil {
					return nil
				}
			case err := <-errs:
				if sw.send("error", toAPIError(err)) != nil {
					return nil
				}
			}
		}
	})
}
