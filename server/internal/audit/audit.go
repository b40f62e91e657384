// Package audit records the calls that change something in the store's audit log
// (store.AuditEntry), from one place per API dialect: Wrap around a route's handler, given
// the route's action, reads who called from the dialect's authentication, the target from
// the path, and the result from the answer's status. It never reads a request or response
// body, so neither file contents, command lines, output nor secrets can enter the log.
//
// Entries are written by a Recorder in the background, in batches, so a call does not wait
// for the store: an entry is committed within linger (50 ms) of the answer; Flush waits for
// those queued, and Close writes them all before it returns.
package audit

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/tupper-dev/tupper/provider/httpcode"
	"github.com/tupper-dev/tupper/store"
)

// maxQueue is how many entries may wait for the store; past it a call waits for the writer,
// so a store that cannot keep up slows the API instead of losing entries.
const maxQueue = 10000

// linger is how long the writer lets entries gather before it writes them, unless Flush or
// Close asks sooner or maxBatch have gathered: one transaction for the calls of this long
// rather than one each, which on SQLite costs as much CPU as a fast exec.
const (
	linger   = 50 * time.Millisecond
	maxBatch = 1000
)

// Recorder writes audit entries to a store. Its methods may be called from many goroutines.
type Recorder struct {
	st  *store.Store
	log *slog.Logger

	mu      sync.Mutex
	cond    *sync.Cond // signalled when queue shrinks, written grows or closed is set
	queue   []store.AuditEntry
	added   uint64 // entries ever queued
	written uint64 // entries ever taken out of the queue and written (or given up)
	flushes int    // Flush calls waiting: the writer does not linger for them
	closed  bool
	wake    chan struct{}
	done    chan struct{}
}

// New returns a Recorder writing to st, its failures logged to log. Close it.
func New(st *store.Store, log *slog.Logger) *Recorder {
	r := &Recorder{st: st, log: log, wake: make(chan struct{}, 1), done: make(chan struct{})}
	r.cond = sync.NewCond(&r.mu)
	go r.run()
	return r
}

// Add queues e. A nil Recorder records nothing.
func (r *Recorder) Add(e store.AuditEntry) {
	if r == nil {
		return
	}
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	r.mu.Lock()
	for len(r.queue) >= maxQueue && !r.closed {
		r.cond.Wait()
	}
	if r.closed {
		r.mu.Unlock()
		// After Close: written directly, as the CLI does.
		r.write([]store.AuditEntry{e})
		return
	}
	r.queue = append(r.queue, e)
	r.added++
	r.mu.Unlock()
	r.poke()
}

// poke wakes the writer.
func (r *Recorder) poke() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Flush waits until every entry queued before it has been written, or ctx ends.
func (r *Recorder) Flush(ctx context.Context) error {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	want := r.added
	r.flushes++
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.flushes--
		r.mu.Unlock()
	}()
	r.poke()
	stop := context.AfterFunc(ctx, func() {
		r.mu.Lock()
		r.cond.Broadcast()
		r.mu.Unlock()
	})
	defer stop()
	r.mu.Lock()
	defer r.mu.Unlock()
	for r.written < want && !r.closed {
		if err := ctx.Err(); err != nil {
			return err
		}
		r.cond.Wait()
	}
	return nil
}

// Close writes the entries queued and stops the writer. Idempotent.
func (r *Recorder) Close() {
	if r == nil {
		return
	}
	r.mu.Lock()
	already := r.closed
	r.closed = true
	r.cond.Broadcast()
	r.mu.Unlock()
	if !already {
		r.poke()
	}
	<-r.done
}

// run writes what is queued, batch after batch, until Close: each batch what gathered in
// linger after the first entry of it, or less when Flush or Close is waiting.
func (r *Recorder) run() {
	defer close(r.done)
	timer := time.NewTimer(linger)
	timer.Stop()
	for {
		r.mu.Lock()
		waiting := len(r.queue) > 0 && len(r.queue) < maxBatch && r.flushes == 0 && !r.closed
		r.mu.Unlock()
		if waiting {
			timer.Reset(linger)
		wait:
			for {
				select {
				case <-timer.C:
					break wait
				case <-r.wake:
					r.mu.Lock()
					hurry := len(r.queue) >= maxBatch || r.flushes > 0 || r.closed
					r.mu.Unlock()
					if hurry {
						timer.Stop()
						break wait
					}
				}
			}
		}
		r.mu.Lock()
		batch := r.queue
		r.queue = nil
		closed := r.closed
		r.mu.Unlock()
		if len(batch) > 0 {
			r.write(batch)
			r.mu.Lock()
			r.written += uint64(len(batch))
			r.cond.Broadcast()
			r.mu.Unlock()
			continue // more may have come meanwhile
		}
		if closed {
			return
		}
		<-r.wake
	}
}

// write stores a batch, retrying a store that is briefly away; entries it cannot store are
// logged (without anything but their identifiers) and dropped.
func (r *Recorder) write(batch []store.AuditEntry) {
	var err error
	for attempt := range 5 {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err = r.st.AppendAudit(ctx, batch...)
		cancel()
		if err == nil {
			return
		}
		time.Sleep(time.Duration(attempt+1) * 200 * time.Millisecond)
	}
	for _, e := range batch {
		r.log.Error("audit entry lost: the store refused it", "action", e.Action, "target", e.Target, "key", e.KeyID, "err", err)
	}
}

// Caller is who made a call, as the dialect's authentication found: an API key's id, or
// the sandbox whose token (or signed URL) it used.
type Caller struct {
	KeyID     string
	SandboxID string
	Via       string // "key", "token", "signed"
}

type noteKey struct{}

// note is what a handler adds to its call's entry.
type note struct {
	mu     sync.Mutex
	target string
	caller *Caller
}

// SetTarget names what a call made (a new sandbox, webhook, template, secret), which its
// path does not name. Only an identifier: never a value from the request's body. Calls not
// being recorded ignore it.
func SetTarget(ctx context.Context, target string) {
	if n, ok := ctx.Value(noteKey{}).(*note); ok {
		n.mu.Lock()
		n.target = target
		n.mu.Unlock()
	}
}

// SetCaller names who made a call the route's own authentication did not (a signed URL,
// checked by the handler).
func SetCaller(ctx context.Context, c Caller) {
	if n, ok := ctx.Value(noteKey{}).(*note); ok {
		n.mu.Lock()
		n.caller = &c
		n.mu.Unlock()
	}
}

// targetParams are the path parameters that name a call's target, in the order they are
// looked for, in both dialects' spellings.
var targetParams = []string{"id", "sandboxID", "snapshot", "snapshotID", "name", "templateID", "build", "webhook", "secretID", "volumeID"}

// Wrap serves h as a call of action through api, made by c (nil: only a handler's SetCaller
// names it; a call no one is named for is not recorded), and records it once h returns.
func (r *Recorder) Wrap(w http.ResponseWriter, req *http.Request, api, action string, c *Caller, h http.HandlerFunc) {
	if r == nil {
		h(w, req)
		return
	}
	start := time.Now()
	n := &note{caller: c}
	sw := &statusWriter{ResponseWriter: w}
	h(sw, req.WithContext(context.WithValue(req.Context(), noteKey{}, n)))
	n.mu.Lock()
	c, target := n.caller, n.target
	n.mu.Unlock()
	if c == nil {
		return
	}
	if target == "" {
		for _, p := range targetParams {
			if target = req.PathValue(p); target != "" {
				break
			}
		}
	}
	e := store.AuditEntry{Time: start, KeyID: c.KeyID, Via: c.Via, Source: Source(req), API: api, Action: action, Target: target, Status: sw.Status()}
	if e.KeyID == "" {
		e.KeyOf = c.SandboxID
	}
	e.Result = Result(e.Status)
	r.Add(e)
}

// Source is the client's address without its port.
func Source(req *http.Request) string {
	if host, _, err := net.SplitHostPort(req.RemoteAddr); err == nil {
		return host
	}
	return req.RemoteAddr
}

// Result is an entry's result for an HTTP status: "ok" below 400, else the error code the
// status stands for (provider/httpcode's table, read backwards).
func Result(status int) string {
	if status < 400 {
		return "ok"
	}
	return string(httpcode.FromStatus(status))
}

// statusWriter records the status of the answer; Flush, Hijack and full duplex pass through
// Unwrap (http.ResponseController).
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 && (code >= 200 || code == http.StatusSwitchingProtocols) {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(p)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Status is the answer's status (101 for a WebSocket), or 200 when the handler wrote nothing
// (net/http's default).
func (w *statusWriter) Status() int {
	if w.status == 0 {
		return http.StatusOK
	}
	return w.status
}
