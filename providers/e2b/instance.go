package e2b

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"connectrpc.com/connect"

	"github.com/tupper-dev/tupper/agent/client"
	"github.com/tupper-dev/tupper/agent/spec/filesystem"
	"github.com/tupper-dev/tupper/agent/spec/filesystem/filesystemconnect"
	"github.com/tupper-dev/tupper/agent/spec/process"
	"github.com/tupper-dev/tupper/agent/spec/process/processconnect"
	"github.com/tupper-dev/tupper/provider"
)

// envdPort is the port E2B routes to envd.
const envdPort = 49983

// Instance is one sandbox of an E2B-compatible API. Every method may be called concurrently.
type Instance struct {
	p    *Provider
	sb   sandboxJSON // as created or fetched
	base string      // envd base URL
	proc processconnect.ProcessClient
	fs   filesystemconnect.FilesystemClient
}

var (
	_ provider.Instance      = (*Instance)(nil)
	_ provider.FileSystem    = (*Instance)(nil)
	_ provider.TimeoutSetter = (*Instance)(nil)
	_ provider.Pauser        = (*Instance)(nil)
)

func (p *Provider) instance(sb sandboxJSON) *Instance {
	in := &Instance{p: p, sb: sb, base: p.envdURL(sb)}
	opts := []connect.ClientOption{connect.WithInterceptors(headers{in}), connect.WithReadMaxBytes(64 << 20)}
	in.proc = processconnect.NewProcessClient(p.hc, in.base, opts...)
	in.fs = filesystemconnect.NewFilesystemClient(p.hc, in.base, opts...)
	return in
}

// ID is the sandbox's id.
func (in *Instance) ID() string { return in.sb.SandboxID }

// setHeaders sets E2B's routing headers, the access token and (unless set) the OS user on an
// envd request.
func (in *Instance) setHeaders(h http.Header, user string) {
	in.setRouting(h)
	if h.Get("Authorization") == "" {
		h.Set("Authorization", basic(user))
	}
}

// setRouting sets E2B's routing headers and the access token.
func (in *Instance) setRouting(h http.Header) {
	h.Set("E2b-Sandbox-Id", in.sb.SandboxID)
	h.Set("E2b-Sandbox-Port", strconv.Itoa(envdPort))
	if in.sb.EnvdAccessToken != "" {
		h.Set("X-Access-Token", in.sb.EnvdAccessToken)
	}
}

// headers is the interceptor that sets them on every RPC: the user is root on unary calls
// that set none; a streaming call sets Authorization on its request (connect merges the
// request's headers into the stream's after the interceptors ran).
type headers struct{ in *Instance }

func (h headers) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		h.in.setHeaders(req.Header(), "")
		return next(ctx, req)
	}
}

func (h headers) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		h.in.setRouting(conn.RequestHeader())
		return conn
	}
}

func (h headers) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

func basic(user string) string {
	if user == "" {
		user = "root"
	}
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"))
}

// rpcErr maps an envd error to a provider error.
func (in *Instance) rpcErr(ctx context.Context, err error, op string) error {
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return fmt.Errorf("%s: %w", op, ctx.Err())
	}
	code := provider.CodeProvider
	switch connect.CodeOf(err) {
	case connect.CodeNotFound:
		code = provider.CodeNotFound
	case connect.CodeAlreadyExists:
		code = provider.CodeConflict
	case connect.CodeInvalidArgument, connect.CodeFailedPrecondition:
		code = provider.CodeInvalidArgument
	case connect.CodePermissionDenied:
		code = provider.CodeForbidden
	case connect.CodeUnauthenticated:
		code = provider.CodeUnauthorized
	case connect.CodeResourceExhausted:
		code = provider.CodeResourceExhausted
	case connect.CodeDeadlineExceeded:
		code = provider.CodeTimeout
	case connect.CodeUnavailable:
		// E2B's proxy answers 502 for a sandbox it does not know.
		code = provider.CodeUnavailable
		if _, gerr := in.p.get(context.WithoutCancel(ctx), in.sb.SandboxID); errors.Is(gerr, provider.CodeNotFound) {
			code = provider.CodeNotFound
		}
	}
	msg := err.Error()
	var ce *connect.Error
	if errors.As(err, &ce) {
		msg = ce.Message()
	}
	return &provider.Error{Code: code, Op: op, Message: provider.StripCredentials(msg), Err: err}
}

// Info fetches the sandbox: GET /sandboxes/{id}.
func (in *Instance) Info(ctx context.Context) (provider.Info, error) {
	sb, err := in.p.get(ctx, in.sb.SandboxID)
	if err != nil {
		return provider.Info{}, err
	}
	return sb.info(), nil
}

// Close releases nothing: the instance holds no connection of its own.
func (in *Instance) Close() error { return nil }

// Exec runs req.Command with /bin/sh -c through Process.Start. See provider.Instance.
func (in *Instance) Exec(ctx context.Context, req provider.ExecRequest) (provider.ExecResult, error) {
	cmd := req.Command
	withStdin := req.Stdin != nil && !req.Detach
	if req.Detach {
		// Its own session and group are envd's doing; stdio goes to /dev/null so nothing
		// holds the stream.
		cmd = "exec </dev/null >/dev/null 2>&1\n" + cmd
	}
	msg := &process.StartRequest{
		Process: &process.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", cmd}, Envs: req.Env},
		Stdin:   &withStdin,
	}
	if req.Cwd != "" {
		cwd := req.Cwd
		msg.Process.Cwd = &cwd
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r := connect.NewRequest(msg)
	r.Header().Set("Authorization", basic(req.User))
	stream, err := in.proc.Start(sctx, r)
	if err != nil {
		return provider.ExecResult{}, in.rpcErr(ctx, err, "exec")
	}
	defer stream.Close()

	var pid uint32
	var end *process.ProcessEvent_EndEvent
	var stdinErr chan error
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		switch {
		case ev.GetStart() != nil:
			pid = ev.GetStart().GetPid()
			if req.Detach {
				return provider.ExecResult{PID: int(pid)}, nil
			}
			if withStdin {
				stdinErr = make(chan error, 1)
				go func() { stdinErr <- in.pumpStdin(sctx, pid, req.Stdin) }()
			}
		case ev.GetData() != nil:
			d := ev.GetData()
			if b := d.GetStdout(); len(b) > 0 && req.Stdout != nil {
				if _, err := req.Stdout.Write(b); err != nil {
					in.kill(pid)
					return provider.ExecResult{}, provider.Errorf(provider.CodeAborted, "exec: writing stdout: %v", err)
				}
			}
			if b := d.GetStderr(); len(b) > 0 && req.Stderr != nil {
				if _, err := req.Stderr.Write(b); err != nil {
					in.kill(pid)
					return provider.ExecResult{}, provider.Errorf(provider.CodeAborted, "exec: writing stderr: %v", err)
				}
			}
		case ev.GetEnd() != nil:
			end = ev.GetEnd()
		}
	}
	err = stream.Err()
	if ctx.Err() != nil {
		in.kill(pid)
		return provider.ExecResult{}, fmt.Errorf("exec: %w", ctx.Err())
	}
	if end == nil {
		if err == nil {
			err = errors.New("the process ended without a result")
		}
		return provider.ExecResult{}, in.rpcErr(ctx, err, "exec")
	}
	if stdinErr != nil {
		cancel()
		<-stdinErr
	}
	res := provider.ExecResult{ExitCode: int(end.GetExitCode())}
	if !end.GetExited() {
		if sig := signalOf(end.GetStatus()); sig != 0 {
			res.ExitCode, res.Signal = 128+int(sig), signalName(sig)
		} else if res.ExitCode <= 0 {
			res.ExitCode, res.Signal = 128+int(syscall.SIGKILL), "SIGKILL"
		}
	}
	return res, nil
}

// pumpStdin sends r to the process with SendInput, then closes its stdin.
func (in *Instance) pumpStdin(ctx context.Context, pid uint32, r io.Reader) error {
	sel := &process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: pid}}
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			input := &process.ProcessInput{Input: &process.ProcessInput_Stdin{Stdin: append([]byte(nil), buf[:n]...)}}
			if _, serr := in.proc.SendInput(ctx, connect.NewRequest(&process.SendInputRequest{Process: sel, Input: input})); serr != nil {
				return serr
			}
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			break // the reader failed: close stdin, as when it ends
		}
	}
	_, err := in.proc.CloseStdin(ctx, connect.NewRequest(&process.CloseStdinRequest{Process: sel}))
	return err
}

// kill sends SIGKILL to the process (envd signals its whole group).
func (in *Instance) kill(pid uint32) {
	if pid == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	sel := &process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: pid}}
	_, _ = in.proc.SendSignal(ctx, connect.NewRequest(&process.SendSignalRequest{Process: sel, Signal: process.Signal_SIGNAL_SIGKILL}))
}

// signalOf parses the signal of an envd status such as "signal: killed".
func signalOf(status string) syscall.Signal {
	name, ok := strings.CutPrefix(status, "signal: ")
	if !ok {
		return 0
	}
	name = strings.TrimSuffix(name, " (core dumped)")
	for s := syscall.Signal(1); s < 65; s++ {
		if s.String() == name {
			return s
		}
	}
	return 0
}

var signalNames = map[syscall.Signal]string{
	syscall.SIGHUP: "SIGHUP", syscall.SIGINT: "SIGINT", syscall.SIGQUIT: "SIGQUIT", syscall.SIGILL: "SIGILL",
	syscall.SIGTRAP: "SIGTRAP", syscall.SIGABRT: "SIGABRT", syscall.SIGBUS: "SIGBUS", syscall.SIGFPE: "SIGFPE",
	syscall.SIGKILL: "SIGKILL", syscall.SIGUSR1: "SIGUSR1", syscall.SIGSEGV: "SIGSEGV", syscall.SIGUSR2: "SIGUSR2",
	syscall.SIGPIPE: "SIGPIPE", syscall.SIGALRM: "SIGALRM", syscall.SIGTERM: "SIGTERM",
}

func signalName(s syscall.Signal) string {
	if n, ok := signalNames[s]; ok {
		return n
	}
	return "SIG" + strconv.Itoa(int(s))
}

// filesRequest builds a /files request as root.
func (in *Instance) filesRequest(ctx context.Context, method, path string, body io.Reader) (*http.Request, error) {
	q := url.Values{"path": {path}}
	req, err := http.NewRequestWithContext(ctx, method, in.base+"/files?"+q.Encode(), body)
	if err != nil {
		return nil, provider.Errorf(provider.CodeInvalidArgument, "files: %v", err)
	}
	in.setHeaders(req.Header, "")
	return req, nil
}

// ReadFile streams a file: GET /files.
func (in *Instance) ReadFile(ctx context.Context, path string) (io.ReadCloser, error) {
	req, err := in.filesRequest(ctx, "GET", path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := in.p.hc.Do(req)
	if err != nil {
		return nil, transportErr(ctx, "files.read", err)
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		return nil, in.filesErr(ctx, resp, "files.read")
	}
	return resp.Body, nil
}

// filesErr maps a /files error: 404 missing, 400 a directory or bad path, 502 a sandbox
// the proxy does not know.
func (in *Instance) filesErr(ctx context.Context, resp *http.Response, op string) error {
	err := errorFrom(resp, op)
	if resp.StatusCode == http.StatusBadGateway {
		if _, gerr := in.p.get(context.WithoutCancel(ctx), in.sb.SandboxID); errors.Is(gerr, provider.CodeNotFound) {
			return &provider.Error{Code: provider.CodeNotFound, Op: op, Message: "the sandbox is gone"}
		}
	}
	return err
}

// WriteFile uploads r as an octet stream (POST /files); envd creates the parents. A mode is
// applied afterwards with chmod.
func (in *Instance) WriteFile(ctx context.Context, path string, r io.Reader, mode *uint32) error {
	if mode != nil && *mode > 0o7777 {
		return provider.Errorf(provider.CodeInvalidArgument, "mode %o out of range", *mode)
	}
	if r == nil {
		r = strings.NewReader("")
	}
	req, err := in.filesRequest(ctx, "POST", path, io.NopCloser(r))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := in.p.hc.Do(req)
	if err != nil {
		return transportErr(ctx, "files.write", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return in.filesErr(ctx, resp, "files.write")
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if mode == nil {
		return nil
	}
	var stderr strings.Builder
	res, err := in.Exec(ctx, provider.ExecRequest{Command: fmt.Sprintf("chmod %o -- '%s'", *mode, strings.ReplaceAll(path, "'", `'\''`)), Cwd: "/", Stderr: &stderr})
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return provider.Errorf(provider.CodeProvider, "files.write: chmod: %s", strings.TrimSpace(stderr.String()))
	}
	return nil
}

// PreviewURL is https://{port}-{id}.{domain}, where E2B routes a sandbox's ports. A server
// reached through E2B_SANDBOX_URL (tupper serve on a plain URL) has none: CodeUnsupported.
func (in *Instance) PreviewURL(ctx context.Context, port int) (string, error) {
	if port < 1 || port > 65535 {
		return "", provider.Errorf(provider.CodeInvalidArgument, "port %d out of range", port)
	}
	if in.p.cfg.SandboxURL != "" {
		return "", provider.Errorf(provider.CodeUnsupported, "e2b: no preview URLs when E2B_SANDBOX_URL is set")
	}
	return "https://" + in.p.previewHost(in.sb, port), nil
}

// SetTimeout moves the lifetime deadline to d from now: POST /sandboxes/{id}/timeout.
func (in *Instance) SetTimeout(ctx context.Context, d time.Duration) error {
	return in.p.call(ctx, "POST", "/sandboxes/"+in.sb.SandboxID+"/timeout", map[string]int64{"timeout": seconds(d)}, nil, "set_timeout")
}

// Pause freezes the sandbox: POST /sandboxes/{id}/pause (409, already paused, is success).
func (in *Instance) Pause(ctx context.Context) error {
	err := in.p.call(ctx, "POST", "/sandboxes/"+in.sb.SandboxID+"/pause", map[string]any{}, nil, "pause")
	if errors.Is(err, provider.CodeConflict) {
		return nil
	}
	return err
}

// Resume thaws it: POST /v2/sandboxes/{id}/connect, which also extends its lifetime if it
// would end within E2B's default five minutes.
func (in *Instance) Resume(ctx context.Context) error {
	var sb sandboxJSON
	if err := in.p.call(ctx, "POST", "/v2/sandboxes/"+in.sb.SandboxID+"/connect", map[string]any{}, &sb, "resume"); err != nil {
		return err
	}
	return nil
}

func fileInfo(e *filesystem.EntryInfo) provider.FileInfo {
	fi := provider.FileInfo{Path: e.GetPath(), Size: e.GetSize(), Mode: client.LstatPerm(e.GetPermissions(), e.GetMode()), Target: e.GetSymlinkTarget()}
	if t := e.GetModifiedTime(); t != nil {
		fi.ModifiedAt = t.AsTime()
	}
	switch {
	case fi.Target != "" || e.GetType() == filesystem.FileType_FILE_TYPE_SYMLINK:
		fi.Type = provider.TypeSymlink
	case e.GetType() == filesystem.FileType_FILE_TYPE_FILE:
		fi.Type = provider.TypeFile
	case e.GetType() == filesystem.FileType_FILE_TYPE_DIRECTORY:
		fi.Type = provider.TypeDir
	default:
		fi.Type = provider.TypeOther
	}
	return fi
}

// Stat describes path: Filesystem.Stat.
func (in *Instance) Stat(ctx context.Context, path string) (provider.FileInfo, error) {
	resp, err := in.fs.Stat(ctx, connect.NewRequest(&filesystem.StatRequest{Path: path}))
	if err != nil {
		return provider.FileInfo{}, in.rpcErr(ctx, err, "files.stat")
	}
	return fileInfo(resp.Msg.GetEntry()), nil
}

// maxListDepth bounds a recursive listing.
const maxListDepth = 64

// ListDir lists dir (recursive: everything below it): Filesystem.ListDir.
func (in *Instance) ListDir(ctx context.Context, dir string, recursive bool) ([]provider.FileInfo, error) {
	depth := uint32(1)
	if recursive {
		depth = maxListDepth
	}
	resp, err := in.fs.ListDir(ctx, connect.NewRequest(&filesystem.ListDirRequest{Path: dir, Depth: depth}))
	if err != nil {
		return nil, in.rpcErr(ctx, err, "files.list")
	}
	out := make([]provider.FileInfo, 0, len(resp.Msg.GetEntries()))
	for _, e := range resp.Msg.GetEntries() {
		out = append(out, fileInfo(e))
	}
	return out, nil
}

// Remove removes path: Filesystem.Remove, which removes whole trees, so a missing path and
// a non-empty directory without recursive are checked first.
func (in *Instance) Remove(ctx context.Context, path string, recursive bool) error {
	fi, err := in.Stat(ctx, path)
	if err != nil {
		return err
	}
	if fi.Type == provider.TypeDir && !recursive {
		list, err := in.ListDir(ctx, path, false)
		if err != nil {
			return err
		}
		if len(list) > 0 {
			return provider.Errorf(provider.CodeInvalidArgument, "directory %s is not empty", path)
		}
	}
	_, err = in.fs.Remove(ctx, connect.NewRequest(&filesystem.RemoveRequest{Path: path}))
	return in.rpcErr(ctx, err, "files.remove")
}

// MakeDir creates dir and its parents: Filesystem.MakeDir; an existing directory is fine.
func (in *Instance) MakeDir(ctx context.Context, dir string) error {
	_, err := in.fs.MakeDir(ctx, connect.NewRequest(&filesystem.MakeDirRequest{Path: dir}))
	if connect.CodeOf(err) == connect.CodeAlreadyExists {
		fi, serr := in.Stat(ctx, dir)
		if serr == nil && fi.Type == provider.TypeDir {
			return nil
		}
		return provider.Errorf(provider.CodeConflict, "%s exists and is not a directory", dir)
	}
	return in.rpcErr(ctx, err, "files.mkdir")
}

// Rename moves from to to: Filesystem.Move.
func (in *Instance) Rename(ctx context.Context, from, to string) error {
	_, err := in.fs.Move(ctx, connect.NewRequest(&filesystem.MoveRequest{Source: from, Destination: to}))
	return in.rpcErr(ctx, err, "files.rename")
}
