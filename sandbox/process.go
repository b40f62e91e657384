package sandbox

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"maps"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tupper-dev/tupper/provider"
)

// procRoot holds one directory per background process:
//
//	spec.json  what was started (name, command, cwd, env, ready, generation)
//	pid        the process group id, written once started
//	stdout     the process's standard output
//	stderr     the process's standard error
//	exit       its exit status, written when it exits by itself
//	oom        present when it exited 137 while the sandbox's OOM kill count rose (oomCount)
//	stopped    the signal Stop sent, written before it is sent
//
// Any process with access to the sandbox can read these, so handles can be found again by
// name and logs followed from a stored cursor.
const procRoot = sdkDir + "/procs"

// ProcessStatus is the state of a background process.
type ProcessStatus string

// Process states.
const (
	ProcessRunning ProcessStatus = "running"
	ProcessExited  ProcessStatus = "exited"
)

// ExitStatus is how a background process ended.
type ExitStatus struct {
	ExitCode int    // 128+n when killed by signal n
	Signal   string // "SIGTERM" or "SIGKILL" when Stop ended it
	// OOMKilled is set when the kernel's OOM killer ended it (ExitCode 137): see
	// docs/commands.md#out-of-memory.
	OOMKilled bool
}

// LogLine is one line of a background process's output.
type LogLine struct {
	Text   string // without the newline, redacted
	Stream string // Stdout or Stderr
	Cursor string // pass as After to continue after this line
}

// LogsOptions selects a page of logs.
type LogsOptions struct {
	After    string // a cursor from an earlier page or line; "" is the beginning
	MaxBytes int    // 0: 16 KiB; at most 1 MiB
}

// LogPage is one page of logs.
type LogPage struct {
	Text       string // stdout then stderr of this page, redacted
	NextCursor string // pass as After for the next page
	Truncated  bool   // more output is waiting past this page
}

// StopOptions configures Stop.
type StopOptions struct {
	Grace time.Duration // between SIGTERM and SIGKILL; 0: 5 s
}

type procSpec struct {
	Name    string            `json:"name"`
	Command string            `json:"command"`
	Cwd     string            `json:"cwd"`
	Env     map[string]string `json:"env,omitempty"`
	Gen     string            `json:"gen"`
	Ready   *readySpec        `json:"ready,omitempty"`
	ReadyMS int64             `json:"readyTimeoutMs,omitempty"`
	Started time.Time         `json:"startedAt"`
}

type readySpec struct {
	Port int    `json:"port,omitempty"`
	Path string `json:"path,omitempty"`
	HTTP bool   `json:"http,omitempty"`
	Log  string `json:"log,omitempty"`
}

// Process is a handle to a background process started with Start or found with Process.
type Process struct {
	b    *Sandbox
	spec procSpec
	dir  string

	mu    sync.Mutex
	pid   int
	start string // the wrapper's start time once read ("": not yet); fixed for one launch
	ready bool
	url   string
}

// Name is the process's name, unique in its sandbox.
func (p *Process) Name() string { return p.spec.Name }

// Command is the command line it runs.
func (p *Process) Command() string { return p.b.red.String(p.spec.Command) }

// Ready reports whether the readiness check passed (always true without one).
func (p *Process) Ready() bool { p.mu.Lock(); defer p.mu.Unlock(); return p.ready }

// URL is the preview URL of the ready port, or "" when Ready named no port.
func (p *Process) URL() string { p.mu.Lock(); defer p.mu.Unlock(); return p.url }

// PID is the process group id inside the sandbox.
func (p *Process) PID() int { p.mu.Lock(); defer p.mu.Unlock(); return p.pid }

// defaultProcName derives a stable name from a command: its first word and a hash.
func defaultProcName(command string) string {
	word := strings.Fields(command)
	base := "proc"
	if len(word) > 0 {
		w := word[0]
		if i := strings.LastIndexByte(w, '/'); i >= 0 {
			w = w[i+1:]
		}
		w = strings.Map(func(r rune) rune {
			if r < 0x80 && procName.rest(byte(r)) {
				return r
			}
			return -1
		}, w)
		if len(w) > 32 {
			w = w[:32]
		}
		if w != "" {
			base = w
		}
	}
	sum := sha256.Sum256([]byte(command))
	return base + "-" + hex.EncodeToString(sum[:4])
}

// Start starts command in the background and returns when it is ready (see StartOptions).
// Starting a name that is already running the same command returns that process; a
// different command under a running name is CodeConflict. A process that exits before it is
// ready fails with CodeProcessExited, whose message ends with its last output.
func (b *Sandbox) Start(ctx context.Context, command string, opts StartOptions) (*Process, error) {
	const op = "start"
	if err := opts.validate(); err != nil {
		return nil, err
	}
	if strings.TrimSpace(command) == "" || containsNUL(command) {
		return nil, errorf(CodeInvalidArgument, op, "command is empty or holds a NUL byte")
	}
	if r := opts.Ready; r != nil && r.Port != 0 && !b.Capabilities.Has(provider.CapShell) && !b.Capabilities.Has(provider.CapPreview) {
		return nil, errorf(CodeUnsupported, op, "provider %s cannot check ports", b.Provider)
	}
	if err := b.ensureSecrets(ctx); err != nil {
		return nil, err
	}
	name := opts.Name
	if name == "" {
		name = defaultProcName(command)
	}
	spec := procSpec{
		Name: name, Command: command, Cwd: b.resolvePath(opts.Cwd), Env: maps.Clone(opts.Env),
		ReadyMS: opts.ReadyTimeout.Milliseconds(),
	}
	if r := opts.Ready; r != nil {
		spec.Ready = &readySpec{Port: r.Port, Path: r.Path, HTTP: r.HTTP}
		if r.Log != nil {
			spec.Ready.Log = r.Log.String()
		}
	}
	if existing, err := b.Process(ctx, name); err == nil {
		st, err := existing.Status(ctx)
		if err != nil {
			return nil, err
		}
		if st == ProcessRunning {
			if existing.spec.Command != command {
				return nil, errorf(CodeConflict, op, "process %q is running another command", name)
			}
			return existing, existing.waitReady(ctx, spec)
		}
	} else if !errors.Is(err, CodeNotFound) {
		return nil, err
	}
	p := &Process{b: b, spec: spec, dir: procRoot + "/" + name}
	if err := p.launch(ctx); err != nil {
		return nil, err
	}
	return p, p.waitReady(ctx, spec)
}

// launch writes the record and starts the wrapper detached.
func (p *Process) launch(ctx context.Context) error {
	const op = "start"
	b := p.b
	var rnd [6]byte
	_, _ = io.ReadFull(randReader, rnd[:])
	p.spec.Gen = hex.EncodeToString(rnd[:])
	p.spec.Started = time.Now().UTC()
	data, _ := json.Marshal(p.spec)
	for _, f := range []struct {
		name string
		data []byte
	}{{"stdout", nil}, {"stderr", nil}, {"spec.json", data}} {
		if err := b.inst.WriteFile(ctx, p.dir+"/"+f.name, bytes.NewReader(f.data), nil); err != nil {
			return b.red.Err(wrapProvider(err, op))
		}
	}
	// Old state of an earlier run of the same name.
	clean := fmt.Sprintf("rm -f %[1]s/exit %[1]s/exit.tmp %[1]s/oom %[1]s/stopped %[1]s/pid %[1]s/start", Quote(p.dir))
	if _, err := b.inst.Exec(ctx, provider.ExecRequest{Command: clean, Cwd: "/"}); err != nil {
		return b.red.Err(wrapProvider(err, op))
	}
	env := maps.Clone(nonInteractive)
	maps.Copy(env, p.spec.Env)
	env[envSDKRun] = "1"
	d := Quote(p.dir)
	// The wrapper first records its start time (see startTime), which tells it from a later
	// process given the same pid once the sandbox has booted again, and the sandbox's OOM
	// kill count, which tells an OOM kill from another SIGKILL when the command ends.
	wrapper := fmt.Sprintf("%s >%s/start; o=$(%s); (cd %s && sh -c %s) >%s/stdout 2>%s/stderr </dev/null; c=$?; "+
		"[ $c = 137 ] && [ \"$(%s)\" != \"$o\" ] && : >%s/oom; echo $c >%s/exit.tmp; mv %s/exit.tmp %s/exit",
		startTime("$$"), d, oomCount, Quote(p.spec.Cwd), Quote(p.spec.Command), d, d, oomCount, d, d, d, d)
	res, err := b.inst.Exec(ctx, provider.ExecRequest{Command: wrapper, Cwd: "/", Env: env, Detach: true})
	if err != nil {
		return b.red.Err(wrapProvider(err, op))
	}
	p.mu.Lock()
	p.pid = res.PID
	p.start = ""
	p.ready = false
	p.url = ""
	p.mu.Unlock()
	return wrapProvider(b.inst.WriteFile(ctx, p.dir+"/pid", strings.NewReader(strconv.Itoa(res.PID)+"\n"), nil), op)
}

// waitReady polls the readiness check.
func (p *Process) waitReady(ctx context.Context, spec procSpec) error {
	const op = "start"
	r := spec.Ready
	if r == nil {
		p.mu.Lock()
		p.ready = true
		p.mu.Unlock()
		return nil
	}
	timeout := time.Duration(spec.ReadyMS) * time.Millisecond
	if timeout == 0 {
		timeout = DefaultReadyTimeout
	}
	deadline := time.Now().Add(timeout)
	var logRe *regexp.Regexp
	if r.Log != "" {
		var err error
		if logRe, err = regexp.Compile(r.Log); err != nil {
			return errorf(CodeInvalidArgument, op, "ready log pattern: %v", err)
		}
	}
	cursor := ""
	for wait := 20 * time.Millisecond; ; wait = min(wait*2, 250*time.Millisecond) {
		ok, err := p.checkReady(ctx, r, logRe, &cursor)
		if err != nil {
			return err
		}
		if ok {
			p.mu.Lock()
			p.ready = true
			p.mu.Unlock()
			if r.Port != 0 {
				if u, err := p.b.PreviewURL(ctx, r.Port); err == nil {
					p.mu.Lock()
					p.url = u
					p.mu.Unlock()
				}
			}
			return nil
		}
		st, code, err := p.state(ctx)
		if err != nil {
			return err
		}
		if st == ProcessExited {
			// One more look: it may have printed its ready line and exited.
			if ok, _ := p.checkReady(ctx, r, logRe, &cursor); ok {
				p.mu.Lock()
				p.ready = true
				p.mu.Unlock()
				return nil
			}
			tail := p.tail(ctx)
			return errorf(CodeProcessExited, op, "process %q exited with %d before it was ready%s", p.spec.Name, code.ExitCode, tail)
		}
		if time.Now().After(deadline) {
			return errorf(CodeTimeout, op, "process %q was not ready within %v", p.spec.Name, timeout)
		}
		select {
		case <-ctx.Done():
			return errorf(CodeAborted, op, "%v", ctx.Err())
		case <-time.After(wait):
		}
	}
}

func (p *Process) tail(ctx context.Context) string {
	page, err := p.Logs(ctx, LogsOptions{MaxBytes: 64 << 10})
	if err != nil || page.Text == "" {
		return ""
	}
	t := strings.TrimSpace(page.Text)
	if len(t) > 2000 {
		t = "…" + t[len(t)-2000:]
	}
	return ": " + t
}

func (p *Process) checkReady(ctx context.Context, r *readySpec, logRe *regexp.Regexp, cursor *string) (bool, error) {
	switch {
	case logRe != nil:
		page, err := p.Logs(ctx, LogsOptions{After: *cursor, MaxBytes: MaxLogPageBytes})
		if err != nil {
			return false, err
		}
		*cursor = page.NextCursor
		for line := range strings.SplitSeq(page.Text, "\n") {
			if logRe.MatchString(line) {
				return true, nil
			}
		}
		return false, nil
	case r.HTTP:
		// Through the provider's tunnel where it has one (provider.PortDialer: no listener on
		// this host for a readiness check), else through its preview URL.
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		target, client := "http://localhost:"+strconv.Itoa(r.Port)+r.Path, http.DefaultClient
		if _, ok := p.b.inst.(provider.PortDialer); ok {
			client = &http.Client{Transport: &http.Transport{
				Proxy:             nil,
				DisableKeepAlives: true,
				DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
					return p.b.DialPort(ctx, r.Port)
				},
			}}
		} else {
			u, err := p.b.inst.PreviewURL(ctx, r.Port)
			if err != nil {
				return false, p.b.red.Err(wrapProvider(err, "start"))
			}
			target = strings.TrimSuffix(u, "/") + r.Path
		}
		req, err := http.NewRequestWithContext(rctx, http.MethodGet, target, nil)
		if err != nil {
			return false, errorf(CodeInvalidArgument, "start", "ready path: %v", err)
		}
		resp, err := client.Do(req)
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode < 500, nil
	default:
		if ok, err := p.portListening(ctx, r.Port); ok || err != nil {
			return ok, err
		}
		// gVisor on the host's network stack (runsc with network all, since 2025) lists no
		// socket in /proc/net: a connection through the provider's tunnel, which the agent
		// makes to 127.0.0.1 inside the sandbox and which fails at once when nothing listens,
		// tells instead. Not through a preview URL: a listener on this host accepts whether
		// or not the port in the sandbox does.
		if _, ok := p.b.inst.(provider.PortDialer); ok {
			dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			if c, err := p.b.DialPort(dctx, r.Port); err == nil {
				c.Close()
				return true, nil
			}
		}
		return false, nil
	}
}

// portListening reads /proc/net/tcp{,6} in the sandbox for a listening socket on port.
func (p *Process) portListening(ctx context.Context, port int) (bool, error) {
	want := fmt.Sprintf(":%04X ", port)
	found := false
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		rc, err := p.b.inst.ReadFile(ctx, f)
		if err != nil {
			if errors.Is(err, CodeNotFound) {
				continue
			}
			return false, p.b.red.Err(wrapProvider(err, "start"))
		}
		sc := bufio.NewScanner(io.LimitReader(rc, 8<<20))
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			// sl local_address rem_address st ...; st 0A is LISTEN.
			if len(fields) > 3 && fields[3] == "0A" && strings.HasSuffix(fields[1]+" ", want) {
				found = true
			}
		}
		rc.Close()
		if found {
			return true, nil
		}
	}
	return false, nil
}

// Process finds a background process by name. CodeNotFound when there is none.
func (b *Sandbox) Process(ctx context.Context, name string) (*Process, error) {
	const op = "process"
	if !procName.MatchString(name) {
		return nil, errorf(CodeInvalidArgument, op, "process name %q is not valid", name)
	}
	if err := b.ensureSecrets(ctx); err != nil {
		return nil, err
	}
	dir := procRoot + "/" + name
	rc, err := b.inst.ReadFile(ctx, dir+"/spec.json")
	if err != nil {
		if errors.Is(err, CodeNotFound) {
			return nil, errorf(CodeNotFound, op, "no process %q", name)
		}
		return nil, b.red.Err(wrapProvider(err, op))
	}
	data, err := readAllLimit(rc, 1<<20)
	rc.Close()
	if err != nil {
		return nil, err
	}
	var spec procSpec
	if err := json.Unmarshal(data, &spec); err != nil {
		return nil, errorf(CodeProvider, op, "process record %q is corrupt: %v", name, err)
	}
	p := &Process{b: b, spec: spec, dir: dir, ready: true}
	pid, err := p.readPID(ctx)
	if err != nil {
		return nil, err
	}
	p.pid = pid
	if spec.Ready != nil && spec.Ready.Port != 0 {
		if u, err := b.PreviewURL(ctx, spec.Ready.Port); err == nil {
			p.url = u
		}
	}
	return p, nil
}

// ProcessInfo describes a background process in Processes.
type ProcessInfo struct {
	Name      string
	Command   string
	Status    ProcessStatus
	StartedAt time.Time
}

// Processes lists the sandbox's background processes, by name.
func (b *Sandbox) Processes(ctx context.Context) ([]ProcessInfo, error) {
	infos, err := b.Files.List(ctx, procRoot, FileListOptions{})
	if errors.Is(err, CodeNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []ProcessInfo
	for _, fi := range infos {
		if fi.Type != provider.TypeDir {
			continue
		}
		name := fi.Path[strings.LastIndexByte(fi.Path, '/')+1:]
		p, err := b.Process(ctx, name)
		if errors.Is(err, CodeNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		st, err := p.Status(ctx)
		if err != nil {
			return nil, err
		}
		out = append(out, ProcessInfo{Name: name, Command: p.Command(), Status: st, StartedAt: p.spec.Started})
	}
	slices.SortFunc(out, func(a, b ProcessInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

func (p *Process) readFile(ctx context.Context, name string, limit int64) (string, bool, error) {
	rc, err := p.b.inst.ReadFile(ctx, p.dir+"/"+name)
	if errors.Is(err, CodeNotFound) {
		return "", false, nil
	}
	if err != nil {
		return "", false, p.b.red.Err(wrapProvider(err, "process"))
	}
	defer rc.Close()
	data, err := readAllLimit(rc, limit)
	if err != nil {
		return "", false, err
	}
	return string(data), true, nil
}

func (p *Process) readPID(ctx context.Context) (int, error) {
	s, ok, err := p.readFile(ctx, "pid", 64)
	if err != nil || !ok {
		return 0, err
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(s))
	return pid, nil
}

// state reads whether the process runs, and its exit status when it does not.
func (p *Process) state(ctx context.Context) (ProcessStatus, ExitStatus, error) {
	s, ok, err := p.readFile(ctx, "exit", 64)
	if err != nil {
		return "", ExitStatus{}, err
	}
	stopped, wasStopped, err := p.readFile(ctx, "stopped", 64)
	if err != nil {
		return "", ExitStatus{}, err
	}
	stopped = strings.TrimSpace(stopped)
	if ok {
		code, _ := strconv.Atoi(strings.TrimSpace(s))
		es := ExitStatus{ExitCode: code}
		if wasStopped && code > 128 {
			es.Signal = stopped
		}
		if code == 137 && !wasStopped {
			if _, oom, err := p.readFile(ctx, "oom", 8); err == nil && oom {
				es.OOMKilled = true
			}
		}
		return ProcessExited, es, nil
	}
	pid := p.PID()
	if pid == 0 {
		if pid, err = p.readPID(ctx); err != nil {
			return "", ExitStatus{}, err
		}
		p.mu.Lock()
		p.pid = pid
		p.mu.Unlock()
	}
	if pid == 0 {
		return ProcessExited, ExitStatus{ExitCode: -1}, nil
	}
	// The whole group: the wrapper shell leads it, but a command that traps TERM can outlive it.
	// A sandbox booted again since (a pause that dropped its memory) numbers its processes
	// from 1 again, so a live group of that number may be a later one's: where the leader is
	// there, its start time must be the one the wrapper recorded.
	check := fmt.Sprintf("kill -0 -%d 2>/dev/null", pid)
	start, err := p.startTime(ctx)
	if err != nil {
		return "", ExitStatus{}, err
	}
	if start != "" {
		check += fmt.Sprintf(" || exit 1; t=$(%s) || exit 0; [ -z \"$t\" ] || [ \"$t\" = %s ]", startTime(strconv.Itoa(pid)), Quote(start))
	}
	res, err := p.b.inst.Exec(ctx, provider.ExecRequest{Command: check, Cwd: "/"})
	if err != nil {
		return "", ExitStatus{}, p.b.red.Err(wrapProvider(err, "process"))
	}
	if res.ExitCode == 0 {
		// It may have exited between the two reads.
		if _, ok, _ := p.readFile(ctx, "exit", 64); !ok {
			return ProcessRunning, ExitStatus{}, nil
		}
		return p.state(ctx)
	}
	if _, ok, _ := p.readFile(ctx, "exit", 64); ok {
		return p.state(ctx)
	}
	// Gone without an exit record: killed with its wrapper.
	es := ExitStatus{ExitCode: -1, Signal: stopped}
	switch stopped {
	case "SIGTERM":
		es.ExitCode = 128 + 15
	case "SIGKILL":
		es.ExitCode = 128 + 9
	}
	return ProcessExited, es, nil
}

// startTime returns the start time the wrapper recorded, read once per launch ("" until the
// wrapper has written it), so that Wait's polls do not read it again.
func (p *Process) startTime(ctx context.Context) (string, error) {
	p.mu.Lock()
	start := p.start
	p.mu.Unlock()
	if start != "" {
		return start, nil
	}
	s, _, err := p.readFile(ctx, "start", 64)
	if err != nil {
		return "", err
	}
	start = strings.TrimSpace(s)
	p.mu.Lock()
	p.start = start
	p.mu.Unlock()
	return start, nil
}

// startTime is a shell command that prints the start time of process pid (field 22 of its
// /proc stat, in clock ticks since boot; the fields are counted after the command name, which
// may hold spaces or parentheses), and fails when there is no such process.
func startTime(pid string) string {
	return fmt.Sprintf(`{ s=$(cat /proc/%s/stat 2>/dev/null) && s=${s##*) } && set -- $s && echo "${20}"; }`, pid)
}

// oomCount is a shell command that prints the sandbox's OOM kill count as its memory cgroup
// says, mounted at /sys/fs/cgroup under runc and crun (cgroup v1 memory.oom_control, v2
// memory.events), or 0 where there is none: what the agent reads around its commands
// (agent/oom.go), for background processes, which the wrapper shell runs.
const oomCount = `n=0; for f in /sys/fs/cgroup/memory/memory.oom_control /sys/fs/cgroup/memory.events; do [ -r "$f" ] || continue; ` +
	`while read -r k v; do [ "$k" = oom_kill ] && n=$v; done <"$f"; break; done; echo $n`

// Status reports whether the process is running.
func (p *Process) Status(ctx context.Context) (ProcessStatus, error) {
	st, _, err := p.state(ctx)
	return st, err
}

// Wait blocks until the process exits and returns how it ended.
func (p *Process) Wait(ctx context.Context) (ExitStatus, error) {
	for wait := 20 * time.Millisecond; ; wait = min(wait*2, 500*time.Millisecond) {
		st, es, err := p.state(ctx)
		if err != nil {
			return ExitStatus{}, err
		}
		if st == ProcessExited {
			return es, nil
		}
		select {
		case <-ctx.Done():
			return ExitStatus{}, errorf(CodeAborted, "process.wait", "%v", ctx.Err())
		case <-time.After(wait):
		}
	}
}

// Stop sends SIGTERM to the process group, then SIGKILL after the grace period, and returns
// when the process is gone. Stopping a process that is not running does nothing.
func (p *Process) Stop(ctx context.Context, opts StopOptions) error {
	const op = "process.stop"
	if opts.Grace < 0 {
		return errorf(CodeInvalidArgument, op, "grace must not be negative")
	}
	grace := opts.Grace
	if grace == 0 {
		grace = DefaultStopGrace
	}
	st, err := p.Status(ctx)
	if err != nil || st != ProcessRunning {
		return err
	}
	pid := p.PID()
	signal := func(sig string) error {
		if err := p.b.inst.WriteFile(ctx, p.dir+"/stopped", strings.NewReader(sig+"\n"), nil); err != nil {
			return p.b.red.Err(wrapProvider(err, op))
		}
		_, err := p.b.inst.Exec(ctx, provider.ExecRequest{
			Command: fmt.Sprintf("kill -%s -%d 2>/dev/null || kill -%s %d 2>/dev/null; true", strings.TrimPrefix(sig, "SIG"), pid, strings.TrimPrefix(sig, "SIG"), pid),
			Cwd:     "/",
		})
		return p.b.red.Err(wrapProvider(err, op))
	}
	if err := signal("SIGTERM"); err != nil {
		return err
	}
	deadline := time.Now().Add(grace)
	for wait := 10 * time.Millisecond; time.Now().Before(deadline); wait = min(wait*2, 200*time.Millisecond) {
		if st, err := p.Status(ctx); err != nil || st != ProcessRunning {
			return err
		}
		select {
		case <-ctx.Done():
			return errorf(CodeAborted, op, "%v", ctx.Err())
		case <-time.After(wait):
		}
	}
	if err := signal("SIGKILL"); err != nil {
		return err
	}
	_, err = p.Wait(ctx)
	return err
}

// Restart stops the process and starts the same command again, waiting for readiness.
func (p *Process) Restart(ctx context.Context) error {
	if err := p.Stop(ctx, StopOptions{}); err != nil {
		return err
	}
	if err := p.launch(ctx); err != nil {
		return err
	}
	return p.waitReady(ctx, p.spec)
}

// cursor is the position in both log files of one generation of a process.
type cursor struct {
	gen      string
	out, err int64
}

func (c cursor) String() string {
	return base64.RawURLEncoding.EncodeToString(fmt.Appendf(nil, "%s.%d.%d", c.gen, c.out, c.err))
}

func parseCursor(s, gen string) (cursor, error) {
	if s == "" {
		return cursor{gen: gen}, nil
	}
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return cursor{}, errorf(CodeInvalidArgument, "process.logs", "cursor is not valid")
	}
	parts := strings.Split(string(raw), ".")
	if len(parts) != 3 {
		return cursor{}, errorf(CodeInvalidArgument, "process.logs", "cursor is not valid")
	}
	o, err1 := strconv.ParseInt(parts[1], 10, 64)
	e, err2 := strconv.ParseInt(parts[2], 10, 64)
	if err1 != nil || err2 != nil || o < 0 || e < 0 {
		return cursor{}, errorf(CodeInvalidArgument, "process.logs", "cursor is not valid")
	}
	if parts[0] != gen {
		// The process was restarted since: its logs start over.
		return cursor{gen: gen}, nil
	}
	return cursor{gen: gen, out: o, err: e}, nil
}

// readFrom reads up to n bytes of a log file from off.
func (p *Process) readFrom(ctx context.Context, name string, off int64, n int) ([]byte, error) {
	file := p.dir + "/" + name
	rc, err := p.b.openRange(ctx, "process.logs", file, off, int64(n))
	if errors.Is(err, CodeNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, p.b.red.Err(wrapProvider(err, "process.logs"))
	}
	defer rc.Close()
	buf, err := io.ReadAll(io.LimitReader(rc, int64(n)))
	if err != nil {
		return nil, p.b.red.Err(wrapProvider(err, "process.logs"))
	}
	return buf, nil
}

// Logs returns one page of output after opts.After: first stdout, then stderr. A page ends
// at a line boundary when it can, so a secret is never split across pages.
func (p *Process) Logs(ctx context.Context, opts LogsOptions) (LogPage, error) {
	const op = "process.logs"
	if opts.MaxBytes < 0 || opts.MaxBytes > MaxLogPageBytes {
		return LogPage{}, errorf(CodeInvalidArgument, op, "maxBytes must be between 0 and %d", MaxLogPageBytes)
	}
	max := opts.MaxBytes
	if max == 0 {
		max = DefaultLogPageBytes
	}
	c, err := parseCursor(opts.After, p.spec.Gen)
	if err != nil {
		return LogPage{}, err
	}
	running := true
	if st, _, err := p.state(ctx); err == nil && st == ProcessExited {
		running = false
	}
	var text bytes.Buffer
	truncated := false
	for _, s := range []struct {
		name string
		off  *int64
	}{{Stdout, &c.out}, {Stderr, &c.err}} {
		room := max - text.Len()
		if room <= 0 {
			// See whether anything waits here.
			if more, _ := p.readFrom(ctx, s.name, *s.off, 1); len(more) > 0 {
				truncated = true
			}
			continue
		}
		data, err := p.readFrom(ctx, s.name, *s.off, room+1)
		if err != nil {
			return LogPage{}, err
		}
		if len(data) > room {
			truncated = true
			cut := room
			if i := bytes.LastIndexByte(data[:room], '\n'); i >= 0 {
				cut = i + 1
			} else {
				// Mid-line: never cut through a secret, or two pages would each hold half.
				more, err := p.readFrom(ctx, s.name, *s.off+int64(len(data)), p.b.red.longest())
				if err != nil {
					return LogPage{}, err
				}
				cut = safeCut(append(data, more...), room, p.b.red.snapshot())
			}
			data = data[:cut]
		} else if running {
			// Keep a partial last line for the next page while the process writes.
			if i := bytes.LastIndexByte(data, '\n'); i >= 0 {
				data = data[:i+1]
			} else {
				data = nil
			}
		}
		*s.off += int64(len(data))
		text.Write(data)
	}
	return LogPage{Text: p.b.red.String(text.String()), NextCursor: c.String(), Truncated: truncated}, nil
}

// Lines yields the process's output line by line after the cursor after ("" is the
// beginning), following it while it runs, until it exits and all output is read or ctx ends.
// Each line carries the cursor that continues after it. The error, if any, ends the sequence.
func (p *Process) Lines(ctx context.Context, after string) iter.Seq2[LogLine, error] {
	return func(yield func(LogLine, error) bool) {
		c, err := parseCursor(after, p.spec.Gen)
		if err != nil {
			yield(LogLine{}, err)
			return
		}
		for wait := 10 * time.Millisecond; ; {
			st, _, err := p.state(ctx)
			if err != nil {
				yield(LogLine{}, err)
				return
			}
			exited := st == ProcessExited
			progressed := false
			for _, s := range []struct {
				name string
				off  *int64
			}{{Stdout, &c.out}, {Stderr, &c.err}} {
				data, err := p.readFrom(ctx, s.name, *s.off, MaxLogPageBytes)
				if err != nil {
					yield(LogLine{}, err)
					return
				}
				for len(data) > 0 {
					i := bytes.IndexByte(data, '\n')
					var line []byte
					switch {
					case i >= 0:
						line, data = data[:i], data[i+1:]
						*s.off += int64(i + 1)
					case exited || len(data) >= MaxLogPageBytes:
						line, data = data, nil
						*s.off += int64(len(line))
					default:
						data = nil
						continue
					}
					progressed = true
					if !yield(LogLine{Text: p.b.red.String(string(line)), Stream: s.name, Cursor: c.String()}, nil) {
						return
					}
				}
			}
			if exited && !progressed {
				return
			}
			if progressed {
				wait = 10 * time.Millisecond
				continue
			}
			select {
			case <-ctx.Done():
				yield(LogLine{}, errorf(CodeAborted, "process.lines", "%v", ctx.Err()))
				return
			case <-time.After(wait):
			}
			wait = min(wait*2, 250*time.Millisecond)
		}
	}
}

var randReader = rand.Reader

// safeCut returns where to cut data near want so that no secret occurrence spans the cut: at
// the start of an occurrence that crosses want, or after it when it starts at 0.
func safeCut(data []byte, want int, secrets []string) int {
	cut := want
	for i := 0; i < len(data) && i < want; i++ {
		for _, s := range secrets { // longest first
			if bytes.HasPrefix(data[i:], []byte(s)) {
				end := i + len(s)
				if end > want {
					if i == 0 {
						return end
					}
					return i
				}
				i = end - 1
				break
			}
		}
	}
	return cut
}
