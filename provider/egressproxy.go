package provider

import (
	"fmt"
	"net"
	"strconv"
	"strings"
)

// EgressProxy is a SOCKS5 proxy (RFC 1928) a sandbox's egress is tunnelled through, on the
// host, after the policy's checks: the sandbox does not see it. A connection whose server
// name the provider knows (the TLS SNI or HTTP Host it checked, or the allowed name whose
// DNS answer held the address) asks the proxy for the name (remote DNS), any other for
// the address. UDP is not tunnelled. It fails closed: a proxy that cannot be reached, or
// refuses, fails the connection; nothing goes out directly instead.
//
// Address is host:port; a host name is resolved when each connection is made, and the
// provider refuses an address that is not public (unless its operator allowed that range).
// Username and Password are RFC 1929's, at most 255 bytes each; a Password needs a
// Username. Password is a credential: it is never logged nor returned (Redacted).
type EgressProxy struct {
	Address  string `json:"address"`
	Username string `json:"username,omitempty"`
	Password string `json:"password,omitempty"`
}

// Validate checks the proxy's form (not where its address leads).
func (p *EgressProxy) Validate() error {
	if p == nil {
		return nil
	}
	host, port, err := net.SplitHostPort(p.Address)
	if err != nil || host == "" || port == "" {
		return Errorf(CodeInvalidArgument, "egress proxy address %q is not host:port", StripCredentials(p.Address))
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return Errorf(CodeInvalidArgument, "egress proxy address %q: the port is not a number from 1 to 65535", StripCredentials(p.Address))
	}
	if len(host) > 255 || strings.ContainsAny(host, " /@\x00\r\n\t") {
		return Errorf(CodeInvalidArgument, "egress proxy address %q: the host is not a name or an IP address", StripCredentials(p.Address))
	}
	if len(p.Username) > 255 || len(p.Password) > 255 {
		return Errorf(CodeInvalidArgument, "egress proxy username and password have at most 255 bytes each (RFC 1929)")
	}
	if p.Password != "" && p.Username == "" {
		return Errorf(CodeInvalidArgument, "egress proxy password given without a username")
	}
	return nil
}

// Redacted is the proxy without its password: what Info, lists and logs show.
func (p *EgressProxy) Redacted() *EgressProxy {
	if p == nil {
		return nil
	}
	return &EgressProxy{Address: p.Address, Username: p.Username}
}

// String is the proxy's address, with its username when it has one; never the password.
func (p *EgressProxy) String() string {
	if p == nil {
		return ""
	}
	if p.Username != "" {
		return fmt.Sprintf("socks5://%s@%s", p.Username, p.Address)
	}
	return "socks5://" + p.Address
}
