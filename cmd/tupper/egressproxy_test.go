package main

import (
	"testing"

	"github.com/tupper-dev/tupper/provider"
)

// TestParseEgressProxy: --egress-proxy's URL, its password only from the environment.
func TestParseEgressProxy(t *testing.T) {
	env := func(pw string) func(string) (string, bool) {
		return func(k string) (string, bool) { return pw, k == egressProxyPasswordEnv && pw != "" }
	}
	for _, c := range []struct {
		v, pw string
		want  *provider.EgressProxy
	}{
		{"socks5://proxy.example:1080", "", &provider.EgressProxy{Address: "proxy.example:1080"}},
		{"socks5://alice@proxy.example:1080", "pw", &provider.EgressProxy{Address: "proxy.example:1080", Username: "alice", Password: "pw"}},
		{"socks5h://alice@[2001:db8::1]:1080/", "", &provider.EgressProxy{Address: "[2001:db8::1]:1080", Username: "alice"}},
		{"socks5://alice:pw@proxy.example:1080", "", nil}, // a password on the command line
		{"socks5://proxy.example:1080", "pw", nil},        // a password without a user
		{"http://proxy.example:1080", "", nil},            // not SOCKS5
		{"socks5://proxy.example", "", nil},               // no port
		{"proxy.example:1080", "", nil},                   // no scheme
	} {
		got, err := parseEgressProxy(c.v, env(c.pw))
		if c.want == nil {
			if err == nil {
				t.Errorf("%s: %+v, want an error", c.v, got)
			}
			continue
		}
		if err != nil || *got != *c.want {
			t.Errorf("%s: %+v, %v; want %+v", c.v, got, err, c.want)
		}
	}
}
