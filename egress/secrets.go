package egress

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// Bound secrets.
//
// A bound secret is a value the sandbox never holds: its environment has a placeholder
// (PlaceholderPrefix and 32 random hex digits, different for each secret of each sandbox)
// under the secret's name, and the proxy writes the real value in place of the placeholder
// in the HTTP requests it relays to the secret's hosts, and in no others. Hosts are exact
// names or wildcards, as in an allow list; addresses are not accepted, since the proxy
// must know the name it is talking to.
//
// Plain HTTP (port 80) is read as today; HTTPS (port 443) to a bound host is terminated by
// the proxy with a certificate for the name signed by the sandbox's own CA (NewCA), whose
// certificate the sandbox trusts; the proxy opens its own TLS connection to the real
// server, verifying it against the host's roots. Every other TLS connection stays an
// end-to-end tunnel checked by SNI. In a request to a bound host the placeholder is
// replaced in every header value (an Authorization: Basic value is decoded, replaced and
// encoded again) and in the query of the request line; never in a body, and never in
// anything sent back to the sandbox.
//
// A secret with a Header has no placeholder: the proxy sets that header to the value in
// every HTTPS request to the secret's hosts, replacing any the sandbox sent (after the
// placeholders are replaced, so the value is written as it is). Never in plain HTTP: the
// sandbox did not choose to send the value, and there anything on the way would read it.
// Such secrets are not
// merged across hosts: for a request, only those whose host matches it most specifically
// (an exact name, else the longest wildcard) are set, and where two of them set one header
// the later in the list wins. They ride on the same termination of TLS, for the same hosts.

// PlaceholderPrefix begins every placeholder.
const PlaceholderPrefix = "tupper_secret_"

// Secret is a bound secret as the proxy holds it (in its configuration file, outside the
// sandbox).
type Secret struct {
	Name        string   `json:"name"`
	Placeholder string   `json:"placeholder,omitempty"` // "" when Header is set
	Value       string   `json:"value"`
	Hosts       []string `json:"hosts"`
	Header      string   `json:"header,omitempty"` // the header set to Value, instead of a placeholder
}

// CheckHeader checks the name of a header a bound secret sets: an HTTP field name, and not
// one that frames the request or names its destination (Host, Content-Length,
// Transfer-Encoding, and the hop-by-hop headers), which the proxy must keep as the
// sandbox sent them.
func CheckHeader(name string) error {
	if name == "" {
		return errors.New("empty header name")
	}
	for _, c := range []byte(name) {
		if !isTokenByte(c) {
			return fmt.Errorf("header name %q is not an HTTP field name", name)
		}
	}
	switch http.CanonicalHeaderKey(name) {
	case "Host", "Content-Length", "Transfer-Encoding", "Connection", "Keep-Alive", "Proxy-Connection",
		"Te", "Trailer", "Upgrade", "Proxy-Authorization", "Proxy-Authenticate":
		return fmt.Errorf("header %s frames the request or is hop-by-hop: a bound secret cannot set it", http.CanonicalHeaderKey(name))
	}
	return nil
}

// isTokenByte reports whether c may be in an HTTP token (RFC 9110, 5.6.2).
func isTokenByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// NewPlaceholder returns a fresh random placeholder.
func NewPlaceholder() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return PlaceholderPrefix + hex.EncodeToString(b), nil
}

// CheckSecretHosts checks the hosts of a bound secret: at least one, each an exact domain
// name or a wildcard (*.example.com).
func CheckSecretHosts(hosts []string) error {
	_, err := parseHosts(hosts)
	return err
}

func parseHosts(hosts []string) (rules, error) {
	var r rules
	if len(hosts) == 0 {
		return r, errors.New("a bound secret needs at least one host")
	}
	var errs []string
	for _, h := range hosts {
		if err := r.add(h); err != nil {
			errs = append(errs, fmt.Sprintf("host %q: %v", h, err))
			continue
		}
		if len(r.prefixes) > 0 {
			r.prefixes = nil
			errs = append(errs, fmt.Sprintf("host %q: a bound secret's host is a domain name or a wildcard, not an address", h))
		}
	}
	if len(errs) > 0 {
		return r, errors.New(strings.Join(errs, "; "))
	}
	return r, nil
}

// secret is a Secret with its hosts parsed.
type secret struct {
	placeholder, value string
	header             string // canonical; "" for a placeholder's secret
	hosts              rules
}

// secrets are a proxy's bound secrets.
type secrets []secret

func parseSecrets(list []Secret) (secrets, error) {
	var out secrets
	for _, s := range list {
		if s.Header != "" {
			if s.Placeholder != "" {
				return nil, fmt.Errorf("secret %s: a secret that sets a header has no placeholder", s.Name)
			}
			if err := CheckHeader(s.Header); err != nil {
				return nil, fmt.Errorf("secret %s: %v", s.Name, err)
			}
			if strings.ContainsAny(s.Value, "\x00\r\n") {
				return nil, fmt.Errorf("secret %s: a header value holds no NUL or line break", s.Name)
			}
		} else if !strings.HasPrefix(s.Placeholder, PlaceholderPrefix) || len(s.Placeholder) < len(PlaceholderPrefix)+32 {
			return nil, fmt.Errorf("secret %s: placeholder is not one NewPlaceholder made", s.Name)
		}
		h, err := parseHosts(s.Hosts)
		if err != nil {
			return nil, fmt.Errorf("secret %s: %v", s.Name, err)
		}
		out = append(out, secret{placeholder: s.Placeholder, value: s.Value, header: http.CanonicalHeaderKey(s.Header), hosts: h})
	}
	return out, nil
}

// binds reports whether a secret is bound to name.
func (ss secrets) binds(name string) bool {
	for _, s := range ss {
		if s.hosts.matchName(name) {
			return true
		}
	}
	return false
}

// rewrite is what the proxy changes in the requests to one bound name.
type rewrite struct {
	header, query *strings.Replacer // placeholders to values; nil when no placeholder is bound
	set           [][2]string       // headers set (canonical name, value), in order
}

// rewrite returns the changes for a request to name, or nil when there are none. Headers
// are set over TLS only, by the secrets whose hosts match name most specifically; where two
// of those set one header, the later in the list wins.
func (ss secrets) rewrite(name string, overTLS bool) *rewrite {
	var hp, qp []string
	best := -1
	for _, s := range ss {
		if s.header != "" && overTLS {
			best = max(best, s.hosts.specificity(name))
		}
	}
	var set [][2]string
	for _, s := range ss {
		if !s.hosts.matchName(name) {
			continue
		}
		if s.header != "" {
			if overTLS && s.hosts.specificity(name) == best {
				set = append(set, [2]string{s.header, s.value})
			}
			continue
		}
		hp = append(hp, s.placeholder, s.value)
		qp = append(qp, s.placeholder, url.QueryEscape(s.value))
	}
	if hp == nil && set == nil {
		return nil
	}
	rw := &rewrite{set: set}
	if hp != nil {
		rw.header, rw.query = strings.NewReplacer(hp...), strings.NewReplacer(qp...)
	}
	return rw
}

// apply writes the secrets into req: the placeholders' values in every header value
// (inside an Authorization Basic value too) and in the query of the request line, then the
// headers set, each replacing every value the request had under that name.
func (rw *rewrite) apply(req *http.Request) {
	if rw.header != nil {
		substitute(rw.header, rw.query, req)
	}
	for _, h := range rw.set {
		req.Header[h[0]] = []string{h[1]}
	}
}

// substitute writes the secrets bound to the request's host in place of their
// placeholders: in every header value, inside an Authorization Basic value, and in the
// query of the request line.
func substitute(header, query *strings.Replacer, req *http.Request) {
	for _, vs := range req.Header {
		for i, v := range vs {
			if scheme, cred, ok := strings.Cut(v, " "); ok && strings.EqualFold(scheme, "basic") {
				if raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(cred)); err == nil {
					if s := header.Replace(string(raw)); s != string(raw) {
						vs[i] = scheme + " " + base64.StdEncoding.EncodeToString([]byte(s))
						continue
					}
				}
			}
			vs[i] = header.Replace(v)
		}
	}
	if req.URL != nil && req.URL.RawQuery != "" {
		req.URL.RawQuery = query.Replace(req.URL.RawQuery)
	}
}

// NewCA makes a sandbox's CA: an ECDSA P-256 key and a self-signed certificate valid for
// ten years, whose name constraints permit only hosts (exact names, and the names below a
// wildcard's domain), so that it vouches for nothing else even where it is trusted. It
// returns both in PEM.
func NewCA(hosts []string) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, err
	}
	var permitted []string
	for _, h := range hosts {
		h = canonical(strings.TrimSpace(h))
		if rest, ok := strings.CutPrefix(h, "*."); ok {
			permitted = append(permitted, "."+rest)
		} else {
			permitted = append(permitted, h)
		}
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: "tupper sandbox egress CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.AddDate(10, 0, 0),
		IsCA: true, BasicConstraintsValid: true, MaxPathLenZero: true,
		KeyUsage:                    x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		PermittedDNSDomainsCritical: true, PermittedDNSDomains: permitted,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), nil
}

// issuer signs the certificates the proxy presents for bound hosts, one per name, kept.
type issuer struct {
	ca     *x509.Certificate
	caKey  *ecdsa.PrivateKey
	leaf   *ecdsa.PrivateKey // one key for every name
	mu     sync.Mutex
	issued map[string]*tls.Certificate
}

func newIssuer(certPEM, keyPEM []byte) (*issuer, error) {
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("sandbox CA: %w", err)
	}
	ca, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("sandbox CA: %w", err)
	}
	caKey, ok := pair.PrivateKey.(*ecdsa.PrivateKey)
	if !ok {
		return nil, errors.New("sandbox CA: not an ECDSA key")
	}
	leaf, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	return &issuer{ca: ca, caKey: caKey, leaf: leaf, issued: map[string]*tls.Certificate{}}, nil
}

// cert returns the certificate for name, issuing it the first time.
func (is *issuer) cert(name string) (*tls.Certificate, error) {
	is.mu.Lock()
	defer is.mu.Unlock()
	if c, ok := is.issued[name]; ok {
		return c, nil
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: is.ca.NotAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, is.ca, &is.leaf.PublicKey, is.caKey)
	if err != nil {
		return nil, err
	}
	c := &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: is.leaf}
	is.issued[name] = c
	return c, nil
}
