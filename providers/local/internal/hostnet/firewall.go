//go:build linux

package hostnet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/tupper-dev/tupper/internal/netrange"
)

// The firewall of network "all": sandboxes reach the public internet and nothing else.
//
// For a bridge B the host's tables hold (iptables, in the provider's network namespace):
//
//	filter INPUT, first         -i B -j TUPPER-IN-B     traffic to the host itself
//	filter FORWARD, first       -i B -j TUPPER-FWD-B    traffic through the host
//	filter FORWARD, last        -i B ! -o B -j ACCEPT
//	                            -o B -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
//	nat POSTROUTING, first      -s SUBNET ! -o B -j MASQUERADE
//	nat PREROUTING, first       -i B -j TUPPER-PRE-B     a policy's redirections (egress.go)
//	ip6tables filter INPUT and FORWARD, first: -i B -j TUPPER-IN-B / TUPPER-FWD-B
//
// TUPPER-FWD-B refuses (REJECT, ICMP "administratively prohibited", so a program fails at
// once rather than waiting out a timeout) every destination in nonPublic, apart from port 53
// of the sandboxes' nameservers and the ranges Config.AllowPrivate opens, and traffic back
// into the bridge. TUPPER-IN-B refuses everything addressed to the host — any of its
// addresses, the bridge's gateway included, so every service the host listens on, the
// tupper server among them — but replies to connections the host opened and port 53 of the
// nameservers. The IPv6 chains refuse everything: sandboxes have IPv4 only, and the bridge
// also has IPv6 turned off, so it has no IPv6 address to be reached at.
//
// The two jumps come first and match only traffic in from our own bridge, and our chains
// only refuse or return: being first never overrides another tool's decision about its own
// traffic, and never lets through anything a later rule would refuse. The accepts come
// last, after every other tool's rules (Docker's DOCKER-USER, ufw's chains, an operator's
// own), so those can still refuse sandbox traffic. Every create puts the hooks back in those
// places, so a tool that inserted rules since does not displace them for long.
//
// Each create rewrites our chains and hooks in one iptables-restore transaction per address
// family (a sandbox never sees a moment without its refusals) and each teardown of the last
// sandbox removes them in one; the per-rule commands are the fallback when a hook is missing
// or doubled.

// NonPublic are the IPv4 destinations a sandbox never reaches unless Config.AllowPrivate
// opens them: every block IANA's special-purpose address registry marks as not globally
// reachable, and multicast (the IPv4 ranges of netrange.NonPublic).
var NonPublic = ipv4(netrange.NonPublic)

func ipv4(rs []netrange.Range) []netrange.Range {
	var out []netrange.Range
	for _, r := range rs {
		if r.Prefix.Addr().Is4() {
			out = append(out, r)
		}
	}
	return out
}

// rule is one iptables rule: its table, chain and arguments (matches and target).
type rule struct {
	table, chain string
	args         []string
}

// line renders r for iptables-restore with op (-A, -I CHAIN 1, -D), quoting arguments that
// hold spaces (the comment).
func (r rule) line(op string) string {
	var b strings.Builder
	b.WriteString(op)
	b.WriteString(" ")
	b.WriteString(r.chain)
	if op == "-I" {
		b.WriteString(" 1")
	}
	for _, a := range r.args {
		b.WriteString(" ")
		if strings.ContainsAny(a, " \"") {
			b.WriteString(`"` + strings.ReplaceAll(a, `"`, `\"`) + `"`)
		} else {
			b.WriteString(a)
		}
	}
	return b.String()
}

// family is one address family's tools and rules.
type family struct {
	iptables, restore string // the iptables (or ip6tables) and matching -restore binaries
	chains            []rule // the contents of our chains, in order
	declared          []rule // chains of ours that exist even when empty (no args)
	first, last       []rule // hooks inserted first, and appended last, in built-in chains
}

// ForwardChain is the chain of the bridge's rules for traffic through the host.
func (n *Network) ForwardChain() string { return "TUPPER-FWD-" + n.bridge }
func (n *Network) preChain() string     { return "TUPPER-PRE-" + n.bridge }
func (n *Network) inChain() string      { return "TUPPER-IN-" + n.bridge }

func (n *Network) comment() []string {
	return []string{"-m", "comment", "--comment", "tupper " + n.bridge}
}

// families returns the rules of the bridge for IPv4 and, when the host has IPv6, IPv6.
// nameservers are the sandboxes' (Nameservers); allowed are the exemptions of the
// sandboxes on the bridge (allowances); policies are the sandboxes with an egress policy
// (egressRules).
func (n *Network) families(nameservers []netip.Addr, allowed []allowance, policies []egressRule) []family {
	c := n.comment()
	fwd, in, pre := n.ForwardChain(), n.inChain(), n.preChain()
	reject4 := []string{"-j", "REJECT", "--reject-with", "icmp-admin-prohibited"}
	hook := func(table, chain string, args ...string) rule {
		return rule{table, chain, append(args, c...)}
	}
	v4 := family{iptables: n.iptPath, restore: n.iptRestore, declared: []rule{{table: "nat", chain: pre}}}
	v4.chains = append(v4.chains, rule{"filter", fwd, append([]string{"-o", n.bridge}, reject4...)})
	// A sandbox with a policy: its DNS (any server, UDP or TCP) and all its TCP go to its
	// proxy on the gateway; of what is forwarded, only UDP to allowed prefixes passes on to
	// the checks below, denied prefixes first.
	gw := n.gateway.String()
	for _, e := range policies {
		src := e.src.String() + "/32"
		v4.chains = append(v4.chains,
			rule{"nat", pre, []string{"-s", src, "-p", "udp", "--dport", "53", "-j", "DNAT", "--to-destination", gw + ":" + strconv.Itoa(e.DNSUDP)}},
			rule{"nat", pre, []string{"-s", src, "-p", "tcp", "--dport", "53", "-j", "DNAT", "--to-destination", gw + ":" + strconv.Itoa(e.DNSTCP)}},
			rule{"nat", pre, []string{"-s", src, "-p", "tcp", "-j", "DNAT", "--to-destination", gw + ":" + strconv.Itoa(e.Proxy)}},
		)
		// TCP is forwarded only on a connection opened before the policy (given while the
		// sandbox ran: attachEgress), past the proxy: reset, so the sandbox sees it end.
		v4.chains = append(v4.chains, rule{"filter", fwd, []string{"-s", src, "-p", "tcp", "-j", "REJECT", "--reject-with", "tcp-reset"}})
		for _, d := range e.UDPDeny {
			v4.chains = append(v4.chains, rule{"filter", fwd, append([]string{"-s", src, "-d", d.String()}, reject4...)})
		}
		for _, a := range e.UDPAllow {
			v4.chains = append(v4.chains, rule{"filter", fwd, []string{"-s", src, "-d", a.String(), "-p", "udp", "-j", "RETURN"}})
		}
		v4.chains = append(v4.chains, rule{"filter", fwd, append([]string{"-s", src}, reject4...)})
	}
	var dns [][]string
	for _, ns := range nameservers {
		for _, proto := range []string{"udp", "tcp"} {
			dns = append(dns, []string{"-d", ns.String() + "/32", "-p", proto, "--dport", "53", "-j", "RETURN"})
		}
	}
	for _, args := range dns {
		v4.chains = append(v4.chains, rule{"filter", fwd, args})
	}
	for _, a := range allowed {
		args := []string{"-s", a.src.String() + "/32", "-d", a.dst.String()}
		if a.port != 0 {
			args = append(args, "-p", "tcp", "--dport", strconv.Itoa(int(a.port)))
		}
		v4.chains = append(v4.chains, rule{"filter", fwd, append(args, "-j", "RETURN")})
	}
	for _, np := range NonPublic {
		v4.chains = append(v4.chains, rule{"filter", fwd, append([]string{"-d", np.Prefix.String()}, reject4...)})
	}
	v4.chains = append(v4.chains, rule{"filter", in, []string{"-m", "conntrack", "--ctstate", "RELATED,ESTABLISHED", "-j", "RETURN"}})
	for _, args := range dns {
		v4.chains = append(v4.chains, rule{"filter", in, args})
	}
	for _, e := range policies {
		src := e.src.String() + "/32"
		for _, pp := range []struct {
			proto string
			port  int
		}{{"udp", e.DNSUDP}, {"tcp", e.DNSTCP}, {"tcp", e.Proxy}} {
			v4.chains = append(v4.chains, rule{"filter", in, []string{"-s", src, "-d", gw + "/32", "-p", pp.proto, "--dport", strconv.Itoa(pp.port), "-j", "RETURN"}})
		}
	}
	v4.chains = append(v4.chains, rule{"filter", in, reject4})
	v4.first = []rule{
		hook("nat", "POSTROUTING", "-s", n.subnet.String(), "!", "-o", n.bridge, "-j", "MASQUERADE"),
		hook("nat", "PREROUTING", "-i", n.bridge, "-j", pre),
		hook("filter", "INPUT", "-i", n.bridge, "-j", in),
		hook("filter", "FORWARD", "-i", n.bridge, "-j", fwd),
	}
	v4.last = []rule{
		hook("filter", "FORWARD", "-i", n.bridge, "!", "-o", n.bridge, "-j", "ACCEPT"),
		hook("filter", "FORWARD", "-o", n.bridge, "-m", "conntrack", "--ctstate", "RELATED,ESTABLISHED", "-j", "ACCEPT"),
	}
	out := []family{v4}
	if n.ip6tPath != "" {
		reject6 := []string{"-j", "REJECT", "--reject-with", "icmp6-adm-prohibited"}
		out = append(out, family{
			iptables: n.ip6tPath, restore: n.ip6tRestore,
			chains: []rule{{"filter", fwd, reject6}, {"filter", in, reject6}},
			first: []rule{
				hook("filter", "INPUT", "-i", n.bridge, "-j", in),
				hook("filter", "FORWARD", "-i", n.bridge, "-j", fwd),
			},
		})
	}
	return out
}

// script is the iptables-restore input for f: our chains declared (which empties them) and
// filled, then, per hook, ops applied in order ("-D" then "-I"/"-A" moves a hook back into
// place; "-I"/"-A" alone adds it; "-D" alone removes it), then with drop our chains deleted.
// Tables come nat first, so a failing nat hook fails the input before anything is applied.
func (f family) script(fill bool, hookOps func(first bool) []string, drop bool) string {
	var b strings.Builder
	for _, table := range []string{"nat", "filter"} {
		var lines []string
		if fill {
			for _, r := range append(slices.Clone(f.declared), f.chains...) {
				if r.table == table && !slices.Contains(lines, ":"+r.chain+" - [0:0]") {
					lines = append(lines, ":"+r.chain+" - [0:0]")
				}
			}
			for _, r := range f.chains {
				if r.table == table {
					lines = append(lines, r.line("-A"))
				}
			}
		}
		for _, group := range []struct {
			rules []rule
			first bool
		}{{f.first, true}, {f.last, false}} {
			for _, r := range group.rules {
				if r.table != table {
					continue
				}
				for _, op := range hookOps(group.first) {
					lines = append(lines, r.line(op))
				}
			}
		}
		if drop {
			var chains []string
			for _, r := range append(slices.Clone(f.declared), f.chains...) {
				if r.table == table && !slices.Contains(chains, r.chain) {
					chains = append(chains, r.chain)
				}
			}
			for _, c := range chains {
				lines = append(lines, "-F "+c, "-X "+c)
			}
		}
		if len(lines) == 0 {
			continue
		}
		fmt.Fprintf(&b, "*%s\n%s\nCOMMIT\n", table, strings.Join(lines, "\n"))
	}
	return b.String()
}

func (n *Network) restore(ctx context.Context, path, script string) error {
	cmd := exec.CommandContext(ctx, path, "-w", "5", "--noflush")
	cmd.Stdin = strings.NewReader(script)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w: %s", filepath.Base(path), err, bytes.TrimSpace(out))
	}
	return nil
}

func (n *Network) run(ctx context.Context, path string, args ...string) error {
	out, err := exec.CommandContext(ctx, path, append([]string{"-w", "5"}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", filepath.Base(path), strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// ApplyFirewall writes the bridge's rules for the sandboxes leased now. Call with the
// network lock held, after the bridge exists.
func (n *Network) ApplyFirewall(ctx context.Context) error {
	for _, f := range n.families(Nameservers(), n.allowances(), n.egressRules()) {
		// Usually the hooks are there: move them back into place and refill the chains.
		err := n.restore(ctx, f.restore, f.script(true, func(first bool) []string {
			if first {
				return []string{"-D", "-I"}
			}
			return []string{"-D", "-A"}
		}, false))
		if err == nil {
			continue
		}
		// A hook is missing: the first sandbox on the bridge (or a rule deleted by hand).
		// Adding them all doubles any that were left, which is harmless and which
		// removeFirewall undoes.
		if err2 := n.restore(ctx, f.restore, f.script(true, func(first bool) []string {
			if first {
				return []string{"-I"}
			}
			return []string{"-A"}
		}, false)); err2 != nil {
			return errors.Join(err, err2)
		}
	}
	return nil
}

// removeFirewall deletes the bridge's hooks and chains. Call with the network lock held,
// when no sandbox is left on the bridge.
func (n *Network) removeFirewall(ctx context.Context) error {
	var errs []error
	for _, f := range n.families(nil, nil, nil) {
		if n.restore(ctx, f.restore, f.script(false, func(bool) []string { return []string{"-D"} }, true)) == nil {
			continue
		}
		// A hook missing or doubled: one rule at a time.
		for _, r := range append(f.first, f.last...) {
			for range 4 {
				if n.run(ctx, f.iptables, append([]string{"-t", r.table, "-D", r.chain}, r.args...)...) != nil {
					break
				}
			}
		}
		for _, tc := range [][2]string{{"filter", n.ForwardChain()}, {"filter", n.inChain()}, {"nat", n.preChain()}} {
			table, c := tc[0], tc[1]
			if n.run(ctx, f.iptables, "-t", table, "-n", "-L", c) != nil {
				continue // never made, or gone
			}
			if err := n.run(ctx, f.iptables, "-t", table, "-F", c); err != nil {
				errs = append(errs, err)
			}
			if err := n.run(ctx, f.iptables, "-t", table, "-X", c); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// allowance lets the sandbox at src reach dst although dst is not public: every port
// (Config.AllowPrivate), or TCP to port only (its template's mirror).
type allowance struct {
	src  netip.Addr
	dst  netip.Prefix
	port uint16 // 0: every port and protocol
}

// Per-address records: n.dir/KIND/ADDRESS holds, on its first line, the lease holder of the
// address when it was written, then what the firewall needs of that sandbox (its
// allowances, its egress policy's ports and prefixes). Records are per address, not per
// bridge: providers with different configurations can share a bridge, each sandbox getting
// its own provider's. A record is written after its lease and the lease is what counts, so a
// record left behind by a crash never applies to the address's next holder.
const (
	recAllow  = "allow"  // Config.AllowPrivate's ranges, one per line
	recEgress = "egress" // an Egress (egress.go), as JSON
)

// addrRecord is one record that counts: its address and body.
type addrRecord struct {
	a    netip.Addr
	body string
}

// setRecord writes the KIND record of the sandbox leasing a (held by holder). Call with the
// network lock held.
func (n *Network) setRecord(kind string, a netip.Addr, holder string, body []byte) error {
	dir := filepath.Join(n.dir, kind)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return writeAtomic(filepath.Join(dir, a.String()), append([]byte(holder+"\n"), body...))
}

// clearRecord removes a's KIND record if holder wrote it, and reports whether it did.
func (n *Network) clearRecord(kind, a, holder string) bool {
	path := filepath.Join(n.dir, kind, a)
	b, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	first, _, _ := strings.Cut(string(b), "\n")
	if first != holder {
		return false
	}
	return os.Remove(path) == nil
}

// records reads the KIND records whose address is still leased by the sandbox that wrote
// them.
func (n *Network) records(kind string) []addrRecord {
	dir := filepath.Join(n.dir, kind)
	ents, _ := os.ReadDir(dir)
	leases := n.Leases()
	var out []addrRecord
	for _, e := range ents {
		a, err := netip.ParseAddr(e.Name())
		if err != nil || !n.subnet.Contains(a) {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		first, rest, _ := strings.Cut(string(b), "\n")
		if first != leases.Holder(e.Name()) {
			continue
		}
		out = append(out, addrRecord{a, rest})
	}
	return out
}

// setAllowances records the ranges of Config.AllowPrivate and the mirror's address:port
// pairs (its template's mirror) for the sandbox leasing a (held by holder), or removes any record
// left for a when there are none. Call with the network lock held.
func (n *Network) setAllowances(a netip.Addr, holder string, mirror []netip.AddrPort) error {
	if len(n.allow) == 0 && len(mirror) == 0 {
		if err := os.Remove(filepath.Join(n.dir, recAllow, a.String())); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	}
	var b strings.Builder
	for _, p := range n.allow {
		b.WriteString(p.String() + "\n")
	}
	for _, ap := range mirror {
		b.WriteString(ap.String() + "\n")
	}
	return n.setRecord(recAllow, a, holder, []byte(b.String()))
}

// allowances reads the allowances of the sandboxes on the bridge (setAllowances): a line is
// a prefix, or an address and TCP port.
func (n *Network) allowances() []allowance {
	var out []allowance
	for _, r := range n.records(recAllow) {
		for _, line := range strings.Split(r.body, "\n") {
			if p, err := netip.ParsePrefix(line); err == nil && p.Addr().Is4() {
				out = append(out, allowance{src: r.a, dst: p.Masked()})
			} else if ap, err := netip.ParseAddrPort(line); err == nil && ap.Addr().Is4() && ap.Port() != 0 {
				out = append(out, allowance{src: r.a, dst: netip.PrefixFrom(ap.Addr(), 32), port: ap.Port()})
			}
		}
	}
	return out
}

// writeAtomic replaces path with b through a temporary file beside it, so that a reader sees
// the old record or the new, never a part.
func writeAtomic(path string, b []byte) error {
	t, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(t.Name()) // after the rename, a no-op
	_, werr := t.Write(b)
	if err := errors.Join(werr, t.Close()); err != nil {
		return err
	}
	return os.Rename(t.Name(), path)
}

// IPTables are the iptables binaries of the bridge's rules: iptables, and ip6tables on a
// host with IPv6 (after FindTools).
func (n *Network) IPTables() []string {
	var out []string
	for _, f := range n.families(nil, nil, nil) {
		out = append(out, f.iptables)
	}
	return out
}

// Chains are the names of the bridge's own chains; every rule of the bridge's is in one
// of them or carries the comment "tupper BRIDGE".
func (n *Network) Chains() []string { return []string{n.ForwardChain(), n.inChain(), n.preChain()} }

// EgressRecorded reports whether an egress record of address a is on disk, whoever wrote
// it.
func (n *Network) EgressRecorded(a string) bool {
	_, err := os.Stat(filepath.Join(n.dir, recEgress, a))
	return err == nil
}
