package docker

import (
	"context"
	"io"
	"net"
	"sync"
	"time"

	"github.com/tupper-dev/tupper/provider"
)

// previewKey names one forwarded port.
type previewKey struct {
	id   string
	port int
}

// preview is a loopback listener whose connections go through the agent's tunnel to a port
// inside a sandbox.
type preview struct {
	ln   net.Listener
	dial func(ctx context.Context) (net.Conn, error)
	wg   sync.WaitGroup

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

// preview returns the forwarder of port in i, starting it on first use.
func (p *Provider) preview(i *Instance, port int) (*preview, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, provider.Errorf(provider.CodeUnavailable, "provider closed")
	}
	k := previewKey{i.id, port}
	if pv, ok := p.previews[k]; ok {
		return pv, nil
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, provider.Wrap(err, provider.CodeProvider, "preview")
	}
	c := i.Client()
	pv := &preview{ln: ln, conns: map[net.Conn]struct{}{},
		dial: func(ctx context.Context) (net.Conn, error) { return c.DialPort(ctx, port) }}
	p.previews[k] = pv
	pv.wg.Add(1)
	go pv.serve()
	return pv, nil
}

// closePreviews stops the forwarders of sandbox id.
func (p *Provider) closePreviews(id string) {
	p.mu.Lock()
	var pvs []*preview
	for k, pv := range p.previews {
		if k.id == id {
			pvs = append(pvs, pv)
			delete(p.previews, k)
		}
	}
	p.mu.Unlock()
	for _, pv := range pvs {
		pv.close()
	}
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

func (pv *preview) track(c net.Conn, add bool) bool {
	pv.mu.Lock()
	defer pv.mu.Unlock()
	if !add {
		delete(pv.conns, c)
		return true
	}
	if pv.closed {
		return false
	}
	pv.conns[c] = struct{}{}
	return true
}

// forward pipes one connection through the tunnel, half-closing each direction at its EOF.
func (pv *preview) forward(conn net.Conn) {
	defer pv.wg.Done()
	defer conn.Close()
	if !pv.track(conn, true) {
		return
	}
	defer pv.track(conn, false)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	up, err := pv.dial(ctx)
	cancel()
	if err != nil {
		return
	}
	defer up.Close()
	if !pv.track(up, true) {
		return
	}
	defer pv.track(up, false)
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

// close stops the listener and every forwarded connection, and waits for them.
func (pv *preview) close() {
	pv.mu.Lock()
	pv.closed = true
	for c := range pv.conns {
		c.Close()
	}
	pv.mu.Unlock()
	pv.ln.Close()
	pv.wg.Wait()
}
