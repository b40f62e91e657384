package egress

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"
)

// The bound-secret lab: an in-process proxy on loopback whose "internet" is a map from
// public-looking addresses to loopback listeners (Proxy.Dial), with the names of Resolve.
// The proxy is the real one; only where a connection was going (OriginalDst) and where
// an address is (Dial) are given by the test. The kernel-level path (iptables, a real
// sandbox) is providers/local's TestEgressPolicy/*/bound_secrets.
var (
	slShared   = netip.MustParseAddr("11.22.34.1") // a.test (bound), b.test (not)
	slAttacker = netip.MustParseAddr("11.22.34.9") // no name: an address the sandbox picked
	slForged   = netip.MustParseAddr("11.22.34.7") // forged.test (bound): a server with an untrusted certificate
)

const slValue = "ghp_real-value/with+chars&more"

// seenReq is what an upstream server got.
type seenReq struct {
	server, host, auth, query, custom string
	set                               []string // the values of X-Set
}

type secretLab struct {
	t        testing.TB
	proxy    *Proxy
	lns      map[netip.AddrPort]net.Listener // the proxy's, one per destination
	caPool   *x509.CertPool
	labCA    *x509.CertPool // the lab servers' CA, as a tunnel's client would trust
	ph       string         // the placeholder
	mu       sync.Mutex
	seen     []seenReq
	dst      map[string]netip.AddrPort // a proxy listener's address → the destination it stands for
	backends map[netip.AddrPort]string
}

func labCert(t testing.TB, names ...string) (tls.Certificate, []byte) {
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "lab CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), DNSNames: names, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
}

func newSecretLab(t testing.TB, pol *Policy, extra ...Secret) *secretLab {
	l := &secretLab{t: t, backends: map[netip.AddrPort]string{}, lns: map[netip.AddrPort]net.Listener{}, dst: map[string]netip.AddrPort{}}
	cert, labCA := labCert(t, "a.test", "b.test", "c.test")
	forgedCert, _ := labCert(t, "forged.test") // signed by a CA nobody trusts
	l.labCA = x509.NewCertPool()
	l.labCA.AppendCertsFromPEM(labCA)
	serve := func(name string, tlsCert *tls.Certificate) string {
		ln, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		if tlsCert != nil {
			ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{*tlsCert}})
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			l.mu.Lock()
			l.seen = append(l.seen, seenReq{server: name, host: r.Host, auth: r.Header.Get("Authorization"), query: r.URL.Query().Get("token"), custom: r.Header.Get("X-Api-Key"), set: r.Header.Values("X-Set")})
			l.mu.Unlock()
			fmt.Fprintf(w, "%s %s\n", name, r.Host)
		})}
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close() })
		return ln.Addr().String()
	}
	l.backends[netip.AddrPortFrom(slShared, 80)] = serve("http", nil)
	l.backends[netip.AddrPortFrom(slShared, 443)] = serve("tls", &cert)
	l.backends[netip.AddrPortFrom(slAttacker, 80)] = serve("attacker-http", nil)
	l.backends[netip.AddrPortFrom(slAttacker, 443)] = serve("attacker-tls", &cert)
	l.backends[netip.AddrPortFrom(slForged, 443)] = serve("forged", &forgedCert)

	var err error
	l.ph, err = NewPlaceholder()
	if err != nil {
		t.Fatal(err)
	}
	hosts := []string{"a.test", "forged.test"}
	caPEM, keyPEM, err := NewCA(hosts)
	if err != nil {
		t.Fatal(err)
	}
	l.caPool = x509.NewCertPool()
	l.caPool.AppendCertsFromPEM(caPEM)
	l.proxy, err = NewProxy(Config{
		Sandbox: netip.MustParseAddr("127.0.0.1"),
		Secrets: append([]Secret{{Name: "TOKEN", Placeholder: l.ph, Value: slValue, Hosts: hosts}}, extra...),
		CACert:  string(caPEM), CAKey: string(keyPEM), ExtraRoots: string(labCA),
	}, pol)
	if err != nil {
		t.Fatal(err)
	}
	l.proxy.LocalAddrs = func() []netip.Addr { return nil }
	l.proxy.OriginalDst = func(c net.Conn) (netip.AddrPort, error) {
		v, ok := l.dst[c.LocalAddr().String()]
		if !ok {
			return netip.AddrPort{}, fmt.Errorf("no destination for %s", c.LocalAddr())
		}
		return v, nil
	}
	l.proxy.Dial = func(a netip.AddrPort) (net.Conn, error) {
		b, ok := l.backends[a]
		if !ok {
			return nil, fmt.Errorf("nothing at %s", a)
		}
		return net.Dial("tcp4", b)
	}
	l.proxy.Resolve = func(name string) ([]netip.Addr, error) {
		switch name {
		case "a.test", "b.test", "c.test":
			return []netip.Addr{slShared}, nil
		case "forged.test":
			return []netip.Addr{slForged}, nil
		}
		return nil, fmt.Errorf("no such name")
	}
	for dst := range l.backends {
		ln, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		l.lns[dst], l.dst[ln.Addr().String()] = ln, dst
		t.Cleanup(func() { ln.Close() })
	}
	for _, ln := range l.lns {
		go l.proxy.ServeTCP(ln)
	}
	return l
}

// dial opens a connection to the proxy as if meant for dst.
func (l *secretLab) dial(dst netip.AddrPort) net.Conn {
	c, err := net.Dial("tcp4", l.lns[dst].Addr().String())
	if err != nil {
		l.t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	return c
}

// get sends raw requests on c (plain, or TLS when cfg is not nil) and returns the
// responses' bodies, or the error that ended it.
func (l *secretLab) get(dst netip.AddrPort, cfg *tls.Config, reqs ...string) (bodies []string, err error) {
	var c net.Conn = l.dial(dst)
	defer c.Close()
	if cfg != nil {
		tc := tls.Client(c, cfg)
		if err := tc.Handshake(); err != nil {
			return nil, err
		}
		c = tc
	}
	br := bufio.NewReader(c)
	for _, r := range reqs {
		if _, err := io.WriteString(c, r); err != nil {
			return bodies, err
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return bodies, err
		}
		b, _ := io.ReadAll(resp.Body)
		bodies = append(bodies, string(b))
	}
	return bodies, nil
}

func (l *secretLab) taken() []seenReq {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.seen
	l.seen = nil
	return s
}

func req(host, ph string) string {
	return "GET /?token=" + ph + " HTTP/1.1\r\nHost: " + host + "\r\nAuthorization: Bearer " + ph + "\r\nX-Api-Key: k-" + ph + "\r\n\r\n"
}

// TestBoundSecretsHTTP: in plain HTTP the placeholder becomes the value in every header and
// the query for the bound host, and stays itself for another host on the same address and
// connection; the response the sandbox reads holds no value.
func TestBoundSecretsHTTP(t *testing.T) {
	for _, pol := range []*Policy{{}, MustParse([]string{"a.test", "b.test"}, nil)} {
		l := newSecretLab(t, pol)
		// As if the sandbox had asked the proxy's resolver.
		l.proxy.learned[slShared] = map[string]bool{"a.test": true, "b.test": true}
		bodies, err := l.get(netip.AddrPortFrom(slShared, 80), nil, req("a.test", l.ph), req("b.test", l.ph), req("a.test", l.ph))
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range bodies {
			if strings.Contains(b, slValue) {
				t.Errorf("a response holds the value: %q", b)
			}
		}
		seen := l.taken()
		if len(seen) != 3 {
			t.Fatalf("upstream saw %d requests: %+v", len(seen), seen)
		}
		for i, s := range seen {
			want := l.ph
			if s.host == "a.test" {
				want = slValue
			}
			if s.auth != "Bearer "+want || s.query != want || s.custom != "k-"+want {
				t.Errorf("request %d for %s: Authorization %q, query %q, X-Api-Key %q; want the %s", i, s.host, s.auth, s.query, s.custom,
					map[bool]string{true: "value", false: "placeholder"}[want == slValue])
			}
		}
		// Basic: the placeholder inside the encoded credentials.
		basic := "Basic " + base64.StdEncoding.EncodeToString([]byte("x-access-token:"+l.ph))
		if _, err := l.get(netip.AddrPortFrom(slShared, 80), nil, "GET / HTTP/1.1\r\nHost: a.test\r\nAuthorization: "+basic+"\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		if s := l.taken(); len(s) != 1 || s[0].auth != "Basic "+base64.StdEncoding.EncodeToString([]byte("x-access-token:"+slValue)) {
			t.Errorf("Basic credentials upstream: %+v", s)
		}
	}
}

// TestBoundSecretsTLS: HTTPS to a bound host is terminated with a certificate of the
// sandbox's CA and gets the value; HTTPS to another host is the server's own TLS, end to
// end, and gets the placeholder.
func TestBoundSecretsTLS(t *testing.T) {
	l := newSecretLab(t, &Policy{})
	bodies, err := l.get(netip.AddrPortFrom(slShared, 443), &tls.Config{ServerName: "a.test", RootCAs: l.caPool}, req("a.test", l.ph), req("a.test", l.ph))
	if err != nil {
		t.Fatal(err)
	}
	if len(bodies) != 2 || bodies[0] != "tls a.test\n" {
		t.Errorf("bodies %q", bodies)
	}
	if s := l.taken(); len(s) != 2 || s[0].auth != "Bearer "+slValue || s[1].query != slValue {
		t.Errorf("upstream of a.test saw %+v", s)
	}
	// b.test is not bound: the lab server's certificate, which the sandbox CA does not sign.
	if _, err := l.get(netip.AddrPortFrom(slShared, 443), &tls.Config{ServerName: "b.test", RootCAs: l.caPool}); err == nil {
		t.Errorf("b.test's TLS verified with the sandbox CA: the proxy terminated an unbound host")
	}
	if _, err := l.get(netip.AddrPortFrom(slShared, 443), &tls.Config{ServerName: "b.test", RootCAs: l.labCA}, req("b.test", l.ph)); err != nil {
		t.Fatal(err)
	}
	if s := l.taken(); len(s) != 1 || s[0].auth != "Bearer "+l.ph {
		t.Errorf("upstream of b.test saw %+v", s)
	}
	// Only HTTP/1.1 is offered on the terminated side.
	c := tls.Client(l.dial(netip.AddrPortFrom(slShared, 443)), &tls.Config{ServerName: "a.test", RootCAs: l.caPool, NextProtos: []string{"h2", "http/1.1"}})
	if err := c.Handshake(); err != nil {
		t.Fatal(err)
	}
	if p := c.ConnectionState().NegotiatedProtocol; p != "http/1.1" {
		t.Errorf("ALPN on a terminated connection: %q, want http/1.1", p)
	}
	c.Close()
}

// TestBoundSecretsAttacks are what root in the sandbox could try to get the value out.
func TestBoundSecretsAttacks(t *testing.T) {
	l := newSecretLab(t, &Policy{})
	noValue := func(what string) {
		t.Helper()
		for _, s := range l.taken() {
			if s.auth == "Bearer "+slValue || s.query == slValue || strings.HasPrefix(s.server, "attacker") {
				t.Errorf("%s: %+v", what, s)
			}
		}
	}
	// The bound name at an address of its choosing (its own /etc/hosts): the proxy goes
	// to the name's real address.
	bodies, err := l.get(netip.AddrPortFrom(slAttacker, 80), nil, req("a.test", l.ph))
	if err != nil || len(bodies) != 1 || bodies[0] != "http a.test\n" {
		t.Errorf("Host a.test sent to %s: %q %v, want the real a.test's answer", slAttacker, bodies, err)
	}
	if s := l.taken(); len(s) != 1 || s[0].server != "http" {
		t.Errorf("Host a.test sent to %s reached %+v", slAttacker, s)
	}
	bodies, err = l.get(netip.AddrPortFrom(slAttacker, 443), &tls.Config{ServerName: "a.test", RootCAs: l.caPool}, req("a.test", l.ph))
	if err != nil || len(bodies) != 1 || bodies[0] != "tls a.test\n" {
		t.Errorf("SNI a.test sent to %s: %q %v, want the real a.test's answer", slAttacker, bodies, err)
	}
	if s := l.taken(); len(s) != 1 || s[0].server != "tls" {
		t.Errorf("SNI a.test sent to %s reached %+v", slAttacker, s)
	}
	// SNI of the bound host, then a Host of another: cut, nothing sent.
	if _, err := l.get(netip.AddrPortFrom(slShared, 443), &tls.Config{ServerName: "a.test", RootCAs: l.caPool}, req("b.test", l.ph)); err == nil {
		t.Errorf("Host b.test on a connection terminated for a.test was answered")
	}
	noValue("SNI a.test, Host b.test")
	// Plain HTTP: a.test first, then b.test on the same connection: b.test gets the
	// placeholder (TestBoundSecretsHTTP); and b.test first, then a.test: the connection was
	// opened for b.test, so a.test's request keeps the placeholder too.
	if _, err := l.get(netip.AddrPortFrom(slShared, 80), nil, req("b.test", l.ph), req("a.test", l.ph)); err != nil {
		t.Fatal(err)
	}
	noValue("Host b.test, then a.test")
	// A bound host whose server's certificate no root vouches for: refused before any
	// request.
	if _, err := l.get(netip.AddrPortFrom(slForged, 443), &tls.Config{ServerName: "forged.test", RootCAs: l.caPool}, req("forged.test", l.ph)); err == nil {
		t.Errorf("forged.test, with an untrusted certificate, was relayed")
	}
	if s := l.taken(); len(s) != 0 {
		t.Errorf("forged.test's server got %+v", s)
	}
}

// TestBoundHeaders: a secret with a Header sets that header in every HTTPS request to its
// hosts (terminated), replacing what the sandbox sent (however many times, in whatever
// case), after the placeholders are replaced; a later secret setting the same header wins;
// plain HTTP, and requests to other hosts (on the same connection too), get nothing; and
// nothing is sent back.
func TestBoundHeaders(t *testing.T) {
	const setValue = "Bearer set-value-0123"
	l := newSecretLab(t, &Policy{},
		Secret{Name: "E2B_RULE_0000", Value: "overridden", Hosts: []string{"a.test"}, Header: "x-set"},
		Secret{Name: "E2B_RULE_0001", Value: setValue, Hosts: []string{"a.test"}, Header: "X-Set"})
	l.proxy.learned[slShared] = map[string]bool{"a.test": true, "b.test": true}
	forged := "GET / HTTP/1.1\r\nHost: %s\r\nx-set: forged1\r\nX-SET: forged2\r\nAuthorization: Bearer " + l.ph + "\r\n\r\n"
	plain := "GET / HTTP/1.1\r\nHost: %s\r\n\r\n"
	for _, c := range []struct {
		what string
		dst  netip.AddrPort
		cfg  *tls.Config
	}{{"http", netip.AddrPortFrom(slShared, 80), nil}, {"tls", netip.AddrPortFrom(slShared, 443), &tls.Config{ServerName: "a.test", RootCAs: l.caPool}}} {
		reqs := []string{fmt.Sprintf(plain, "a.test"), fmt.Sprintf(forged, "a.test")}
		if c.cfg == nil {
			reqs = append(reqs, fmt.Sprintf(forged, "b.test"))
		}
		bodies, err := l.get(c.dst, c.cfg, reqs...)
		if err != nil {
			t.Fatalf("%s: %v", c.what, err)
		}
		for _, b := range bodies {
			if strings.Contains(b, "set-value") {
				t.Errorf("%s: a response holds the value: %q", c.what, b)
			}
		}
		seen := l.taken()
		if len(seen) != len(reqs) {
			t.Fatalf("%s: upstream saw %+v", c.what, seen)
		}
		for i, s := range seen[:2] {
			want := []string{setValue} // over TLS only: in plain HTTP, what the sandbox sent
			if c.cfg == nil {
				want = map[int][]string{0: nil, 1: {"forged1", "forged2"}}[i]
			}
			if s.host != "a.test" || fmt.Sprint(s.set) != fmt.Sprint(want) {
				t.Errorf("%s request %d to a.test: X-Set %q, want %q", c.what, i, s.set, want)
			}
		}
		if seen[1].auth != "Bearer "+slValue {
			t.Errorf("%s: the placeholder beside a set header: Authorization %q", c.what, seen[1].auth)
		}
		if c.cfg == nil {
			if s := seen[2]; s.host != "b.test" || len(s.set) != 2 || s.set[0] != "forged1" || s.auth != "Bearer "+l.ph {
				t.Errorf("b.test (not bound) after a.test on one connection: %+v, want what the sandbox sent", s)
			}
		}
	}
	// A header secret alone terminates TLS for its hosts, as a placeholder's does.
	only, err := NewProxy(Config{Secrets: []Secret{{Name: "H", Value: "v", Hosts: []string{"c.test"}, Header: "X-Set"}},
		CACert: l.proxy.cfg.CACert, CAKey: l.proxy.cfg.CAKey}, &Policy{})
	if err != nil || !only.secrets.binds("c.test") || only.secrets.binds("b.test") {
		t.Errorf("a proxy with a header secret only: %v, binds c.test %v", err, err == nil && only.secrets.binds("c.test"))
	}
	for _, bad := range []Secret{
		{Name: "H", Value: "v", Hosts: []string{"a.test"}, Header: "Host"},
		{Name: "H", Value: "v", Hosts: []string{"a.test"}, Header: "transfer-encoding"},
		{Name: "H", Value: "v", Hosts: []string{"a.test"}, Header: "X Bad"},
		{Name: "H", Value: "v\r\nX-Injected: 1", Hosts: []string{"a.test"}, Header: "X-Set"},
		{Name: "H", Value: "v", Hosts: []string{"a.test"}, Header: "X-Set", Placeholder: l.ph},
	} {
		if _, err := NewProxy(Config{Secrets: []Secret{bad}, CACert: l.proxy.cfg.CACert, CAKey: l.proxy.cfg.CAKey}, &Policy{}); err == nil {
			t.Errorf("a proxy with %+v started", bad)
		}
	}
}

// TestBoundHeaderPrecedence: headers are set by the secrets of the most specific host
// that matches (an exact name, else the longest wildcard) only, not merged with the others'.
func TestBoundHeaderPrecedence(t *testing.T) {
	ss, err := parseSecrets([]Secret{
		{Name: "1", Value: "wide", Hosts: []string{"*.example.com"}, Header: "X-A"},
		{Name: "2", Value: "narrow", Hosts: []string{"*.api.example.com"}, Header: "X-B"},
		{Name: "3", Value: "exact", Hosts: []string{"v1.api.example.com"}, Header: "X-C"},
		{Name: "4", Value: "exact2", Hosts: []string{"V1.api.example.com"}, Header: "x-d"},
	})
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string][][2]string{
		"v1.api.example.com": {{"X-C", "exact"}, {"X-D", "exact2"}},
		"v2.api.example.com": {{"X-B", "narrow"}},
		"www.example.com":    {{"X-A", "wide"}},
		"example.com":        nil,
	} {
		if rw := ss.rewrite(name, false); rw != nil {
			t.Errorf("%s in plain HTTP: headers set %q", name, rw.set)
		}
		rw := ss.rewrite(name, true)
		var got [][2]string
		if rw != nil {
			got = rw.set
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: headers set %q, want %q", name, got, want)
		}
	}
}

// TestCANameConstraints: the sandbox CA vouches only for its bound hosts, even for a
// certificate signed with its key.
func TestCANameConstraints(t *testing.T) {
	certPEM, keyPEM, err := NewCA([]string{"api.example.com", "*.git.example.com"})
	if err != nil {
		t.Fatal(err)
	}
	is, err := newIssuer(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(certPEM)
	for name, ok := range map[string]bool{"api.example.com": true, "x.git.example.com": true, "git.example.com": false, "evil.test": false, "example.com": false} {
		c, err := is.cert(name)
		if err != nil {
			t.Fatal(err)
		}
		leaf, _ := x509.ParseCertificate(c.Certificate[0])
		_, err = leaf.Verify(x509.VerifyOptions{DNSName: name, Roots: pool})
		if (err == nil) != ok {
			t.Errorf("%s: verify error %v, want ok=%v", name, err, ok)
		}
	}
}

// TestSecretHosts: a bound secret's hosts are names or wildcards, at least one.
func TestSecretHosts(t *testing.T) {
	for _, c := range []struct {
		hosts []string
		ok    bool
	}{{[]string{"api.github.com"}, true}, {[]string{"*.example.com", "a.test"}, true}, {nil, false},
		{[]string{"10.0.0.1"}, false}, {[]string{"10.0.0.0/8"}, false}, {[]string{"*"}, false}, {[]string{"a.test:443"}, false}} {
		if err := CheckSecretHosts(c.hosts); (err == nil) != c.ok {
			t.Errorf("%q: %v, want ok=%v", c.hosts, err, c.ok)
		}
	}
	ph, _ := NewPlaceholder()
	ph2, _ := NewPlaceholder()
	if !strings.HasPrefix(ph, PlaceholderPrefix) || len(ph) != len(PlaceholderPrefix)+32 || ph == ph2 {
		t.Errorf("placeholders %q %q", ph, ph2)
	}
}

// BenchmarkHTTPS is an HTTPS request on a new connection through the proxy, as a plain
// SNI-checked tunnel (to b.test) and terminated with substitution (to a.test), side by side.
func BenchmarkHTTPS(b *testing.B) {
	l := newSecretLab(b, &Policy{})
	for _, c := range []struct {
		name string
		cfg  *tls.Config
	}{{"tunnel", &tls.Config{ServerName: "b.test", RootCAs: l.labCA}}, {"substituted", &tls.Config{ServerName: "a.test", RootCAs: l.caPool}}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := l.get(netip.AddrPortFrom(slShared, 443), c.cfg, req(c.cfg.ServerName, l.ph)); err != nil {
					b.Fatal(err)
				}
				l.taken()
			}
		})
	}
}
