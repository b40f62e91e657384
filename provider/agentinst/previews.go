package agentinst

import (
	"context"
	"io"
	"net"
	"sync"
	"time"

	"github.com/tupper-dev/tupper/provider"
)

// Previews are the preview forwarders of a provider whose sandboxes run the agent: for each
// sandbox and port, a listener on the host's 127.0.0.1 whose every connection goes through
// the agent's port tunnel (client.DialPort) to the port inside the sandbox, so a server
// listening on the sandbox's loopback is reached too, whatever the sandbox's network. A
// forwarder lasts until its sandbox's are stopped (CloseSandbox) or Close.
//
// The zero value is ready to use. Every method may be called concurrently.
type Previews struct {
	mu     sync.Mutex
	m      map[previewKey]*preview
	closed bool
}

// Dialer opens one connection to the port inside the sandbox, through the agent's tunnel.
type Dialer func(ctx context.Context) (net.Conn, error)

type previewKey struct {
	id   string
	port int
}

// Open returns the address (host:port on 127.0.0.1) of the forwarder of port in sandbox id,
// starting it with dial on first use. done, if not nil, runs once when a forwarder started
// by this call stops (to close a client made for it); it also runs at once when an
// existing forwarder is returned or none can start.
func (ps *Previews) Open(id string, port int, dial Dialer, done func()) (string, error) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.closed {
		runDone(done)
		return "", provider.Errorf(provider.CodeUnavailable, "provider closed")
	}
	k := previewKey{id, port}
	if pv, ok := ps.m[k]; ok {
		runDone(done)
		return pv.ln.Addr().String(), nil
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		runDone(done)
		return "", provider.Wrap(err, provider.CodeProvider, "preview")
	}
	ctx, cancel := context.WithCancel(context.Background())
	pv := &preview{ln: ln, dial: dial, done: done, ctx: ctx, cancel: cancel, conns: map[net.Conn]struct{}{}}
	if ps.m == nil {
		ps.m = map[previewKey]*preview{}
	}
	ps.m[k] = pv
	pv.wg.Add(1)
	go pv.serve()
	return ln.Addr().String(), nil
}

// CloseSandbox stops the forwarders of sandbox id and waits for their connections to end.
func (ps *Previews) CloseSandbox(id string) {
	ps.mu.Lock()
	var list []*preview
	for k, pv := range ps.m {
		if k.id == id {
			list = append(list, pv)
			delete(ps.m, k)
		}
	}
	ps.mu.Unlock()
	for _, pv := range list {
		pv.close()
	}
}

// Close stops every forwarder; from then on Open fails with CodeUnavailable. It is
// idempotent.
func (ps *Previews) Close() {
	ps.mu.Lock()
	ps.closed = true
	list := ps.m
	ps.m = nil
	ps.mu.Unlock()
	for _, pv := range list {
		pv.close()
	}
}

func runDone(done func()) {
	if done != nil {
		done()
	}
}

// preview is one forwarder: a loopback listener and the connections it forwards.
type preview struct {
	ln     net.Listener
	dial   Dialer
	done   func()
	ctx    context.Context // cancelled by close: a dial in progress gives up
	cancel context.CancelFunc
	wg     sync.WaitGroup // serve and every forward
	once   sync.Once

	mu     sync.Mutex
	conns  map[net.Conn]struct{} // open forwarded connections, both ends
	closed bool
}

func (pv *preview) serve() {
	defer pv.wg.Done()
	for {
		conn, err := pv.ln.Accept()
		if err != nil {
			return
		}
		pv.wg.Add(1)
		go pv.forward(conn)
	}
}

// track records c as open, or reports false when the forwarder is closed.
func (pv *preview) track(c net.Conn) bool {
	pv.mu.Lock()
	defer pv.mu.Unlock()
	if pv.closed {
		return false
	}
	pv.conns[c] = struct{}{}
	return true
}

func (pv *preview) untrack(c net.Conn) {
	pv.mu.Lock()
	delete(pv.conns, c)
	pv.mu.Unlock()
}

// forward pipes one connection through the tunnel, half-closing each direction at its EOF.
func (pv *preview) forward(conn net.Conn) {
	defer pv.wg.Done()
	defer conn.Close()
	if !pv.track(conn) {
		return
	}
	defer pv.untrack(conn)
	ctx, cancel := context.WithTimeout(pv.ctx, 10*time.Second)
	up, err := pv.dial(ctx)
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

// close stops the listener and every forwarded connection, waits for them, then runs done.
func (pv *preview) close() {
	pv.once.Do(func() {
		pv.mu.Lock()
		pv.closed = true
		for c := range pv.conns {
			c.Close()
		}
		pv.mu.Unlock()
		pv.cancel()
		pv.ln.Close()
		pv.wg.Wait()
		runDone(pv.done)
	})
}
