//go:build linux

package agent

import (
	"compress/gzip"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tupper-dev/tupper/internal/filemode"
)

var copyBufs = sync.Pool{New: func() any { b := make([]byte, 256<<10); return &b }}

// checkSigning applies envd's /files rules when an access token is set: a
// correct X-Access-Token passes; otherwise the signed-URL parameters must
// match "v1_" + base64(sha256(path:op:user:token[:exp])).
func (a *Agent) checkSigning(r *http.Request, op string) error {
	if a.cfg.AccessToken == "" {
		return nil
	}
	q := r.URL.Query()
	if h := r.Header.Get(accessTokenHeader); h != "" {
		if !a.tokenOK(h) {
			return errors.New("access token present in header but does not match")
		}
		return nil
	}
	sig := q.Get("signature")
	if sig == "" {
		return errors.New("missing signature query parameter")
	}
	parts := []string{q.Get("path"), op, q.Get("username"), a.cfg.AccessToken}
	exp := q.Get("signature_expiration")
	if exp != "" {
		parts = append(parts, exp)
	}
	sum := sha256.Sum256([]byte(strings.Join(parts, ":")))
	want := "v1_" + base64.RawStdEncoding.EncodeToString(sum[:])
	if subtle.ConstantTimeCompare([]byte(want), []byte(sig)) != 1 {
		return errors.New("invalid signature")
	}
	if exp != "" {
		n, err := strconv.ParseInt(exp, 10, 64)
		if err != nil || n < time.Now().Unix() {
			return errors.New("signature is already expired")
		}
	}
	return nil
}

// getFiles serves GET /files?path=&username= (and Tupper's offset=&length=).
func (a *Agent) getFiles(w http.ResponseWriter, r *http.Request) {
	if err := a.checkSigning(r, "read"); err != nil {
		jsonError(w, http.StatusUnauthorized, err.Error())
		return
	}
	q := r.URL.Query()
	u, err := a.userFor(q.Get("username"), r.Header)
	if err != nil {
		jsonError(w, http.StatusUnauthorized, err.Error())
		return
	}
	p, err := a.resolvePath(q.Get("path"), u)
	if err != nil {
		jsonError(w, http.StatusBadRequest, err.Error())
		return
	}
	f, err := os.Open(p)
	if err != nil {
		jsonError(w, httpStatus(err), fmt.Sprintf("open %s: %v", p, unwrapPath(err)))
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		jsonError(w, httpStatus(err), err.Error())
		return
	}
	if fi.IsDir() {
		jsonError(w, http.StatusBadRequest, fmt.Sprintf("path %s is a directory", p))
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Disposition", mime.FormatMediaType("inline", map[string]string{"filename": filepath.Base(p)}))

	off, length := q.Get("offset"), q.Get("length")
	// Files whose size stat cannot tell (procfs, sysfs: size 0) are streamed as they read,
	// without Range or Content-Length, since seeking to their end fails.
	if fi.Size() == 0 {
		start, err1 := parseNonNeg(off, 0)
		n, err2 := parseNonNeg(length, -1)
		if err1 != nil || err2 != nil {
			jsonError(w, http.StatusBadRequest, "offset and length must be non-negative integers")
			return
		}
		w.WriteHeader(http.StatusOK)
		if r.Method == http.MethodHead {
			return
		}
		var src io.Reader = f
		if start > 0 {
			if _, err := io.CopyN(io.Discard, src, start); err != nil {
				return
			}
		}
		if n >= 0 {
			src = io.LimitReader(src, n)
		}
		copyOut(w, src)
		return
	}
	if off != "" || length != "" {
		start, err1 := parseNonNeg(off, 0)
		n, err2 := parseNonNeg(length, -1)
		if err1 != nil || err2 != nil {
			jsonError(w, http.StatusBadRequest, "offset and length must be non-negative integers")
			return
		}
		size := fi.Size()
		start = min(start, size)
		if n < 0 || n > size-start {
			n = size - start
		}
		h.Set("Content-Length", strconv.FormatInt(n, 10))
		w.WriteHeader(http.StatusOK)
		if r.Method != http.MethodHead {
			copyOut(w, io.NewSectionReader(f, start, n))
		}
		return
	}
	if r.Header.Get("Range") == "" && acceptsGzip(r) {
		h.Set("Content-Encoding", "gzip")
		h.Add("Vary", "Accept-Encoding")
		w.WriteHeader(http.StatusOK)
		if r.Method != http.MethodHead {
			gz := gzip.NewWriter(w)
			copyOut(gz, f)
			gz.Close()
		}
		return
	}
	http.ServeContent(w, r, "", fi.ModTime(), f)
}

func copyOut(w io.Writer, r io.Reader) {
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	_, _ = io.CopyBuffer(w, r, *bp)
}

func acceptsGzip(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		name, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.EqualFold(strings.TrimSpace(name), "gzip") && !strings.Contains(strings.ReplaceAll(params, " ", ""), "q=0") {
			return true
		}
	}
	return false
}

func parseNonNeg(s string, def int64) (int64, error) {
	if s == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, errors.New("invalid")
	}
	return n, nil
}

func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

func httpStatus(err error) int {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return http.StatusNotFound
	case errors.Is(err, fs.ErrPermission):
		return http.StatusForbidden
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return http.StatusInsufficientStorage
	case errors.Is(err, syscall.EISDIR), errors.Is(err, syscall.ENOTDIR), errors.Is(err, syscall.ENAMETOOLONG), errors.Is(err, syscall.EINVAL):
		return http.StatusBadRequest
	}
	return http.StatusInternalServerError
}

type uploaded struct {
	Path     string            `json:"path"`
	Name     string            `json:"name"`
	Type     string            `json:"type"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

// postFiles serves POST /files: multipart/form-data (parts named "file",
// each filename the full target path unless ?path= is given) or a raw body
// with ?path= (Content-Encoding gzip allowed). Tupper's ?mode= (octal) sets
// the file mode, also on existing files.
func (a *Agent) postFiles(w http.ResponseWriter, r *http.Request) {
	if err := a.checkSigning(r, "write"); err != nil {
		jsonError(w, http.StatusUnauthorized, err.Error())
		return
	}
	q := r.URL.Query()
	u, err := a.userFor(q.Get("username"), r.Header)
	if err != nil {
		jsonError(w, http.StatusUnauthorized, err.Error())
		return
	}
	mode := fs.FileMode(0)
	if m := q.Get("mode"); m != "" {
		n, err := strconv.ParseUint(m, 8, 32)
		if err != nil || n > 0o7777 {
			jsonError(w, http.StatusBadRequest, fmt.Sprintf("invalid mode %q: want octal like 0644", m))
			return
		}
		mode = filemode.FromUnix(uint32(n))
	}
	md, err := metadataOf(r.Header)
	if err != nil {
		jsonError(w, http.StatusBadRequest, err.Error())
		return
	}
	body := io.Reader(r.Body)
	if strings.EqualFold(r.Header.Get("Content-Encoding"), "gzip") {
		gz, err := gzip.NewReader(r.Body)
		if err != nil {
			jsonError(w, http.StatusBadRequest, "invalid gzip body: "+err.Error())
			return
		}
		defer gz.Close()
		body = gz
	}
	ct, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	var out []uploaded
	if ct == "multipart/form-data" {
		boundary := params["boundary"]
		if boundary == "" {
			jsonError(w, http.StatusBadRequest, "multipart body without boundary")
			return
		}
		mr := multipart.NewReader(body, boundary)
		seen := map[string]bool{}
		for {
			part, err := mr.NextRawPart()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				jsonError(w, http.StatusBadRequest, "read multipart body: "+err.Error())
				return
			}
			if part.FormName() != "file" {
				part.Close()
				continue
			}
			target := q.Get("path")
			if target == "" {
				target = partFileName(part.Header.Get("Content-Disposition"))
			}
			if target == "" {
				part.Close()
				jsonError(w, http.StatusBadRequest, "multipart part without a filename and no path parameter")
				return
			}
			p, err := a.resolvePath(target, u)
			if err != nil {
				part.Close()
				jsonError(w, http.StatusBadRequest, err.Error())
				return
			}
			if seen[p] {
				part.Close()
				jsonError(w, http.StatusBadRequest, fmt.Sprintf("cannot upload multiple files to the same path %q in one request", p))
				return
			}
			seen[p] = true
			status, err := a.writeFile(p, part, u, mode, md)
			part.Close()
			if err != nil {
				jsonError(w, status, err.Error())
				return
			}
			out = append(out, uploaded{Path: p, Name: filepath.Base(p), Type: "file", Metadata: md})
		}
		if len(out) == 0 {
			jsonError(w, http.StatusBadRequest, "no part named \"file\" in the multipart body")
			return
		}
	} else {
		target := q.Get("path")
		if target == "" {
			jsonError(w, http.StatusBadRequest, "path query parameter is required for raw body upload")
			return
		}
		p, err := a.resolvePath(target, u)
		if err != nil {
			jsonError(w, http.StatusBadRequest, err.Error())
			return
		}
		status, err := a.writeFile(p, body, u, mode, md)
		if err != nil {
			jsonError(w, status, err.Error())
			return
		}
		out = append(out, uploaded{Path: p, Name: filepath.Base(p), Type: "file", Metadata: md})
	}
	writeJSON(w, http.StatusOK, out)
}

// writeFile writes r to p, creating parent directories; new files and
// directories belong to u. mode 0 means 0644 for new files and unchanged
// for existing ones. The file's metadata becomes md (none when md is nil).
func (a *Agent) writeFile(p string, r io.Reader, u *osUser, mode fs.FileMode, md map[string]string) (int, error) {
	if p == "/" {
		return http.StatusBadRequest, errors.New("cannot write to /")
	}
	if err := a.ensureDirs(filepath.Dir(p), u); err != nil {
		return http.StatusBadRequest, err
	}
	perm := fs.FileMode(0o644)
	if mode != 0 {
		perm = mode.Perm()
	}
	_, statErr := os.Lstat(p)
	// Truncated only once its metadata is set: a file system that keeps none refuses the
	// write before it changes the file.
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE, perm)
	if err != nil {
		return httpStatus(err), fmt.Errorf("open %s: %v", p, unwrapPath(err))
	}
	if statErr != nil {
		if a.euid == 0 {
			_ = f.Chown(int(u.UID), int(u.GID))
		}
	}
	if mode != 0 || statErr != nil {
		m := perm | (mode &^ fs.ModePerm)
		if err := f.Chmod(m); err != nil {
			f.Close()
			return httpStatus(err), fmt.Errorf("chmod %s: %v", p, unwrapPath(err))
		}
	}
	if err := setMetadata(f, md); err != nil {
		f.Close()
		if errors.Is(err, errNoMetadata) {
			return http.StatusNotImplemented, err
		}
		return httpStatus(err), err
	}
	if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() && fi.Size() > 0 {
		if err := f.Truncate(0); err != nil {
			f.Close()
			return httpStatus(err), fmt.Errorf("truncate %s: %v", p, unwrapPath(err))
		}
	}
	bp := copyBufs.Get().(*[]byte)
	_, err = io.CopyBuffer(struct{ io.Writer }{f}, r, *bp) // our buffer, not os.File.ReadFrom's 32 KiB
	copyBufs.Put(bp)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
			return http.StatusInsufficientStorage, fmt.Errorf("not enough disk space writing %s", p)
		}
		var pe *fs.PathError
		if errors.As(err, &pe) {
			return httpStatus(err), fmt.Errorf("write %s: %v", p, pe.Err)
		}
		return http.StatusBadRequest, fmt.Errorf("read request body: %v", err)
	}
	return http.StatusOK, nil
}

// partFileName returns the filename parameter of a part's
// Content-Disposition with its directories (multipart.Part.FileName keeps
// only the base name, but E2B's SDKs put the full target path there).
func partFileName(cd string) string {
	if _, params, err := mime.ParseMediaType(cd); err == nil {
		return params["filename"]
	}
	// Lenient fallback for headers mime rejects, e.g. unescaped quotes.
	i := strings.Index(cd, "filename=")
	if i < 0 {
		return ""
	}
	v := cd[i+len("filename="):]
	if strings.HasPrefix(v, `"`) {
		if j := strings.LastIndex(v, `"`); j > 0 {
			return v[1:j]
		}
		return ""
	}
	if j := strings.IndexByte(v, ';'); j >= 0 {
		v = v[:j]
	}
	return strings.TrimSpace(v)
}
