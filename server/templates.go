package server

import (
	"bytes"
	"encoding/json"
	"io"
	"mime"
	"net/http"
	"os"
	"path"
	"strings"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/sandbox"
	"github.com/tupper-dev/tupper/server/api"
	"github.com/tupper-dev/tupper/server/builds"
	"github.com/tupper-dev/tupper/template"
	"github.com/tupper-dev/tupper/template/dockerfile"
)

func (s *Server) listTemplates(w http.ResponseWriter, r *http.Request, _ *caller) {
	// The provider's, shared by every key of the server: what a create's template names.
	all, err := sandbox.Templates(r.Context(), s.prov)
	if err != nil {
		writeError(w, err)
		return
	}
	out := []api.Template{}
	for _, t := range all {
		out = append(out, api.TemplateOf(t))
	}
	writeJSON(w, http.StatusOK, api.TemplateList{Templates: out})
}

func (s *Server) getTemplate(w http.ResponseWriter, r *http.Request, _ *caller) {
	name := r.PathValue("name")
	t, err := sandbox.InspectTemplate(r.Context(), s.prov, name)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, api.TemplateOf(t))
}

// deleteTemplate removes a template and the layers no other template uses; one that a
// sandbox or snapshot uses only with ?force=true.
func (s *Server) deleteTemplate(w http.ResponseWriter, r *http.Request, _ *caller) {
	force := false
	switch r.URL.Query().Get("force") {
	case "", "false":
	case "true":
		force = true
	default:
		writeError(w, badRequest("force: true or false"))
		return
	}
	if err := sandbox.DeleteTemplate(r.Context(), s.prov, r.PathValue("name"), force); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// buildTemplate is POST /v1/templates: a build from a Dockerfile and an uploaded context.
// The body is the build's JSON alone (a Dockerfile given inline, no context), or
// multipart/form-data whose first part, "build", is that JSON and whose second, "context",
// is the context as a tar (plain, gzip, zstd or bzip2). The context is unpacked and the
// Dockerfile parsed before the answer, so a bad one is a 4xx at once; the build itself
// runs in the background: 202 with its status, and Location its URL.
func (s *Server) buildTemplate(w http.ResponseWriter, r *http.Request, c *caller) {
	if err := s.builds.Supported(); err != nil {
		writeError(w, err)
		return
	}
	var req api.BuildRequest
	dir := ""
	cleanup := func() {
		if dir != "" {
			os.RemoveAll(dir)
		}
	}
	err := func() error {
		mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
		switch mt {
		case "application/json":
			return decode(w, r, &req, false)
		case "multipart/form-data":
		default:
			return badRequest("send the build as application/json, or as multipart/form-data with a \"build\" part (JSON) and a \"context\" part (a tar)")
		}
		// The whole body: the build part (at most MaxJSONBody) and the context (at most
		// MaxBuildContextBytes, counted by overLimit below), and the multipart framing.
		r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxBuildContextBytes+MaxJSONBody+64<<10)
		mr, err := r.MultipartReader()
		if err != nil {
			return badRequest("multipart body: %v", err)
		}
		part, err := mr.NextPart()
		if err != nil || part.FormName() != "build" {
			return badRequest("the first part of the body must be \"build\", the build's JSON")
		}
		data, err := io.ReadAll(io.LimitReader(part, MaxJSONBody+1))
		if err != nil {
			return badRequest("reading the build part: %v", err)
		}
		if len(data) > MaxJSONBody {
			return badRequest("the build part is larger than %d bytes", MaxJSONBody)
		}
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			return badRequest("malformed build JSON: %s", strings.TrimPrefix(err.Error(), "json: "))
		}
		part, err = mr.NextPart()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return badRequest("multipart body: %v", err)
		}
		if part.FormName() != "context" {
			return badRequest("the second part of the body must be \"context\", a tar of the build context")
		}
		if err := s.checkBuild(r, &req); err != nil {
			return err // before unpacking what may be a large context
		}
		if dir, err = s.builds.ScratchDir(); err != nil {
			return err
		}
		body := &overLimit{r: part, left: s.cfg.MaxBuildContextBytes}
		err = template.UnpackContext(r.Context(), dir, body, template.Limits{MaxBytes: 4 * s.cfg.MaxBuildContextBytes, MaxFiles: 200_000})
		if body.err != nil {
			return body.err // 413, whatever the unpacker made of it
		}
		return err
	}()
	if err == nil {
		err = s.checkBuild(r, &req)
	}
	if err == nil && req.DockerfileText == "" {
		req.DockerfileText, err = readDockerfile(dir, req.Dockerfile)
	}
	if err == nil {
		_, err = dockerfile.Parse(req.DockerfileText)
		if err != nil {
			err = provider.Errorf(provider.CodeInvalidArgument, "%w", err)
		}
	}
	if err != nil {
		cleanup()
		writeError(w, err)
		return
	}
	b, err := s.builds.Reserve(r.Context(), c.KeyID, req.Name, req.Tags)
	if err != nil {
		cleanup()
		writeError(w, err)
		return
	}
	build := sandbox.BuildRequest{
		Context: dir, DockerfileText: req.DockerfileText, BuildArgs: req.BuildArgs, Target: req.Target,
		Network: provider.NetworkMode(req.Network), NoCache: req.NoCache, StartCmd: req.StartCmd, ReadyCmd: req.ReadyCmd,
	}
	if err := s.builds.Start(b, build, cleanup); err != nil {
		writeError(w, err)
		return
	}
	w.Header().Set("Location", "/v1/templates/builds/"+b.ID)
	writeJSON(w, http.StatusAccepted, b.Status())
}

// checkBuild refuses a build request that cannot be built, before its context is read.
func (s *Server) checkBuild(r *http.Request, req *api.BuildRequest) error {
	if err := template.ValidName(req.Name); err != nil {
		return err
	}
	switch req.Network {
	case "", "all", "none":
	default:
		return badRequest("network %q: all or none", req.Network)
	}
	if req.DockerfileText != "" && req.Dockerfile != "" {
		return badRequest("give dockerfile (a path in the context) or dockerfileText, not both")
	}
	if len(req.DockerfileText) > template.MaxDockerfile {
		return badRequest("dockerfileText is larger than %d bytes", template.MaxDockerfile)
	}
	if req.Dockerfile != "" && (path.IsAbs(req.Dockerfile) || strings.Contains(req.Dockerfile, "\x00")) {
		return badRequest("dockerfile %q: a path relative to the context", req.Dockerfile)
	}
	return nil
}

// readDockerfile reads the Dockerfile at rel ("" is Dockerfile) of the context dir, through
// the directory's root: a symbolic link in the context never leads out of it.
func readDockerfile(dir, rel string) (string, error) {
	if rel == "" {
		rel = "Dockerfile"
	}
	if dir == "" {
		return "", badRequest("no Dockerfile: give dockerfileText, or a context holding %s", rel)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return "", err
	}
	defer root.Close()
	f, err := root.Open(rel)
	if err != nil {
		return "", badRequest("the context has no Dockerfile at %q", rel)
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return "", badRequest("%q in the context is not a file", rel)
	}
	b, err := io.ReadAll(io.LimitReader(f, template.MaxDockerfile+1))
	if err != nil {
		return "", err
	}
	if len(b) > template.MaxDockerfile {
		return "", badRequest("%q is larger than %d bytes", rel, template.MaxDockerfile)
	}
	return string(b), nil
}

func (s *Server) getBuild(w http.ResponseWriter, r *http.Request, c *caller) {
	b, err := s.builds.Get(c.KeyID, r.PathValue("build"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, b.Status())
}

// cancelBuild stops a build: it ends in state error (aborted) and writes no template.
func (s *Server) cancelBuild(w http.ResponseWriter, r *http.Request, c *caller) {
	if err := s.builds.Cancel(c.KeyID, r.PathValue("build")); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// buildLogs is a build's log from ?offset= on: as JSON ({entries, next, state}), or, with
// Accept: application/x-ndjson or text/event-stream, followed as a stream of "log" events
// until the build ends, then an "end" event with its status.
func (s *Server) buildLogs(w http.ResponseWriter, r *http.Request, c *caller) {
	b, err := s.builds.Get(c.KeyID, r.PathValue("build"))
	if err != nil {
		writeError(w, err)
		return
	}
	offset, err := queryInt(r, "offset", 0)
	if err != nil || offset < 0 {
		writeError(w, badRequest("offset must be a non-negative integer"))
		return
	}
	format := wantStream(r)
	if format == "" {
		entries, state, _ := b.Logs(int(offset))
		if entries == nil {
			entries = []builds.LogEntry{}
		}
		writeJSON(w, http.StatusOK, api.BuildLogPage{Entries: entries, Next: int(offset) + len(entries), State: state})
		return
	}
	sw := startStream(w, format)
	next := int(offset)
	for {
		entries, state, changed := b.Logs(next)
		for _, e := range entries {
			if sw.send("log", e) != nil {
				return
			}
		}
		next += len(entries)
		if state.Done() {
			_ = sw.send("end", b.Status())
			return
		}
		select {
		case <-changed:
		case <-r.Context().Done():
			return
		}
	}
}

// overLimit reads the context part, at most left bytes: past them it fails with an
// *http.MaxBytesError (413), which it remembers, whatever the unpacker makes of it.
type overLimit struct {
	r    io.Reader
	left int64
	read int64
	err  *http.MaxBytesError
}

func (o *overLimit) Read(p []byte) (int, error) {
	if o.err != nil {
		return 0, o.err
	}
	if int64(len(p)) > o.left-o.read+1 {
		p = p[:o.left-o.read+1]
	}
	n, err := o.r.Read(p)
	o.read += int64(n)
	if o.read > o.left {
		o.err = &http.MaxBytesError{Limit: o.left}
		return 0, o.err
	}
	return n, err
}
