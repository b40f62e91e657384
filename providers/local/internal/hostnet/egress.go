//go:build linux

package hostnet

import (
	"encoding/json"
	"net"
	"net/netip"
	"os"

	"github.com/tupper-dev/tupper/egress"
	"github.com/tupper-dev/tupper/internal/netrange"
)

// Egress is what the firewall needs of a sandbox with a policy (network "allow"): the ports
// of its proxy on the gateway, and the prefixes it opens and closes to UDP. It is recorded
// in n.dir/egress/ADDRESS, its first line the lease holder, as for allowances.
type Egress struct {
	DNSUDP   int            `json:"dnsUDP"`
	DNSTCP   int            `json:"dnsTCP"`
	Proxy    int            `json:"proxy"`
	UDPAllow []netip.Prefix `json:"udpAllow,omitempty"`
	UDPDeny  []netip.Prefix `json:"udpDeny,omitempty"`
}

type egressRule struct {
	src netip.Addr
	Egress
}

// SetEgress records f for the sandbox leasing a (held by holder). Call with the network lock
// held.
func (n *Network) SetEgress(a netip.Addr, holder string, f Egress) error {
	b, err := json.Marshal(f)
	if err != nil {
		return err
	}
	return n.setRecord(recEgress, a, holder, b)
}

// egressRules reads the egress records of the sandboxes on the bridge (SetEgress).
func (n *Network) egressRules() []egressRule {
	var out []egressRule
	for _, r := range n.records(recEgress) {
		var f Egress
		if json.Unmarshal([]byte(r.body), &f) != nil || f.DNSUDP == 0 || f.DNSTCP == 0 || f.Proxy == 0 {
			continue
		}
		out = append(out, egressRule{r.a, f})
	}
	return out
}

// UDPRules are the IPv4 prefixes a policy opens and closes to UDP. Only allowed prefixes
// wholly public (or wholly inside Config.AllowPrivate) open anything: the firewall's
// RETURN skips the non-public checks that follow it.
func (n *Network) UDPRules(pol *egress.Policy) (allow, deny []netip.Prefix) {
	for _, d := range pol.DeniedPrefixes() {
		if d.Addr().Is4() {
			deny = append(deny, d)
		}
	}
	if pol.OpenByDefault() {
		return nil, deny // UDP by address only: an empty allow list opens no UDP
	}
outer:
	for _, a := range pol.AllowedPrefixes() {
		if !a.Addr().Is4() {
			continue
		}
		for _, ap := range n.allow {
			if ap.Bits() <= a.Bits() && ap.Contains(a.Addr()) {
				allow = append(allow, a)
				continue outer
			}
		}
		for _, r := range netrange.NonPublic {
			if r.Prefix.Overlaps(a) {
				continue outer
			}
		}
		allow = append(allow, a)
	}
	return allow, deny
}

// Sockets are a proxy's sockets, bound on the gateway (ListenEgress).
type Sockets struct {
	dnsUDP        *net.UDPConn
	dnsTCP, proxy *net.TCPListener
}

// Close closes the sockets; nil or closed already, it does nothing harmful.
func (s *Sockets) Close() {
	if s == nil {
		return
	}
	for _, c := range []interface{ Close() error }{s.dnsUDP, s.dnsTCP, s.proxy} {
		if c != nil && !isNilCloser(c) {
			c.Close()
		}
	}
}

func isNilCloser(c interface{ Close() error }) bool {
	switch c := c.(type) {
	case *net.UDPConn:
		return c == nil
	case *net.TCPListener:
		return c == nil
	}
	return false
}

// ListenEgress binds a proxy's sockets on the gateway, ports chosen by the kernel. Call
// after EnsureBridge.
func (n *Network) ListenEgress() (s *Sockets, f Egress, err error) {
	s = &Sockets{}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	gw := n.gateway.String()
	if s.dnsUDP, err = net.ListenUDP("udp4", &net.UDPAddr{IP: net.ParseIP(gw)}); err != nil {
		return nil, f, err
	}
	if s.dnsTCP, err = net.ListenTCP("tcp4", &net.TCPAddr{IP: net.ParseIP(gw)}); err != nil {
		return nil, f, err
	}
	if s.proxy, err = net.ListenTCP("tcp4", &net.TCPAddr{IP: net.ParseIP(gw)}); err != nil {
		return nil, f, err
	}
	f.DNSUDP = s.dnsUDP.LocalAddr().(*net.UDPAddr).Port
	f.DNSTCP = s.dnsTCP.Addr().(*net.TCPAddr).Port
	f.Proxy = s.proxy.Addr().(*net.TCPAddr).Port
	return s, f, nil
}

// Files are duplicates of the sockets' descriptors, for a proxy to inherit, in the order of
// egress.FDDNSUDP, FDDNSTCP and FDProxy; the caller closes them.
func (s *Sockets) Files() ([]*os.File, error) {
	var files []*os.File
	for _, c := range []interface{ File() (*os.File, error) }{s.dnsUDP, s.dnsTCP, s.proxy} {
		f, err := c.File()
		if err != nil {
			for _, f := range files {
				f.Close()
			}
			return nil, err
		}
		files = append(files, f)
	}
	return files, nil
}

// ClearEgress removes the egress record of address a if holder wrote it, and reports
// whether it did (then ApplyFirewall drops its rules). Call with the lock held.
func (n *Network) ClearEgress(a, holder string) bool {
	return n.clearRecord(recEgress, a, holder)
}
