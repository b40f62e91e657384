package egress

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tupper-dev/tupper/internal/sockstest"
	"github.com/tupper-dev/tupper/provider"
)

// newSocksServer serves a test SOCKS5 server (sockstest) on loopback whose targets are
// backends' loopback addresses.
func newSocksServer(t *testing.T, user, pass string, backends map[string]string) *socksServer {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &socksServer{ln: ln, Server: &sockstest.Server{User: user, Pass: pass, Route: func(target string) string { return backends[target] }}}
	t.Cleanup(func() { ln.Close() })
	go s.Serve(ln)
	return s
}

type socksServer struct {
	*sockstest.Server
	ln net.Listener
}

// socksLab is an in-process proxy on loopback whose "internet" is reachable only through a
// SOCKS server: its Dial, the direct way out, counts and fails, so any fallback shows.
type socksLab struct {
	t       *testing.T
	proxy   *Proxy
	lns     map[netip.AddrPort]net.Listener
	dst     map[string]netip.AddrPort
	direct  int
	mu      sync.Mutex
	backend string // an HTTP server answering "backend HOST"
}

var (
	skShared = netip.MustParseAddr("11.22.34.1")
	skOther  = netip.MustParseAddr("11.22.34.9")
)

func newSocksLab(t *testing.T, pol *Policy, allowPrivate ...netip.Prefix) *socksLab {
	l := &socksLab{t: t, lns: map[netip.AddrPort]net.Listener{}, dst: map[string]netip.AddrPort{}}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "backend %s", r.Host)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	l.backend = ln.Addr().String()
	l.proxy, err = NewProxy(Config{Sandbox: netip.MustParseAddr("127.0.0.1"), AllowPrivate: allowPrivate}, pol)
	if err != nil {
		t.Fatal(err)
	}
	l.proxy.LocalAddrs = func() []netip.Addr { return nil }
	l.proxy.OriginalDst = func(c net.Conn) (netip.AddrPort, error) {
		v, ok := l.dst[c.LocalAddr().String()]
		if !ok {
			return netip.AddrPort{}, fmt.Errorf("no destination for %s", c.LocalAddr())
		}
		return v, nil
	}
	l.proxy.Dial = func(a netip.AddrPort) (net.Conn, error) {
		l.mu.Lock()
		l.direct++
		l.mu.Unlock()
		return nil, fmt.Errorf("direct dial to %s", a)
	}
	for _, dst := range []netip.AddrPort{
		netip.AddrPortFrom(skShared, 80), netip.AddrPortFrom(skShared, 7000), netip.AddrPortFrom(skOther, 7000),
	} {
		ln, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		l.lns[dst], l.dst[ln.Addr().String()] = ln, dst
		t.Cleanup(func() { ln.Close() })
	}
	for _, ln := range l.lns {
		go l.proxy.ServeTCP(ln)
	}
	return l
}

// get sends GET / with Host host on a connection meant for dst and returns the body.
func (l *socksLab) get(dst netip.AddrPort, host string) (string, error) {
	c, err := net.Dial("tcp4", l.lns[dst].Addr().String())
	if err != nil {
		return "", err // the proxy may reset it before the handshake is seen through
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", host)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

func (l *socksLab) directDials() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.direct
}

func withProxy(t *testing.T, allow, deny []string, px *provider.EgressProxy) *Policy {
	t.Helper()
	pol, err := File{Allow: allow, Deny: deny, Proxy: px}.Policy()
	if err != nil {
		t.Fatal(err)
	}
	return pol
}

var loopback = netip.MustParsePrefix("127.0.0.1/32")

// TestSocksTunnel: allowed TCP goes through the SOCKS5 server, asking it for the name the
// proxy knows (ATYP=domain) or else the address; credentials are sent; whatever fails on
// the way (refused credentials, a server that is down, a refused proxy address) fails the
// connection and nothing is dialled directly; a denied destination never reaches the SOCKS
// server.
func TestSocksTunnel(t *testing.T) {
	backends := func(l *socksLab) map[string]string {
		return map[string]string{"a.test:80": l.backend, "c.test:7000": l.backend, "11.22.34.9:7000": l.backend}
	}
	t.Run("address", func(t *testing.T) {
		l := newSocksLab(t, Nothing(), loopback)
		s := newSocksServer(t, "", "", backends(l))
		l.proxy.SetPolicy(withProxy(t, []string{"11.22.34.0/24"}, nil, &provider.EgressProxy{Address: s.ln.Addr().String()}))
		got, err := l.get(netip.AddrPortFrom(skOther, 7000), "anything")
		if err != nil || got != "backend anything" {
			t.Fatalf("through the proxy: %q, %v", got, err)
		}
		_, connects, logins := s.Seen()
		if len(connects) != 1 || connects[0] != (sockstest.Connect{ATYP: 1, Target: "11.22.34.9:7000"}) || len(logins) != 0 {
			t.Errorf("CONNECTs %v, logins %v; want one for the address (ATYP 1), no login", connects, logins)
		}
	})
	t.Run("name from Host", func(t *testing.T) {
		l := newSocksLab(t, Nothing(), loopback)
		s := newSocksServer(t, "", "", backends(l))
		l.proxy.SetPolicy(withProxy(t, []string{"a.test"}, nil, &provider.EgressProxy{Address: s.ln.Addr().String()}))
		l.proxy.mu.Lock()
		l.proxy.learned[skShared] = map[string]bool{"a.test": true} // a.test's DNS answer
		l.proxy.mu.Unlock()
		got, err := l.get(netip.AddrPortFrom(skShared, 80), "a.test")
		if err != nil || got != "backend a.test" {
			t.Fatalf("through the proxy: %q, %v", got, err)
		}
		if _, connects, _ := s.Seen(); len(connects) != 1 || connects[0] != (sockstest.Connect{ATYP: 3, Target: "a.test:80"}) {
			t.Errorf("CONNECTs %v, want a.test:80 as a domain name (ATYP 3)", connects)
		}
	})
	t.Run("name from DNS", func(t *testing.T) {
		l := newSocksLab(t, Nothing(), loopback)
		s := newSocksServer(t, "", "", backends(l))
		l.proxy.SetPolicy(withProxy(t, []string{"c.test"}, nil, &provider.EgressProxy{Address: s.ln.Addr().String()}))
		// What handleDNS records when c.test's answer holds the address.
		l.proxy.mu.Lock()
		l.proxy.learned[skShared] = map[string]bool{"c.test": true}
		l.proxy.mu.Unlock()
		got, err := l.get(netip.AddrPortFrom(skShared, 7000), "whatever")
		if err != nil || got != "backend whatever" {
			t.Fatalf("through the proxy: %q, %v", got, err)
		}
		if _, connects, _ := s.Seen(); len(connects) != 1 || connects[0] != (sockstest.Connect{ATYP: 3, Target: "c.test:7000"}) {
			t.Errorf("CONNECTs %v, want c.test:7000 as a domain name (ATYP 3)", connects)
		}
	})
	t.Run("credentials", func(t *testing.T) {
		l := newSocksLab(t, Nothing(), loopback)
		s := newSocksServer(t, "alice", "s3cret", backends(l))
		l.proxy.SetPolicy(withProxy(t, nil, nil, &provider.EgressProxy{Address: s.ln.Addr().String(), Username: "alice", Password: "s3cret"}))
		if got, err := l.get(netip.AddrPortFrom(skOther, 7000), "x"); err != nil || got != "backend x" {
			t.Fatalf("with the right credentials: %q, %v", got, err)
		}
		l.proxy.SetPolicy(withProxy(t, nil, nil, &provider.EgressProxy{Address: s.ln.Addr().String(), Username: "alice", Password: "wrong"}))
		if got, err := l.get(netip.AddrPortFrom(skOther, 7000), "x"); err == nil {
			t.Fatalf("with refused credentials: %q, want the connection to fail", got)
		}
		_, connects, logins := s.Seen()
		if len(connects) != 1 || strings.Join(logins, " ") != "alice:s3cret alice:wrong" {
			t.Errorf("CONNECTs %v, logins %v: want one CONNECT (the refused login makes none) and both logins", connects, logins)
		}
		if n := l.directDials(); n != 0 {
			t.Errorf("%d direct dials: a refused login must not fall back", n)
		}
	})
	t.Run("proxy down", func(t *testing.T) {
		l := newSocksLab(t, Nothing(), loopback)
		s := newSocksServer(t, "", "", backends(l))
		l.proxy.SetPolicy(withProxy(t, nil, nil, &provider.EgressProxy{Address: s.ln.Addr().String()}))
		s.ln.Close()
		if got, err := l.get(netip.AddrPortFrom(skOther, 7000), "x"); err == nil {
			t.Fatalf("with the SOCKS server down: %q, want the connection to fail", got)
		}
		if n := l.directDials(); n != 0 {
			t.Errorf("%d direct dials: a proxy that is down must not fall back", n)
		}
	})
	t.Run("not SOCKS", func(t *testing.T) {
		l := newSocksLab(t, Nothing(), loopback)
		// A server that answers like an HTTP one where the SOCKS server should be.
		ln, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				io.WriteString(c, "HTTP/1.1 400 Bad Request\r\n\r\n")
				c.Close()
			}
		}()
		l.proxy.SetPolicy(withProxy(t, nil, nil, &provider.EgressProxy{Address: ln.Addr().String()}))
		if got, err := l.get(netip.AddrPortFrom(skOther, 7000), "x"); err == nil {
			t.Fatalf("with an HTTP server as the proxy: %q, want the connection to fail", got)
		}
		if n := l.directDials(); n != 0 {
			t.Errorf("%d direct dials", n)
		}
	})
	t.Run("denied never reaches the proxy", func(t *testing.T) {
		l := newSocksLab(t, Nothing(), loopback)
		s := newSocksServer(t, "", "", backends(l))
		l.proxy.SetPolicy(withProxy(t, []string{"a.test"}, []string{"11.22.34.9"}, &provider.EgressProxy{Address: s.ln.Addr().String()}))
		if got, err := l.get(netip.AddrPortFrom(skOther, 7000), "x"); err == nil {
			t.Errorf("denied address: %q, want refused", got)
		}
		if got, err := l.get(netip.AddrPortFrom(skShared, 80), "b.test"); err == nil {
			t.Errorf("name not allowed: %q, want refused", got)
		}
		if accepted, _, _ := s.Seen(); accepted != 0 {
			t.Errorf("the SOCKS server had %d connections for refused destinations", accepted)
		}
	})
	t.Run("private proxy address", func(t *testing.T) {
		l := newSocksLab(t, Nothing()) // 127.0.0.1 not allowed
		s := newSocksServer(t, "", "", backends(l))
		l.proxy.SetPolicy(withProxy(t, nil, nil, &provider.EgressProxy{Address: s.ln.Addr().String()}))
		if got, err := l.get(netip.AddrPortFrom(skOther, 7000), "x"); err == nil {
			t.Errorf("through a loopback proxy not allowed: %q, want refused", got)
		}
		if accepted, _, _ := s.Seen(); accepted != 0 || l.directDials() != 0 {
			t.Errorf("the SOCKS server had %d connections, %d direct dials; want none", accepted, l.directDials())
		}
	})
	t.Run("proxy changed cuts", func(t *testing.T) {
		l := newSocksLab(t, Nothing(), loopback)
		s := newSocksServer(t, "", "", map[string]string{"11.22.34.9:7000": l.backend})
		l.proxy.SetPolicy(withProxy(t, nil, nil, &provider.EgressProxy{Address: s.ln.Addr().String()}))
		c, err := net.Dial("tcp4", l.lns[netip.AddrPortFrom(skOther, 7000)].Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		br := bufio.NewReader(c)
		fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		io.ReadAll(resp.Body)
		// Another proxy (here: none) for the same destinations: the open connection went
		// through the old one and is cut.
		l.proxy.SetPolicy(withProxy(t, nil, nil, nil))
		fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		if resp, err := http.ReadResponse(br, nil); err == nil {
			t.Errorf("after the proxy changed, the old connection still answers: %s", resp.Status)
		}
	})
}

// TestSocksResolveProxy: the SOCKS server's own address must be public, unless inside the
// operator's allowed ranges; the host's own addresses likewise.
func TestSocksResolveProxy(t *testing.T) {
	ctx := context.Background()
	host := netip.MustParseAddr("203.0.113.7") // TEST-NET-3 is not public either; a made-up host address below
	public := netip.MustParseAddr("8.8.8.8")
	for _, c := range []struct {
		addr  string
		allow []netip.Prefix
		local []netip.Addr
		ok    bool
	}{
		{"8.8.8.8:1080", nil, nil, true},
		{"127.0.0.1:1080", nil, nil, false},
		{"127.0.0.1:1080", []netip.Prefix{loopback}, nil, true},
		{"10.1.2.3:1080", nil, nil, false},
		{"169.254.169.254:1080", nil, nil, false},
		{"[::1]:1080", nil, nil, false},
		{"[::ffff:127.0.0.1]:1080", nil, nil, false},
		{"8.8.8.8:1080", nil, []netip.Addr{public}, false},
		{"8.8.8.8:1080", []netip.Prefix{netip.PrefixFrom(public, 32)}, []netip.Addr{public}, true},
		{"localhost:1080", nil, nil, false},
		{"8.8.8.8", nil, nil, false},
		{"8.8.8.8:0", nil, nil, false},
		{host.String() + ":1080", nil, nil, false},
	} {
		_, err := ResolveProxy(ctx, c.addr, c.allow, c.local)
		if (err == nil) != c.ok {
			t.Errorf("%s (allow %v, host %v): %v, want ok=%v", c.addr, c.allow, c.local, err, c.ok)
		}
		if err != nil && provider.CodeOf(err) != provider.CodeInvalidArgument {
			t.Errorf("%s: %v, want invalid_argument", c.addr, err)
		}
	}
}
