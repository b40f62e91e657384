package sandbox

import (
	"slices"
	"testing"
)

func TestLearnAllowListAndDenied(t *testing.T) {
	entries := []EgressEntry{
		{Kind: "dns", Name: "pypi.org", Type: "A", Allowed: true},
		{Kind: "dns", Name: "pypi.org", Type: "AAAA", Allowed: true},
		{Kind: "dns", Name: "gone.example", Type: "A", Allowed: true, Reason: "upstream: timeout"},
		{Kind: "connect", Name: "files.pythonhosted.org", Dest: "151.101.0.223:443", Allowed: true},
		{Kind: "connect", Via: "github.com", Dest: "140.82.112.3:22", Allowed: true},
		{Kind: "connect", Dest: "140.82.112.4:7000", Allowed: true},
		{Kind: "dns", Name: "evil.example", Type: "A", Reason: "name not allowed"},
		{Kind: "connect", Dest: "1.2.3.4:443", Reason: "address not allowed"},
		{Kind: "dns", Name: "evil.example", Type: "AAAA", Reason: "name not allowed"},
	}
	want := []string{"140.82.112.4", "files.pythonhosted.org", "github.com", "pypi.org"}
	if got := LearnAllowList(entries); !slices.Equal(got, want) {
		t.Errorf("LearnAllowList: %q, want %q", got, want)
	}
	if got, want := Denied(entries), []string{"evil.example", "1.2.3.4:443"}; !slices.Equal(got, want) {
		t.Errorf("Denied: %q, want %q", got, want)
	}
}

func TestLearnNetwork(t *testing.T) {
	if got := (Network{Learn: true}).Normalized().Mode; got != "allow" {
		t.Errorf("Network{Learn: true} normalizes to mode %q, want allow", got)
	}
	for _, c := range []struct {
		n  Network
		ok bool
	}{
		{Network{Learn: true}, true},
		{Network{Mode: "allow", Learn: true}, true},
		{Network{Mode: "allow", Learn: true, Deny: []string{"1.2.3.4"}}, true},
		{Network{Mode: "allow"}, false},
		{Network{Mode: "none", Learn: true}, false},
		{Network{Mode: "all", Learn: true}, false},
	} {
		if err := validateNetwork("create", c.n); (err == nil) != c.ok {
			t.Errorf("%+v: %v, want ok %v", c.n, err, c.ok)
		}
	}
}
