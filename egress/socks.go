package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"time"

	"golang.org/x/net/proxy"

	"github.com/tupper-dev/tupper/internal/netrange"
	"github.com/tupper-dev/tupper/provider"
)

// A policy with a proxy (Policy.Proxy, provider.EgressProxy) tunnels every TCP connection
// the proxy allows through a SOCKS5 server, after the policy's checks. The SOCKS client is
// golang.org/x/net/proxy's: it sends a host name as RFC 1928's ATYP=domain and an address
// as ATYP=IPv4, and its DialWithConn runs the handshake on a connection made here, so that
// the SOCKS server's address is resolved and checked once per connection (never re-resolved
// between the check and the dial) and the connection stays a *net.TCPConn (half-close,
// reset). Nothing falls back to a direct connection: a SOCKS server that is down, refuses
// the credentials or the destination fails the sandbox's connection.

// socksTimeout bounds the connection to the SOCKS server and its handshake.
const socksTimeout = 10 * time.Second

// withConn is x/net's SOCKS dialer's handshake on a connection already made.
type withConn interface {
	DialWithConn(ctx context.Context, c net.Conn, network, address string) (net.Addr, error)
}

// dialSocks connects through px to dst, asking the SOCKS server for name at dst's port
// (remote DNS) when name is not "", else for dst's address.
func (p *Proxy) dialSocks(px *provider.EgressProxy, dst netip.AddrPort, name string) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), socksTimeout)
	defer cancel()
	server, err := ResolveProxy(ctx, px.Address, p.cfg.AllowPrivate, p.localAddrs())
	if err != nil {
		return nil, err
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", server.String())
	if err != nil {
		return nil, fmt.Errorf("egress proxy %s: %w", px.Address, err)
	}
	var auth *proxy.Auth
	if px.Username != "" {
		auth = &proxy.Auth{User: px.Username, Password: px.Password}
	}
	sd, err := proxy.SOCKS5("tcp", server.String(), auth, nil)
	if err != nil {
		c.Close()
		return nil, err
	}
	wc, ok := sd.(withConn)
	if !ok {
		c.Close()
		return nil, errors.New("egress proxy: the SOCKS5 client cannot use a connection made for it")
	}
	target := dst.String()
	if name != "" {
		target = net.JoinHostPort(name, strconv.Itoa(int(dst.Port())))
	}
	if _, err := wc.DialWithConn(ctx, c, "tcp", target); err != nil {
		reset(c)
		return nil, fmt.Errorf("egress proxy %s: %w", px.Address, err)
	}
	return c, nil
}

func (p *Proxy) localAddrs() []netip.Addr {
	if p.LocalAddrs != nil {
		return p.LocalAddrs()
	}
	return HostAddrs()
}

// ResolveProxy resolves the host of a SOCKS server's address (host:port) and returns the
// first of its addresses the host may connect to: a public one, or one inside allowPrivate
// (the operator's local.Config.AllowPrivate); an address of the host itself (local) only
// inside allowPrivate. So a sandbox's creator cannot make the host connect, on its behalf,
// to a service on a private network, on the host or at a cloud's metadata address.
func ResolveProxy(ctx context.Context, address string, allowPrivate []netip.Prefix, local []netip.Addr) (netip.AddrPort, error) {
	host, portStr, err := net.SplitHostPort(address)
	if err != nil {
		return netip.AddrPort{}, provider.Errorf(provider.CodeInvalidArgument, "egress proxy address %q is not host:port", address)
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil || port == 0 {
		return netip.AddrPort{}, provider.Errorf(provider.CodeInvalidArgument, "egress proxy address %q: bad port", address)
	}
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{a}
	} else if addrs, err = net.DefaultResolver.LookupNetIP(ctx, "ip", host); err != nil {
		return netip.AddrPort{}, provider.Errorf(provider.CodeInvalidArgument, "egress proxy %s does not resolve: %v", address, err)
	}
	var whys []string
	for _, a := range addrs {
		a = a.Unmap()
		if why := proxyRefusal(a, allowPrivate, local); why != "" {
			whys = append(whys, a.String()+" is "+why)
			continue
		}
		return netip.AddrPortFrom(a, uint16(port)), nil
	}
	return netip.AddrPort{}, provider.Errorf(provider.CodeInvalidArgument,
		"egress proxy %s is refused: %v (an egress proxy must be a public address, or in a range the operator allowed)", address, whys)
}

// proxyRefusal reports why the host may not connect to a as a SOCKS server, or "".
func proxyRefusal(a netip.Addr, allowPrivate []netip.Prefix, local []netip.Addr) string {
	for _, ap := range allowPrivate {
		if ap.Contains(a) {
			return ""
		}
	}
	if r, ok := netrange.Lookup(a); ok {
		return "not public: " + r.Why
	}
	for _, l := range local {
		if l == a {
			return "an address of the host"
		}
	}
	return ""
}

// sameProxy reports whether a and b are the same SOCKS server with the same credentials.
func sameProxy(a, b *provider.EgressProxy) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}
