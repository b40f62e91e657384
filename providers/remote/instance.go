package remote

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/server/api"
)

// Instance is one sandbox on the server.
type Instance struct {
	p    *Provider
	id   string
	path string // /v1/sandboxes/{id}

	mu       sync.Mutex
	previews map[int]preview
}

type preview struct {
	url     string
	expires time.Time
}

var (
	_ provider.Instance         = (*Instance)(nil)
	_ provider.FileSystem       = (*Instance)(nil)
	_ provider.Searcher         = (*Instance)(nil)
	_ provider.ChangeTracker    = (*Instance)(nil)
	_ provider.ActivityReporter = (*Instance)(nil)
	_ provider.Pauser           = (*Instance)(nil)
	_ provider.ColdPauser       = (*Instance)(nil)
	_ provider.Snapshotter      = (*Instance)(nil)
	_ provider.TimeoutSetter    = (*Instance)(nil)
	_ provider.RangeReader      = (*Instance)(nil)
)

// ID is the sandbox's id.
func (in *Instance) ID() string { return in.id }

// Info asks the server for the sandbox's identity and state.
func (in *Instance) Info(ctx context.Context) (provider.Info, error) {
	var sb api.Sandbox
	if err := in.p.call(ctx, http.MethodGet, in.path, nil, &sb); err != nil {
		return provider.Info{}, err
	}
	return infoOf(sb), nil
}

// Close does nothing: the instance holds no connection of its own.
func (in *Instance) Close() error { return nil }

// serverGrace is how much longer than the caller's deadline the server lets a command run;
// the caller's deadline ends the request first, which makes the server kill the command.
const serverGrace = 5 * time.Second

// Exec runs one command on the server, streaming stdin up and output down in one request.
func (in *Instance) Exec(ctx context.Context, req provider.ExecRequest) (provider.ExecResult, error) {
	h := api.ExecHeader{Command: req.Command, Cwd: req.Cwd, Env: req.Env, User: req.User, Detach: req.Detach, Stdin: req.Stdin != nil && !req.Detach}
	if dl, ok := ctx.Deadline(); ok && !req.Detach {
		h.TimeoutMS = ceilMS(time.Until(dl) + serverGrace)
	}
	line, err := json.Marshal(h)
	if err != nil {
		return provider.ExecResult{}, provider.Errorf(provider.CodeInvalidArgument, "exec: %v", err)
	}
	line = append(line, '\n')
	var body io.Reader = bytes.NewReader(line)
	if h.Stdin {
		body = io.MultiReader(bytes.NewReader(line), req.Stdin)
	}
	hr, err := in.p.request(ctx, http.MethodPost, in.path+"/exec", body)
	if err != nil {
		return provider.ExecResult{}, err
	}
	hr.Header.Set("Content-Type", "application/x-tupper-exec")
	resp, err := in.p.do(hr, "exec")
	if err != nil {
		return provider.ExecResult{}, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	for sc.Scan() {
		var f api.ExecFrame
		if err := json.Unmarshal(sc.Bytes(), &f); err != nil {
			return provider.ExecResult{}, provider.Errorf(provider.CodeProvider, "exec: malformed frame from the server: %v", err)
		}
		switch f.Type {
		case "stdout", "stderr":
			w := req.Stdout
			if f.Type == "stderr" {
				w = req.Stderr
			}
			if w != nil {
				if _, err := w.Write(f.Data); err != nil {
					return provider.ExecResult{}, provider.Errorf(provider.CodeAborted, "exec: writing output: %v", err)
				}
			}
		case "exit":
			return provider.ExecResult{ExitCode: f.ExitCode, Signal: f.Signal, OOMKilled: f.OOMKilled, PID: f.PID}, nil
		case "error":
			if ctx.Err() != nil {
				return provider.ExecResult{}, fmt.Errorf("exec: %w", ctx.Err())
			}
			return provider.ExecResult{}, api.Error{Code: f.Code, Message: f.Message}.Err()
		}
	}
	if ctx.Err() != nil {
		return provider.ExecResult{}, fmt.Errorf("exec: %w", ctx.Err())
	}
	msg := "the server ended the stream before the command's exit"
	if err := sc.Err(); err != nil {
		msg += ": " + err.Error()
	}
	return provider.ExecResult{}, provider.Errorf(provider.CodeUnavailable, "exec: %s", msg)
}

func (in *Instance) filePath(route, p string, extra url.Values) string {
	q := url.Values{"path": {p}}
	for k, v := range extra {
		q[k] = v
	}
	return in.path + "/files/" + route + "?" + q.Encode()
}

// ReadFile streams a file from the server.
func (in *Instance) ReadFile(ctx context.Context, path string) (io.ReadCloser, error) {
	return in.ReadFileRange(ctx, path, 0, -1)
}

// ReadFileRange streams length bytes (all with length < 0) from offset.
func (in *Instance) ReadFileRange(ctx context.Context, path string, offset, length int64) (io.ReadCloser, error) {
	extra := url.Values{}
	if offset > 0 {
		extra.Set("offset", strconv.FormatInt(offset, 10))
	}
	if length >= 0 {
		extra.Set("length", strconv.FormatInt(length, 10))
	}
	req, err := in.p.request(ctx, http.MethodGet, in.filePath("content", path, extra), nil)
	if err != nil {
		return nil, err
	}
	resp, err := in.p.do(req, "files.read")
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// WriteFile streams r to a file on the server.
func (in *Instance) WriteFile(ctx context.Context, path string, r io.Reader, mode *uint32) error {
	extra := url.Values{}
	if mode != nil {
		extra.Set("mode", strconv.FormatUint(uint64(*mode), 8))
	}
	req, err := in.p.request(ctx, http.MethodPut, in.filePath("content", path, extra), r)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := in.p.do(req, "files.write")
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// previewTTL is how long the signed preview links PreviewURL asks for stay valid; a link is
// reused until a minute before it expires.
const previewTTL = time.Hour

// PreviewURL returns the server's signed preview link for port, which needs no credential.
func (in *Instance) PreviewURL(ctx context.Context, port int) (string, error) {
	in.mu.Lock()
	pv, ok := in.previews[port]
	in.mu.Unlock()
	if ok && time.Until(pv.expires) > time.Minute {
		return pv.url, nil
	}
	var out api.Port
	if err := in.p.call(ctx, http.MethodPost, fmt.Sprintf("%s/ports/%d/expose", in.path, port),
		api.ExposeRequest{ExpiresInMS: previewTTL.Milliseconds()}, &out); err != nil {
		return "", err
	}
	in.mu.Lock()
	in.previews[port] = preview{url: out.SignedURL, expires: out.ExpiresAt}
	in.mu.Unlock()
	return out.SignedURL, nil
}

// Stat describes path.
func (in *Instance) Stat(ctx context.Context, path string) (provider.FileInfo, error) {
	return get(ctx, in.p, in.filePath("stat", path, nil), api.FileInfo.Info)
}

// ListDir lists dir.
func (in *Instance) ListDir(ctx context.Context, dir string, recursive bool) ([]provider.FileInfo, error) {
	extra := url.Values{}
	if recursive {
		extra.Set("recursive", "true")
	}
	return list(ctx, in.p, in.filePath("list", dir, extra), "entries", api.FileInfo.Info)
}

// Remove removes path.
func (in *Instance) Remove(ctx context.Context, path string, recursive bool) error {
	return in.p.call(ctx, http.MethodPost, in.path+"/files/remove", api.RemoveRequest{Path: path, Recursive: recursive}, nil)
}

// MakeDir creates dir and its parents.
func (in *Instance) MakeDir(ctx context.Context, dir string) error {
	return in.p.call(ctx, http.MethodPost, in.path+"/files/mkdir", api.PathRequest{Path: dir}, nil)
}

// Rename moves from to to.
func (in *Instance) Rename(ctx context.Context, from, to string) error {
	return in.p.call(ctx, http.MethodPost, in.path+"/files/rename", api.RenameRequest{From: from, To: to}, nil)
}

// Search finds lines containing query below dir.
func (in *Instance) Search(ctx context.Context, query, dir, glob string, max int) ([]provider.SearchMatch, error) {
	var out api.Matches
	body := api.SearchRequest{Query: query, Path: dir, Glob: glob, MaxMatches: max}
	if err := in.p.call(ctx, http.MethodPost, in.path+"/files/search", body, &out); err != nil {
		return nil, err
	}
	matches := make([]provider.SearchMatch, 0, len(out.Matches))
	for _, m := range out.Matches {
		matches = append(matches, provider.SearchMatch{Path: m.Path, Line: m.Line, Text: m.Text})
	}
	return matches, nil
}

// Mark records a checkpoint of /workspace (the server tracks /workspace; dir is that).
func (in *Instance) Mark(ctx context.Context, dir, name string) error {
	return in.p.call(ctx, http.MethodPost, in.path+"/files/mark", api.MarkRequest{Name: name}, nil)
}

// Changes compares /workspace with checkpoint name.
func (in *Instance) Changes(ctx context.Context, dir, name string) (provider.Changes, error) {
	var raw api.Changes
	if err := in.p.call(ctx, http.MethodGet, in.path+"/files/changes?since="+url.QueryEscape(name), nil, &raw); err != nil {
		return provider.Changes{}, err
	}
	return provider.Changes{Added: raw.Added, Modified: raw.Modified, Removed: raw.Removed, Patch: raw.Patch}, nil
}

// Busy reports whether a command or background process runs in the sandbox.
func (in *Instance) Busy(ctx context.Context) (bool, error) {
	var out api.Busy
	err := in.p.call(ctx, http.MethodGet, in.path+"/busy", nil, &out)
	return out.Busy, err
}

// Pause freezes the sandbox.
func (in *Instance) Pause(ctx context.Context) error {
	if err := in.p.Refuse(provider.CapPause); err != nil {
		return err
	}
	return in.p.call(ctx, http.MethodPost, in.path+"/pause", nil, nil)
}

// PauseCold pauses the sandbox without its memory (POST pause {"keepMemory": false}): the
// server's provider keeps its files and ends its processes; refused where the server does
// not list "pause-cold". A sandbox paused already, either way, is left as it is (the server
// answers conflict).
func (in *Instance) PauseCold(ctx context.Context) error {
	if err := in.p.Refuse(provider.CapPauseCold); err != nil {
		return err
	}
	err := in.p.call(ctx, http.MethodPost, in.path+"/pause", api.PauseRequest{KeepMemory: new(bool)}, nil)
	if provider.CodeOf(err) == provider.CodeConflict {
		if info, ierr := in.Info(ctx); ierr == nil && info.State == provider.StatePaused {
			return nil
		}
	}
	return err
}

// Resume thaws the sandbox (boots it again when it was paused without its memory).
func (in *Instance) Resume(ctx context.Context) error {
	return in.p.call(ctx, http.MethodPost, in.path+"/resume", nil, nil)
}

// Snapshot captures the sandbox and returns the snapshot's id.
func (in *Instance) Snapshot(ctx context.Context, expires time.Duration) (string, error) {
	if err := in.p.Refuse(provider.CapSnapshot); err != nil {
		return "", err
	}
	var out api.SnapshotTaken
	err := in.p.call(ctx, http.MethodPost, in.path+"/snapshot", api.SnapshotRequest{ExpiresInMS: ceilMS(expires)}, &out)
	return out.ID, err
}

// SetNetwork replaces the sandbox's network policy (PUT /v1/sandboxes/{id}/network).
func (in *Instance) SetNetwork(ctx context.Context, n provider.Network) error {
	return in.p.call(ctx, http.MethodPut, in.path+"/network", api.NetworkOf(n), nil)
}

var _ provider.NetworkReporter = (*Instance)(nil)

// Network is the sandbox's network policy now (GET /v1/sandboxes/{id}/network), its egress
// proxy without the password.
func (in *Instance) Network(ctx context.Context) (provider.Network, error) {
	var n api.Network
	if err := in.p.call(ctx, http.MethodGet, in.path+"/network", nil, &n); err != nil {
		return provider.Network{}, err
	}
	return n.Provider(), nil
}

var _ provider.EgressReporter = (*Instance)(nil)

// Egress reads a page of the sandbox's egress record (GET /v1/sandboxes/{id}/egress).
func (in *Instance) Egress(ctx context.Context, after string) (provider.EgressLog, error) {
	var l provider.EgressLog
	err := in.p.call(ctx, http.MethodGet, in.path+"/egress?after="+url.QueryEscape(after), nil, &l)
	return l, err
}

// SetTimeout moves the sandbox's deadline to d from now.
func (in *Instance) SetTimeout(ctx context.Context, d time.Duration) error {
	return in.p.call(ctx, http.MethodPost, in.path+"/timeout", api.TimeoutRequest{TimeoutMS: ceilMS(d)}, nil)
}
