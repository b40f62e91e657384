// Package netrange says which IP addresses are public: on the internet, rather than a
// host's own, a private network's, a link's (cloud metadata services), or reserved. The
// server checks the address of every connection it makes for a webhook against it.
package netrange

import "net/netip"

// Kind is what a non-public range is for.
type Kind int

// Kinds of non-public ranges.
const (
	Loopback  Kind = iota + 1 // the host itself
	Private                   // a private network: RFC 1918, carrier-grade NAT, IPv6 ULA
	LinkLocal                 // one link, and cloud metadata services (169.254.169.254)
	Reserved                  // unspecified, documentation, benchmarking, multicast, reserved
)

// Range is a non-public range.
type Range struct {
	Prefix netip.Prefix
	Kind   Kind
	Why    string
}

// NonPublic lists the non-public ranges, IPv4 then IPv6.
var NonPublic = []Range{
	{netip.MustParsePrefix("0.0.0.0/8"), Reserved, `"this network"`},
	{netip.MustParsePrefix("10.0.0.0/8"), Private, "private (RFC 1918)"},
	{netip.MustParsePrefix("100.64.0.0/10"), Private, "shared address space (carrier-grade NAT)"},
	{netip.MustParsePrefix("127.0.0.0/8"), Loopback, "loopback"},
	{netip.MustParsePrefix("169.254.0.0/16"), LinkLocal, "link-local, cloud metadata services (169.254.169.254)"},
	{netip.MustParsePrefix("172.16.0.0/12"), Private, "private (RFC 1918)"},
	{netip.MustParsePrefix("192.0.0.0/24"), Reserved, "IETF protocol assignments"},
	{netip.MustParsePrefix("192.0.2.0/24"), Reserved, "documentation (TEST-NET-1)"},
	{netip.MustParsePrefix("192.168.0.0/16"), Private, "private (RFC 1918)"},
	{netip.MustParsePrefix("198.18.0.0/15"), Reserved, "benchmarking"},
	{netip.MustParsePrefix("198.51.100.0/24"), Reserved, "documentation (TEST-NET-2)"},
	{netip.MustParsePrefix("203.0.113.0/24"), Reserved, "documentation (TEST-NET-3)"},
	{netip.MustParsePrefix("224.0.0.0/4"), Reserved, "multicast"},
	{netip.MustParsePrefix("240.0.0.0/4"), Reserved, "reserved, and the limited broadcast address"},

	{netip.MustParsePrefix("::/128"), Reserved, "unspecified"},
	{netip.MustParsePrefix("::1/128"), Loopback, "loopback"},
	{netip.MustParsePrefix("::/96"), Reserved, "IPv4-compatible (deprecated)"},
	{netip.MustParsePrefix("64:ff9b::/96"), Reserved, "NAT64 (an IPv4 address behind a translator)"},
	{netip.MustParsePrefix("64:ff9b:1::/48"), Reserved, "local-use NAT64"},
	{netip.MustParsePrefix("100::/64"), Reserved, "discard-only"},
	{netip.MustParsePrefix("2001::/23"), Reserved, "IETF protocol assignments (Teredo among them)"},
	{netip.MustParsePrefix("2001:db8::/32"), Reserved, "documentation"},
	{netip.MustParsePrefix("2002::/16"), Reserved, "6to4 (an IPv4 address inside)"},
	{netip.MustParsePrefix("fd00:ec2::254/128"), LinkLocal, "a cloud metadata service (AWS's IPv6 address, inside the ULA range)"},
	{netip.MustParsePrefix("fc00::/7"), Private, "unique local (ULA)"},
	{netip.MustParsePrefix("fe80::/10"), LinkLocal, "link-local"},
	{netip.MustParsePrefix("fec0::/10"), Private, "site-local (deprecated)"},
	{netip.MustParsePrefix("ff00::/8"), Reserved, "multicast"},
}

// Lookup returns the non-public range that holds a, or false when a is public. An IPv4
// address mapped into IPv6 (::ffff:a.b.c.d) is looked up as the IPv4 address; an invalid
// address is reported as reserved.
func Lookup(a netip.Addr) (Range, bool) {
	if !a.IsValid() {
		return Range{Kind: Reserved, Why: "not an address"}, true
	}
	a = a.Unmap()
	for _, r := range NonPublic {
		if r.Prefix.Contains(a) {
			return r, true
		}
	}
	return Range{}, false
}
