package egress

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"

	"github.com/tupper-dev/tupper/internal/netrange"
	"github.com/tupper-dev/tupper/provider"
)

// Config is a Proxy's fixed configuration.
type Config struct {
	// Sandbox is the one address the proxy serves; connections and queries from any other
	// are dropped.
	Sandbox netip.Addr `json:"sandbox"`
	// Upstream are the DNS servers allowed names are resolved with (port 53).
	Upstream []netip.Addr `json:"upstream"`
	// AllowPrivate are non-public ranges the proxy may connect to (local.Config.AllowPrivate);
	// every other non-public address, and every address of the host, is refused whatever
	// the policy says.
	AllowPrivate []netip.Prefix `json:"allowPrivate,omitempty"`
	// Mirror are non-public addresses, each with the one TCP port the proxy may connect to
	// there: the package mirror of the sandbox's template (local.Config.NoTemplateMirror).
	// The policy still decides: they are only no longer refused for being non-public, and an
	// allowed name's answer keeps them.
	Mirror []netip.AddrPort `json:"mirror,omitempty"`
	// Log, when set, is a file the proxy appends one JSON line (Entry) to per name asked and
	// per connection, allowed or refused: each allowed entry once, each refusal at most once
	// a second. It stops writing at 4 MiB.
	Log string `json:"log,omitempty"`
	// Secrets are the sandbox's bound secrets (secrets.go): their real values live here and
	// in the proxy's memory, never in the sandbox.
	Secrets []Secret `json:"secrets,omitempty"`
	// CACert and CAKey are the sandbox's CA (NewCA), in PEM, with which the proxy signs the
	// certificates it presents for bound hosts; needed when Secrets is not empty.
	CACert string `json:"caCert,omitempty"`
	CAKey  string `json:"caKey,omitempty"`
	// ExtraRoots are CA certificates (PEM) trusted, besides the host's roots, to verify the
	// servers of bound hosts (local.Config.EgressRoots: a private CA, or a test's).
	ExtraRoots string `json:"extraRoots,omitempty"`
}

// Entry is one line of the proxy's log (ReadLog reads them back).
type Entry = provider.EgressEntry

const maxLog = 4 << 20

// maxLogged bounds the proxy's memory of what it logged; past it, it forgets and may log
// an allowed entry again.
const maxLogged = 8192

// Proxy enforces a Policy for one sandbox: a DNS resolver (ServeDNS) and a transparent TCP
// proxy (ServeTCP). Its methods may be called concurrently.
type Proxy struct {
	cfg Config

	// OriginalDst returns where the sandbox meant a redirected connection to go; nil means
	// the kernel's answer (SO_ORIGINAL_DST of an iptables REDIRECT or DNAT).
	OriginalDst func(c net.Conn) (netip.AddrPort, error)
	// LocalAddrs returns the host's own addresses, never dialled; nil means the interfaces'.
	LocalAddrs func() []netip.Addr
	// Dial connects to a destination; nil means net.DialTimeout (10 s).
	Dial func(addr netip.AddrPort) (net.Conn, error)
	// Resolve returns the addresses of a bound host, for a connection whose destination was
	// not learned from that name's answer; nil means asking Config.Upstream.
	Resolve func(name string) ([]netip.Addr, error)

	secrets secrets
	issuer  *issuer        // signs for bound hosts; nil without secrets
	roots   *x509.CertPool // what bound hosts' servers are verified with

	mu      sync.Mutex
	policy  *Policy
	learned map[netip.Addr]map[string]bool // address → names whose answers held it
	conns   map[*proxied]struct{}
	logMu   sync.Mutex
	logSize int64
	logged  map[string]time.Time // entries logged (see log), to log each once
}

// proxied is a connection being relayed, with what it was allowed for.
type proxied struct {
	dst    netip.AddrPort
	name   string                // SNI or the latest Host; "" when none was needed
	via    *provider.EgressProxy // the SOCKS5 proxy it goes through; nil: direct
	cut    func()
	hostMu sync.Mutex
}

// NewProxy returns a proxy enforcing pol, with cfg's bound secrets.
func NewProxy(cfg Config, pol *Policy) (*Proxy, error) {
	p := &Proxy{cfg: cfg, policy: pol, learned: map[netip.Addr]map[string]bool{}, conns: map[*proxied]struct{}{}}
	var err error
	if p.secrets, err = parseSecrets(cfg.Secrets); err != nil {
		return nil, err
	}
	if len(p.secrets) > 0 {
		if p.issuer, err = newIssuer([]byte(cfg.CACert), []byte(cfg.CAKey)); err != nil {
			return nil, err
		}
		if p.roots, err = x509.SystemCertPool(); err != nil || p.roots == nil {
			p.roots = x509.NewCertPool()
		}
		if cfg.ExtraRoots != "" && !p.roots.AppendCertsFromPEM([]byte(cfg.ExtraRoots)) {
			return nil, errors.New("egress proxy: extra roots hold no certificate")
		}
	}
	return p, nil
}

// SetPolicy replaces the policy. Connections the new policy refuses are cut at once, and
// those made through another egress proxy (or none) than the new policy's; addresses
// learned from names it no longer allows stop counting.
func (p *Proxy) SetPolicy(pol *Policy) {
	p.mu.Lock()
	p.policy = pol
	var cut []func()
	for c := range p.conns {
		c.hostMu.Lock()
		name := c.name
		c.hostMu.Unlock()
		if why := p.refuseLocked(c.dst, name); why != "" || !sameProxy(c.via, pol.Proxy()) {
			cut = append(cut, c.cut)
		}
	}
	p.mu.Unlock()
	for _, f := range cut {
		f()
	}
}

// Policy returns the policy in force.
func (p *Proxy) Policy() *Policy {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.policy
}

// log appends e to the log: an allowed entry once, a refusal at most once a second, so a
// sandbox retrying in a loop cannot fill it.
func (p *Proxy) log(e Entry) {
	if p.cfg.Log == "" {
		return
	}
	e = sanitize(e)
	now := time.Now().UTC()
	e.Time = now
	key := strings.Join([]string{e.Kind, e.Name, e.Via, e.Type, e.Dest, strconv.FormatBool(e.Allowed), e.Reason}, "\x00")
	p.logMu.Lock()
	defer p.logMu.Unlock()
	if last, ok := p.logged[key]; ok && (e.Allowed || now.Sub(last) < time.Second) {
		return
	}
	if p.logged == nil || len(p.logged) >= maxLogged {
		p.logged = map[string]time.Time{}
	}
	p.logged[key] = now
	b, _ := json.Marshal(e)
	b = append(b, '\n')
	if p.logSize+int64(len(b)) > maxLog {
		return
	}
	f, err := os.OpenFile(p.cfg.Log, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return
	}
	defer f.Close()
	n, _ := f.Write(b)
	p.logSize += int64(n)
}

// dialable reports why the proxy must never connect to a on TCP port, or "". Port 0 asks
// about the address alone (an answer to keep): a mirror's address passes then.
func (p *Proxy) dialable(a netip.Addr, port uint16) string {
	a = a.Unmap()
	if r, ok := netrange.Lookup(a); ok {
		allowed := false
		for _, ap := range p.cfg.AllowPrivate {
			if ap.Contains(a) {
				allowed = true
			}
		}
		for _, m := range p.cfg.Mirror {
			if m.Addr().Unmap() == a && (port == 0 || port == m.Port()) {
				allowed = true
			}
		}
		if !allowed {
			return "not public: " + r.Why
		}
	}
	local := p.LocalAddrs
	if local == nil {
		local = HostAddrs
	}
	for _, l := range local() {
		if l == a {
			return "an address of the host"
		}
	}
	return ""
}

// HostAddrs are the addresses of the host's interfaces, which the proxy never dials.
func HostAddrs() []netip.Addr {
	addrs, _ := net.InterfaceAddrs()
	var out []netip.Addr
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok {
				out = append(out, ip.Unmap())
			}
		}
	}
	return out
}

// refuseLocked reports why a connection to dst, for name (the SNI or Host, "" if none), is
// refused by the policy, or "". Call with p.mu held.
func (p *Proxy) refuseLocked(dst netip.AddrPort, name string) string {
	a := dst.Addr().Unmap()
	pol := p.policy
	if pol.DeniesAddr(a) {
		return "address denied"
	}
	if name != "" && !pol.AllowsName(name) {
		return "name not allowed"
	}
	if pol.AllowsAddr(a) {
		return ""
	}
	// Learned from an allowed name's answer: then ports 80 and 443 must also name an
	// allowed host, so one allowed name does not open the others that share its address.
	learned := false
	for n := range p.learned[a] {
		if pol.AllowsName(n) {
			learned = true
			break
		}
	}
	if !learned {
		return "address not allowed (neither listed nor in an allowed name's DNS answer)"
	}
	if (dst.Port() == 443 || dst.Port() == 80) && name == "" {
		return "no server name (TLS SNI or HTTP Host) to check"
	}
	return ""
}

// via returns, for a connection to a without a name, the first (in order) of the allowed
// names whose answers held a: how a learn mode names an address.
func (p *Proxy) via(a netip.Addr, name string) string {
	if name != "" {
		return ""
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var names []string
	for n := range p.learned[a.Unmap()] {
		if p.policy.AllowsName(n) {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	if len(names) == 0 {
		return ""
	}
	return names[0]
}

// needsName reports whether a connection to dst must present an allowed name before it is
// relayed (port 80 or 443, address not allowed by prefix).
func (p *Proxy) needsName(dst netip.AddrPort) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	a := dst.Addr().Unmap()
	return (dst.Port() == 443 || dst.Port() == 80) && !(p.policy.AllowsAddr(a) && !p.policy.OpenByDefault())
}

func (p *Proxy) refuse(dst netip.AddrPort, name string) string {
	if why := p.dialable(dst.Addr(), dst.Port()); why != "" {
		return why
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.refuseLocked(dst, name)
}

// fromSandbox reports whether addr is the sandbox's.
func (p *Proxy) fromSandbox(addr net.Addr) bool {
	ap, err := netip.ParseAddrPort(addr.String())
	return err == nil && ap.Addr().Unmap() == p.cfg.Sandbox
}

// ServeDNS answers queries on pc (UDP) and ln (TCP, may be nil) until ctx is done.
func (p *Proxy) ServeDNS(ctx context.Context, pc net.PacketConn, ln net.Listener) error {
	h := dns.HandlerFunc(p.handleDNS)
	var servers []*dns.Server
	if pc != nil {
		servers = append(servers, &dns.Server{PacketConn: pc, Handler: h})
	}
	if ln != nil {
		servers = append(servers, &dns.Server{Listener: ln, Handler: h})
	}
	errc := make(chan error, len(servers))
	for _, s := range servers {
		go func() { errc <- s.ActivateAndServe() }()
	}
	select {
	case <-ctx.Done():
		for _, s := range servers {
			s.Shutdown()
		}
		return nil
	case err := <-errc:
		return err
	}
}

func (p *Proxy) handleDNS(w dns.ResponseWriter, req *dns.Msg) {
	if !p.fromSandbox(w.RemoteAddr()) {
		return
	}
	m := new(dns.Msg)
	if len(req.Question) != 1 || req.Opcode != dns.OpcodeQuery {
		m.SetRcode(req, dns.RcodeFormatError)
		w.WriteMsg(m)
		return
	}
	q := req.Question[0]
	name := canonical(q.Name)
	qtype := dns.TypeToString[q.Qtype]
	if !p.Policy().AllowsName(name) {
		p.log(Entry{Kind: "dns", Name: name, Type: qtype, Reason: "name not allowed"})
		m.SetRcode(req, dns.RcodeNameError)
		w.WriteMsg(m)
		return
	}
	if q.Qtype == dns.TypeAAAA || q.Qclass != dns.ClassINET {
		// Sandboxes have IPv4 only: an allowed name has no IPv6 address for them.
		p.log(Entry{Kind: "dns", Name: name, Type: qtype, Allowed: true})
		m.SetReply(req)
		w.WriteMsg(m)
		return
	}
	resp, err := p.forward(req)
	if err != nil {
		p.log(Entry{Kind: "dns", Name: name, Type: qtype, Allowed: true, Reason: "upstream: " + err.Error()})
		m.SetRcode(req, dns.RcodeServerFailure)
		w.WriteMsg(m)
		return
	}
	resp.Id = req.Id
	var keep []dns.RR
	var addrs []netip.Addr
	pol := p.Policy()
	for _, rr := range resp.Answer {
		switch rr := rr.(type) {
		case *dns.A:
			a, ok := netip.AddrFromSlice(rr.A)
			if !ok {
				continue
			}
			a = a.Unmap()
			// An allowed name answering with an address that is denied or never dialled
			// (a private one, the host's) gets no such answer.
			if pol.DeniesAddr(a) || p.dialable(a, 0) != "" {
				continue
			}
			addrs = append(addrs, a)
			keep = append(keep, rr)
		case *dns.AAAA:
		default:
			keep = append(keep, rr)
		}
	}
	resp.Answer = keep
	resp.Extra = nil // no glue or options from upstream
	if o := req.IsEdns0(); o != nil {
		resp.SetEdns0(o.UDPSize(), false)
	}
	if len(addrs) > 0 {
		p.mu.Lock()
		for _, a := range addrs {
			if p.learned[a] == nil {
				p.learned[a] = map[string]bool{}
			}
			p.learned[a][name] = true
		}
		p.mu.Unlock()
	}
	p.log(Entry{Kind: "dns", Name: name, Type: qtype, Allowed: true})
	if _, udp := w.RemoteAddr().(*net.UDPAddr); udp {
		size := dns.MinMsgSize
		if o := req.IsEdns0(); o != nil {
			size = int(o.UDPSize())
		}
		resp.Truncate(size)
	}
	w.WriteMsg(resp)
}

// forward asks the upstream servers, in order, over UDP and then TCP when truncated.
func (p *Proxy) forward(req *dns.Msg) (*dns.Msg, error) {
	q := req.Copy()
	q.Extra = nil
	q.SetEdns0(1232, false)
	var errs []error
	for _, s := range p.cfg.Upstream {
		addr := net.JoinHostPort(s.String(), "53")
		c := &dns.Client{Timeout: 3 * time.Second}
		resp, _, err := c.Exchange(q, addr)
		if err == nil && resp.Truncated {
			c.Net = "tcp"
			resp, _, err = c.Exchange(q, addr)
		}
		if err == nil {
			return resp, nil
		}
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		return nil, errors.New("no upstream nameserver")
	}
	return nil, errors.Join(errs...)
}

// ServeTCP relays the sandbox's redirected TCP connections on ln until ln is closed.
func (p *Proxy) ServeTCP(ln net.Listener) error {
	for {
		c, err := ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return err
		}
		go p.relay(c)
	}
}

// boundDst is where a connection for bound name goes: dst when the proxy's resolver learned
// it from name's answer, else an address name resolves to now (upstream), so that the
// sandbox cannot send a secret to an address of its choosing under a bound name.
func (p *Proxy) boundDst(dst netip.AddrPort, name string) (netip.AddrPort, error) {
	p.mu.Lock()
	learned := p.learned[dst.Addr()][name]
	p.mu.Unlock()
	if learned {
		return dst, nil
	}
	resolve := p.Resolve
	if resolve == nil {
		resolve = p.lookup
	}
	addrs, err := resolve(name)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("resolving bound host %s: %v", name, err)
	}
	pol := p.Policy()
	for _, a := range addrs {
		a = a.Unmap()
		if !a.Is4() || pol.DeniesAddr(a) || p.dialable(a, 0) != "" {
			continue
		}
		p.mu.Lock()
		if p.learned[a] == nil {
			p.learned[a] = map[string]bool{}
		}
		p.learned[a][name] = true
		p.mu.Unlock()
		return netip.AddrPortFrom(a, dst.Port()), nil
	}
	return netip.AddrPort{}, fmt.Errorf("bound host %s has no address the proxy may reach", name)
}

// lookup asks the upstream servers for name's IPv4 addresses.
func (p *Proxy) lookup(name string) ([]netip.Addr, error) {
	q := new(dns.Msg)
	q.SetQuestion(dns.Fqdn(name), dns.TypeA)
	resp, err := p.forward(q)
	if err != nil {
		return nil, err
	}
	var out []netip.Addr
	for _, rr := range resp.Answer {
		if a, ok := rr.(*dns.A); ok {
			if ip, ok := netip.AddrFromSlice(a.A); ok {
				out = append(out, ip.Unmap())
			}
		}
	}
	return out, nil
}

// terminate takes over a TLS connection for bound host name: first its own connection to
// the server on up, verified against the host's roots (and Config.ExtraRoots) for name,
// then the sandbox's handshake, replaying head, with a certificate for name signed by the
// sandbox's CA. Both sides speak HTTP/1.1 only (ALPN offers nothing else).
func (p *Proxy) terminate(c net.Conn, head []byte, up net.Conn, name string) (client, server *tls.Conn, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), helloTimeout)
	defer cancel()
	server = tls.Client(up, &tls.Config{ServerName: name, RootCAs: p.roots, NextProtos: []string{"http/1.1"}, MinVersion: tls.VersionTLS12})
	if err := server.HandshakeContext(ctx); err != nil {
		return nil, nil, fmt.Errorf("the server of bound host %s: %v", name, err)
	}
	cert, err := p.issuer.cert(name)
	if err != nil {
		return nil, nil, err
	}
	client = tls.Server(replayConn{Conn: c, r: io.MultiReader(bytes.NewReader(head), c)}, &tls.Config{
		Certificates: []tls.Certificate{*cert}, NextProtos: []string{"http/1.1"}, MinVersion: tls.VersionTLS12,
	})
	if err := client.HandshakeContext(ctx); err != nil {
		return nil, nil, fmt.Errorf("the sandbox's TLS for bound host %s: %v", name, err)
	}
	return client, server, nil
}

// replayConn is c whose reads start with bytes already read from it.
type replayConn struct {
	net.Conn
	r io.Reader
}

func (c replayConn) Read(b []byte) (int, error) { return c.r.Read(b) }

// CloseWrite ends the writing side of the connection under TLS.
func (c replayConn) CloseWrite() error {
	closeWrite(c.Conn)
	return nil
}

// hostOnly is a Host header's name, without a port.
func hostOnly(h string) string {
	if host, _, err := net.SplitHostPort(h); err == nil {
		return canonical(host)
	}
	return canonical(strings.Trim(h, "[]"))
}

// errHelloRead stops a TLS handshake once the ClientHello has been read.
var errHelloRead = errors.New("client hello read")

// peekSNI reads a TLS ClientHello from c and returns its server name ("" when it has none)
// and the bytes read, to be replayed to the server.
func peekSNI(c net.Conn) (string, []byte, error) {
	var buf bytes.Buffer
	var name string
	got := false
	err := tls.Server(readOnly{io.TeeReader(c, &buf)}, &tls.Config{
		GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
			name, got = h.ServerName, true
			return nil, errHelloRead
		},
	}).Handshake()
	if !got {
		return "", nil, err
	}
	return canonical(name), buf.Bytes(), nil
}

// readOnly is a net.Conn that reads from r and writes nothing: the peek never answers.
type readOnly struct{ r io.Reader }

func (c readOnly) Read(b []byte) (int, error)     { return c.r.Read(b) }
func (readOnly) Write(b []byte) (int, error)      { return 0, io.ErrClosedPipe }
func (readOnly) Close() error                     { return nil }
func (readOnly) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (readOnly) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (readOnly) SetDeadline(time.Time) error      { return nil }
func (readOnly) SetReadDeadline(time.Time) error  { return nil }
func (readOnly) SetWriteDeadline(time.Time) error { return nil }

// originalDst is where an iptables REDIRECT or DNAT sent c before it reached us.
func originalDst(c net.Conn) (netip.AddrPort, error) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return netip.AddrPort{}, errors.New("not TCP")
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, err
	}
	var ap netip.AddrPort
	var serr error
	err = raw.Control(func(fd uintptr) {
		ap, serr = getOriginalDst(int(fd))
	})
	if err != nil {
		return netip.AddrPort{}, err
	}
	return ap, serr
}
