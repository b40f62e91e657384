//go:build linux

package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tupper-dev/tupper/agent/spec/process"
)

// drainGrace is how long output is still waited for after a process exits, for
// descendants that keep its stdout, stderr or terminal open. What the pipes
// already hold when it passes is read all the same (drainReady).
var drainGrace = 100 * time.Millisecond

// maxDrain bounds what drainReady reads once the grace has passed: a pipe's
// largest default capacity, so a descendant writing without pause cannot hold
// the end event.
const maxDrain = 1 << 20

// maxEnded bounds how many finished processes are remembered for Connect.
const maxEnded = 256

const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// proc is one process the agent started, the leader of its own session and
// process group.
type proc struct {
	pid    int
	config *process.ProcessConfig
	tag    *string
	term   *os.File // PTY master, nil without a PTY

	timedOut atomic.Bool
	timer    *time.Timer
	// oomBefore is the sandbox's OOM kill count when the process started (oomKills).
	oomBefore int64

	stdinMu sync.Mutex // serialises writes to stdin

	mu    sync.Mutex
	stdin *os.File // nil when there is no stdin or it was closed
	subs  map[*subscriber]struct{}
	end   *process.ProcessEvent_EndEvent
	done  chan struct{}
}

// subscriber receives a process's events in order; the end event is last.
type subscriber struct {
	ch   chan *process.ProcessEvent
	gone chan struct{}
	once sync.Once
}

func newSubscriber() *subscriber {
	return &subscriber{ch: make(chan *process.ProcessEvent, 64), gone: make(chan struct{})}
}

// subscribe adds s; it returns the end event instead when p already ended.
func (p *proc) subscribe(s *subscriber) *process.ProcessEvent_EndEvent {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.end != nil {
		return p.end
	}
	p.subs[s] = struct{}{}
	return nil
}

func (p *proc) unsubscribe(s *subscriber) {
	s.once.Do(func() { close(s.gone) })
	p.mu.Lock()
	delete(p.subs, s)
	p.mu.Unlock()
}

// broadcast delivers ev to every subscriber, waiting for slow ones (output
// back-pressures the process like a pipe would) but not for departed ones.
func (p *proc) broadcast(ev *process.ProcessEvent) {
	p.mu.Lock()
	subs := make([]*subscriber, 0, len(p.subs))
	for s := range p.subs {
		subs = append(subs, s)
	}
	p.mu.Unlock()
	for _, s := range subs {
		select {
		case s.ch <- ev:
		case <-s.gone:
		}
	}
}

func (p *proc) info() *process.ProcessInfo {
	return &process.ProcessInfo{Config: p.config, Pid: uint32(p.pid), Tag: p.tag}
}

// signalGroup signals p's whole process group.
func (p *proc) signalGroup(sig syscall.Signal) error {
	err := unix.Kill(-p.pid, sig)
	if err == unix.ESRCH {
		err = unix.Kill(p.pid, sig)
	}
	return err
}

// closeStdin closes the stdin pipe (a blocked write fails).
func (p *proc) closeStdin() {
	p.mu.Lock()
	f := p.stdin
	p.stdin = nil
	p.mu.Unlock()
	if f != nil {
		f.Close()
	}
}

// procTable holds running processes and the most recently ended ones.
type procTable struct {
	mu         sync.Mutex
	running    map[int]*proc
	ended      map[int]*proc
	endedOrder []int
}

func newProcTable() *procTable {
	return &procTable{running: map[int]*proc{}, ended: map[int]*proc{}}
}

func (t *procTable) add(p *proc) {
	t.mu.Lock()
	t.running[p.pid] = p
	delete(t.ended, p.pid)
	t.mu.Unlock()
}

func (t *procTable) finish(p *proc) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.running[p.pid] == p {
		delete(t.running, p.pid)
	}
	t.ended[p.pid] = p
	t.endedOrder = append(t.endedOrder, p.pid)
	for len(t.endedOrder) > maxEnded {
		old := t.endedOrder[0]
		t.endedOrder = t.endedOrder[1:]
		if !slices.Contains(t.endedOrder, old) {
			delete(t.ended, old)
		}
	}
}

func (t *procTable) count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.running)
}

func (t *procTable) list() []*proc {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]*proc, 0, len(t.running))
	for _, p := range t.running {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b *proc) int { return a.pid - b.pid })
	return out
}

// find returns the process sel names; withEnded also searches ended ones.
func (t *procTable) find(sel *process.ProcessSelector, withEnded bool) *proc {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch s := sel.GetSelector().(type) {
	case *process.ProcessSelector_Pid:
		if p := t.running[int(s.Pid)]; p != nil {
			return p
		}
		if withEnded {
			return t.ended[int(s.Pid)]
		}
	case *process.ProcessSelector_Tag:
		for _, p := range t.running {
			if p.tag != nil && *p.tag == s.Tag {
				return p
			}
		}
		if withEnded {
			for i := len(t.endedOrder) - 1; i >= 0; i-- {
				if p := t.ended[t.endedOrder[i]]; p != nil && p.tag != nil && *p.tag == s.Tag {
					return p
				}
			}
		}
	}
	return nil
}

// startSpec is a validated request to start a process.
type startSpec struct {
	cfg     *process.ProcessConfig
	tag     *string
	user    *osUser
	stdin   bool
	pty     *process.PTY
	timeout time.Duration
}

// errStart marks failures caused by the request (bad cwd, unknown program), or, with
// exhausted set, by the sandbox's limits (its process limit reached, its memory full).
type errStart struct {
	msg       string
	exhausted bool
}

func (e *errStart) Error() string { return e.msg }

// start launches a process and returns it with first already subscribed,
// so no output can be missed.
func (a *Agent) start(spec startSpec, first *subscriber) (*proc, error) {
	cmd, err := a.resolveCommand(spec)
	if err != nil {
		return nil, err
	}
	std, err := a.openStdio(spec)
	if err != nil {
		return nil, err
	}
	oomBefore := oomKills()
	pid, exited, err := a.reaper.spawn(func() (int, error) {
		return a.forkExec(cmd.prog, cmd.argv, cmd.env, cmd.dir, spec.user, std.fds[:], spec.pty != nil)
	})
	std.closeChildEnds()
	if err != nil {
		std.closeParentEnds()
		// fork fails with EAGAIN at the pids limit and ENOMEM when memory is full: the
		// sandbox is out of a resource, not the request at fault, and a later try may work.
		exhausted := errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.ENOMEM)
		return nil, &errStart{msg: fmt.Sprintf("start %q: %v", spec.cfg.GetCmd(), err), exhausted: exhausted}
	}
	p := a.track(pid, spec, std, first)
	p.oomBefore = oomBefore
	go a.wait(p, std, exited)
	return p, nil
}

// command is what a process runs: the program found, its arguments, environment and
// working directory.
type command struct {
	prog string
	argv []string
	env  []string
	dir  string
}

// resolveCommand resolves what spec runs as its user sees it: a cwd that is not an existing
// directory, or a program not found, is the request's fault (errStart).
func (a *Agent) resolveCommand(spec startSpec) (command, error) {
	cwd := spec.cfg.GetCwd()
	if cwd == "" {
		cwd = a.cfg.DefaultWorkdir
	}
	dir, err := a.resolvePath(cwd, spec.user)
	if err != nil {
		return command{}, &errStart{msg: err.Error()}
	}
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return command{}, &errStart{msg: fmt.Sprintf("cwd %q does not exist or is not a directory", dir)}
	}
	env := a.buildEnv(spec.user, spec.cfg.GetEnvs(), spec.pty != nil)
	prog, err := lookPath(spec.cfg.GetCmd(), dir, envValue(env, "PATH"))
	if err != nil {
		return command{}, &errStart{msg: err.Error()}
	}
	argv := append([]string{spec.cfg.GetCmd()}, spec.cfg.GetArgs()...)
	return command{prog: prog, argv: argv, env: env, dir: dir}, nil
}

// stdio are a process's standard streams: the child's ends, given to fork and closed in
// the agent right after, and the agent's ends, which it reads and writes.
type stdio struct {
	fds      [3]uintptr // the child's stdin, stdout and stderr
	childFDs []int      // the child's ends the agent opened
	readers  []*os.File // the output the agent reads: stdout and stderr, or the terminal
	kinds    []int      // each reader's event kind: 1 stdout, 2 stderr, 3 terminal
	stdin    *os.File   // the write end of stdin's pipe; nil without stdin or with a PTY
	term     *os.File   // PTY master, nil without a PTY
}

// openStdio opens the process's streams: one terminal for all three with a PTY, else a
// pipe for stdin (or /dev/null) and one each for stdout and stderr. On error nothing is
// left open.
func (a *Agent) openStdio(spec startSpec) (*stdio, error) {
	std := &stdio{}
	if spec.pty != nil {
		m, s, err := openPTY(spec.pty.GetSize().GetCols(), spec.pty.GetSize().GetRows())
		if err != nil {
			return nil, fmt.Errorf("allocate pty: %w", err)
		}
		std.term = m
		std.childFDs = []int{s}
		std.fds = [3]uintptr{uintptr(s), uintptr(s), uintptr(s)}
		std.readers, std.kinds = []*os.File{m}, []int{3}
		return std, nil
	}
	std.fds[0] = uintptr(a.devNull)
	if spec.stdin {
		w, r, err := pipe(false)
		if err != nil {
			return nil, err
		}
		std.childFDs = append(std.childFDs, r)
		std.stdin = w
		std.fds[0] = uintptr(r)
	}
	for i := 1; i <= 2; i++ {
		r, w, err := pipe(true)
		if err != nil {
			std.closeChildEnds()
			std.closeParentEnds()
			return nil, err
		}
		std.childFDs = append(std.childFDs, w)
		std.readers = append(std.readers, r)
		std.kinds = append(std.kinds, i)
		std.fds[i] = uintptr(w)
	}
	return std, nil
}

// closeChildEnds closes the child's ends in the agent: after fork only the child holds
// them, so the agent's reads end when the child's writers are gone.
func (std *stdio) closeChildEnds() {
	for _, fd := range std.childFDs {
		unix.Close(fd)
	}
	std.childFDs = nil
}

// closeParentEnds closes the agent's ends of a process that never started.
func (std *stdio) closeParentEnds() {
	for _, f := range std.readers {
		f.Close()
	}
	if std.stdin != nil {
		std.stdin.Close()
	}
	if std.term != nil {
		std.term.Close()
	}
}

// track adds the started process to the agent's table with first subscribed, and arms
// its timeout, which kills its whole process group.
func (a *Agent) track(pid int, spec startSpec, std *stdio, first *subscriber) *proc {
	p := &proc{pid: pid, config: spec.cfg, tag: spec.tag, term: std.term, stdin: std.stdin,
		subs: map[*subscriber]struct{}{}, done: make(chan struct{})}
	if first != nil {
		p.subs[first] = struct{}{}
	}
	a.procs.add(p)
	a.touch()
	if spec.timeout > 0 {
		p.timer = time.AfterFunc(spec.timeout, func() {
			p.timedOut.Store(true)
			_ = p.signalGroup(unix.SIGKILL)
		})
	}
	return p
}

// wait pumps p's output into events until p exits and its output is drained (drainGrace),
// then ends it: its streams closed, it is finished in the table and the end event is the
// last each subscriber gets.
func (a *Agent) wait(p *proc, std *stdio, exited <-chan unix.WaitStatus) {
	var wg sync.WaitGroup
	for i, f := range std.readers {
		wg.Add(1)
		go func(f *os.File, kind int) {
			defer wg.Done()
			pump(p, f, kind)
		}(f, std.kinds[i])
	}
	ws := <-exited
	if p.timer != nil {
		p.timer.Stop()
	}
	grace := time.Now().Add(drainGrace)
	for _, f := range std.readers {
		_ = f.SetReadDeadline(grace)
	}
	wg.Wait()
	for _, f := range std.readers {
		if f != std.term {
			f.Close()
		}
	}
	p.closeStdin()
	end := endEvent(ws)
	if killed(ws) && oomKills() > p.oomBefore {
		markOOMKilled(end)
	}
	a.end(p, end)
}

// end records p's end, finishes it in the table and sends the end event to each
// subscriber still there.
func (a *Agent) end(p *proc, end *process.ProcessEvent_EndEvent) {
	p.mu.Lock()
	if p.term != nil {
		p.term.Close()
	}
	p.end = end
	subs := make([]*subscriber, 0, len(p.subs))
	for s := range p.subs {
		subs = append(subs, s)
	}
	p.mu.Unlock()
	a.procs.finish(p)
	a.touch()
	ev := &process.ProcessEvent{Event: &process.ProcessEvent_End{End: end}}
	for _, s := range subs {
		select {
		case s.ch <- ev:
		case <-s.gone:
		}
	}
	close(p.done)
}

// pipe returns a pipe whose parent end is a pollable *os.File (the read
// end when read is set) and whose child end is a bare close-on-exec
// descriptor: unlike os.Pipe it never registers the child's end with the
// poller, which would cost an epoll_ctl to add and one to remove for every
// command.
func pipe(read bool) (parent *os.File, child int, err error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return nil, -1, os.NewSyscallError("pipe2", err)
	}
	mine, theirs := p[1], p[0]
	if read {
		mine, theirs = p[0], p[1]
	}
	if err := unix.SetNonblock(mine, true); err != nil {
		unix.Close(p[0])
		unix.Close(p[1])
		return nil, -1, os.NewSyscallError("setnonblock", err)
	}
	return os.NewFile(uintptr(mine), "|pipe"), theirs, nil
}

// pumpBufs are pump's read buffers: a 32 KiB array on each pump's stack
// would grow two goroutine stacks to 64 KiB for every command.
var pumpBufs = sync.Pool{New: func() any { return new([32 << 10]byte) }}

// pump copies one output stream of p into data events.
func pump(p *proc, f *os.File, kind int) {
	bp := pumpBufs.Get().(*[32 << 10]byte)
	defer pumpBufs.Put(bp)
	buf := bp[:]
	for {
		n, err := f.Read(buf)
		if n > 0 {
			p.emit(kind, buf[:n])
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			drainReady(p, f, kind, buf)
			return
		}
		if err != nil {
			return
		}
	}
}

// drainReady reads what f already holds, without waiting for more, once the
// grace after the process's exit has passed. The poller refuses every read
// after a deadline, even of bytes already in the pipe: a pump that was not
// scheduled within the grace (a sandbox throttled by its CPU quota sleeps for
// up to a CFS period, 100 ms) would otherwise drop output the command wrote
// before it exited, and report its exit with empty output.
func drainReady(p *proc, f *os.File, kind int, buf []byte) {
	rc, err := f.SyscallConn()
	if err != nil || f.SetReadDeadline(time.Time{}) != nil {
		return
	}
	for total := 0; total < maxDrain; {
		var n int
		// Returning true reads once: EAGAIN ends the drain instead of waiting.
		if rc.Read(func(fd uintptr) bool { n, _ = unix.Read(int(fd), buf); return true }) != nil || n <= 0 {
			return
		}
		p.emit(kind, buf[:n])
		total += n
	}
}

// emit broadcasts b (copied) as a data event of stream kind: 1 stdout, 2
// stderr, anything else the terminal.
func (p *proc) emit(kind int, b []byte) {
	chunk := slices.Clone(b)
	var out process.ProcessEvent_DataEvent
	switch kind {
	case 1:
		out.Output = &process.ProcessEvent_DataEvent_Stdout{Stdout: chunk}
	case 2:
		out.Output = &process.ProcessEvent_DataEvent_Stderr{Stderr: chunk}
	default:
		out.Output = &process.ProcessEvent_DataEvent_Pty{Pty: chunk}
	}
	p.broadcast(&process.ProcessEvent{Event: &process.ProcessEvent_Data{Data: &out}})
}

// endEvent describes a wait status the way envd (and os.ProcessState) does:
// "exit status 1", "signal: killed".
func endEvent(ws unix.WaitStatus) *process.ProcessEvent_EndEvent {
	var e process.ProcessEvent_EndEvent
	switch {
	case ws.Exited():
		e.ExitCode = int32(ws.ExitStatus())
		e.Exited = true
		e.Status = "exit status " + strconv.Itoa(ws.ExitStatus())
	case ws.Signaled():
		e.ExitCode = -1
		e.Status = "signal: " + ws.Signal().String()
		if ws.CoreDump() {
			e.Status += " (core dumped)"
		}
	default:
		e.ExitCode = -1
		e.Status = "unknown status " + strconv.Itoa(int(ws))
	}
	if !(e.Exited && e.ExitCode == 0) {
		msg := e.Status
		e.Error = &msg
	}
	return &e
}

// buildEnv returns PATH, HOME, USER, LOGNAME (and TERM for a PTY), then the
// config's env, then the request's envs; later entries win.
func (a *Agent) buildEnv(u *osUser, req map[string]string, pty bool) []string {
	vals := map[string]string{}
	var order []string
	set := func(k, v string) {
		if _, ok := vals[k]; !ok {
			order = append(order, k)
		}
		vals[k] = v
	}
	path := os.Getenv("PATH")
	if path == "" {
		path = defaultPath
	}
	set("PATH", path)
	set("HOME", u.Home)
	set("USER", u.Name)
	set("LOGNAME", u.Name)
	if pty {
		set("TERM", "xterm-256color")
	}
	for _, k := range sortedKeys(a.cfg.Env) {
		set(k, a.cfg.Env[k])
	}
	for _, k := range sortedKeys(req) {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			continue
		}
		set(k, req[k])
	}
	env := make([]string, 0, len(order))
	for _, k := range order {
		env = append(env, k+"="+strings.ReplaceAll(vals[k], "\x00", ""))
	}
	return env
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func envValue(env []string, key string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(env[i], key+"="); ok {
			return v
		}
	}
	return ""
}

// lookPath finds cmd like a shell would: names containing a slash are used
// as given (relative to dir), others are searched in path.
func lookPath(cmd, dir, path string) (string, error) {
	if cmd == "" {
		return "", errors.New("empty command")
	}
	if strings.ContainsRune(cmd, 0) {
		return "", errors.New("command contains a NUL byte")
	}
	check := func(p string) error {
		full := p
		if !filepath.IsAbs(full) {
			full = filepath.Join(dir, full)
		}
		fi, err := os.Stat(full)
		if err != nil {
			return err
		}
		if fi.IsDir() || fi.Mode()&0o111 == 0 {
			return fs.ErrPermission
		}
		return nil
	}
	if strings.Contains(cmd, "/") {
		if err := check(cmd); err != nil {
			return "", fmt.Errorf("exec %q: %w", cmd, err)
		}
		if !filepath.IsAbs(cmd) {
			return filepath.Join(dir, cmd), nil
		}
		return cmd, nil
	}
	for _, d := range filepath.SplitList(path) {
		if d == "" {
			d = "."
		}
		p := filepath.Join(d, cmd)
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		if check(p) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("exec: %q: executable file not found in $PATH", cmd)
}

// forkExec starts argv in its own session, as u, in dir. With hiding on,
// the fork happens on the spawner's thread, so the child starts in the
// mount namespace that covers the hidden paths.
func (a *Agent) forkExec(prog string, argv, env []string, dir string, u *osUser, fds []uintptr, tty bool) (int, error) {
	sys := &syscall.SysProcAttr{Setsid: true}
	if tty {
		sys.Setctty = true
		sys.Ctty = 0
	}
	if a.euid == 0 || u.UID != uint32(a.euid) || u.GID != uint32(a.egid) {
		sys.Credential = &syscall.Credential{Uid: u.UID, Gid: u.GID, Groups: u.Groups}
	}
	attr := &syscall.ProcAttr{Dir: dir, Env: env, Files: fds, Sys: sys}
	var pid int
	var err error
	if a.spawner != nil {
		pid, err = a.spawner.forkExec(prog, argv, attr)
	} else {
		pid, err = syscall.ForkExec(prog, argv, attr)
	}
	if err == nil && a.oomProtected {
		commandOOMScore(pid)
	}
	return pid, err
}

// commandOOMScore gives a command the highest oom_score_adj, 1000: when the sandbox runs out
// of memory the OOM killer then picks a command (among commands, the largest, as before),
// never the agent (PID 1), whose score is 0 or, where the host could lower it, -1000.
// Raising a score needs no privilege. The command has just exec'd, before it could start
// children of its own in practice; one that lowers its own score again (no lower than the
// agent's) can only stall its own sandbox.
func commandOOMScore(pid int) {
	f, err := os.OpenFile("/proc/"+strconv.Itoa(pid)+"/oom_score_adj", os.O_WRONLY, 0)
	if err != nil {
		return // it exited already
	}
	f.WriteString("1000")
	f.Close()
}

// openPTY allocates a pseudo-terminal pair of the given size.
func openPTY(cols, rows uint32) (master *os.File, slave int, err error) {
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, -1, err
	}
	var n int
	var ierr error
	rc, err := m.SyscallConn()
	if err == nil {
		err = rc.Control(func(fd uintptr) {
			if ierr = unix.IoctlSetPointerInt(int(fd), unix.TIOCSPTLCK, 0); ierr != nil {
				return
			}
			n, ierr = unix.IoctlGetInt(int(fd), unix.TIOCGPTN)
		})
	}
	if err == nil {
		err = ierr
	}
	if err != nil {
		m.Close()
		return nil, -1, err
	}
	if err := resizePTY(m, cols, rows); err != nil {
		m.Close()
		return nil, -1, err
	}
	sfd, err := unix.Open("/dev/pts/"+strconv.Itoa(n), unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		m.Close()
		return nil, -1, err
	}
	return m, sfd, nil
}

func resizePTY(m *os.File, cols, rows uint32) error {
	if cols == 0 {
		cols = 80
	}
	if rows == 0 {
		rows = 24
	}
	rc, err := m.SyscallConn()
	if err != nil {
		return err
	}
	var ierr error
	err = rc.Control(func(fd uintptr) {
		ierr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Col: uint16(min(cols, 0xffff)), Row: uint16(min(rows, 0xffff))})
	})
	if err != nil {
		return err
	}
	return ierr
}
