//go:build linux

package hostnet

import (
	"flag"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tupper-dev/tupper/internal/netrange"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// TestFirewallScripts pins the iptables-restore input of each step (golden file): what a
// create writes (first without hooks, then with), what the last teardown removes.
func TestFirewallScripts(t *testing.T) {
	n, err := New(Config{Subnet: "10.213.0.0/16", Bridge: "tupper0"})
	if err != nil {
		t.Fatal(err)
	}
	n.iptPath, n.iptRestore, n.ip6tPath, n.ip6tRestore = "iptables", "iptables-restore", "ip6tables", "ip6tables-restore"
	fams := n.families([]netip.Addr{netip.MustParseAddr("10.255.255.53")},
		[]allowance{{src: netip.MustParseAddr("10.213.0.7"), dst: netip.MustParsePrefix("10.1.2.0/24")},
			{src: netip.MustParseAddr("10.213.0.8"), dst: netip.MustParsePrefix("203.0.113.80/32"), port: 80}}, // a template's mirror
		[]egressRule{{netip.MustParseAddr("10.213.0.9"), Egress{DNSUDP: 40001, DNSTCP: 40002, Proxy: 40003,
			UDPAllow: []netip.Prefix{netip.MustParsePrefix("11.22.33.0/24")}, UDPDeny: []netip.Prefix{netip.MustParsePrefix("11.22.33.44/32")}}}})
	var b strings.Builder
	for _, f := range fams {
		b.WriteString("## " + f.restore + ", a create on a bridge with its hooks in place\n")
		b.WriteString(f.script(true, func(first bool) []string {
			if first {
				return []string{"-D", "-I"}
			}
			return []string{"-D", "-A"}
		}, false))
		b.WriteString("## " + f.restore + ", the first create\n")
		b.WriteString(f.script(true, func(first bool) []string {
			if first {
				return []string{"-I"}
			}
			return []string{"-A"}
		}, false))
		b.WriteString("## " + f.restore + ", the last teardown\n")
		b.WriteString(f.script(false, func(bool) []string { return []string{"-D"} }, true))
	}
	golden := filepath.Join("testdata", "firewall.golden")
	if *update {
		os.MkdirAll("testdata", 0o755)
		if err := os.WriteFile(golden, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if b.String() != string(want) {
		t.Errorf("the scripts differ from %s (go test -run TestFirewallScripts -update):\n%s", golden, b.String())
	}
}

// TestNonPublic checks the refused ranges against the standard library's view of private,
// loopback, link-local and multicast addresses, and that public addresses stay outside.
func TestNonPublic(t *testing.T) {
	refused := func(a netip.Addr) bool {
		return slices.ContainsFunc(NonPublic, func(r netrange.Range) bool { return r.Prefix.Contains(a) })
	}
	for _, s := range []string{"10.1.2.3", "172.16.0.1", "172.31.255.254", "192.168.1.1", "100.64.0.1",
		"100.127.255.254", "169.254.169.254", "127.0.0.1", "0.0.0.0", "224.0.0.251", "239.255.255.250",
		"255.255.255.255", "240.0.0.1", "192.0.2.1", "198.51.100.1", "203.0.113.1", "198.18.0.1", "198.19.255.255",
		"192.0.0.170"} {
		a := netip.MustParseAddr(s)
		if !refused(a) {
			t.Errorf("%s is not refused", a)
		}
	}
	for _, s := range []string{"1.1.1.1", "8.8.8.8", "100.63.255.255", "100.128.0.0", "172.15.255.255", "172.32.0.0",
		"192.167.255.255", "192.169.0.0", "198.17.255.255", "198.20.0.0", "11.22.33.44", "223.255.255.255"} {
		if a := netip.MustParseAddr(s); refused(a) {
			t.Errorf("the public %s is refused", a)
		}
	}
	// Whatever Go calls private, loopback, link-local or multicast is refused.
	for i := 0; i < 1<<16; i++ {
		a := netip.AddrFrom4([4]byte{byte(i >> 8), byte(i), 1, 1})
		if (a.IsPrivate() || a.IsLoopback() || a.IsLinkLocalUnicast() || a.IsMulticast() || a.IsUnspecified()) && !refused(a) {
			t.Errorf("%s is not refused", a)
		}
	}
}

func TestNameservers(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(s), 0o644)
		return p
	}
	stub := write("stub", "# systemd-resolved\nnameserver 127.0.0.53\noptions edns0 trust-ad\n")
	upstream := write("upstream", "nameserver 192.0.2.53\nnameserver 2001:db8::53\nnameserver 192.0.2.54\n")
	mixed := write("mixed", "nameserver 10.255.255.53\nnameserver ::1\nnameserver fe80::1%eth0\nnameserver 127.0.0.1\nnameserver 10.255.255.53\nnameserver ::ffff:192.0.2.9\nnameserver bogus\n")
	for _, c := range []struct {
		conf, upstream string
		want           string
	}{
		{stub, upstream, "[192.0.2.53 192.0.2.54]"},               // a loopback stub: its upstream servers
		{stub, filepath.Join(dir, "missing"), "[]"},               // no upstream list: none
		{mixed, upstream, "[10.255.255.53 192.0.2.9]"},            // IPv4, not loopback, once each
		{upstream, stub, "[192.0.2.53 192.0.2.54]"},               // not a stub: as listed (IPv4)
		{filepath.Join(dir, "missing"), upstream, "[]"},           // no resolv.conf
		{write("v6", "nameserver 2001:db8::1\n"), upstream, "[]"}, // IPv6 only: sandboxes have no IPv6
	} {
		if got := "[" + stringsOf(nameservers(c.conf, c.upstream)) + "]"; got != c.want {
			t.Errorf("nameservers(%s, %s) = %s, want %s", filepath.Base(c.conf), filepath.Base(c.upstream), got, c.want)
		}
	}
}

func stringsOf(as []netip.Addr) string {
	var s []string
	for _, a := range as {
		s = append(s, a.String())
	}
	return strings.Join(s, " ")
}

// TestParseConnections reads `ss -Htn state established` as iproute2 prints it: only the
// sandbox's own address's connections (not loopback's, not another address's), IPv6 and
// interface-scoped addresses skipped.
func TestParseConnections(t *testing.T) {
	out := "0      0      10.216.201.5:45678 11.22.34.1:80\n" +
		"0      0      127.0.0.1:39122 127.0.0.1:57343\n" +
		"0      12     10.216.201.5:45680   11.22.34.6:7000   \n" +
		"0      0      10.216.201.50:1000 11.22.34.1:80\n" +
		"0      0      [::1]:5000 [::1]:6000\n" +
		"0      0      10.216.201.5%eth0:22 1.2.3.4:5\n\n"
	got := parseConnections(out, "10.216.201.5")
	want := []Conn{
		{netip.MustParseAddrPort("10.216.201.5:45678"), netip.MustParseAddrPort("11.22.34.1:80")},
		{netip.MustParseAddrPort("10.216.201.5:45680"), netip.MustParseAddrPort("11.22.34.6:7000")},
	}
	if !slices.Equal(got, want) {
		t.Errorf("parseConnections: %v, want %v", got, want)
	}
}
