//go:build linux

package local

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/tupper-dev/tupper/egress"
	"github.com/tupper-dev/tupper/internal/netrange"
	"github.com/tupper-dev/tupper/template"
)

// A template made from this machine's package mirror (the built-in debian template, and
// base and every other template built from it: template.Template.Mirror) knows the
// mirror's addresses and port as the machine reached them when the template was made. A
// mirror on a private or reserved address (a company's apt cache, a local one) is refused to
// network "all" like every non-public address, so apt-get in such a template's sandboxes
// failed ("No route to host") unless the operator opened the range with AllowPrivate. Now
// the sandboxes of such a template are let through to exactly those addresses, on that TCP
// port, and nothing else: a per-sandbox firewall exemption beside AllowPrivate's (its
// allowance carries the port). Config.NoTemplateMirror turns it off.

// mirrorHop is one address of a template's mirror and what the firewall does with it.
type mirrorHop struct {
	addr netip.AddrPort
	// open: the sandboxes are let through to it (it is non-public and reachable by
	// forwarding). Otherwise why says why nothing is done: public (reachable anyway), or
	// an address that cannot or must not be opened.
	open bool
	why  string
}

// mirrorHops sorts the addresses of mirror m: which ones the template's sandboxes are let
// through to, and why the others are not. host are the host's own addresses.
func mirrorHops(m *template.Mirror, host []netip.Addr) []mirrorHop {
	if m == nil {
		return nil
	}
	var out []mirrorHop
	for _, ap := range m.Addrs {
		a := ap.Addr().Unmap()
		h := mirrorHop{addr: netip.AddrPortFrom(a, ap.Port())}
		r, nonPublic := netrange.Lookup(a)
		switch {
		case !a.Is4() || ap.Port() == 0:
			h.why = "not an IPv4 address and port"
		case slices.Contains(host, a):
			h.why = "an address of this host, which sandboxes never reach"
		case !nonPublic:
			h.why = "public: reachable without an exemption"
		case r.Kind == netrange.Loopback || r.Kind == netrange.LinkLocal || a.IsMulticast() ||
			r.Prefix.Contains(netip.MustParseAddr("0.0.0.1")) || r.Prefix.Contains(netip.MustParseAddr("240.0.0.1")):
			// Loopback is the sandbox's own; link-local holds the cloud metadata services;
			// the rest is never a unicast destination.
			h.why = r.Why + ": never opened for a mirror (AllowPrivate can)"
		default:
			h.open, h.why = true, r.Why
		}
		out = append(out, h)
	}
	return out
}

// mirrorAllowances are the address:port pairs the sandboxes of tp with network "all" are
// let through to: its mirror's non-public addresses (mirrorHops), or none with
// Config.NoTemplateMirror.
func (p *Provider) mirrorAllowances(tp *sandboxTemplate) []netip.AddrPort {
	if p.cfg.NoTemplateMirror || tp == nil || tp.image == nil || tp.image.Mirror == nil {
		return nil
	}
	var out []netip.AddrPort
	for _, h := range mirrorHops(tp.image.Mirror, egress.HostAddrs()) {
		if h.open {
			out = append(out, h.addr)
		}
	}
	return out
}

// MirrorReport says, per template of the store made from a package mirror (and for the
// built-in debian template before it is made, from this machine's apt sources as they are
// now), what its sandboxes with network "all" reach of that mirror: one line each, for
// `tupper doctor`.
func (p *Provider) MirrorReport(ctx context.Context) []string {
	st, err := p.templateStore()
	if err != nil {
		return nil
	}
	host := egress.HostAddrs()
	var lines []string
	describe := func(name string, m *template.Mirror, made bool) {
		if p.cfg.NoTemplateMirror {
			lines = append(lines, fmt.Sprintf("template %s: made from %s; its sandboxes are given no way to it (NoTemplateMirror)", name, m.URI))
			return
		}
		var open, shut []string
		for _, h := range mirrorHops(m, host) {
			if h.open {
				open = append(open, fmt.Sprintf("%s (%s)", h.addr, h.why))
			} else {
				shut = append(shut, fmt.Sprintf("%s (%s)", h.addr, h.why))
			}
		}
		verb, from := "reach", "made from"
		if !made {
			verb, from = "will reach", "not made yet; will be made from"
		}
		var b strings.Builder
		fmt.Fprintf(&b, "template %s: %s %s", name, from, m.URI)
		switch {
		case len(open) > 0:
			fmt.Fprintf(&b, "; its sandboxes %s it at %s and nothing else private (docs/network.md; --no-template-mirror turns it off)", verb, strings.Join(open, ", "))
		case len(m.Addrs) == 0:
			b.WriteString("; no network address recorded for it: nothing opened")
		default:
			b.WriteString("; nothing to open")
		}
		if len(shut) > 0 {
			fmt.Fprintf(&b, "; not opened: %s", strings.Join(shut, ", "))
		}
		lines = append(lines, b.String())
	}
	ts, _ := st.List()
	debianMade := false
	for _, t := range ts {
		if t.Name == template.Debian {
			debianMade = true
		}
		if t.Mirror != nil {
			describe(t.Name, t.Mirror, true)
		} else if t.Name == template.Debian || t.Name == template.Base {
			lines = append(lines, fmt.Sprintf("template %s: no mirror recorded (made by an older tupper): its sandboxes reach a private mirror only through --allow-private; remove and remake it to record one", t.Name))
		}
	}
	if !debianMade {
		if d, err := template.HostDistro("/"); err == nil {
			describe(template.Debian, template.ResolveMirror(ctx, d.Mirror), false)
		}
	}
	return lines
}
