//go:build linux

package agent

import (
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Checkpoints. gVisor cannot save a sandbox while a socket in it is bound to a host socket
// (runsc --host-uds=create), and the agent's listener on a host directory is one, as is
// every connection accepted on it. Before its host checkpoints the sandbox it posts
// /tupper/quiesce: the agent closes its listener and every connection (the quiesce request's
// own last, so the host reads the end of that connection once nothing of the agent touches
// a host socket), keeps running everything else, and waits for SIGUSR2 (runsc kill ID USR2
// from the host, once the checkpoint is taken, in the sandbox it was taken from and in each
// one restored from it). Then it listens again at the same path, which in a restored sandbox
// is the new sandbox's own socket directory. A SIGUSR2 that arrives while the agent serves
// is ignored.

// relistener listens again at the path of the agent's first unix listener. The directory is
// held open from the start: HideFromAgent covers it later.
type relistener struct {
	dir  *os.File // O_PATH
	name string
}

// newRelistener returns a relistener for ln, or nil when ln is not a unix listener on a
// path (then /tupper/quiesce answers 501).
func newRelistener(ln net.Listener) *relistener {
	ul, ok := ln.(*net.UnixListener)
	if !ok {
		return nil
	}
	path := ul.Addr().String()
	if !filepath.IsAbs(path) {
		return nil
	}
	fd, err := unix.Open(filepath.Dir(path), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	return &relistener{dir: os.NewFile(uintptr(fd), filepath.Dir(path)), name: filepath.Base(path)}
}

// listen removes what is left at the path and binds a new listener there.
func (r *relistener) listen() (net.Listener, error) {
	_ = unix.Unlinkat(int(r.dir.Fd()), r.name, 0)
	ln, err := net.Listen("unix", "/proc/self/fd/"+strconv.Itoa(int(r.dir.Fd()))+"/"+r.name)
	if err != nil {
		return nil, err
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	return ln, nil
}

// unlink removes the socket's name once its listener is closed. A checkpoint then knows of
// no socket file in the host directory: gVisor (since 2025) walks again, on restore, every
// file of a host-backed mount the saved sandbox knew of, and the new sandbox's socket
// directory has none until the agent listens again there.
func (r *relistener) unlink() {
	if r == nil {
		return
	}
	_ = unix.Unlinkat(int(r.dir.Fd()), r.name, 0)
}

func (r *relistener) close() {
	if r != nil {
		r.dir.Close()
	}
}

// hijackedConns are the connections handlers took over (tunnels, quiesce): http.Server's
// Close does not close them.
type hijackedConns struct {
	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

func (h *hijackedConns) add(c net.Conn) {
	h.mu.Lock()
	if h.conns == nil {
		h.conns = map[net.Conn]struct{}{}
	}
	h.conns[c] = struct{}{}
	h.mu.Unlock()
}

func (h *hijackedConns) remove(c net.Conn) {
	h.mu.Lock()
	delete(h.conns, c)
	h.mu.Unlock()
}

func (h *hijackedConns) closeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for c := range h.conns {
		c.Close()
	}
	clear(h.conns)
}

var errQuiesced = errors.New("agent: quiesced")

// quiesce serves POST /tupper/quiesce (see Checkpoints above).
func (a *Agent) quiesce(w http.ResponseWriter, r *http.Request) {
	if a.relisten == nil {
		jsonError(w, http.StatusNotImplemented, "the agent cannot listen again on this listener")
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		jsonError(w, http.StatusHTTPVersionNotSupported, "quiesce needs HTTP/1.1")
		return
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		return
	}
	done := make(chan struct{})
	select {
	case a.quiesceReq <- done:
	case <-time.After(5 * time.Second):
		conn.Close() // Serve is not serving: another quiesce took the listener
		return
	}
	<-done // the listener and every other connection are closed
	_, _ = io.WriteString(conn, "HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n")
	conn.Close()
}
