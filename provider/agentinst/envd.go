package agentinst

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/tupper-dev/tupper/agent/client"
	"github.com/tupper-dev/tupper/provider"
)

// Config is what the embedding provider supplies; see the package doc.
type Config struct {
	// ID is the sandbox's id, returned by ID and named in messages.
	ID string
	// Client reaches the sandbox's agent or envd. Close closes it.
	Client *client.Client
	// Check, when set, runs before every call to the agent but SetDeadline; its error is
	// returned as it is.
	Check func(ctx context.Context) error
	// Gone, when set, reports whether the sandbox has stopped. It is asked after a failure
	// the protocol does not explain (CodeProvider or CodeUnavailable), with a context that is
	// not cancelled; true turns the failure into CodeNotFound.
	Gone func(ctx context.Context) bool
}

// Envd implements exec, files and provider.FileSystem over envd's protocol. Create it with
// NewEnvd.
type Envd struct {
	cfg       Config
	c         *client.Client
	closeOnce sync.Once
}

var _ provider.FileSystem = (*Envd)(nil)

// NewEnvd returns the instance half for cfg.
func NewEnvd(cfg Config) *Envd { return &Envd{cfg: cfg, c: cfg.Client} }

// ID is the sandbox's id (Config.ID).
func (e *Envd) ID() string { return e.cfg.ID }

// Client is Config.Client, for the provider's own calls to the agent (map their errors with
// Err).
func (e *Envd) Client() *client.Client { return e.c }

// Close releases the client's connections; the sandbox lives on. It is idempotent.
func (e *Envd) Close() error {
	e.closeOnce.Do(func() { e.c.Close() })
	return nil
}

func (e *Envd) check(ctx context.Context) error {
	if e.cfg.Check == nil {
		return nil
	}
	return e.cfg.Check(ctx)
}

// detachPrefix puts a detached command's stdin, stdout and stderr on /dev/null, as the
// contract says; its own session and process group are the agent's doing.
const detachPrefix = "exec </dev/null >/dev/null 2>&1\n"

// Exec runs req.Command with /bin/sh -c through the process service's Start, streaming its
// output, feeding req.Stdin with SendInput and CloseStdin. When ctx ends first, or writing
// its output fails, the process group is killed (SendSignal). See provider.Instance.
func (e *Envd) Exec(ctx context.Context, req provider.ExecRequest) (provider.ExecResult, error) {
	if err := e.check(ctx); err != nil {
		return provider.ExecResult{}, err
	}
	creq := client.ExecRequest{Command: req.Command, Env: req.Env, Cwd: req.Cwd, User: req.User}
	if req.Detach {
		creq.Command = detachPrefix + req.Command
		pid, err := e.c.Detach(ctx, creq)
		if err != nil {
			return provider.ExecResult{}, e.Err(ctx, err, "exec")
		}
		return provider.ExecResult{PID: pid}, nil
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var failed outputFailure
	creq.Stdin = req.Stdin
	creq.Stdout = failed.wrap(req.Stdout, "stdout", cancel)
	creq.Stderr = failed.wrap(req.Stderr, "stderr", cancel)
	res, err := e.c.Exec(runCtx, creq)
	if failed.err != nil {
		return provider.ExecResult{}, provider.Errorf(provider.CodeAborted, "exec: writing %s: %v", failed.stream, failed.err)
	}
	if err != nil {
		return provider.ExecResult{}, e.Err(ctx, err, "exec")
	}
	return execResult(res), nil
}

// outputFailure records the first failed write of a command's output. The client writes
// both streams from one goroutine.
type outputFailure struct {
	stream string
	err    error
}

// wrap returns w, which on its first failure records it and calls stop; nil stays nil.
func (f *outputFailure) wrap(w io.Writer, stream string, stop func()) io.Writer {
	if w == nil {
		return nil
	}
	return writerFunc(func(p []byte) (int, error) {
		if f.err != nil {
			return 0, f.err
		}
		n, err := w.Write(p)
		if err == nil && n < len(p) {
			err = io.ErrShortWrite
		}
		if err != nil {
			f.stream, f.err = stream, err
			stop()
		}
		return n, err
	})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// ReadFile streams a file: GET /files. Missing: CodeNotFound; a directory:
// CodeInvalidArgument.
func (e *Envd) ReadFile(ctx context.Context, path string) (io.ReadCloser, error) {
	if err := e.check(ctx); err != nil {
		return nil, err
	}
	rc, err := e.c.ReadFile(ctx, path, client.ReadOptions{})
	if err != nil {
		return nil, e.Err(ctx, err, "files.read")
	}
	return rc, nil
}

// WriteFile uploads r as an octet stream (POST /files), which creates the parents; a mode
// is then set with chmod, as envd takes none.
func (e *Envd) WriteFile(ctx context.Context, path string, r io.Reader, mode *uint32) error {
	if err := checkMode(mode); err != nil {
		return err
	}
	if err := e.check(ctx); err != nil {
		return err
	}
	if err := e.c.WriteFile(ctx, path, r, client.WriteOptions{}); err != nil {
		return e.Err(ctx, err, "files.write")
	}
	if mode == nil {
		return nil
	}
	return e.chmod(ctx, path, *mode)
}

func checkMode(mode *uint32) error {
	if mode != nil && *mode > 0o7777 {
		return provider.Errorf(provider.CodeInvalidArgument, "mode %o out of range", *mode)
	}
	return nil
}

// chmod sets path's mode with chmod(1), without a shell.
func (e *Envd) chmod(ctx context.Context, path string, mode uint32) error {
	var stderr limitedBuffer
	res, err := e.c.Exec(ctx, client.ExecRequest{Argv: []string{"chmod", fmt.Sprintf("%o", mode), "--", path}, Cwd: "/", Stderr: &stderr})
	if err != nil {
		return e.Err(ctx, err, "files.write")
	}
	if res.ExitCode != 0 {
		return &provider.Error{Code: provider.CodeProvider, Op: "files.write",
			Message: provider.StripCredentials(fmt.Sprintf("chmod %o %s: %s", mode, path, strings.TrimSpace(stderr.String())))}
	}
	return nil
}

// limitedBuffer keeps the first KiB written to it: enough for chmod's complaint, and no
// more of what an untrusted agent sends.
type limitedBuffer struct{ b []byte }

func (l *limitedBuffer) Write(p []byte) (int, error) {
	l.b = append(l.b, p[:min(len(p), max(0, 1024-len(l.b)))]...)
	return len(p), nil
}

func (l *limitedBuffer) String() string { return string(l.b) }

// maxListDepth bounds a recursive listing.
const maxListDepth = 64

// Stat describes path without following a final symlink: Filesystem.Stat.
func (e *Envd) Stat(ctx context.Context, path string) (provider.FileInfo, error) {
	if err := e.check(ctx); err != nil {
		return provider.FileInfo{}, err
	}
	fi, err := e.c.Stat(ctx, path)
	if err != nil {
		return provider.FileInfo{}, e.Err(ctx, err, "files.stat")
	}
	return fileInfo(fi), nil
}

// ListDir lists dir, or everything below it: Filesystem.ListDir.
func (e *Envd) ListDir(ctx context.Context, dir string, recursive bool) ([]provider.FileInfo, error) {
	if err := e.check(ctx); err != nil {
		return nil, err
	}
	depth := 1
	if recursive {
		depth = maxListDepth
	}
	list, err := e.c.ListDir(ctx, dir, depth)
	if err != nil {
		return nil, e.Err(ctx, err, "files.list")
	}
	out := make([]provider.FileInfo, len(list))
	for k, fi := range list {
		out[k] = fileInfo(fi)
	}
	return out, nil
}

// Remove removes path: Filesystem.Remove, which removes whole trees, so a non-empty
// directory without recursive is refused first.
func (e *Envd) Remove(ctx context.Context, path string, recursive bool) error {
	if err := e.check(ctx); err != nil {
		return err
	}
	fi, err := e.c.Stat(ctx, path)
	if err != nil {
		return e.Err(ctx, err, "files.remove")
	}
	if fi.Type == client.FileTypeDir && fi.SymlinkTarget == "" && !recursive {
		list, err := e.c.ListDir(ctx, path, 1)
		if err != nil {
			return e.Err(ctx, err, "files.remove")
		}
		if len(list) > 0 {
			return provider.Errorf(provider.CodeInvalidArgument, "directory %s is not empty", path)
		}
	}
	return e.Err(ctx, e.c.Remove(ctx, path), "files.remove")
}

// MakeDir creates dir and its parents: Filesystem.MakeDir; an existing directory is fine.
func (e *Envd) MakeDir(ctx context.Context, dir string) error {
	if err := e.check(ctx); err != nil {
		return err
	}
	_, err := e.c.MakeDir(ctx, dir)
	return e.Err(ctx, err, "files.mkdir")
}

// Rename moves from to to: Filesystem.Move.
func (e *Envd) Rename(ctx context.Context, from, to string) error {
	if err := e.check(ctx); err != nil {
		return err
	}
	_, err := e.c.Move(ctx, from, to)
	return e.Err(ctx, err, "files.rename")
}

// fileInfo is the contract's description of an entry. A symlink is TypeSymlink whatever
// its target is; Mode is the entry's own permission bits (client.LstatPerm).
func fileInfo(fi client.FileInfo) provider.FileInfo {
	t := provider.TypeOther
	switch {
	case fi.SymlinkTarget != "" || fi.Type == client.FileTypeSymlink:
		t = provider.TypeSymlink
	case fi.Type == client.FileTypeFile:
		t = provider.TypeFile
	case fi.Type == client.FileTypeDir:
		t = provider.TypeDir
	}
	return provider.FileInfo{
		Path: fi.Path, Type: t, Size: fi.Size, Mode: client.LstatPerm(fi.Permissions, uint32(fi.Mode.Perm())),
		ModifiedAt: fi.ModTime, Target: fi.SymlinkTarget,
	}
}
