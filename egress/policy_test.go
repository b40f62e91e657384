package egress

import (
	"net/netip"
	"strings"
	"testing"
)

func TestParseRefuses(t *testing.T) {
	for _, d := range []string{"", "*", "*.com", "a.*.com", "foo*.com", "1.2.3.4/33", "example.com:443", "[::1]:80",
		"-a.com", "a-.com", "a..com", "ex ample.com", strings.Repeat("a", 64) + ".com", "fe80::1%eth0", "ü.com"} {
		if _, err := Parse([]string{d}, nil); err == nil {
			t.Errorf("allow %q: accepted", d)
		} else if !strings.Contains(err.Error(), "allow") {
			t.Errorf("allow %q: %v does not say which list", d, err)
		}
	}
	// Every bad entry is named at once.
	_, err := Parse([]string{"ok.com", "*"}, []string{"1.2.3.4/40"})
	if err == nil || !strings.Contains(err.Error(), `allow "*"`) || !strings.Contains(err.Error(), `deny "1.2.3.4/40"`) {
		t.Errorf("two bad entries: %v", err)
	}
}

func TestPolicyMatches(t *testing.T) {
	p := MustParse([]string{"pypi.org", "*.github.com", "10.1.0.0/16", "2001:db8::1", "Example.COM."},
		[]string{"evil.github.com", "10.1.2.0/24"})
	names := map[string]bool{
		"pypi.org": true, "PYPI.org.": true, "www.pypi.org": false, "api.github.com": true,
		"a.b.github.com": true, "github.com": false, "evil.github.com": false, "x.evil.github.com": true,
		"example.com": true, "notgithub.com": false, "": false,
	}
	for n, want := range names {
		if got := p.AllowsName(n); got != want {
			t.Errorf("AllowsName(%q) = %v, want %v", n, got, want)
		}
	}
	addrs := map[string]bool{
		"10.1.0.1": true, "10.1.2.3": false, "10.2.0.1": false, "2001:db8::1": true, "2001:db8::2": false,
		"::ffff:10.1.0.1": true,
	}
	for a, want := range addrs {
		if got := p.AllowsAddr(netip.MustParseAddr(a)); got != want {
			t.Errorf("AllowsAddr(%s) = %v, want %v", a, got, want)
		}
	}
	// A deny list alone allows the rest.
	d := MustParse(nil, []string{"*.ads.example", "203.0.113.0/24"})
	if !d.OpenByDefault() || !d.AllowsName("pypi.org") || d.AllowsName("x.ads.example") ||
		!d.AllowsAddr(netip.MustParseAddr("198.51.100.1")) || d.AllowsAddr(netip.MustParseAddr("203.0.113.9")) {
		t.Error("deny-only policy")
	}
	n := Nothing()
	if n.AllowsName("pypi.org") || n.AllowsAddr(netip.MustParseAddr("1.1.1.1")) || !n.DeniesAddr(netip.MustParseAddr("::1")) || n.OpenByDefault() {
		t.Error("Nothing allows something")
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"pypi.org", "*.github.com", "10.0.0.0/8", "::1", "a..b", "*"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := Parse([]string{s}, []string{s})
		if err != nil {
			return
		}
		// Whatever parsed: deny wins over the same allow entry.
		if name := strings.TrimPrefix(s, "*."); p.AllowsName(name) || p.AllowsName("x."+name) {
			t.Errorf("%q: allowed although denied", s)
		}
	})
}
