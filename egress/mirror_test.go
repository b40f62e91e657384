package egress

import (
	"net/netip"
	"testing"
)

// A template's mirror (Config.Mirror) is dialable on its port only, and an answer keeps its
// address; the non-public addresses beside it, and its other ports, stay refused.
func TestMirrorDialable(t *testing.T) {
	mirror := netip.MustParseAddrPort("203.0.113.80:80")
	p, err := NewProxy(Config{Sandbox: netip.MustParseAddr("10.213.0.2"), Mirror: []netip.AddrPort{mirror}}, &Policy{})
	if err != nil {
		t.Fatal(err)
	}
	p.LocalAddrs = func() []netip.Addr { return nil }
	for _, c := range []struct {
		addr string
		port uint16
		ok   bool
	}{
		{"203.0.113.80", 80, true},
		{"203.0.113.80", 0, true}, // an answer holding it
		{"203.0.113.80", 443, false},
		{"203.0.113.80", 22, false},
		{"203.0.113.81", 80, false},
		{"10.1.2.3", 80, false},
		{"169.254.169.254", 80, false},
		{"11.22.33.44", 443, true}, // public
	} {
		why := p.dialable(netip.MustParseAddr(c.addr), c.port)
		if (why == "") != c.ok {
			t.Errorf("%s port %d: refused %q, want dialable %v", c.addr, c.port, why, c.ok)
		}
	}
}
