// Package egress is a sandbox's egress policy and the proxy that enforces it outside the
// sandbox.
//
// A Policy is made of two lists of destinations, allow and deny. A destination is an exact
// domain name (pypi.org), a wildcard (*.github.com: every name below github.com, not
// github.com itself), an IP address (IPv4 or IPv6) or a CIDR prefix. Deny wins over allow;
// when the allow list is not empty, whatever it does not name is denied; an empty allow list
// allows everything the deny list does not name.
//
// The Proxy (proxy.go) is what enforces a Policy for one sandbox: a DNS resolver that
// answers only allowed names and learns the addresses of their answers, and a transparent
// TCP proxy that connects only to addresses allowed by prefix or learned from an allowed
// name, checking the TLS server name (SNI) or HTTP Host of ports 443 and 80 against the
// policy. The local provider starts one per sandbox with a policy, as a host process
// (`tupper egress-proxy`), and routes the sandbox's DNS and TCP to it with iptables; see
// docs/network.md.
//
// A policy may carry a SOCKS5 proxy (socks.go): the connections it allows are then opened
// through it, by name when the proxy knows the name, never directly.
//
// The proxy also holds the sandbox's bound secrets (secrets.go): values the sandbox knows
// only as placeholders, written into HTTP requests to their hosts (terminating TLS for
// those hosts with the sandbox's own CA) and nowhere else.
package egress

import (
	"fmt"

	"github.com/tupper-dev/tupper/provider"
	"math"
	"net/netip"
	"slices"
	"strings"
)

// Policy is a parsed allow and deny list. The zero Policy allows everything.
type Policy struct {
	allow, deny rules
	nothing     bool
	proxy       *provider.EgressProxy // SOCKS5 proxy allowed TCP goes through; nil: direct
}

// rules is one list, split by kind.
type rules struct {
	names    []string       // exact names, lower case, no trailing dot
	suffixes []string       // wildcards, as ".github.com"
	prefixes []netip.Prefix // addresses (as /32 or /128) and CIDRs
}

func (r rules) empty() bool {
	return len(r.names) == 0 && len(r.suffixes) == 0 && len(r.prefixes) == 0
}

func (r rules) matchName(name string) bool {
	if slices.Contains(r.names, name) {
		return true
	}
	for _, s := range r.suffixes {
		if strings.HasSuffix(name, s) {
			return true
		}
	}
	return false
}

// specificity is how closely r's names match name: math.MaxInt for an exact name, the
// length of the longest wildcard's domain that matches, -1 when none does.
func (r rules) specificity(name string) int {
	if slices.Contains(r.names, name) {
		return math.MaxInt
	}
	best := -1
	for _, s := range r.suffixes {
		if strings.HasSuffix(name, s) {
			best = max(best, len(s))
		}
	}
	return best
}

func (r rules) matchAddr(a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range r.prefixes {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// Parse parses allow and deny lists. Every bad entry is reported, each with why.
func Parse(allow, deny []string) (*Policy, error) {
	p := &Policy{}
	var errs []string
	for _, l := range []struct {
		list []string
		into *rules
		what string
	}{{allow, &p.allow, "allow"}, {deny, &p.deny, "deny"}} {
		for _, d := range l.list {
			if err := l.into.add(d); err != nil {
				errs = append(errs, fmt.Sprintf("%s %q: %v", l.what, d, err))
			}
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("network policy: %s", strings.Join(errs, "; "))
	}
	return p, nil
}

// MustParse is Parse for lists known to be good; it panics on a bad one.
func MustParse(allow, deny []string) *Policy {
	p, err := Parse(allow, deny)
	if err != nil {
		panic(err)
	}
	return p
}

func (r *rules) add(d string) error {
	d = strings.TrimSpace(d)
	if d == "" {
		return fmt.Errorf("empty destination")
	}
	if strings.Contains(d, "/") {
		p, err := netip.ParsePrefix(d)
		if err != nil {
			return fmt.Errorf("not a CIDR prefix (want like 10.1.0.0/16 or 2001:db8::/32)")
		}
		if p.Addr().Zone() != "" {
			return fmt.Errorf("a zone is not allowed")
		}
		r.prefixes = append(r.prefixes, p.Masked())
		return nil
	}
	if a, err := netip.ParseAddr(strings.Trim(d, "[]")); err == nil {
		if a.Zone() != "" {
			return fmt.Errorf("a zone is not allowed")
		}
		a = a.Unmap()
		r.prefixes = append(r.prefixes, netip.PrefixFrom(a, a.BitLen()))
		return nil
	}
	if strings.ContainsAny(d, ":[]") {
		return fmt.Errorf("not an IP address, and a domain has no port or brackets")
	}
	name := strings.ToLower(strings.TrimSuffix(d, "."))
	wild := false
	if rest, ok := strings.CutPrefix(name, "*."); ok {
		wild, name = true, rest
	}
	if err := checkName(name); err != nil {
		return err
	}
	if wild {
		if !strings.Contains(name, ".") {
			return fmt.Errorf("a wildcard must have at least two labels after *. (like *.example.com)")
		}
		r.suffixes = append(r.suffixes, "."+name)
	} else {
		r.names = append(r.names, name)
	}
	return nil
}

// checkName checks a domain name: labels of letters, digits, hyphens and underscores, 1 to
// 63 bytes each, not starting or ending with a hyphen, 253 bytes at most.
func checkName(name string) error {
	if len(name) > 253 {
		return fmt.Errorf("a domain name has at most 253 characters")
	}
	if strings.Contains(name, "*") {
		return fmt.Errorf("a wildcard is only allowed as a leading *. (like *.example.com)")
	}
	for _, l := range strings.Split(name, ".") {
		if l == "" {
			return fmt.Errorf("empty label in domain name")
		}
		if len(l) > 63 {
			return fmt.Errorf("label %q is longer than 63 characters", l)
		}
		if l[0] == '-' || l[len(l)-1] == '-' {
			return fmt.Errorf("label %q starts or ends with a hyphen", l)
		}
		for _, c := range []byte(l) {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return fmt.Errorf("character %q is not allowed in a domain name", c)
			}
		}
	}
	return nil
}

// canonical is name in lower case without its trailing dot.
func canonical(name string) string { return strings.ToLower(strings.TrimSuffix(name, ".")) }

// AllowsName reports whether the policy lets the sandbox resolve and reach name.
func (p *Policy) AllowsName(name string) bool {
	name = canonical(name)
	if p.nothing || name == "" || p.deny.matchName(name) {
		return false
	}
	return p.allow.empty() || p.allow.matchName(name)
}

// AllowsAddr reports whether the policy lets the sandbox reach a by address alone: a is in
// an allowed prefix (or the allow list is empty) and in no denied one. Addresses learned
// from an allowed name's DNS answer are the proxy's business.
func (p *Policy) AllowsAddr(a netip.Addr) bool {
	if p.nothing || p.deny.matchAddr(a) {
		return false
	}
	return p.allow.empty() || p.allow.matchAddr(a)
}

// DeniesAddr reports whether a is in a denied prefix: then nothing reaches it, whatever
// name it was learned from.
func (p *Policy) DeniesAddr(a netip.Addr) bool { return p.nothing || p.deny.matchAddr(a) }

// OpenByDefault reports whether the allow list is empty: everything not denied is allowed.
func (p *Policy) OpenByDefault() bool { return !p.nothing && p.allow.empty() }

// AllowedPrefixes are the allow list's prefixes (addresses as /32 or /128).
func (p *Policy) AllowedPrefixes() []netip.Prefix {
	if p.nothing {
		return nil
	}
	return slices.Clone(p.allow.prefixes)
}

// DeniedPrefixes are the deny list's prefixes.
func (p *Policy) DeniedPrefixes() []netip.Prefix {
	if p.nothing {
		return []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")}
	}
	return slices.Clone(p.deny.prefixes)
}

// Proxy is the SOCKS5 proxy the policy's allowed TCP connections go through (socks.go);
// nil when they go out directly.
func (p *Policy) Proxy() *provider.EgressProxy {
	if p.nothing {
		return nil
	}
	return p.proxy
}

// WithProxy returns a copy of p whose allowed TCP connections go through proxy (nil:
// directly). The proxy's form is checked (provider.EgressProxy.Validate).
func (p *Policy) WithProxy(proxy *provider.EgressProxy) (*Policy, error) {
	if err := proxy.Validate(); err != nil {
		return nil, err
	}
	q := *p
	if proxy != nil {
		c := *proxy
		q.proxy = &c
	} else {
		q.proxy = nil
	}
	return &q, nil
}

// File is a policy as the proxy reads it from disk. Generation, when not zero, is written
// to the Applied file once the proxy enforces the policy. Proxy holds a credential: the
// file is written 0600 and never mounted into the sandbox.
type File struct {
	Allow      []string              `json:"allow,omitempty"`
	Deny       []string              `json:"deny,omitempty"`
	Nothing    bool                  `json:"nothing,omitempty"` // deny everything, names included
	Proxy      *provider.EgressProxy `json:"proxy,omitempty"`   // SOCKS5 proxy for allowed TCP
	Generation int64                 `json:"generation,omitempty"`
}

// Policy is the policy f says.
func (f File) Policy() (*Policy, error) {
	if f.Nothing {
		return Nothing(), nil
	}
	p, err := Parse(f.Allow, f.Deny)
	if err != nil {
		return nil, err
	}
	return p.WithProxy(f.Proxy)
}

// Applied is the file next to a policy file at path where the proxy writes, after each
// SIGHUP, the generation it enforces — or, when it could not take the file and keeps the
// policy it had, AppliedError and why.
func Applied(path string) string { return path + ".applied" }

// AppliedError starts an Applied file that says why the proxy kept its policy.
const AppliedError = "error: "

// Nothing is the policy that allows nothing: no name resolves, no address is reached.
func Nothing() *Policy { return &Policy{nothing: true} }
