//go:build linux

package agent

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// tunnel serves GET /tupper/tunnel?port=N with "Connection: Upgrade" and
// "Upgrade: tcp": it dials 127.0.0.1:N inside the sandbox and, on success,
// answers "101 Switching Protocols" and splices the two connections. A
// failed dial is a 502 with the usual JSON error body. HTTP/1.1 only.
func (a *Agent) tunnel(w http.ResponseWriter, r *http.Request) {
	if !strings.EqualFold(r.Header.Get("Upgrade"), "tcp") {
		jsonError(w, http.StatusBadRequest, `tunnel needs "Connection: Upgrade" and "Upgrade: tcp"`)
		return
	}
	port, err := strconv.Atoi(r.URL.Query().Get("port"))
	if err != nil || port < 1 || port > 65535 {
		jsonError(w, http.StatusBadRequest, "port must be an integer in 1..65535")
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		jsonError(w, http.StatusHTTPVersionNotSupported, "tunnel needs HTTP/1.1")
		return
	}
	d := net.Dialer{Timeout: 10 * time.Second}
	up, err := d.DialContext(r.Context(), "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		jsonError(w, http.StatusBadGateway, "dial port "+strconv.Itoa(port)+": "+err.Error())
		return
	}
	defer up.Close()
	conn, brw, err := hj.Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	a.hijacked.add(conn)
	defer a.hijacked.remove(conn)
	_ = conn.SetDeadline(time.Time{})
	if _, err := io.WriteString(conn, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n\r\n"); err != nil {
		return
	}
	done := make(chan struct{}, 2)
	go func() {
		// brw.Reader first: it may hold bytes the client sent early.
		_, _ = io.Copy(up, brw.Reader)
		closeWrite(up)
		done <- struct{}{}
	}()
	go func() {
		_, _ = io.Copy(conn, up)
		closeWrite(conn)
		done <- struct{}{}
	}()
	<-done
	<-done
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	} else {
		_ = c.Close()
	}
}

// DeadlineRequest is the body of POST /tupper/deadline and its answer.
type DeadlineRequest struct {
	// DeadlineUnix is the new lifetime deadline in unix seconds; 0 clears it.
	DeadlineUnix int64 `json:"deadlineUnix"`
	// IdleTimeoutSeconds, when present, is the new idle timeout in seconds
	// (0: never), counted from this request; absent leaves it as it is.
	IdleTimeoutSeconds *int64 `json:"idleTimeoutSeconds,omitempty"`
}

func (a *Agent) setDeadline(w http.ResponseWriter, r *http.Request) {
	var req DeadlineRequest
	dec := json.NewDecoder(io.LimitReader(r.Body, 4096))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		jsonError(w, http.StatusBadRequest, "invalid body: "+err.Error())
		return
	}
	if req.DeadlineUnix < 0 {
		jsonError(w, http.StatusBadRequest, "deadlineUnix must not be negative")
		return
	}
	if req.IdleTimeoutSeconds != nil && *req.IdleTimeoutSeconds < 0 {
		jsonError(w, http.StatusBadRequest, "idleTimeoutSeconds must not be negative")
		return
	}
	a.deadline.Store(req.DeadlineUnix)
	if req.IdleTimeoutSeconds != nil {
		a.touch()
		a.idle.Store(*req.IdleTimeoutSeconds)
	}
	a.wake()
	writeJSON(w, http.StatusOK, req)
}

// BusyResponse is the answer of GET /tupper/busy.
type BusyResponse struct {
	// Busy is true while any process started through the agent runs.
	Busy bool `json:"busy"`
	// Processes counts those processes.
	Processes int `json:"processes"`
	// LastActivityUnixMs is when the last request (other than /health and
	// /tupper/busy) began or ended, or a process ended.
	LastActivityUnixMs int64 `json:"lastActivityUnixMs"`
	// DeadlineUnix is the current lifetime deadline, 0 if none.
	DeadlineUnix int64 `json:"deadlineUnix"`
}

func (a *Agent) busy(w http.ResponseWriter, r *http.Request) {
	n := a.procs.count()
	writeJSON(w, http.StatusOK, BusyResponse{
		Busy:               n > 0,
		Processes:          n,
		LastActivityUnixMs: a.lastActivity.Load() / int64(time.Millisecond),
		DeadlineUnix:       a.deadline.Load(),
	})
}
