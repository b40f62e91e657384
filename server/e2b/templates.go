package e2b

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tupper-dev/tupper/internal/httpdeadline"
	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/sandbox"
	"github.com/tupper-dev/tupper/server/builds"
	"github.com/tupper-dev/tupper/template"
)

// E2B's template API (its Template SDK's builds), mapped on to the server's builds
// (package builds) and so on to template.Store.Build: a build is reserved (POST
// /v3/templates), the files its COPY steps need are uploaded by content hash to a signed
// URL of this server, and its steps (POST /v2/templates/{id}/builds/{buildID}) become a
// Dockerfile run by the same builder as every other build. A template's E2B id is its name;
// E2B's "name:tag" tags are the template's own tags "name:tag".

// uploadURLExpiry is how long an upload URL of a build file stays valid.
const uploadURLExpiry = time.Hour

// e2bBuild is a build reserved through E2B's API: its uploads wait in dir.
type e2bBuild struct {
	b     *builds.Build
	keyID string
	dir   string // uploaded files, <hash>.tar; removed when the build ends
	// steps maps the Dockerfile's lines to E2B's step names ("base", "1", …), once started.
	mu    sync.Mutex
	steps map[int]string
}

// templateBuilds are the builds reserved through E2B's API, by build id.
type templateBuilds struct {
	mu sync.Mutex
	m  map[string]*e2bBuild
}

func (t *templateBuilds) get(id string) *e2bBuild {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.m[id]
}

// put records e, and forgets the builds the builds service has forgotten.
func (t *templateBuilds) put(svc *builds.Service, e *e2bBuild) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = map[string]*e2bBuild{}
	}
	for id, o := range t.m {
		if _, err := svc.Get(o.keyID, id); err != nil {
			if o.b.Status().State == builds.Waiting {
				os.RemoveAll(o.dir) // never started: no build removes its uploads
			}
			delete(t.m, id)
		}
	}
	t.m[e.b.ID] = e
}

// pending is the waiting build of the key for templateID, for its uploads.
func (t *templateBuilds) pending(keyID, templateID string) *e2bBuild {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, e := range t.m {
		if e.keyID == keyID && e.b.Name == templateID && e.b.Status().State == builds.Waiting {
			return e
		}
	}
	return nil
}

func (s *Server) templateRoutes(m *router, h func(string, func(http.ResponseWriter, *http.Request, string))) {
	h("POST /v3/templates", s.requestBuild)
	h("POST /v2/templates", s.requestBuild)
	h("GET /templates/{templateID}/files/{hash}", s.fileUploadLink)
	m.handle("PUT /templates/{templateID}/files/{hash}", s.uploadFile) // a signed URL: no API key
	h("POST /v2/templates/{templateID}/builds/{buildID}", s.startBuild)
	h("GET /templates/{templateID}/builds/{buildID}/status", s.buildStatus)
	h("GET /templates/{templateID}/builds/{buildID}/logs", s.buildLogs)
	h("POST /templates/tags", s.assignTags)
	h("DELETE /templates/tags", s.removeTags)
	h("GET /templates/{templateID}/tags", s.templateTags)
	h("GET /templates", s.listTemplates)
	h("GET /v2/templates", s.listTemplates)
}

// e2bTemplate is E2B's Template, for a template of the provider.
type e2bTemplate struct {
	TemplateID    string     `json:"templateID"`
	BuildID       string     `json:"buildID"`
	BuildCount    int        `json:"buildCount"`
	BuildStatus   string     `json:"buildStatus"`
	CPUCount      int        `json:"cpuCount"`
	MemoryMB      int        `json:"memoryMB"`
	DiskSizeMB    int        `json:"diskSizeMB"`
	EnvdVersion   string     `json:"envdVersion"`
	Public        bool       `json:"public"`
	Aliases       []string   `json:"aliases"`
	Names         []string   `json:"names"`
	CreatedAt     time.Time  `json:"createdAt"`
	UpdatedAt     time.Time  `json:"updatedAt"`
	CreatedBy     *struct{}  `json:"createdBy"`
	LastSpawnedAt *time.Time `json:"lastSpawnedAt"`
	SpawnCount    int        `json:"spawnCount"`
}

// listTemplates is GET /templates and GET /v2/templates (one page): the provider's
// templates (none when it keeps none), each its own alias with its tags, and "base" (the
// provider's default template when it has none of that name). A built-in template not
// made yet is "waiting": a create that names it makes it.
func (s *Server) listTemplates(w http.ResponseWriter, r *http.Request, _ string) {
	all, err := sandbox.Templates(r.Context(), s.prov)
	if err != nil {
		writeError(w, err)
		return
	}
	own := len(all)
	if !slices.ContainsFunc(all, func(t provider.TemplateInfo) bool { return t.Name == baseTemplate }) {
		all = append(all, provider.TemplateInfo{Name: baseTemplate, Builtin: true})
	}
	sz := s.size()
	out := []e2bTemplate{}
	for i, t := range all {
		e := e2bTemplate{
			TemplateID: t.Name, BuildID: t.Build, BuildStatus: "ready", BuildCount: 1,
			CPUCount: max(1, int(sz.CPU)), MemoryMB: sz.MemoryMB, DiskSizeMB: sz.DiskGB * 1024,
			EnvdVersion: EnvdVersion, Public: t.Builtin, Aliases: append([]string{t.Name}, t.Tags...), Names: []string{t.Name},
			CreatedAt: t.Created.UTC(), UpdatedAt: t.Created.UTC(),
		}
		if _, makes := template.BuiltinNamed(t.Name); makes && t.Layers == 0 && i < own {
			e.BuildStatus, e.BuildCount = "waiting", 0
		}
		out = append(out, e)
	}
	w.Header().Set("X-Next-Token", "")
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) buildsOrErr() (*builds.Service, error) {
	if s.cfg.Builds == nil {
		return nil, unsupported("template builds are not enabled on this server")
	}
	if err := s.cfg.Builds.Supported(); err != nil {
		return nil, err
	}
	return s.cfg.Builds, nil
}

// splitName splits E2B's "name:tag" into the template's name and the tag ("" for none).
func splitName(s string) (string, string) {
	name, tag, _ := strings.Cut(s, ":")
	return name, tag
}

// requestBuild is POST /v3/templates (and /v2/templates, whose alias is the name): a build
// of the template name reserved, waiting for its files and steps.
func (s *Server) requestBuild(w http.ResponseWriter, r *http.Request, keyID string) {
	svc, err := s.buildsOrErr()
	if err != nil {
		writeError(w, err)
		return
	}
	var req struct {
		Name  string   `json:"name"`
		Alias string   `json:"alias"`
		Tags  []string `json:"tags"`
	}
	if err := decodeBody(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	full := req.Name
	if full == "" {
		full = req.Alias
	}
	name, tag := splitName(full)
	tags := slices.Clone(req.Tags)
	if tag != "" {
		tags = append([]string{tag}, tags...)
	}
	var named []string
	for _, t := range tags {
		if t == "" || strings.ContainsAny(t, ": /\t\n") {
			writeError(w, provider.Errorf(provider.CodeInvalidArgument, "tag %q: letters, digits, '.', '_' and '-'", t))
			return
		}
		if !slices.Contains(named, name+":"+t) {
			named = append(named, name+":"+t)
		}
	}
	b, err := svc.Reserve(r.Context(), keyID, name, named)
	if err != nil {
		writeError(w, err)
		return
	}
	dir, err := svc.ScratchDir()
	if err != nil {
		svc.Cancel(keyID, b.ID)
		writeError(w, err)
		return
	}
	s.tbuilds.put(svc, &e2bBuild{b: b, keyID: keyID, dir: dir})
	if tags == nil {
		tags = []string{}
	}
	writeJSON(w, http.StatusAccepted, map[string]any{
		"templateID": name, "buildID": b.ID, "names": []string{name}, "aliases": []string{name}, "tags": tags, "public": false,
	})
}

// The validation patterns below are compiled on first use, not at start-up: every tupper
// command links this package, and `tupper exec` or `tupper version` should not pay for
// compiling them (hashRe's {64} alone is 64 copies of its class).
var hashRe = lazyRegexp(`^[0-9a-f]{64}$`)

// lazyRegexp returns a function that compiles expr the first time it is called.
func lazyRegexp(expr string) func() *regexp.Regexp {
	return sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(expr) })
}

// uploadSignature signs an upload of the file hash for build id until expires.
func (s *Server) uploadSignature(id, hash string, expires int64) string {
	m := hmac.New(sha256.New, s.tokenKey)
	fmt.Fprintf(m, "template-file\n%s\n%s\n%d", id, hash, expires)
	return hex.EncodeToString(m.Sum(nil))
}

// fileUploadLink is GET /templates/{templateID}/files/{hash}: whether the waiting build of
// the template has the file, and if not a signed URL of this server to PUT it to.
func (s *Server) fileUploadLink(w http.ResponseWriter, r *http.Request, keyID string) {
	if _, err := s.buildsOrErr(); err != nil {
		writeError(w, err)
		return
	}
	hash := r.PathValue("hash")
	if !hashRe().MatchString(hash) {
		writeError(w, provider.Errorf(provider.CodeInvalidArgument, "files hash %q: 64 lowercase hex digits", hash))
		return
	}
	e := s.tbuilds.pending(keyID, r.PathValue("templateID"))
	if e == nil {
		writeError(w, provider.Errorf(provider.CodeNotFound, "template %q has no build waiting for files", r.PathValue("templateID")))
		return
	}
	if _, err := os.Stat(filepath.Join(e.dir, hash+".tar")); err == nil {
		writeJSON(w, http.StatusCreated, map[string]any{"present": true})
		return
	}
	if s.cfg.BaseURL == "" {
		writeError(w, unsupported("file uploads need the server's BaseURL"))
		return
	}
	exp := time.Now().Add(uploadURLExpiry).Unix()
	q := url.Values{"build": {e.b.ID}, "expires": {strconv.FormatInt(exp, 10)}, "signature": {s.uploadSignature(e.b.ID, hash, exp)}}
	u := strings.TrimSuffix(s.cfg.BaseURL, "/") + "/templates/" + url.PathEscape(e.b.Name) + "/files/" + hash + "?" + q.Encode()
	writeJSON(w, http.StatusCreated, map[string]any{"present": false, "url": u})
}

// uploadFile is PUT /templates/{templateID}/files/{hash} at a signed URL: the tar of a
// COPY step's files, kept with the build until it ends, at most Config.MaxUploadBytes.
func (s *Server) uploadFile(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	id, hash := q.Get("build"), r.PathValue("hash")
	exp, err := strconv.ParseInt(q.Get("expires"), 10, 64)
	if err != nil || !hashRe().MatchString(hash) ||
		!hmac.Equal([]byte(q.Get("signature")), []byte(s.uploadSignature(id, hash, exp))) {
		writeError(w, provider.Errorf(provider.CodeUnauthorized, "invalid upload signature"))
		return
	}
	if time.Now().Unix() > exp {
		writeError(w, provider.Errorf(provider.CodeUnauthorized, "the upload URL has expired"))
		return
	}
	e := s.tbuilds.get(id)
	if e == nil || e.b.Name != r.PathValue("templateID") || e.b.Status().State != builds.Waiting {
		writeError(w, provider.Errorf(provider.CodeNotFound, "build %q is not waiting for files", id))
		return
	}
	httpdeadline.LiftRead(w)
	limit := s.cfg.MaxUploadBytes
	if limit <= 0 {
		limit = 1 << 30
	}
	f, err := os.CreateTemp(e.dir, ".upload-*")
	if err != nil {
		writeError(w, err)
		return
	}
	defer os.Remove(f.Name())
	_, err = io.Copy(f, http.MaxBytesReader(w, r.Body, limit))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		writeJSON(w, http.StatusRequestEntityTooLarge, apiError{Code: http.StatusRequestEntityTooLarge, Message: fmt.Sprintf("the file is larger than %d bytes", limit)})
		return
	}
	if err == nil {
		err = os.Rename(f.Name(), filepath.Join(e.dir, hash+".tar"))
	}
	if err != nil {
		writeError(w, provider.Errorf(provider.CodeInvalidArgument, "upload: %v", err))
		return
	}
	w.WriteHeader(http.StatusOK)
}

// templateStep is E2B's TemplateStep.
type templateStep struct {
	Type      string   `json:"type"`
	Args      []string `json:"args"`
	FilesHash string   `json:"filesHash"`
	Force     bool     `json:"force"`
}

// buildStart is E2B's TemplateBuildStartV2.
type buildStart struct {
	FromImage         string          `json:"fromImage"`
	FromTemplate      string          `json:"fromTemplate"`
	FromImageRegistry json.RawMessage `json:"fromImageRegistry"`
	StartCmd          string          `json:"startCmd"`
	ReadyCmd          string          `json:"readyCmd"`
	Steps             []templateStep  `json:"steps"`
	Force             bool            `json:"force"`
}

// startBuild is POST /v2/templates/{templateID}/builds/{buildID}: the steps, translated to
// a Dockerfile whose context is the uploaded files, built by the server's builds.
func (s *Server) startBuild(w http.ResponseWriter, r *http.Request, keyID string) {
	svc, err := s.buildsOrErr()
	if err != nil {
		writeError(w, err)
		return
	}
	e := s.tbuilds.get(r.PathValue("buildID"))
	if e == nil || e.keyID != keyID || e.b.Name != r.PathValue("templateID") {
		writeError(w, provider.Errorf(provider.CodeNotFound, "build %q of template %q not found", r.PathValue("buildID"), r.PathValue("templateID")))
		return
	}
	var req buildStart
	if err := decodeBody(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	ctxDir := filepath.Join(e.dir, "context")
	df, steps, noCache, err := translate(r.Context(), req, e.dir, ctxDir, s.cfg.MaxUploadBytes)
	if err != nil {
		writeError(w, err)
		return
	}
	e.mu.Lock()
	e.steps = steps
	e.mu.Unlock()
	build := sandbox.BuildRequest{Context: ctxDir, DockerfileText: df, NoCache: noCache, StartCmd: req.StartCmd, ReadyCmd: req.ReadyCmd}
	dir := e.dir
	if err := svc.Start(e.b, build, func() { os.RemoveAll(dir) }); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusAccepted)
}

var (
	envKeyRe = lazyRegexp(`^[A-Za-z_][A-Za-z0-9_]*$`)
	userRe   = lazyRegexp(`^[A-Za-z0-9_][A-Za-z0-9_.-]*(:[A-Za-z0-9_][A-Za-z0-9_.-]*)?$`)
	modeRe   = lazyRegexp(`^[0-7]{3,4}$`)
	baseRe   = lazyRegexp(`^[A-Za-z0-9][A-Za-z0-9._:/@-]*$`)
)

// quoteWord quotes s for a Dockerfile instruction that expands variables (ENV, WORKDIR):
// literally, whatever it holds but a line break.
func quoteWord(s string) (string, error) {
	if strings.ContainsAny(s, "\r\n\x00") {
		return "", fmt.Errorf("%q holds a line break", s)
	}
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`, `$`, `\$`, "`", "\\`").Replace(s) + `"`, nil
}

// jsonArray is the exec (JSON) form of words, '<' and '&' as they are.
func jsonArray(words ...string) string {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(words)
	return strings.TrimSuffix(b.String(), "\n")
}

// translate turns E2B's steps into a Dockerfile: FROM the template or image, RUN in the
// exec form of /bin/sh -c (a step's user around it with USER), COPY of the uploaded tar
// (unpacked into ctxDir/<hash>), ENV, WORKDIR and USER. It returns the Dockerfile, E2B's step
// name of each of its lines, and whether to skip the cache (a forced step).
func translate(ctx context.Context, req buildStart, uploads, ctxDir string, maxUpload int64) (string, map[int]string, bool, error) {
	bad := func(format string, args ...any) (string, map[int]string, bool, error) {
		return "", nil, false, provider.Errorf(provider.CodeInvalidArgument, format, args...)
	}
	if len(req.FromImageRegistry) > 0 && string(req.FromImageRegistry) != "null" {
		return bad("fromImageRegistry: registry credentials are not supported; import the image with `tupper template import` and build fromTemplate")
	}
	base := req.FromTemplate
	if (req.FromImage == "") == (req.FromTemplate == "") {
		return bad("give exactly one of fromImage and fromTemplate")
	}
	if base == "" {
		base = req.FromImage
	}
	if !baseRe().MatchString(base) {
		return bad("base %q is not a template name or an image reference", base)
	}
	var lines []string
	steps := map[int]string{}
	add := func(step, line string) {
		lines = append(lines, line)
		steps[len(lines)] = step
	}
	add("base", "FROM "+base)
	noCache := req.Force
	user := "" // the USER in force; "" the base's
	if err := os.MkdirAll(ctxDir, 0o700); err != nil {
		return "", nil, false, err
	}
	unpacked := map[string]bool{}
	for i, st := range req.Steps {
		name := strconv.Itoa(i + 1)
		noCache = noCache || st.Force
		switch st.Type {
		case "RUN":
			if len(st.Args) < 1 || len(st.Args) > 2 || st.Args[0] == "" {
				return bad("step %s: RUN takes a command and optionally a user", name)
			}
			run := "RUN " + jsonArray("/bin/sh", "-c", st.Args[0])
			if len(st.Args) == 2 && st.Args[1] != "" && st.Args[1] != user {
				if !userRe().MatchString(st.Args[1]) {
					return bad("step %s: user %q", name, st.Args[1])
				}
				add(name, "USER "+st.Args[1])
				add(name, run)
				add(name, "USER "+cmpOr(user, "root"))
				continue
			}
			add(name, run)
		case "COPY":
			if len(st.Args) < 2 || len(st.Args) > 4 {
				return bad("step %s: COPY takes a source, a destination, a user and a mode", name)
			}
			src, dest := st.Args[0], st.Args[1]
			if src == "" || path.IsAbs(src) || slices.Contains(strings.Split(src, "/"), "..") || dest == "" || strings.ContainsAny(src+dest, "\r\n\x00") {
				return bad("step %s: COPY %q %q: the source must be relative to the context, without '..'", name, src, dest)
			}
			if !hashRe().MatchString(st.FilesHash) {
				return bad("step %s: COPY needs the filesHash of its uploaded files", name)
			}
			if !unpacked[st.FilesHash] {
				f, err := os.Open(filepath.Join(uploads, st.FilesHash+".tar"))
				if err != nil {
					return bad("step %s: the files of COPY %q (hash %s) were not uploaded", name, src, st.FilesHash)
				}
				dir := filepath.Join(ctxDir, st.FilesHash)
				err = os.Mkdir(dir, 0o700)
				if err == nil {
					err = template.UnpackContext(ctx, dir, f, template.Limits{MaxBytes: 4 * cmpOr64(maxUpload, 1<<30), MaxFiles: 200_000})
				}
				f.Close()
				if err != nil {
					return "", nil, false, fmt.Errorf("step %s: COPY %q: %w", name, src, err)
				}
				unpacked[st.FilesHash] = true
			}
			line := "COPY "
			if len(st.Args) > 2 && st.Args[2] != "" {
				if !userRe().MatchString(st.Args[2]) {
					return bad("step %s: user %q", name, st.Args[2])
				}
				line += "--chown=" + st.Args[2] + " "
			}
			if len(st.Args) > 3 && st.Args[3] != "" {
				if !modeRe().MatchString(st.Args[3]) {
					return bad("step %s: mode %q is not octal", name, st.Args[3])
				}
				line += "--chmod=" + st.Args[3] + " "
			}
			add(name, line+jsonArray(st.FilesHash+"/"+strings.TrimPrefix(src, "./"), dest))
		case "ENV":
			if len(st.Args) == 0 || len(st.Args)%2 != 0 {
				return bad("step %s: ENV takes keys and values in pairs", name)
			}
			var kv []string
			for j := 0; j < len(st.Args); j += 2 {
				if !envKeyRe().MatchString(st.Args[j]) {
					return bad("step %s: environment variable name %q", name, st.Args[j])
				}
				v, err := quoteWord(st.Args[j+1])
				if err != nil {
					return bad("step %s: ENV %s: %v", name, st.Args[j], err)
				}
				kv = append(kv, st.Args[j]+"="+v)
			}
			add(name, "ENV "+strings.Join(kv, " "))
		case "WORKDIR":
			if len(st.Args) != 1 || st.Args[0] == "" {
				return bad("step %s: WORKDIR takes a directory", name)
			}
			d, err := quoteWord(st.Args[0])
			if err != nil {
				return bad("step %s: WORKDIR: %v", name, err)
			}
			add(name, "WORKDIR "+d)
		case "USER":
			if len(st.Args) != 1 || !userRe().MatchString(st.Args[0]) {
				return bad("step %s: USER takes a user name or id", name)
			}
			user = st.Args[0]
			add(name, "USER "+user)
		default:
			return bad("step %s: step type %q is not supported (RUN, COPY, ENV, WORKDIR, USER)", name, st.Type)
		}
	}
	return strings.Join(lines, "\n") + "\n", steps, noCache, nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func cmpOr64(a, b int64) int64 {
	if a > 0 {
		return a
	}
	return b
}

// buildStatusName is E2B's TemplateBuildStatus of a build's state.
func buildStatusName(st builds.State) string {
	switch st {
	case builds.Waiting, builds.Queued:
		return "waiting"
	case builds.Building:
		return "building"
	case builds.Ready:
		return "ready"
	}
	return "error"
}

// buildLogEntry is E2B's BuildLogEntry.
type buildLogEntry struct {
	Timestamp time.Time `json:"timestamp"`
	Level     string    `json:"level"`
	Message   string    `json:"message"`
	Step      string    `json:"step,omitempty"`
}

func (e *e2bBuild) entries(in []builds.LogEntry) []buildLogEntry {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := []buildLogEntry{}
	for _, l := range in {
		le := buildLogEntry{Timestamp: l.Time, Level: "info", Message: strings.TrimRight(l.Text, "\n"), Step: e.steps[l.Line]}
		if l.Kind == "error" {
			le.Level = "error"
		}
		out = append(out, le)
	}
	return out
}

// ownBuild returns the build named by the request's path, of the key keyID.
func (s *Server) ownBuild(r *http.Request, keyID string) (*e2bBuild, error) {
	e := s.tbuilds.get(r.PathValue("buildID"))
	if e == nil || e.keyID != keyID || e.b.Name != r.PathValue("templateID") {
		return nil, provider.Errorf(provider.CodeNotFound, "build %q of template %q not found", r.PathValue("buildID"), r.PathValue("templateID"))
	}
	return e, nil
}

// buildStatus is GET /templates/{templateID}/builds/{buildID}/status: E2B's
// TemplateBuildInfo, with the log entries from ?logsOffset= (at most ?limit=, default 100).
func (s *Server) buildStatus(w http.ResponseWriter, r *http.Request, keyID string) {
	e, err := s.ownBuild(r, keyID)
	if err != nil {
		writeError(w, err)
		return
	}
	offset, _ := strconv.Atoi(r.URL.Query().Get("logsOffset"))
	limit, err := strconv.Atoi(r.URL.Query().Get("limit"))
	if err != nil || limit <= 0 || limit > 1000 {
		limit = 100
	}
	raw, state, _ := e.b.Logs(offset)
	if len(raw) > limit {
		raw = raw[:limit]
		if state.Done() {
			state = builds.Building // not final until the log is read to its end
		}
	}
	st := e.b.Status()
	out := map[string]any{
		"templateID": e.b.Name, "buildID": e.b.ID, "status": buildStatusName(state),
		"logEntries": e.entries(raw), "logs": []string{},
	}
	if state == builds.Failed && st.Error != nil {
		msg := st.Error.Message
		if st.Error.Output != "" {
			msg += "\n" + st.Error.Output
		}
		e.mu.Lock()
		step := e.steps[st.Error.Line]
		e.mu.Unlock()
		reason := map[string]any{"message": msg, "logEntries": []buildLogEntry{}}
		if step != "" {
			reason["step"] = step
		}
		out["reason"] = reason
	}
	writeJSON(w, http.StatusOK, out)
}

// buildLogs is GET /templates/{templateID}/builds/{buildID}/logs: E2B's
// TemplateBuildLogsResponse, entries at or after ?cursor= (unix milliseconds), at most
// ?limit= (default 100), oldest first (?direction=backward: newest first).
func (s *Server) buildLogs(w http.ResponseWriter, r *http.Request, keyID string) {
	e, err := s.ownBuild(r, keyID)
	if err != nil {
		writeError(w, err)
		return
	}
	q := r.URL.Query()
	cursor, _ := strconv.ParseInt(q.Get("cursor"), 10, 64)
	limit, err := strconv.Atoi(q.Get("limit"))
	if err != nil || limit <= 0 || limit > 1000 {
		limit = 100
	}
	raw, _, _ := e.b.Logs(0)
	if q.Get("direction") == "backward" {
		slices.Reverse(raw)
	}
	var sel []builds.LogEntry
	for _, l := range raw {
		if l.Time.UnixMilli() >= cursor && len(sel) < limit {
			sel = append(sel, l)
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"logs": e.entries(sel)})
}

// assignTags is POST /templates/tags {target: "name:tag" or "name", tags}: the tags given
// become names of the template the target names.
func (s *Server) assignTags(w http.ResponseWriter, r *http.Request, _ string) {
	var req struct {
		Target string   `json:"target"`
		Tags   []string `json:"tags"`
	}
	t, ok := s.retag(w, r, &req, &req.Target, func(t sandbox.TemplateInfo) ([]string, error) {
		tags := t.Tags
		for _, tag := range req.Tags {
			if tag == "" || strings.ContainsAny(tag, ": /\t\n") {
				return nil, provider.Errorf(provider.CodeInvalidArgument, "tag %q: letters, digits, '.', '_' and '-'", tag)
			}
			if n := t.Name + ":" + tag; !slices.Contains(tags, n) {
				tags = append(tags, n)
			}
		}
		return tags, nil
	})
	if !ok {
		return
	}
	// Every tag names the template's current build: the one that made its record.
	writeJSON(w, http.StatusCreated, map[string]any{"buildID": t.Build, "tags": req.Tags})
}

// removeTags is DELETE /templates/tags {name, tags}.
func (s *Server) removeTags(w http.ResponseWriter, r *http.Request, _ string) {
	var req struct {
		Name string   `json:"name"`
		Tags []string `json:"tags"`
	}
	if _, ok := s.retag(w, r, &req, &req.Name, func(t sandbox.TemplateInfo) ([]string, error) {
		return slices.DeleteFunc(t.Tags, func(n string) bool {
			_, tag := splitName(n)
			return slices.Contains(req.Tags, tag)
		}), nil
	}); !ok {
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// retag decodes a tag request into req, then changes the tags of the template *name names
// by change; it returns the template as written and whether that worked, having answered the
// request when not.
func (s *Server) retag(w http.ResponseWriter, r *http.Request, req any, name *string, change func(sandbox.TemplateInfo) ([]string, error)) (sandbox.TemplateInfo, bool) {
	if err := decodeBody(w, r, req); err != nil {
		writeError(w, err)
		return sandbox.TemplateInfo{}, false
	}
	_, err := s.buildsOrErr()
	var t sandbox.TemplateInfo
	if err == nil {
		t, err = sandbox.RetagTemplate(r.Context(), s.prov, *name, change)
	}
	if err != nil {
		writeError(w, err)
		return sandbox.TemplateInfo{}, false
	}
	return t, true
}

// templateTags is GET /templates/{templateID}/tags: E2B's TemplateTag list.
func (s *Server) templateTags(w http.ResponseWriter, r *http.Request, _ string) {
	if _, err := s.buildsOrErr(); err != nil {
		writeError(w, err)
		return
	}
	t, err := s.builtTemplate(r.Context(), r.PathValue("templateID"))
	if err != nil {
		writeError(w, err)
		return
	}
	out := []map[string]any{}
	for _, n := range t.Tags {
		if name, tag := splitName(n); name == t.Name && tag != "" {
			out = append(out, map[string]any{"tag": tag, "buildID": t.Build, "createdAt": t.Created})
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// builtTemplate is the template name (or the one tagged name) that an import or a build
// made: a built-in one not made yet, or made of the host, has no tags and is not found.
func (s *Server) builtTemplate(ctx context.Context, name string) (sandbox.TemplateInfo, error) {
	t, err := sandbox.InspectTemplate(ctx, s.prov, name)
	if err == nil && t.Layers == 0 {
		err = provider.Errorf(provider.CodeNotFound, "template %q not found", name)
	}
	return t, err
}
