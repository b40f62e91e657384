package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tupper-dev/tupper/agent/client"
	"github.com/tupper-dev/tupper/provider"
)

// Instance is one local sandbox. Its methods go to the sandbox's agent over the unix socket
// in the sandbox's state directory; Info, Pause, Resume and SetTimeout also read or write
// the record. Every method may be called concurrently.
type Instance struct {
	p   *Provider
	id  string
	c   *client.Client
	mu  sync.Mutex
	rec *record // as read when the handle was made; refreshed by Info

	closeOnce sync.Once
}

var (
	_ provider.Instance         = (*Instance)(nil)
	_ provider.FileSystem       = (*Instance)(nil)
	_ provider.ActivityReporter = (*Instance)(nil)
	_ provider.Pauser           = (*Instance)(nil)
	_ provider.TimeoutSetter    = (*Instance)(nil)
	_ provider.RangeReader      = (*Instance)(nil)
)

var _ provider.CapabilityReporter = (*Instance)(nil)
var _ provider.PortDialer = (*Instance)(nil)

// Capabilities are the sandbox's own, kept in its record at creation (they depend on its
// runtime), so connecting to a sandbox does not probe the host; for a sandbox recorded
// before they were kept, the provider's.
func (i *Instance) Capabilities() provider.Capabilities {
	i.mu.Lock()
	rec := i.rec
	i.mu.Unlock()
	if rec != nil && len(rec.Caps) > 0 {
		return provider.NewCapabilities(rec.Caps...)
	}
	return i.p.Capabilities()
}

func (p *Provider) instance(rec *record) *Instance {
	return &Instance{p: p, id: rec.ID, rec: rec, c: agentClient(p.lay.socket(rec.ID))}
}

// agentClient returns a client of the agent whose socket is at path, dialled with
// dialAgent.
func agentClient(path string) *client.Client {
	return client.NewWithDialer(func(ctx context.Context) (net.Conn, error) { return dialAgent(ctx, path) })
}

// dialAgent connects to the agent's socket at path. The socket lives in a directory the
// sandbox can write, so the sandbox could put a symlink there to make the host connect
// elsewhere (another sandbox's agent, a host daemon). It therefore opens the final
// component without following it, checks that it is a socket, and connects through
// /proc/self/fd to exactly that inode. Every connection the host makes to an agent goes
// through here.
func dialAgent(ctx context.Context, path string) (net.Conn, error) {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: "unix", Err: err}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, &net.OpError{Op: "dial", Net: "unix", Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return nil, &net.OpError{Op: "dial", Net: "unix", Err: fmt.Errorf("%s is not a socket", path)}
	}
	var d net.Dialer
	return d.DialContext(ctx, "unix", fmt.Sprintf("/proc/self/fd/%d", fd))
}

// ID is the sandbox's id.
func (i *Instance) ID() string { return i.id }

// waitAgent polls the agent's socket until it answers /health, the init dies, or the ready
// timeout passes.
func (p *Provider) waitAgent(ctx context.Context, rec *record) error {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.ReadyTimeout)
	defer cancel()
	c := agentClient(p.lay.socket(rec.ID))
	defer c.Close()
	delay := 200 * time.Microsecond
	for {
		if _, err := os.Stat(p.lay.socket(rec.ID)); err == nil {
			hctx, hcancel := context.WithTimeout(ctx, 2*time.Second)
			err := c.Health(hctx)
			hcancel()
			if err == nil {
				return nil
			}
		}
		if !alive(rec) {
			return fmt.Errorf("the agent exited: %s", p.logTail(rec))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the agent did not answer: %w (log: %s)", ctx.Err(), p.logTail(rec))
		case <-time.After(delay):
		}
		delay = min(2*delay, 5*time.Millisecond)
	}
}

// logTail returns the end of a sandbox's runtime and agent log, for error messages. The log
// is on the sandbox's disk, reached through its holder.
func (p *Provider) logTail(rec *record) string {
	path, err := p.nsPath(rec, p.lay.log(rec.ID))
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	b, _ := os.ReadFile(path)
	if rec.HolderPID != 0 && !holderAlive(rec) {
		return "(no log: its holder is gone)"
	}
	s := strings.TrimSpace(string(b))
	if len(s) > 600 {
		s = s[len(s)-600:]
	}
	if s == "" {
		return "(empty)"
	}
	return lastLines(s, 4)
}

// check refuses calls to a sandbox that is paused (its agent cannot answer) or gone.
func (i *Instance) check() error {
	rec, err := i.p.lay.readRecord(i.id)
	if err != nil {
		return err
	}
	if rec.Paused {
		return provider.Errorf(provider.CodeConflict, "sandbox %s is paused", i.id)
	}
	return nil
}

// agentErr turns an agent client error into a provider error. The agent's messages are
// untrusted text; Error.Error strips credentials from them.
func (i *Instance) agentErr(err error, op string) error {
	if err == nil {
		return nil
	}
	var pe *provider.Error
	if errors.As(err, &pe) {
		return err
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	code := provider.CodeProvider
	switch client.CodeOf(err) {
	case client.CodeNotFound:
		code = provider.CodeNotFound
	case client.CodeAlreadyExists:
		code = provider.CodeConflict
	case client.CodeInvalidArgument, client.CodeFailedPrecondition:
		code = provider.CodeInvalidArgument
	case client.CodePermissionDenied, client.CodeUnauthenticated:
		code = provider.CodeForbidden
	case client.CodeResourceExhausted:
		code = provider.CodeResourceExhausted
	case client.CodeDeadlineExceeded:
		code = provider.CodeTimeout
	case client.CodeUnavailable:
		code = provider.CodeUnavailable
	}
	if code == provider.CodeProvider && !alive(i.rec) {
		return provider.Errorf(provider.CodeNotFound, "sandbox %s has stopped", i.id)
	}
	return &provider.Error{Code: code, Op: op, Message: err.Error(), Err: err}
}

// Info returns the sandbox's record and whether its init still runs.
func (i *Instance) Info(ctx context.Context) (provider.Info, error) {
	rec, err := i.p.lay.readRecord(i.id)
	if err != nil {
		return provider.Info{}, err
	}
	i.mu.Lock()
	i.rec = rec
	i.mu.Unlock()
	return info(rec), nil
}

// Exec runs a command through the agent. See provider.Instance.
func (i *Instance) Exec(ctx context.Context, req provider.ExecRequest) (provider.ExecResult, error) {
	if err := i.check(); err != nil {
		return provider.ExecResult{}, err
	}
	creq := client.ExecRequest{
		Command: req.Command, Env: req.Env, Cwd: req.Cwd, User: req.User,
		Stdin: req.Stdin, Stdout: req.Stdout, Stderr: req.Stderr,
	}
	if req.Detach {
		creq.Stdin, creq.Stdout, creq.Stderr = nil, nil, nil
		pid, err := i.c.Detach(ctx, creq)
		if err != nil {
			return provider.ExecResult{}, i.agentErr(err, "exec")
		}
		return provider.ExecResult{PID: pid}, nil
	}
	res, err := i.c.Exec(ctx, creq)
	if err != nil {
		if ctx.Err() != nil {
			return provider.ExecResult{}, fmt.Errorf("exec: %w", ctx.Err())
		}
		return provider.ExecResult{}, i.agentErr(err, "exec")
	}
	return execResult(res), nil
}

// execResult turns the agent's report of a process's end into the provider's: a signal
// gives ExitCode 128+n and its name.
func execResult(res client.ExecResult) provider.ExecResult {
	out := provider.ExecResult{ExitCode: res.ExitCode}
	if !res.Exited {
		if sig := signalOf(res.Status); sig != 0 {
			out.ExitCode = 128 + int(sig)
			out.Signal = unix.SignalName(sig)
		} else if out.ExitCode < 0 {
			out.ExitCode = 128 + int(unix.SIGKILL)
			out.Signal = "SIGKILL"
		}
	}
	return out
}

// signalOf parses the signal of an envd status text such as "signal: killed".
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

// ReadFile streams a file from the sandbox.
func (i *Instance) ReadFile(ctx context.Context, path string) (io.ReadCloser, error) {
	return i.ReadFileRange(ctx, path, 0, -1)
}

// ReadFileRange streams part of a file from the sandbox.
func (i *Instance) ReadFileRange(ctx context.Context, path string, offset, length int64) (io.ReadCloser, error) {
	if err := i.check(); err != nil {
		return nil, err
	}
	if offset < 0 {
		return nil, provider.Errorf(provider.CodeInvalidArgument, "negative offset")
	}
	if length == 0 {
		return io.NopCloser(strings.NewReader("")), nil
	}
	if length < 0 {
		length = 0 // the client's "to the end"
	}
	rc, err := i.c.ReadFile(ctx, path, client.ReadOptions{Offset: offset, Length: length})
	if err != nil {
		return nil, i.agentErr(err, "files.read")
	}
	return rc, nil
}

// WriteFile writes r to path in the sandbox.
func (i *Instance) WriteFile(ctx context.Context, path string, r io.Reader, mode *uint32) error {
	if err := i.check(); err != nil {
		return err
	}
	var o client.WriteOptions
	if mode != nil {
		if *mode > 0o7777 {
			return provider.Errorf(provider.CodeInvalidArgument, "mode %o out of range", *mode)
		}
		o.Mode = fs.FileMode(*mode&0o777) | unixModeBits(*mode)
	}
	if err := i.c.WriteFile(ctx, path, r, o); err != nil {
		return i.agentErr(err, "files.write")
	}
	if mode != nil && *mode == 0 {
		// The agent reads mode 0 as "default"; set it explicitly.
		res, err := i.c.Exec(ctx, client.ExecRequest{Argv: []string{"chmod", "0", "--", path}})
		if err != nil {
			return i.agentErr(err, "files.write")
		}
		if res.ExitCode != 0 {
			return provider.Errorf(provider.CodeProvider, "chmod 0 %s failed", path)
		}
	}
	return nil
}

// unixModeBits maps setuid, setgid and sticky bits to fs.FileMode.
func unixModeBits(m uint32) fs.FileMode {
	var out fs.FileMode
	if m&0o4000 != 0 {
		out |= fs.ModeSetuid
	}
	if m&0o2000 != 0 {
		out |= fs.ModeSetgid
	}
	if m&0o1000 != 0 {
		out |= fs.ModeSticky
	}
	return out
}

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

// Stat describes path without following a final symlink.
func (i *Instance) Stat(ctx context.Context, path string) (provider.FileInfo, error) {
	if err := i.check(); err != nil {
		return provider.FileInfo{}, err
	}
	fi, err := i.c.Stat(ctx, path)
	if err != nil {
		return provider.FileInfo{}, i.agentErr(err, "files.stat")
	}
	return fileInfo(fi), nil
}

// maxListDepth bounds a recursive listing.
const maxListDepth = 64

// ListDir lists dir, or everything below it.
func (i *Instance) ListDir(ctx context.Context, dir string, recursive bool) ([]provider.FileInfo, error) {
	if err := i.check(); err != nil {
		return nil, err
	}
	depth := 1
	if recursive {
		depth = maxListDepth
	}
	list, err := i.c.ListDir(ctx, dir, depth)
	if err != nil {
		return nil, i.agentErr(err, "files.list")
	}
	out := make([]provider.FileInfo, len(list))
	for k, fi := range list {
		out[k] = fileInfo(fi)
	}
	return out, nil
}

// Remove removes path; a non-empty directory needs recursive.
func (i *Instance) Remove(ctx context.Context, path string, recursive bool) error {
	if err := i.check(); err != nil {
		return err
	}
	fi, err := i.c.Stat(ctx, path)
	if err != nil {
		return i.agentErr(err, "files.remove")
	}
	if fi.Type == client.FileTypeDir && fi.SymlinkTarget == "" && !recursive {
		list, err := i.c.ListDir(ctx, path, 1)
		if err != nil {
			return i.agentErr(err, "files.remove")
		}
		if len(list) > 0 {
			return provider.Errorf(provider.CodeInvalidArgument, "directory %s is not empty", path)
		}
	}
	return i.agentErr(i.c.Remove(ctx, path), "files.remove")
}

// MakeDir creates dir and its parents.
func (i *Instance) MakeDir(ctx context.Context, dir string) error {
	if err := i.check(); err != nil {
		return err
	}
	_, err := i.c.MakeDir(ctx, dir)
	return i.agentErr(err, "files.mkdir")
}

// Rename moves from to to.
func (i *Instance) Rename(ctx context.Context, from, to string) error {
	if err := i.check(); err != nil {
		return err
	}
	_, err := i.c.Move(ctx, from, to)
	return i.agentErr(err, "files.rename")
}

// Busy reports whether a command started through the agent is running. A paused sandbox
// counts as busy.
func (i *Instance) Busy(ctx context.Context) (bool, error) {
	if err := i.check(); err != nil {
		if provider.CodeOf(err) == provider.CodeConflict {
			return true, nil
		}
		return false, err
	}
	b, err := i.c.Busy(ctx)
	if err != nil {
		return false, i.agentErr(err, "busy")
	}
	return b.Busy, nil
}

// SetTimeout moves the lifetime deadline to now+d: in the record, which the host enforces,
// and in the agent, which enforces it from inside.
func (i *Instance) SetTimeout(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return provider.Errorf(provider.CodeInvalidArgument, "timeout must be positive")
	}
	lk, err := i.p.lockSandbox(ctx, i.id)
	if err != nil {
		return err
	}
	defer lk.unlock()
	rec, err := i.p.lay.readRecord(i.id)
	if err != nil {
		return err
	}
	rec.Deadline = time.Now().Add(d).UTC().Truncate(time.Millisecond)
	if err := i.p.lay.writeRecord(rec); err != nil {
		return provider.Wrap(err, provider.CodeProvider, "set_timeout")
	}
	if rec.Paused {
		return nil // the record rules; the agent learns it on resume
	}
	return i.agentErr(i.c.SetDeadline(ctx, rec.Deadline.Add(999*time.Millisecond)), "set_timeout")
}

// Pause freezes every process of the sandbox (the runtime's pause: the cgroup freezer).
func (i *Instance) Pause(ctx context.Context) error { return i.setPaused(ctx, true) }

// Resume thaws a paused sandbox.
func (i *Instance) Resume(ctx context.Context) error { return i.setPaused(ctx, false) }

func (i *Instance) setPaused(ctx context.Context, pause bool) error {
	lk, err := i.p.lockSandbox(ctx, i.id)
	if err != nil {
		return err
	}
	defer lk.unlock()
	rec, err := i.p.lay.readRecord(i.id)
	if err != nil {
		return err
	}
	if !alive(rec) {
		return provider.Errorf(provider.CodeNotFound, "sandbox %s has stopped", i.id)
	}
	if rec.Paused == pause {
		return nil
	}
	i.p.probed()
	rt, ok := i.p.runtimes[rec.Runtime]
	if !ok {
		return provider.Errorf(provider.CodeUnavailable, "runtime %s not found", rec.Runtime)
	}
	verb := "pause"
	if !pause {
		verb = "resume"
	}
	if err := rt.run(ctx, runscNetwork(rec), verb, i.id); err != nil {
		return provider.Wrap(err, provider.CodeProvider, verb)
	}
	rec.Paused = pause
	if err := i.p.lay.writeRecord(rec); err != nil {
		return provider.Wrap(err, provider.CodeProvider, verb)
	}
	if !pause && !rec.Deadline.IsZero() {
		// The deadline may have moved while the agent was frozen.
		_ = i.c.SetDeadline(ctx, rec.Deadline.Add(999*time.Millisecond))
	}
	return nil
}

// PreviewURL returns http://127.0.0.1:PORT/ where a host listener forwards each connection
// through the agent's tunnel to port inside the sandbox. It works with any network mode. The
// listener belongs to the Provider: it lasts until the sandbox is destroyed or the Provider
// is closed.
func (i *Instance) PreviewURL(ctx context.Context, port int) (string, error) {
	if port < 1 || port > 65535 {
		return "", provider.Errorf(provider.CodeInvalidArgument, "port %d out of range", port)
	}
	if err := i.check(); err != nil {
		return "", err
	}
	pv, err := i.p.preview(i.id, port)
	if err != nil {
		return "", err
	}
	return "http://" + pv.addr() + "/", nil
}

// DialPort connects to port inside the sandbox (its 127.0.0.1:port) through the agent's
// tunnel, as PreviewURL's listener does for each connection, but with no listener: only the
// caller holds the connection. It works with any network mode (provider.PortDialer).
func (i *Instance) DialPort(ctx context.Context, port int) (net.Conn, error) {
	if port < 1 || port > 65535 {
		return nil, provider.Errorf(provider.CodeInvalidArgument, "port %d out of range", port)
	}
	if err := i.check(); err != nil {
		return nil, err
	}
	c, err := i.c.DialPort(ctx, port)
	return c, i.agentErr(err, "dial_port")
}

// Close releases the client connection; the sandbox lives on. It is idempotent.
func (i *Instance) Close() error {
	i.closeOnce.Do(func() { i.c.Close() })
	return nil
}

// previewKey names one forwarded port.
type previewKey struct {
	id   string
	port int
}

// preview is a loopback listener forwarding to a port in a sandbox.
type preview struct {
	ln   net.Listener
	c    *client.Client
	port int
	wg   sync.WaitGroup
	once sync.Once

	mu     sync.Mutex
	conns  map[net.Conn]struct{} // open forwarded connections, both ends
	closed bool
}

// track records c as open, or reports false when the preview is closed.
func (pv *preview) track(c net.Conn) bool {
	pv.mu.Lock()
	defer pv.mu.Unlock()
	if pv.closed {
		return false
	}
	if pv.conns == nil {
		pv.conns = map[net.Conn]struct{}{}
	}
	pv.conns[c] = struct{}{}
	return true
}

func (pv *preview) untrack(c net.Conn) {
	pv.mu.Lock()
	delete(pv.conns, c)
	pv.mu.Unlock()
}

func (p *Provider) preview(id string, port int) (*preview, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, provider.Errorf(provider.CodeUnavailable, "provider closed")
	}
	k := previewKey{id, port}
	if pv, ok := p.previews[k]; ok {
		return pv, nil
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, provider.Wrap(err, provider.CodeProvider, "preview")
	}
	pv := &preview{ln: ln, c: agentClient(p.lay.socket(id)), port: port}
	p.previews[k] = pv
	pv.wg.Add(1)
	go pv.serve()
	return pv, nil
}

func (pv *preview) addr() string { return pv.ln.Addr().String() }

func (pv *preview) serve() {
	defer pv.wg.Done()
	for {
		conn, err := pv.ln.Accept()
		if err != nil {
			return
		}
		go pv.forward(conn)
	}
}

// forward pipes one connection through the agent's tunnel, half-closing each direction at
// its EOF.
func (pv *preview) forward(conn net.Conn) {
	defer conn.Close()
	if !pv.track(conn) {
		return
	}
	defer pv.untrack(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	up, err := pv.c.DialPort(ctx, pv.port)
	cancel()
	if err != nil {
		return
	}
	defer up.Close()
	if !pv.track(up) {
		return
	}
	defer pv.untrack(up)
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		io.Copy(dst, src)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		} else {
			dst.Close()
		}
		done <- struct{}{}
	}
	go pipe(up, conn)
	go pipe(conn, up)
	<-done
	<-done
}

func (pv *preview) close() {
	pv.once.Do(func() {
		pv.ln.Close()
		pv.wg.Wait()
		pv.mu.Lock()
		pv.closed = true
		for c := range pv.conns {
			c.Close()
		}
		pv.mu.Unlock()
		pv.c.Close()
	})
}

// closePreviews closes the listeners of sandbox id.
func (p *Provider) closePreviews(id string) {
	p.mu.Lock()
	var list []*preview
	for k, v := range p.previews {
		if k.id == id {
			list = append(list, v)
			delete(p.previews, k)
		}
	}
	p.mu.Unlock()
	for _, v := range list {
		v.close()
	}
}
