package memory

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"maps"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/tupper-dev/tupper/provider"
)

// sandbox is the state of one sandbox. Handles (Instance values) point at it.
type sandbox struct {
	prov      *Provider
	id        string
	key       string
	labels    map[string]string
	env       map[string]string // CreateSpec.Env and Secrets
	createdAt time.Time
	fs        *memFS

	// ctx is cancelled when the sandbox stops; every command's context derives from it.
	ctx    context.Context
	cancel context.CancelFunc

	mu          sync.Mutex
	stopped     bool
	deadline    time.Time // zero: none
	lifeTimer   *time.Timer
	idle        time.Duration
	idleTimer   *time.Timer
	lastUse     time.Time
	procs       map[int]*job
	nextPID     int
	checkpoints map[string]*memFS
}

func newSandbox(p *Provider, id string, spec provider.CreateSpec, mfs *memFS) *sandbox {
	env := map[string]string{}
	maps.Copy(env, spec.Env)
	maps.Copy(env, spec.Secrets)
	ctx, cancel := context.WithCancel(context.Background())
	sb := &sandbox{
		prov:        p,
		id:          id,
		key:         spec.Key,
		labels:      maps.Clone(spec.Labels),
		env:         env,
		createdAt:   time.Now(),
		fs:          mfs,
		ctx:         ctx,
		cancel:      cancel,
		idle:        spec.IdleTimeout,
		lastUse:     time.Now(),
		procs:       map[int]*job{},
		nextPID:     100,
		checkpoints: map[string]*memFS{},
	}
	if sb.labels == nil {
		sb.labels = map[string]string{}
	}
	if spec.Timeout > 0 {
		sb.deadline = sb.createdAt.Add(spec.Timeout)
	}
	return sb
}

// startTimers arms the lifetime and idle timers.
func (sb *sandbox) startTimers() {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if !sb.deadline.IsZero() {
		sb.lifeTimer = time.AfterFunc(time.Until(sb.deadline), sb.lifetimeCheck)
	}
	if sb.idle > 0 {
		sb.idleTimer = time.AfterFunc(sb.idle, sb.idleCheck)
	}
}

func (sb *sandbox) lifetimeCheck() {
	sb.mu.Lock()
	if sb.stopped {
		sb.mu.Unlock()
		return
	}
	if rem := time.Until(sb.deadline); rem > 0 { // moved by SetTimeout meanwhile
		sb.lifeTimer.Reset(rem)
		sb.mu.Unlock()
		return
	}
	sb.mu.Unlock()
	sb.prov.expire(sb)
}

func (sb *sandbox) idleCheck() {
	sb.mu.Lock()
	if sb.stopped {
		sb.mu.Unlock()
		return
	}
	if len(sb.procs) > 0 {
		sb.idleTimer.Reset(sb.idle)
		sb.mu.Unlock()
		return
	}
	if rem := sb.idle - time.Since(sb.lastUse); rem > 0 {
		sb.idleTimer.Reset(rem)
		sb.mu.Unlock()
		return
	}
	sb.mu.Unlock()
	sb.prov.expire(sb)
}

// use records activity and fails when the sandbox is gone.
func (sb *sandbox) use() error {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if sb.stopped {
		return notFound(sb.id)
	}
	sb.lastUse = time.Now()
	return nil
}

// stop ends the sandbox: timers stopped, every command cancelled, checkpoints dropped.
func (sb *sandbox) stop() {
	sb.mu.Lock()
	sb.stopped = true
	if sb.lifeTimer != nil {
		sb.lifeTimer.Stop()
	}
	if sb.idleTimer != nil {
		sb.idleTimer.Stop()
	}
	sb.checkpoints = nil
	sb.mu.Unlock()
	sb.cancel()
}

func (sb *sandbox) info() provider.Info {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	state := provider.StateRunning
	if sb.stopped {
		state = provider.StateStopped
	}
	return provider.Info{
		ID:        sb.id,
		Key:       sb.key,
		Labels:    maps.Clone(sb.labels),
		State:     state,
		CreatedAt: sb.createdAt,
		Template:  "default",
		Runtime:   Name,
		Deadline:  sb.deadline,
	}
}

// Instance is a handle to one in-memory sandbox. Its methods may be called concurrently.
type Instance struct {
	sb *sandbox
}

// ID returns the sandbox's id.
func (in *Instance) ID() string { return in.sb.id }

// Info returns the sandbox's identity.
func (in *Instance) Info(ctx context.Context) (provider.Info, error) {
	if err := in.sb.use(); err != nil {
		return provider.Info{}, err
	}
	return in.sb.info(), nil
}

// Close does nothing: a handle holds no resources. It is idempotent.
func (in *Instance) Close() error { return nil }

// PreviewURL fails with CodeUnsupported: there is no network to reach.
func (in *Instance) PreviewURL(ctx context.Context, port int) (string, error) {
	if err := in.sb.use(); err != nil {
		return "", err
	}
	return "", provider.Errorf(provider.CodeUnsupported, "the memory provider has no network, so no preview URLs")
}

// fsError turns a file system error into a provider error with the right code.
func fsError(op string, err error) error {
	if err == nil {
		return nil
	}
	code := provider.CodeInternal
	var en *errno
	if errors.As(err, &en) {
		switch en {
		case errNotExist:
			code = provider.CodeNotFound
		case errExist:
			code = provider.CodeConflict
		default:
			code = provider.CodeInvalidArgument
		}
	}
	msg := err.Error()
	var pe *fs.PathError
	if errors.As(err, &pe) {
		msg = pe.Path + ": " + strings.ToLower(pe.Err.Error())
	}
	return &provider.Error{Code: code, Op: op, Message: msg, Err: err}
}

func checkAbs(op, p string) error {
	if !strings.HasPrefix(p, "/") {
		return &provider.Error{Code: provider.CodeInvalidArgument, Op: op, Message: "path " + quote(p) + " is not absolute"}
	}
	if strings.IndexByte(p, 0) >= 0 {
		return &provider.Error{Code: provider.CodeInvalidArgument, Op: op, Message: "path contains a NUL byte"}
	}
	return nil
}

func quote(s string) string { return "\"" + strings.ReplaceAll(s, "\"", "\\\"") + "\"" }

// ReadFile returns the content of the file at p as it is now; later writes do not change
// what the reader returns.
func (in *Instance) ReadFile(ctx context.Context, p string) (io.ReadCloser, error) {
	if err := in.sb.use(); err != nil {
		return nil, err
	}
	if err := checkAbs("files.read", p); err != nil {
		return nil, err
	}
	data, err := in.sb.fs.ReadFile(p)
	if err != nil {
		return nil, fsError("files.read", err)
	}
	return io.NopCloser(bytes.NewReader(data)), nil
}

// WriteFile replaces the file at p with r's content, creating parent directories.
func (in *Instance) WriteFile(ctx context.Context, p string, r io.Reader, mode *uint32) error {
	if err := in.sb.use(); err != nil {
		return err
	}
	if err := checkAbs("files.write", p); err != nil {
		return err
	}
	if mode != nil && *mode > 0o7777 {
		return provider.Errorf(provider.CodeInvalidArgument, "mode %#o is out of range 0..0o7777", *mode)
	}
	var data []byte
	if r != nil {
		var err error
		if data, err = io.ReadAll(r); err != nil {
			return provider.Wrap(err, provider.CodeInvalidArgument, "files.write")
		}
	}
	if err := ctx.Err(); err != nil {
		return provider.Wrap(err, provider.CodeAborted, "files.write")
	}
	return fsError("files.write", in.sb.fs.WriteFile(p, data, mode, true))
}

func toProviderInfo(p string, fi *fileInfo) provider.FileInfo {
	out := provider.FileInfo{Path: p, Size: fi.size, Mode: fi.perm(), ModifiedAt: fi.mtime}
	switch fi.kind {
	case kindDir:
		out.Type = provider.TypeDir
	case kindFile:
		out.Type = provider.TypeFile
	case kindSymlink:
		out.Type = provider.TypeSymlink
		out.Target = fi.target
	default:
		out.Type = provider.TypeOther
	}
	return out
}

// cleanAbs cleans an absolute path lexically, for reporting.
func cleanAbs(p string) string { return path.Clean(p) }

// Stat describes p without following a final symbolic link.
func (in *Instance) Stat(ctx context.Context, p string) (provider.FileInfo, error) {
	if err := in.sb.use(); err != nil {
		return provider.FileInfo{}, err
	}
	if err := checkAbs("files.stat", p); err != nil {
		return provider.FileInfo{}, err
	}
	fi, err := in.sb.fs.Stat(p, false)
	if err != nil {
		return provider.FileInfo{}, fsError("files.stat", err)
	}
	return toProviderInfo(cleanAbs(p), fi), nil
}

// ListDir lists dir, or with recursive everything below it, without following links below dir.
func (in *Instance) ListDir(ctx context.Context, dir string, recursive bool) ([]provider.FileInfo, error) {
	if err := in.sb.use(); err != nil {
		return nil, err
	}
	if err := checkAbs("files.list", dir); err != nil {
		return nil, err
	}
	fi, err := in.sb.fs.Stat(dir, true)
	if err != nil {
		return nil, fsError("files.list", err)
	}
	if !fi.IsDir() {
		return nil, &provider.Error{Code: provider.CodeInvalidArgument, Op: "files.list", Message: dir + ": not a directory"}
	}
	base := cleanAbs(dir)
	join := func(rel string) string {
		if base == "/" {
			return "/" + rel
		}
		return base + "/" + rel
	}
	var out []provider.FileInfo
	if !recursive {
		entries, err := in.sb.fs.ReadDir(dir)
		if err != nil {
			return nil, fsError("files.list", err)
		}
		for _, e := range entries {
			out = append(out, toProviderInfo(join(e.name), e))
		}
		return out, nil
	}
	entries, err := in.sb.fs.Walk(dir, true)
	if err != nil {
		return nil, fsError("files.list", err)
	}
	for _, e := range entries[1:] {
		out = append(out, toProviderInfo(join(e.rel), e.info))
	}
	return out, nil
}

// Remove removes p; a non-empty directory needs recursive.
func (in *Instance) Remove(ctx context.Context, p string, recursive bool) error {
	if err := in.sb.use(); err != nil {
		return err
	}
	if err := checkAbs("files.remove", p); err != nil {
		return err
	}
	if recursive {
		return fsError("files.remove", in.sb.fs.RemoveAll(p))
	}
	return fsError("files.remove", in.sb.fs.Remove(p))
}

// MakeDir creates dir and its parents.
func (in *Instance) MakeDir(ctx context.Context, dir string) error {
	if err := in.sb.use(); err != nil {
		return err
	}
	if err := checkAbs("files.mkdir", dir); err != nil {
		return err
	}
	return fsError("files.mkdir", in.sb.fs.MkdirAll(dir, 0o755))
}

// Rename moves from to to with rename(2)'s rules, replacing a file there.
func (in *Instance) Rename(ctx context.Context, from, to string) error {
	if err := in.sb.use(); err != nil {
		return err
	}
	if err := checkAbs("files.rename", from); err != nil {
		return err
	}
	if err := checkAbs("files.rename", to); err != nil {
		return err
	}
	return fsError("files.rename", in.sb.fs.Rename(from, to))
}

// Search finds lines containing query in the regular text files below dir whose base name
// matches glob, in path order, stopping after max matches (max <= 0: no limit).
func (in *Instance) Search(ctx context.Context, query, dir, glob string, max int) ([]provider.SearchMatch, error) {
	if err := in.sb.use(); err != nil {
		return nil, err
	}
	if err := checkAbs("files.search", dir); err != nil {
		return nil, err
	}
	if query == "" {
		return nil, provider.Errorf(provider.CodeInvalidArgument, "empty search query")
	}
	if glob != "" {
		if _, err := path.Match(glob, ""); err != nil {
			return nil, provider.Errorf(provider.CodeInvalidArgument, "bad glob %q: %v", glob, err)
		}
	}
	entries, err := in.sb.fs.Walk(dir, true)
	if err != nil {
		return nil, fsError("files.search", err)
	}
	base := cleanAbs(dir)
	var out []provider.SearchMatch
	for _, e := range entries {
		if e.info.kind != kindFile {
			continue
		}
		if err := ctx.Err(); err != nil {
			return nil, provider.Wrap(err, provider.CodeAborted, "files.search")
		}
		if glob != "" {
			if ok, _ := path.Match(glob, e.info.name); !ok {
				continue
			}
		}
		data, err := in.sb.fs.ReadFile(e.path)
		if err != nil || bytes.IndexByte(data, 0) >= 0 {
			continue
		}
		p := base
		if e.rel != "" {
			p = strings.TrimSuffix(base, "/") + "/" + e.rel
		}
		for i, line := range splitLines(data) {
			if strings.Contains(line, query) {
				out = append(out, provider.SearchMatch{Path: p, Line: i + 1, Text: line})
				if max > 0 && len(out) >= max {
					return out, nil
				}
			}
		}
	}
	return out, nil
}

// splitLines splits data into lines without their newlines; a final newline does not start
// another line.
func splitLines(data []byte) []string {
	if len(data) == 0 {
		return nil
	}
	s := strings.TrimSuffix(string(data), "\n")
	return strings.Split(s, "\n")
}

// Busy reports whether a command (attached or detached) is running.
func (in *Instance) Busy(ctx context.Context) (bool, error) {
	sb := in.sb
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if sb.stopped {
		return false, notFound(sb.id)
	}
	return len(sb.procs) > 0, nil
}

// SetTimeout moves the lifetime deadline to d from now.
func (in *Instance) SetTimeout(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return provider.Errorf(provider.CodeInvalidArgument, "timeout must be positive, got %v", d)
	}
	sb := in.sb
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if sb.stopped {
		return notFound(sb.id)
	}
	sb.lastUse = time.Now()
	sb.deadline = time.Now().Add(d)
	if sb.lifeTimer == nil {
		sb.lifeTimer = time.AfterFunc(d, sb.lifetimeCheck)
	} else {
		sb.lifeTimer.Reset(d)
	}
	return nil
}

// Snapshot captures the sandbox's file system. Running commands are not captured.
func (in *Instance) Snapshot(ctx context.Context, expires time.Duration) (string, error) {
	if err := in.sb.use(); err != nil {
		return "", err
	}
	if expires < 0 {
		return "", provider.Errorf(provider.CodeInvalidArgument, "negative snapshot expiry %v", expires)
	}
	return in.sb.prov.addSnapshot(in.sb.fs.Clone(), expires), nil
}
