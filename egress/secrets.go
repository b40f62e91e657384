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

// PlaceholderPrefix begins every placeholder.
const PlaceholderPrefix = "tupper_secret_"

// Secret is a bound secret as the proxy holds it (in its configuration file, outside the
// sandbox).
type Secret struct {
	Name        string   `json:"name"`
	Placeholder string   `json:"placeholder"`
	Value       string   `json:"value"`
	Hosts       []string `json:"hosts"`
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
	hosts              rules
}

// secrets are a proxy's bound secrets.
type secrets []secret

func parseSecrets(list []Secret) (secrets, error) {
	var out secrets
	for _, s := range list {
		if !strings.HasPrefix(s.Placeholder, PlaceholderPrefix) || len(s.Placeholder) < len(PlaceholderPrefix)+32 {
			return nil, fmt.Errorf("secret %s: placeholder is not one NewPlaceholder made", s.Name)
		}
		h, err := parseHosts(s.Hosts)
		if err != nil {
			return nil, fmt.Errorf("secret %s: %v", s.Name, err)
		}
		out = append(out, secret{placeholder: s.Placeholder, value: s.Value, hosts: h})
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

// replacers return the replacements for a request to name, in header values and in a query
// (where the value is percent-encoded), or nils when no secret is bound to name.
func (ss secrets) replacers(name string) (header, query *strings.Replacer) {
	var hp, qp []string
	for _, s := range ss {
		if s.hosts.matchName(name) {
			hp = append(hp, s.placeholder, s.value)
			qp = append(qp, s.placeholder, url.QueryEscape(s.value))
		}
	}
	if hp == nil {
		return nil, nil
	}
	return strings.NewReplacer(hp...), strings.NewReplacer(qp...)
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
