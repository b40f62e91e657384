package provider

import (
	"strings"
	"testing"
)

// TestEgressProxyValidate: host:port, RFC 1929's lengths, a password only with a username;
// Redacted and String never hold the password.
func TestEgressProxyValidate(t *testing.T) {
	long := strings.Repeat("x", 256)
	for _, c := range []struct {
		p  EgressProxy
		ok bool
	}{
		{EgressProxy{Address: "proxy.example:1080"}, true},
		{EgressProxy{Address: "[2001:db8::1]:1080", Username: "u", Password: "p"}, true},
		{EgressProxy{Address: "1.2.3.4:1080", Username: "u"}, true},
		{EgressProxy{Address: "proxy.example"}, false},
		{EgressProxy{Address: ":1080"}, false},
		{EgressProxy{Address: "proxy.example:0"}, false},
		{EgressProxy{Address: "proxy.example:65536"}, false},
		{EgressProxy{Address: "user:pw@proxy.example:1080"}, false},
		{EgressProxy{Address: "proxy.example:1080", Password: "pw-9z"}, false},
		{EgressProxy{Address: "proxy.example:1080", Username: long}, false},
		{EgressProxy{Address: "proxy.example:1080", Username: "u", Password: long}, false},
	} {
		err := c.p.Validate()
		if (err == nil) != c.ok {
			t.Errorf("%+v: %v, want ok=%v", c.p, err, c.ok)
		}
		if err != nil && (CodeOf(err) != CodeInvalidArgument || (c.p.Password != "" && strings.Contains(err.Error(), c.p.Password))) {
			t.Errorf("%+v: %v, want invalid_argument without the password", c.p, err)
		}
	}
	p := &EgressProxy{Address: "proxy.example:1080", Username: "alice", Password: "s3cret"}
	if r := p.Redacted(); r.Password != "" || r.Address != p.Address || r.Username != "alice" || p.Password != "s3cret" {
		t.Errorf("Redacted: %+v (original %+v)", r, p)
	}
	if s := p.String(); strings.Contains(s, "s3cret") || s != "socks5://alice@proxy.example:1080" {
		t.Errorf("String: %q", s)
	}
	if (*EgressProxy)(nil).Validate() != nil || (*EgressProxy)(nil).Redacted() != nil {
		t.Errorf("a nil proxy is no proxy")
	}
}
