package server

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/tupper-dev/tupper/internal/netrange"
)

// Webhook targets. A delivery goes to a public address only: the server may run where its
// callers cannot reach (a cloud instance beside its metadata service, a host on a private
// network), and a webhook is a request the server makes on a caller's behalf. The check is
// made on every address a name resolves to, at each connection (DNS can change between
// registration and delivery), before anything is sent; redirects are not followed.
// Config.AllowPrivateWebhooks also lets loopback and private targets through, for a server
// that posts to a service on its own machine or network; link-local addresses (cloud
// metadata) and reserved ranges stay refused.

// webhookTargetError is a target the server does not send to.
type webhookTargetError struct {
	addr  string
	why   string
	allow bool // --allow-private-webhooks would let it through
}

func (e *webhookTargetError) Error() string {
	msg := fmt.Sprintf("webhook target %s is not a public address (%s)", e.addr, e.why)
	if e.allow {
		msg += "; tupper serve --allow-private-webhooks allows loopback and private targets"
	}
	return msg
}

// webhookTargetOK returns nil when a connection to addr may carry a webhook, or why not.
func webhookTargetOK(addr netip.Addr, allowPrivate bool) error {
	r, bad := netrange.Lookup(addr)
	if !bad {
		return nil
	}
	canAllow := r.Kind == netrange.Loopback || r.Kind == netrange.Private
	if allowPrivate && canAllow {
		return nil
	}
	return &webhookTargetError{addr: addr.Unmap().String(), why: r.Why, allow: canAllow && !allowPrivate}
}

// checkWebhookURL refuses, at registration, a URL whose host is an address (or a name of the
// host itself) the server would not send to. A name is checked at each delivery.
func checkWebhookURL(u *url.URL, allowPrivate bool) error {
	host := strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		host = "127.0.0.1"
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return nil
	}
	if err := webhookTargetOK(a, allowPrivate); err != nil {
		return badRequest("%v", err)
	}
	return nil
}

// errWebhookRedirect marks a delivery answered with a redirect, which is not followed.
var errWebhookRedirect = errors.New("redirects are not followed")

// webhookClient is the client of deliveries: no proxy (the target's address is what is
// checked), the address check on every connection, no redirects, 10 s per attempt.
func webhookClient(allowPrivate bool) *http.Client {
	d := &net.Dialer{
		Timeout: 10 * time.Second,
		Control: func(network, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return &webhookTargetError{addr: address, why: "not an address"}
			}
			return webhookTargetOK(ap.Addr(), allowPrivate)
		},
	}
	return &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			Proxy:               nil,
			DialContext:         d.DialContext,
			TLSHandshakeTimeout: 10 * time.Second,
			MaxIdleConnsPerHost: 4,
			IdleConnTimeout:     90 * time.Second,
			ForceAttemptHTTP2:   true,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}
