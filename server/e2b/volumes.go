package e2b

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/sandbox"
	"github.com/tupper-dev/tupper/server/internal/audit"
)

// E2B's volumes are the provider's volumes (provider.Volumer), by name: a volume's
// volumeID is its name. Its token, which E2B's SDK sends to /volumecontent, is derived from
// the name and the volume's creation time, so a volume made again under the same name has
// another token. An API key is accepted there too.

// volumeJSON is E2B's VolumeAndToken (Volume without the token).
type volumeJSON struct {
	VolumeID string `json:"volumeID"`
	Name     string `json:"name"`
	Token    string `json:"token,omitempty"`
}

func (s *Server) volumeToken(v sandbox.VolumeInfo) string {
	m := hmac.New(sha256.New, s.tokenKey)
	m.Write([]byte("e2b volume token\x00" + v.Name + "\x00" + strconv.FormatInt(v.CreatedAt.UnixNano(), 10)))
	return "vol_" + hex.EncodeToString(m.Sum(nil))[:40]
}

func (s *Server) volumeRoutes(m *router, h func(string, func(http.ResponseWriter, *http.Request, string))) {
	h("POST /volumes", s.createVolume)
	h("GET /volumes", s.listVolumes)
	h("GET /volumes/{volumeID}", s.getVolume)
	h("DELETE /volumes/{volumeID}", s.deleteVolume)
	c := func(pattern string, fn func(w http.ResponseWriter, r *http.Request, root *os.File, p string)) {
		m.handle(pattern, func(w http.ResponseWriter, r *http.Request) {
			// Who called is known once volumeContent has checked the credential (SetCaller).
			if action := auditActions[pattern]; action != "" {
				s.cfg.Audit.Wrap(w, r, "e2b", action, nil, func(w http.ResponseWriter, r *http.Request) { s.volumeContent(w, r, fn) })
				return
			}
			s.volumeContent(w, r, fn)
		})
	}
	c("GET /volumecontent/{volumeID}/dir", s.volListDir)
	c("POST /volumecontent/{volumeID}/dir", s.volMakeDir)
	c("GET /volumecontent/{volumeID}/file", s.volReadFile)
	c("PUT /volumecontent/{volumeID}/file", s.volWriteFile)
	c("GET /volumecontent/{volumeID}/path", s.volGetPath)
	c("PATCH /volumecontent/{volumeID}/path", s.volPatchPath)
	c("DELETE /volumecontent/{volumeID}/path", s.volDeletePath)
}

func (s *Server) createVolume(w http.ResponseWriter, r *http.Request, _ string) {
	var req struct {
		Name string `json:"name"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&req); err != nil {
		writeError(w, provider.Errorf(provider.CodeInvalidArgument, "the body: %v", err))
		return
	}
	v, err := s.lc.CreateVolume(r.Context(), req.Name, sandbox.VolumeOptions{})
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, volumeJSON{VolumeID: v.Name, Name: v.Name, Token: s.volumeToken(v)})
}

func (s *Server) listVolumes(w http.ResponseWriter, r *http.Request, _ string) {
	list, err := sandbox.Volumes(r.Context(), s.prov)
	if err != nil {
		writeError(w, err)
		return
	}
	out := make([]volumeJSON, 0, len(list))
	for _, v := range list {
		out = append(out, volumeJSON{VolumeID: v.Name, Name: v.Name})
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) getVolume(w http.ResponseWriter, r *http.Request, _ string) {
	v, err := sandbox.InspectVolume(r.Context(), s.prov, r.PathValue("volumeID"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, volumeJSON{VolumeID: v.Name, Name: v.Name, Token: s.volumeToken(v)})
}

func (s *Server) deleteVolume(w http.ResponseWriter, r *http.Request, _ string) {
	if err := sandbox.DeleteVolume(r.Context(), s.prov, r.PathValue("volumeID")); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// volumeContent authenticates a /volumecontent request (the volume's token, or an API
// key), opens the volume (provider.VolumeOpener) and runs fn with its root and the path
// asked for, relative to the root.
func (s *Server) volumeContent(w http.ResponseWriter, r *http.Request, fn func(w http.ResponseWriter, r *http.Request, root *os.File, p string)) {
	name := r.PathValue("volumeID")
	cred := credential(r)
	if cred == "" {
		writeError(w, provider.Errorf(provider.CodeUnauthorized, "missing the volume's token"))
		return
	}
	v, err := sandbox.InspectVolume(r.Context(), s.prov, name)
	if provider.CodeOf(err) == provider.CodeNotFound || provider.CodeOf(err) == provider.CodeInvalidArgument {
		// Whether a volume exists is for credentials to learn.
		if _, aerr := s.authenticate(r); aerr != nil {
			writeError(w, aerr)
			return
		}
	}
	if err != nil {
		writeError(w, err)
		return
	}
	if subtle.ConstantTimeCompare([]byte(cred), []byte(s.volumeToken(v))) != 1 {
		keyID, err := s.authenticate(r)
		if err != nil {
			writeError(w, provider.Errorf(provider.CodeUnauthorized, "invalid volume token"))
			return
		}
		audit.SetCaller(r.Context(), audit.Caller{KeyID: keyID, Via: "key"})
	} else {
		// The volume's token is no key's: the entry names the volume only.
		audit.SetCaller(r.Context(), audit.Caller{Via: "token"})
	}
	o, ok := s.prov.(provider.VolumeOpener)
	if !ok {
		writeError(w, unsupported("provider %s cannot reach a volume's files from the host", s.prov.Name()))
		return
	}
	root, err := o.OpenVolume(r.Context(), name)
	if err != nil {
		writeError(w, err)
		return
	}
	defer root.Close()
	fn(w, r, root, r.URL.Query().Get("path"))
}

// queryIDs reads uid, gid and mode from the query; absent ones are nil.
func queryIDs(r *http.Request) (uid, gid, mode *uint32, err error) {
	q := r.URL.Query()
	get := func(k string) (*uint32, error) {
		v := q.Get(k)
		if v == "" {
			return nil, nil
		}
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil {
			return nil, provider.Errorf(provider.CodeInvalidArgument, "%s %q is not a number", k, v)
		}
		u := uint32(n)
		return &u, nil
	}
	if uid, err = get("uid"); err != nil {
		return
	}
	if gid, err = get("gid"); err != nil {
		return
	}
	mode, err = get("mode")
	return
}

func (s *Server) volListDir(w http.ResponseWriter, r *http.Request, root *os.File, p string) {
	depth := 1
	if v := r.URL.Query().Get("depth"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			writeError(w, provider.Errorf(provider.CodeInvalidArgument, "depth %q", v))
			return
		}
		depth = n
	}
	list, err := volList(root, volRel(p), depth)
	if err != nil {
		writeError(w, volErr(p, err))
		return
	}
	writeJSON(w, http.StatusOK, list)
}

func (s *Server) volMakeDir(w http.ResponseWriter, r *http.Request, root *os.File, p string) {
	uid, gid, mode, err := queryIDs(r)
	if err != nil {
		writeError(w, err)
		return
	}
	rel := volRel(p)
	if err := volMkdir(root, rel, r.URL.Query().Get("force") == "true", uid, gid, mode); err != nil {
		writeError(w, volErr(p, err))
		return
	}
	s.volAnswerStat(w, root, rel, p, http.StatusCreated)
}

func (s *Server) volAnswerStat(w http.ResponseWriter, root *os.File, rel, p string, status int) {
	e, err := volStat(root, rel)
	if err != nil {
		writeError(w, volErr(p, err))
		return
	}
	writeJSON(w, status, e)
}

func (s *Server) volReadFile(w http.ResponseWriter, r *http.Request, root *os.File, p string) {
	fd, err := volOpen(root, volRel(p), os.O_RDONLY|volNoFollow, 0)
	if err != nil {
		writeError(w, volErr(p, err))
		return
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		writeError(w, volErr(p, err))
		return
	}
	if !st.Mode().IsRegular() {
		writeError(w, provider.Errorf(provider.CodeInvalidArgument, "path %s is not a file", p))
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(st.Size(), 10))
	w.WriteHeader(http.StatusOK)
	io.CopyN(w, f, st.Size())
}

func (s *Server) volWriteFile(w http.ResponseWriter, r *http.Request, root *os.File, p string) {
	uid, gid, mode, err := queryIDs(r)
	if err != nil {
		writeError(w, err)
		return
	}
	rel := volRel(p)
	if err := volWrite(root, rel, r.Body, r.URL.Query().Get("force") == "true", uid, gid, mode); err != nil {
		writeError(w, volErr(p, err))
		return
	}
	s.volAnswerStat(w, root, rel, p, http.StatusCreated)
}

func (s *Server) volGetPath(w http.ResponseWriter, r *http.Request, root *os.File, p string) {
	s.volAnswerStat(w, root, volRel(p), p, http.StatusOK)
}

func (s *Server) volPatchPath(w http.ResponseWriter, r *http.Request, root *os.File, p string) {
	var req struct {
		UID  *uint32 `json:"uid"`
		GID  *uint32 `json:"gid"`
		Mode *uint32 `json:"mode"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&req); err != nil {
		writeError(w, provider.Errorf(provider.CodeInvalidArgument, "the body: %v", err))
		return
	}
	rel := volRel(p)
	// Opened, never followed: a symbolic link there is refused.
	fd, err := volOpen(root, rel, os.O_RDONLY|volNoFollow, 0)
	if err != nil {
		writeError(w, volErr(p, err))
		return
	}
	err = volOwn(fd, req.UID, req.GID, req.Mode)
	volClose(fd)
	if err != nil {
		writeError(w, volErr(p, err))
		return
	}
	s.volAnswerStat(w, root, rel, p, http.StatusOK)
}

func (s *Server) volDeletePath(w http.ResponseWriter, r *http.Request, root *os.File, p string) {
	rel := volRel(p)
	if rel == "." {
		writeError(w, provider.Errorf(provider.CodeInvalidArgument, "the volume's root cannot be removed: delete the volume"))
		return
	}
	if err := volRemove(root, rel); err != nil {
		writeError(w, volErr(p, err))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// volRel is p relative to the volume's root: "." for the root itself.
func volRel(p string) string {
	c := strings.TrimPrefix(path.Clean("/"+p), "/")
	if c == "" {
		return "."
	}
	return c
}

// volEntry is E2B's VolumeEntryStat.
type volEntry struct {
	Name   string    `json:"name"`
	Path   string    `json:"path"`
	Type   string    `json:"type"`
	Size   int64     `json:"size"`
	Mode   uint32    `json:"mode"`
	UID    uint32    `json:"uid"`
	GID    uint32    `json:"gid"`
	Atime  time.Time `json:"atime"`
	Mtime  time.Time `json:"mtime"`
	Ctime  time.Time `json:"ctime"`
	Target string    `json:"target,omitempty"`
}
