package egress

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/tupper-dev/tupper/provider"
)

// helloTimeout bounds how long a connection may take to show its server name.
const helloTimeout = 10 * time.Second

// reset closes c with a TCP reset, so that the program fails at once.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetLinger(0) // a reset, so the program fails at once
	}
	c.Close()
}

// opening is what relay learns of a connection before its first byte goes upstream.
type opening struct {
	c   net.Conn
	dst netip.AddrPort // the sandbox's choice; for a bound name, the proxy resolver's
	// name is the TLS server name or the first request's Host; "" when it was not read or
	// is not the policy's business.
	name      string
	checkName bool          // the policy needs the name (needsName)
	head      []byte        // the ClientHello, peeked from c
	br        *bufio.Reader // the sandbox's bytes, head first
	httpMode  bool          // relayed request by request (relayHTTP)
	first     *http.Request // the first request, already read when httpMode
	bound     bool          // name has bound secrets: they are written into its requests
	hc        httpCheck
}

// relay carries one redirected connection from the sandbox to its destination and back, if
// the policy allows it. Each step below may refuse it: a refusal resets the connection (the
// program fails at once) and is logged.
func (p *Proxy) relay(c net.Conn) {
	o, ok := p.admit(c)
	if !ok {
		return
	}
	if why := p.readName(o); why != "" {
		p.deny(o, why)
		return
	}
	if why := p.route(o); why != "" {
		p.deny(o, why)
		return
	}
	up, via, err := p.dialUpstream(o)
	if err != nil {
		p.deny(o, "dial: "+err.Error())
		return
	}
	pc, why := p.track(o, up, via)
	defer p.untrack(pc)
	if why != "" {
		p.log(Entry{Kind: "connect", Name: o.name, Dest: o.dst.String(), Reason: why})
		return
	}
	p.pipe(o, pc, up)
}

// deny logs the refusal of o and resets its connection.
func (p *Proxy) deny(o *opening, why string) {
	p.log(Entry{Kind: "connect", Name: o.name, Dest: o.dst.String(), Reason: why})
	reset(o.c)
}

// admit returns the connection with where the sandbox meant it to go. It resets one from
// anywhere but the sandbox or whose destination is unknown, and refuses one to a denied or
// non-public address before a byte is read.
func (p *Proxy) admit(c net.Conn) (*opening, bool) {
	if !p.fromSandbox(c.RemoteAddr()) {
		reset(c)
		return nil, false
	}
	od := p.OriginalDst
	if od == nil {
		od = originalDst
	}
	dst, err := od(c)
	if err != nil {
		reset(c)
		return nil, false
	}
	o := &opening{c: c, dst: netip.AddrPortFrom(dst.Addr().Unmap(), dst.Port())}
	if why := p.dialable(o.dst.Addr(), o.dst.Port()); why != "" {
		p.deny(o, why)
		return nil, false
	}
	return o, true
}

// readName reads the name o is for when the policy needs it, or a bound secret might (then
// only a bound name changes what happens): the TLS server name of the ClientHello on port
// 443, else the Host of the first HTTP request. Each read waits helloTimeout at most; what
// is read stays in o.br for the server.
func (p *Proxy) readName(o *opening) (why string) {
	o.checkName = p.needsName(o.dst)
	port := o.dst.Port()
	if o.checkName || (len(p.secrets) > 0 && (port == 443 || port == 80)) {
		if port == 443 {
			o.c.SetReadDeadline(time.Now().Add(helloTimeout))
			name, head, err := peekSNI(o.c)
			o.c.SetReadDeadline(time.Time{})
			if err != nil {
				return "no TLS ClientHello"
			}
			o.name, o.head = name, head
		} else {
			o.httpMode = true
		}
	}
	o.br = bufio.NewReader(io.MultiReader(bytes.NewReader(o.head), o.c))
	if !o.httpMode {
		return ""
	}
	o.c.SetReadDeadline(time.Now().Add(helloTimeout))
	first, err := http.ReadRequest(o.br)
	o.c.SetReadDeadline(time.Time{})
	if err != nil {
		return "no HTTP request"
	}
	o.first, o.name = first, hostOnly(first.Host)
	if o.name == "" && o.checkName {
		return "no Host"
	}
	return ""
}

// route checks o's destination and name against the policy. A name with bound secrets
// (and allowed) goes to an address the proxy's resolver had from that name, never the one
// the sandbox chose, so a secret cannot be sent where the sandbox likes. A name that is not
// the policy's business is forgotten: relayed as before there were secrets.
func (p *Proxy) route(o *opening) (why string) {
	o.bound = o.name != "" && p.secrets.binds(o.name) && p.Policy().AllowsName(o.name)
	if !o.checkName && !o.bound {
		o.name = ""
	}
	o.hc = httpCheck{policy: o.checkName}
	if !o.bound {
		return p.refuse(o.dst, o.name)
	}
	real, err := p.boundDst(o.dst, o.name)
	if err != nil {
		return err.Error()
	}
	if why := p.refuse(real, o.name); why != "" {
		return why
	}
	o.dst = real
	o.hc.bound = o.name
	o.hc.rewrite = p.secrets.rewrite(o.name, !o.httpMode) // TLS, terminated by pipe
	return ""
}

// dialUpstream connects to o.dst: through the policy's SOCKS5 proxy when it has one (via),
// asking it for the name the proxy knows (checked, or the allowed name whose answer held
// the address), never directly.
func (p *Proxy) dialUpstream(o *opening) (up net.Conn, via *provider.EgressProxy, err error) {
	if via = p.Policy().Proxy(); via != nil {
		remote := o.name
		if remote == "" {
			remote = p.via(o.dst.Addr(), "")
		}
		up, err = p.dialSocks(via, o.dst, remote)
		return up, via, err
	}
	dial := p.Dial
	if dial == nil {
		dial = func(a netip.AddrPort) (net.Conn, error) { return net.DialTimeout("tcp", a.String(), 10*time.Second) }
	}
	up, err = dial(o.dst)
	return up, nil, err
}

// track registers o so that SetPolicy can cut it, and checks the policy again under the
// lock: a SetPolicy since route may have refused it, or changed the proxy (why). Whatever
// why says, the caller untracks pc when done.
func (p *Proxy) track(o *opening, up net.Conn, via *provider.EgressProxy) (pc *proxied, why string) {
	var once sync.Once
	pc = &proxied{dst: o.dst, name: o.name, via: via}
	pc.cut = func() {
		once.Do(func() {
			reset(o.c)
			up.Close()
		})
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.conns[pc] = struct{}{}
	why = p.refuseLocked(o.dst, o.name)
	if why == "" && !sameProxy(via, p.policy.Proxy()) {
		why = "the egress proxy changed"
	}
	return pc, why
}

// untrack forgets pc and cuts it.
func (p *Proxy) untrack(pc *proxied) {
	p.mu.Lock()
	delete(p.conns, pc)
	p.mu.Unlock()
	pc.cut()
}

// pipe copies between the sandbox and up until both directions end. The sandbox's bytes go
// through relayHTTP when they are requests the proxy checks or writes secrets into, else as
// they come. For a bound name over TLS it terminates TLS on both sides first.
func (p *Proxy) pipe(o *opening, pc *proxied, up net.Conn) {
	var (
		toClient io.Writer = o.c
		toServer io.Writer = up
		server   io.Reader = up
	)
	if o.bound && !o.httpMode {
		tc, tu, err := p.terminate(o.c, o.head, up, o.name)
		if err != nil {
			p.log(Entry{Kind: "connect", Name: o.name, Dest: o.dst.String(), Reason: err.Error()})
			return
		}
		toClient, toServer, server = tc, tu, tu
		o.br = bufio.NewReader(tc)
		if o.first, err = http.ReadRequest(o.br); err != nil {
			return
		}
		o.httpMode, o.hc.only = true, true
	}
	if !o.httpMode || !(o.hc.policy || o.hc.only) { // else relayHTTP logs each request's Host
		p.log(Entry{Kind: "connect", Name: o.name, Via: p.via(o.dst.Addr(), o.name), Dest: o.dst.String(), Allowed: true})
	}
	done := make(chan struct{}, 2)
	go func() {
		io.Copy(toClient, server)
		closeWrite(toClient)
		done <- struct{}{}
	}()
	go func() {
		if o.httpMode {
			p.relayHTTP(pc, o.br, o.first, toServer, o.hc)
		} else {
			io.Copy(up, o.br)
			closeWrite(up)
		}
		done <- struct{}{}
	}()
	<-done
	<-done
}

// closeWrite ends w's writing side when it has one (TCP, TLS).
func closeWrite(w io.Writer) {
	if cw, ok := w.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
}

// httpCheck is what relayHTTP checks and changes in each request.
type httpCheck struct {
	policy bool // each Host is checked against the policy
	// bound is the name the connection was opened for, whose secrets are written into
	// requests for it (header, query); "" when none.
	bound   string
	rewrite *rewrite
	only    bool // a request for any other Host cuts the connection (terminated TLS)
}

// relayHTTP writes requests from br to up, each after checking its Host against the policy
// (hc.policy): one connection cannot move on to a name that shares the address. A request
// refused cuts the connection. A request for hc.bound gets its secrets; on a connection
// where hc.only, one for another name is refused. After a protocol upgrade the bytes are
// relayed as they come.
func (p *Proxy) relayHTTP(pc *proxied, br *bufio.Reader, req *http.Request, up io.Writer, hc httpCheck) {
	for {
		name := hostOnly(req.Host)
		if hc.only && name != hc.bound {
			p.log(Entry{Kind: "connect", Name: name, Dest: pc.dst.String(), Reason: "Host is not the TLS server name " + hc.bound})
			pc.cut()
			return
		}
		if hc.policy || hc.only {
			pc.hostMu.Lock()
			pc.name = name
			pc.hostMu.Unlock()
			if why := p.refuse(pc.dst, name); why != "" {
				p.log(Entry{Kind: "connect", Name: name, Dest: pc.dst.String(), Reason: why})
				pc.cut()
				return
			}
			p.log(Entry{Kind: "connect", Name: name, Dest: pc.dst.String(), Allowed: true})
		}
		if hc.rewrite != nil && name == hc.bound {
			hc.rewrite.apply(req)
		}
		if _, ok := req.Header["User-Agent"]; !ok {
			req.Header["User-Agent"] = []string{""} // Write adds none then
		}
		upgrade := req.Header.Get("Upgrade") != ""
		if err := req.Write(up); err != nil {
			pc.cut()
			return
		}
		if upgrade {
			io.Copy(up, br)
			return
		}
		var err error
		if req, err = http.ReadRequest(br); err != nil {
			closeWrite(up)
			return
		}
	}
}
