//go:build linux

package agent

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	"github.com/tupper-dev/tupper/agent/internal/zerocopy"
	"github.com/tupper-dev/tupper/agent/spec/filesystem/filesystemconnect"
	"github.com/tupper-dev/tupper/agent/spec/process/processconnect"
)

// ErrDeadline is returned by Serve when the lifetime deadline was reached.
var ErrDeadline = errors.New("agent: lifetime deadline reached")

// ErrIdle is returned by Serve when the idle timeout was reached.
var ErrIdle = errors.New("agent: idle timeout reached")

// Agent is a running agent. Serve creates one; it is not exported because
// everything a caller needs goes over the wire.
type Agent struct {
	cfg      Config
	users    *userDB
	reaper   *reaper
	procs    *procTable
	watchers *watcherTable
	pid1     bool
	euid     int
	egid     int
	spawner  *spawner // nil without HidePaths and CommandCgroup
	// oomProtected is set when the agent runs as PID 1: commands then start at the highest
	// OOM score, so the OOM killer picks them before the agent (commandOOMScore).
	oomProtected bool
	devNull      int

	deadline     atomic.Int64 // unix seconds, 0 = none
	idle         atomic.Int64 // idle timeout in seconds, 0 = never
	inflight     atomic.Int64
	lastActivity atomic.Int64 // unix nanoseconds
	poke         chan struct{}

	relisten   *relistener        // nil: the listener cannot be made again (no quiesce)
	quiesceReq chan chan struct{} // quiesce → Serve: close every host socket, then close the channel
	hijacked   hijackedConns

	closeOnce sync.Once
}

func newAgent(cfg Config) (*Agent, error) {
	if cfg.CommandCgroup != nil {
		// Used once, by newSpawner; no command may inherit it.
		defer cfg.CommandCgroup.Close()
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	a := &Agent{
		cfg:      cfg,
		users:    newUserDB("/etc"),
		procs:    newProcTable(),
		watchers: newWatcherTable(),
		pid1:     os.Getpid() == 1,
		euid:     os.Geteuid(),
		egid:     os.Getegid(),
		poke:     make(chan struct{}, 1),

		quiesceReq: make(chan chan struct{}),
	}
	a.oomProtected = a.pid1
	if len(cfg.HidePaths) > 0 && a.euid != 0 {
		return nil, errors.New("agent: hidePaths needs root (mount namespaces)")
	}
	if cfg.BootIDFile != "" {
		// Before the spawner's thread copies the mount namespace commands start in.
		if err := newBootID(cfg.BootIDFile); err != nil {
			return nil, err
		}
	}
	fd, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("agent: open /dev/null: %w", err)
	}
	a.devNull = fd
	if len(cfg.HidePaths) > 0 || cfg.CommandCgroup != nil {
		s, err := newSpawner(cfg.HidePaths, cfg.CommandCgroup)
		if err != nil {
			unix.Close(fd)
			return nil, err
		}
		a.spawner = s
	}
	a.deadline.Store(cfg.DeadlineUnix)
	a.idle.Store(cfg.IdleTimeoutSeconds)
	a.touch()
	a.reaper = newReaper(a.pid1)
	return a, nil
}

// Serve runs the agent on ln until ctx is done, the lifetime deadline or the
// idle timeout is reached, or ln fails. On return every process the agent
// started has been killed (and, as PID 1, every other process in the
// sandbox). It returns nil when ctx ended it, ErrDeadline or ErrIdle when a
// deadline did, and the listener's error otherwise. Serve closes ln.
func Serve(ctx context.Context, ln net.Listener, cfg Config) error {
	a, err := newAgent(cfg)
	if err != nil {
		ln.Close()
		return err
	}
	defer a.shutdown()
	// Before the hiding below covers its directory.
	var endFile *os.File
	if cfg.EndFile != "" {
		if endFile, err = os.OpenFile(cfg.EndFile, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644); err != nil {
			ln.Close()
			return fmt.Errorf("agent: end file: %w", err)
		}
		defer endFile.Close()
	}
	// Before the hiding below covers the listener's directory.
	rl := newRelistener(ln)
	defer rl.close()
	a.relisten = rl
	if cfg.HideFromAgent {
		for _, hp := range cfg.HidePaths {
			if err := hidePath(hp); err != nil {
				ln.Close()
				return fmt.Errorf("agent: hide %s from the agent: %w", hp, err)
			}
		}
	}
	if len(cfg.HidePaths) > 0 {
		// Without CAP_SYS_PTRACE, commands cannot reach the agent's
		// namespace through /proc/<agent>/root, /exe or /fd.
		_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	}

	var usr2 chan os.Signal
	if rl != nil {
		usr2 = make(chan os.Signal, 1)
		signal.Notify(usr2, unix.SIGUSR2)
		defer signal.Stop(usr2)
	}
	var srv *http.Server
	var serveErr chan error
	serve := func(ln net.Listener) {
		p := new(http.Protocols)
		p.SetHTTP1(true)
		p.SetUnencryptedHTTP2(true)
		srv = &http.Server{
			Handler:           a.Handler(),
			Protocols:         p,
			ReadHeaderTimeout: 30 * time.Second,
			ErrorLog:          nil,
		}
		serveErr = make(chan error, 1)
		// zerocopy: file downloads go out with sendfile(2), not 32 KiB copies.
		go func() { serveErr <- srv.Serve(zerocopy.Listener{Listener: ln}) }()
	}
	stop := func() {
		if srv != nil {
			srv.Close()
			<-serveErr
			a.hijacked.closeAll()
			srv, serveErr = nil, nil
		}
	}
	serve(ln)

	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		wait, reason := a.nextCheck(time.Now())
		if reason != nil {
			stop()
			if endFile != nil {
				// The host reads it: this sandbox ended as it was told to, not by a crash.
				endFile.WriteString(reason.Error() + "\n")
			}
			return reason
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			stop()
			return nil
		case err := <-serveErr:
			return err
		case done := <-a.quiesceReq:
			// Every host socket of the agent's closed: the sandbox can be checkpointed.
			stop()
			rl.unlink()
			close(done)
		case <-usr2:
			if srv != nil {
				continue // not quiesced: nothing to do
			}
			nl, err := rl.listen()
			if err != nil {
				return fmt.Errorf("agent: listen again after a checkpoint: %w", err)
			}
			serve(nl)
		case <-a.poke:
		case <-timer.C:
		}
	}
}

// nextCheck returns how long until the next deadline or idle check, or the
// reason to stop now.
func (a *Agent) nextCheck(now time.Time) (time.Duration, error) {
	wait := time.Hour
	if d := a.deadline.Load(); d > 0 {
		left := time.Unix(d, 0).Sub(now)
		if left <= 0 {
			return 0, ErrDeadline
		}
		wait = min(wait, left)
	}
	if idle := time.Duration(a.idle.Load()) * time.Second; idle > 0 {
		if a.inflight.Load() == 0 && a.procs.count() == 0 {
			left := time.Unix(0, a.lastActivity.Load()).Add(idle).Sub(now)
			if left <= 0 {
				return 0, ErrIdle
			}
			wait = min(wait, left)
		} else {
			wait = min(wait, idle)
		}
	}
	return wait + time.Millisecond, nil
}

func (a *Agent) touch() { a.lastActivity.Store(time.Now().UnixNano()) }

func (a *Agent) wake() {
	select {
	case a.poke <- struct{}{}:
	default:
	}
}

// shutdown kills every process the agent started (as PID 1: every process).
func (a *Agent) shutdown() {
	a.closeOnce.Do(func() {
		for _, p := range a.procs.list() {
			_ = p.signalGroup(unix.SIGKILL)
		}
		if a.pid1 {
			_ = unix.Kill(-1, unix.SIGKILL)
		}
		deadline := time.Now().Add(2 * time.Second)
		for _, p := range a.procs.list() {
			select {
			case <-p.done:
			case <-time.After(time.Until(deadline)):
			}
		}
		a.watchers.closeAll()
		if a.spawner != nil {
			a.spawner.close()
		}
		a.reaper.close()
		unix.Close(a.devNull)
	})
}

// Handler returns the agent's HTTP handler: the Connect services, /health,
// /files and the /tupper/ extensions, behind access-token checks.
func (a *Agent) Handler() http.Handler {
	mux := http.NewServeMux()
	opts := []connect.HandlerOption{connect.WithReadMaxBytes(64 << 20)}
	path, h := processconnect.NewProcessHandler(&processService{a}, opts...)
	mux.Handle(path, h)
	path, h = filesystemconnect.NewFilesystemHandler(&fsService{a}, opts...)
	mux.Handle(path, h)
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	mux.HandleFunc("GET /files", a.getFiles)
	mux.HandleFunc("HEAD /files", a.getFiles)
	mux.HandleFunc("POST /files", a.postFiles)
	mux.HandleFunc("GET /tupper/tunnel", a.tunnel)
	mux.HandleFunc("POST /tupper/deadline", a.setDeadline)
	mux.HandleFunc("GET /tupper/busy", a.busy)
	mux.HandleFunc("POST /tupper/quiesce", a.quiesce)
	return a.withAuth(a.withActivity(mux))
}

// noActivity lists requests that do not count as activity for the idle
// timeout: probes must not keep an idle sandbox alive.
func noActivity(r *http.Request) bool {
	return r.URL.Path == "/health" || r.URL.Path == "/tupper/busy"
}

func (a *Agent) withActivity(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if noActivity(r) {
			next.ServeHTTP(w, r)
			return
		}
		a.inflight.Add(1)
		a.touch()
		defer func() {
			a.touch()
			a.inflight.Add(-1)
			a.wake()
		}()
		next.ServeHTTP(w, r)
	})
}

const accessTokenHeader = "X-Access-Token"

// withAuth applies envd's rules: with an access token configured, every
// request needs it in X-Access-Token except GET /health and GET/POST /files
// (which check a signed URL instead when the header is absent).
func (a *Agent) withAuth(next http.Handler) http.Handler {
	if a.cfg.AccessToken == "" {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		exempt := r.URL.Path == "/health" && r.Method == http.MethodGet ||
			r.URL.Path == "/files" && (r.Method == http.MethodGet || r.Method == http.MethodHead || r.Method == http.MethodPost)
		if !exempt && !a.tokenOK(r.Header.Get(accessTokenHeader)) {
			jsonError(w, http.StatusUnauthorized, "unauthorized access, please provide a valid access token or method signing if supported")
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (a *Agent) tokenOK(got string) bool {
	return subtle.ConstantTimeCompare([]byte(got), []byte(a.cfg.AccessToken)) == 1
}

// jsonError writes envd's error body {"code": status, "message": msg}.
func jsonError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}{status, msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// userFor picks the request's user: name if given, else the Basic auth
// user, else the default user. A user the sandbox does not have is refused in
// envd's words, which E2B's SDKs show: "invalid username: 'NAME'" (the
// default user's: "invalid default user: 'NAME'").
func (a *Agent) userFor(name string, r http.Header) (*osUser, error) {
	if name == "" {
		name = basicUser(r)
	}
	what := "username"
	if name == "" {
		name, what = a.cfg.DefaultUser, "default user"
	}
	if name == "" {
		return a.users.byUID(uint32(a.euid)), nil
	}
	u, err := a.users.lookup(name)
	if err != nil {
		return nil, fmt.Errorf("invalid %s: '%s'", what, name)
	}
	return u, nil
}

func basicUser(h http.Header) string {
	r := http.Request{Header: h}
	u, _, ok := r.BasicAuth()
	if !ok {
		return ""
	}
	return u
}

// resolvePath makes p absolute the way envd does: "" is the default
// workdir (or home), "~" and "~/x" expand to the user's home, relative
// paths are relative to the home. The result is Clean, so ".." never
// climbs above "/".
func (a *Agent) resolvePath(p string, u *osUser) (string, error) {
	if p == "" {
		p = a.cfg.DefaultWorkdir
		if p == "" {
			p = u.Home
		}
	}
	if strings.HasPrefix(p, "~") {
		if len(p) > 1 && p[1] != '/' {
			return "", fmt.Errorf("cannot expand %q: only ~ and ~/ are supported", p)
		}
		p = u.Home + "/" + p[1:]
	}
	if !strings.HasPrefix(p, "/") {
		p = u.Home + "/" + p
	}
	// Checked last: the home directory comes from the sandbox's /etc/passwd.
	if strings.ContainsRune(p, 0) {
		return "", errors.New("path contains a NUL byte")
	}
	return cleanAbs(p), nil
}

// cleanAbs cleans an absolute path; ".." at the root stays at the root.
func cleanAbs(p string) string {
	return filepath.Clean("/" + p)
}
