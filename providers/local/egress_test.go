//go:build linux

package local

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/sys/unix"

	"github.com/tupper-dev/tupper/internal/testenv"
	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/providers/local/internal/hostnet"
	"github.com/tupper-dev/tupper/providers/remote"
	"github.com/tupper-dev/tupper/sandbox"
	"github.com/tupper-dev/tupper/server"
	"github.com/tupper-dev/tupper/store"
)

// The egress lab: a small internet in a namespace the test makes (the same shape as
// TestSecurityNetwork's: the test runs in a child with namespaces of its own, whose
// default route is the upstream namespace). Upstream serves, on addresses routed only
// there:
//
//	10.77.0.53:53        the resolver the host's resolv.conf names (UDP and TCP)
//	11.22.34.1           a.test and b.test share it (a CDN): HTTP :80, TLS :443, TCP :7000, UDP :7001
//	11.22.34.2, .4, .5, .6   c.test (allowed by address), x.w.test, deny.w.test, and an address no name has
//	11.22.35.1, .9       in an allowed /24; .9 denied
//	10.77.0.10           a private address, which rebind.test also answers with (with .9)
//
// Every HTTP and TLS server answers "HOST NAME" with the name it was asked for, and
// records it, so a test sees what reached the internet, not only what the sandbox saw.
var (
	egShared  = netip.MustParseAddr("11.22.34.1")
	egByAddr  = netip.MustParseAddr("11.22.34.2")
	egWild    = netip.MustParseAddr("11.22.34.4")
	egWildDen = netip.MustParseAddr("11.22.34.5")
	egNoName  = netip.MustParseAddr("11.22.34.6")
	egCIDR    = netip.MustParseAddr("11.22.35.1")
	egDenied  = netip.MustParseAddr("11.22.35.9")

	egAllow = []string{"a.test", "*.w.test", "rebind.test", "11.22.34.2", "11.22.35.0/24"}
	egDeny  = []string{"deny.w.test", "11.22.35.9"}
	egZone  = map[string][]netip.Addr{
		"a.test.":      {egShared},
		"b.test.":      {egShared},
		"c.test.":      {egByAddr},
		"x.w.test.":    {egWild},
		"deny.w.test.": {egWildDen},
		"w.test.":      {egWild},
		"rebind.test.": {labPrivate, egDenied},
	}
)

// TestEgressPolicy is network "allow" under each runtime, as an adversary root in the
// sandbox would try it: one sandbox per runtime, shared by the subtests.
func TestEgressPolicy(t *testing.T) {
	forRuntimesInNetns(t, false, testEgress)
}

// egressHelperSource is the in-sandbox client of the egress tests. Each command prints one
// line: "ok RESULT" or "err WHY".
//
//	dns SERVER:PORT udp|tcp NAME   A records of NAME asked of SERVER
//	http ADDR HOST...              GET / with each Host in turn on one connection
//	tls ADDR SNI                   a TLS handshake (no verification) and GET /
//	connect ADDR                   a TCP connection, then a read (the proxy connects first)
//	udp ADDR                       one datagram
//	bench ADDR SNI N CONC          N HTTPS GETs, each on a new connection, CONC at a time:
//	                               "ok p50=µs p90=µs rps=R"
//	hold ADDR HOST FILE            GET / with Host, then keep the connection: "held" in FILE
//	                               once answered, "cut" when the connection ends (30 s at most)
const egressHelperSource = `package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
)

func main() {
	fmt.Println(run(os.Args[1], os.Args[2:]))
}

func run(cmd string, a []string) string {
	d := net.Dialer{Timeout: 5 * time.Second}
	switch cmd {
	case "dns":
		r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return d.DialContext(ctx, a[1], a[0])
		}}
		ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
		defer cancel()
		ips, err := r.LookupIP(ctx, "ip4", a[2])
		if err != nil {
			return "err " + err.Error()
		}
		var s []string
		for _, ip := range ips {
			s = append(s, ip.String())
		}
		return "ok " + strings.Join(s, ",")
	case "http":
		c, err := d.Dial("tcp", a[0])
		if err != nil {
			return "err " + err.Error()
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(8 * time.Second))
		br := bufio.NewReader(c)
		var got []string
		for _, h := range a[1:] {
			fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s\r\n\r\n", h)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				return "err " + strings.Join(append(got, err.Error()), " ")
			}
			b, _ := io.ReadAll(resp.Body)
			got = append(got, strings.TrimSpace(string(b)))
		}
		return "ok " + strings.Join(got, ",")
	case "tls":
		c, err := tls.DialWithDialer(&d, "tcp", a[0], &tls.Config{ServerName: a[1], InsecureSkipVerify: true})
		if err != nil {
			return "err " + err.Error()
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(8 * time.Second))
		fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s\r\n\r\n", a[1])
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return "err " + err.Error()
		}
		b, _ := io.ReadAll(resp.Body)
		return "ok " + strings.TrimSpace(string(b))
	case "connect":
		c, err := d.Dial("tcp", a[0])
		if err != nil {
			return "err " + err.Error()
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		b := make([]byte, 64)
		n, err := c.Read(b)
		if n == 0 {
			return "err " + fmt.Sprint(err)
		}
		return "ok " + strings.TrimSpace(string(b[:n]))
	case "hold":
		c, err := d.Dial("tcp", a[0])
		if err != nil {
			return "err " + err.Error()
		}
		defer c.Close()
		br := bufio.NewReader(c)
		fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s\r\n\r\n", a[1])
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return "err " + err.Error()
		}
		io.ReadAll(resp.Body)
		os.WriteFile(a[2], []byte("held\n"), 0o644)
		c.SetReadDeadline(time.Now().Add(30 * time.Second))
		_, err = br.ReadByte()
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			os.WriteFile(a[2], []byte("held, never cut\n"), 0o644)
			return "err no end"
		}
		os.WriteFile(a[2], []byte("cut\n"), 0o644)
		return "ok cut"
	case "bench":
		// bench ADDR SNI N CONC: N HTTPS GETs, each on a new connection, CONC at a time.
		n, _ := strconv.Atoi(a[2])
		conc, _ := strconv.Atoi(a[3])
		lat := make([]time.Duration, n)
		next := make(chan int, n)
		for i := range n {
			next <- i
		}
		close(next)
		errs := make(chan error, conc)
		start := time.Now()
		for range conc {
			go func() {
				for i := range next {
					t0 := time.Now()
					c, err := tls.DialWithDialer(&d, "tcp", a[0], &tls.Config{ServerName: a[1], InsecureSkipVerify: true})
					if err != nil {
						errs <- err
						return
					}
					fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", a[1])
					resp, err := http.ReadResponse(bufio.NewReader(c), nil)
					if err == nil {
						_, err = io.ReadAll(resp.Body)
					}
					c.Close()
					if err != nil {
						errs <- err
						return
					}
					lat[i] = time.Since(t0)
				}
				errs <- nil
			}()
		}
		for range conc {
			if err := <-errs; err != nil {
				return "err " + err.Error()
			}
		}
		total := time.Since(start)
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		return fmt.Sprintf("ok p50=%d p90=%d rps=%.1f", lat[n/2].Microseconds(), lat[n*9/10].Microseconds(), float64(n)/total.Seconds())
	case "udp":
		c, err := d.Dial("udp", a[0])
		if err != nil {
			return "err " + err.Error()
		}
		defer c.Close()
		if _, err := c.Write([]byte("hi")); err != nil {
			return "err " + err.Error()
		}
		return "ok sent"
	}
	return "err unknown command"
}
`

const egHelperIn = "/tmp/tupper-egress"

type egressLab struct {
	ctx    context.Context
	p      *Provider
	caPEM  []byte
	seen   *tally // names served upstream, by "proto address"
	auth   *tally // Authorization headers served upstream, by "proto address host"
	udp    *tally
	helper []byte
}

func testEgress(t *testing.T, rt string) {
	l := newEgressLab(t, nil)
	l.p = newTestProviderConfig(t, Config{Runtime: rt, Subnet: "10.216.201.0/24", Bridge: "tpeg" + rt, EgressRoots: l.caPEM})
	// The sandbox is made, changed and destroyed through a real server on loopback: its REST
	// API and its E2B API.
	api := l.startServer(t)
	var made struct{ ID string }
	api.want(t, 201, &made, "POST", "/v1/sandboxes", map[string]any{"network": map[string]any{"allow": egAllow, "deny": egDeny}})
	pi, err := l.p.Connect(l.ctx, made.ID)
	if err != nil {
		t.Fatal(err)
	}
	inst := pi.(*Instance)
	m := uint32(0o755)
	if err := inst.WriteFile(l.ctx, egHelperIn, bytes.NewReader(l.helper), &m); err != nil {
		t.Fatal(err)
	}
	if err := inst.WriteFile(l.ctx, "/tmp/ca.pem", bytes.NewReader(l.caPEM), nil); err != nil {
		t.Fatal(err)
	}
	gw := "10.216.201.1:53"
	h := func(args string) string { return strings.TrimSpace(run(t, inst, egHelperIn+" "+args)) }
	want := func(what, got, prefix string) {
		t.Helper()
		if !strings.HasPrefix(got, prefix) {
			t.Errorf("%s: %q, want %q…", what, got, prefix)
		}
	}

	t.Run("allowed", func(t *testing.T) {
		// The sandbox's own resolver configuration, a real client, the test CA.
		out, _, code := runCode(t, inst, "curl -sS --max-time 10 --cacert /tmp/ca.pem https://a.test/ && curl -sS --max-time 10 http://a.test/")
		if code != 0 || strings.TrimSpace(out) != "tls a.test\nhttp a.test" {
			t.Errorf("curl of a.test: exit %d, %q", code, out)
		}
		want("dns a.test", h("dns "+gw+" udp a.test"), "ok "+egShared.String())
		want("wildcard x.w.test", h("dns "+gw+" udp x.w.test"), "ok "+egWild.String())
		want("http x.w.test", h("http "+egWild.String()+":80 x.w.test"), "ok http x.w.test")
		want("by address, any port", h("connect "+egByAddr.String()+":7000"), "ok hello")
		want("in an allowed CIDR", h("connect "+egCIDR.String()+":7000"), "ok hello")
		want("learned address, another port", h("connect "+egShared.String()+":7000"), "ok hello")
	})
	t.Run("denied names", func(t *testing.T) {
		for _, name := range []string{"b.test", "c.test", "deny.w.test", "w.test"} {
			want("dns "+name, h("dns "+gw+" udp "+name), "err ")
		}
	})
	t.Run("shared address, other name", func(t *testing.T) {
		// a.test was learned on the shared address; b.test behind it stays closed.
		want("SNI b.test", h("tls "+egShared.String()+":443 b.test"), "err ")
		want("Host b.test", h("http "+egShared.String()+":80 b.test"), "err ")
		want("Host a.test then b.test", h("http "+egShared.String()+":80 a.test b.test"), "err ")
		want("no SNI", h("tls "+egShared.String()+":443 ''"), "err ")
		want("SNI a.test", h("tls "+egShared.String()+":443 a.test"), "ok tls a.test")
		for _, k := range []string{"tls " + egShared.String(), "http " + egShared.String()} {
			for _, name := range l.seen.peers(k) {
				if name != "a.test" {
					t.Errorf("%s served %q upstream", k, name)
				}
			}
		}
	})
	t.Run("addresses", func(t *testing.T) {
		want("no name has it", h("connect "+egNoName.String()+":7000"), "err ")
		want("denied in an allowed CIDR", h("connect "+egDenied.String()+":7000"), "err ")
		want("private", h("connect "+labPrivate.String()+":7000"), "err ")
		want("the gateway", h("connect 10.216.201.1:22"), "err ")
		// rebind.test is allowed, but its answer held only a private and a denied address.
		want("rebind.test", h("dns "+gw+" udp rebind.test"), "err ")
	})
	t.Run("resolver", func(t *testing.T) {
		// Root changes the sandbox's resolver, or asks another server, over UDP or TCP:
		// every query reaches the proxy.
		run(t, inst, "echo nameserver "+labResolver.String()+" > /etc/resolv.conf")
		want("curl b.test via upstream", func() string {
			o, e, code := runCode(t, inst, "curl -sS --max-time 5 http://b.test/")
			return fmt.Sprint(code, o, e)
		}(), "6") // curl: could not resolve host
		for _, srv := range []string{labResolver.String() + ":53", labPublic.String() + ":53"} {
			for _, proto := range []string{"udp", "tcp"} {
				want("b.test at "+srv+" over "+proto, h("dns "+srv+" "+proto+" b.test"), "err ")
				want("a.test at "+srv+" over "+proto, h("dns "+srv+" "+proto+" a.test"), "ok "+egShared.String())
			}
		}
	})
	t.Run("udp", func(t *testing.T) {
		want("send", h("udp "+egCIDR.String()+":7001"), "ok")
		h("udp " + egShared.String() + ":7001")
		h("udp " + egDenied.String() + ":7001")
		deadline := time.Now().Add(3 * time.Second)
		for len(l.udp.peers(egCIDR.String())) == 0 && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if len(l.udp.peers(egCIDR.String())) == 0 {
			t.Errorf("UDP to an allowed CIDR did not arrive")
		}
		for _, a := range []netip.Addr{egShared, egDenied} {
			if got := l.udp.peers(a.String()); len(got) > 0 {
				t.Errorf("UDP to %s (not allowed by address) arrived from %v", a, got)
			}
		}
	})
	t.Run("ipv6", func(t *testing.T) {
		run(t, inst, "ip -6 addr add fd77:216::2/64 dev eth0 2>/dev/null; ip -6 route add default via fd77:216::1 2>/dev/null; true")
		want("IPv6", h("connect [fd77::10]:7000"), "err ")
	})
	t.Run("log", func(t *testing.T) {
		b, err := os.ReadFile(l.p.lay.egressLog(inst.ID()))
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range []string{`"name":"b.test","type":"A","allowed":false`, `"name":"a.test","type":"A","allowed":true`} {
			if !bytes.Contains(b, []byte(s)) {
				t.Errorf("the query log lacks %s:\n%s", s, b)
			}
		}
	})
	t.Run("denials are events", func(t *testing.T) {
		// b.test was refused above: the server's egress loop makes it an event, stored and
		// delivered to a webhook on loopback.
		var ev struct {
			Type string `json:"type"`
			Data struct {
				Destination, Kind, Reason string
			} `json:"data"`
		}
		select {
		case body := <-api.hooks:
			if err := json.Unmarshal(body, &ev); err != nil {
				t.Fatal(err)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("no sandbox.egress_denied delivered to the webhook within 20 s")
		}
		if ev.Type != "sandbox.egress_denied" || ev.Data.Destination == "" || ev.Data.Reason == "" {
			t.Errorf("webhook delivery: %+v", ev)
		}
		// The server's egress loop makes the proxy's log into events as it reads it: the first
		// delivery says it runs, not that it has read every denial yet. Each must be an event
		// within the same 20 s.
		wantDenied := []string{"b.test", "deny.w.test", "c.test", egNoName.String() + ":7000", egDenied.String() + ":7000"}
		got := map[string]string{}
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			var list struct {
				Events []struct {
					Data struct{ Destination, Kind, Reason, Address string }
				}
			}
			api.want(t, 200, &list, "GET", "/v1/events?type=sandbox.egress_denied&sandbox="+inst.ID(), nil)
			got = map[string]string{}
			for _, e := range list.Events {
				got[e.Data.Destination] = e.Data.Reason
			}
			if !slices.ContainsFunc(wantDenied, func(d string) bool { return got[d] == "" }) || time.Now().After(deadline) {
				break
			}
		}
		for _, d := range wantDenied {
			if got[d] == "" {
				t.Errorf("no sandbox.egress_denied event for %s: %v", d, got)
			}
		}
		if _, ok := got["a.test"]; ok {
			t.Errorf("an event for a.test, which is allowed: %v", got)
		}
		// The record itself, over REST: allowed entries once each, refusals with their reason.
		var page struct {
			Entries []struct {
				Kind, Name, Dest, Reason string
				Allowed                  bool
			}
			Cursor string
			More   bool
		}
		api.want(t, 200, &page, "GET", "/v1/sandboxes/"+inst.ID()+"/egress", nil)
		var allowedA, deniedB, connectA int
		for _, e := range page.Entries {
			switch {
			case e.Kind == "dns" && e.Name == "a.test" && e.Allowed:
				allowedA++
			case e.Kind == "dns" && e.Name == "b.test" && !e.Allowed:
				deniedB++
			case e.Kind == "connect" && e.Name == "a.test" && e.Allowed:
				connectA++
			}
		}
		if allowedA == 0 || deniedB == 0 || connectA == 0 || page.Cursor == "" {
			t.Errorf("egress record: a.test asked %d, b.test refused %d, a.test connected %d, cursor %q", allowedA, deniedB, connectA, page.Cursor)
		}
		// The same through the Go SDK over the server (providers/remote).
		box, err := sandbox.Connect(l.ctx, remote.New(remote.Config{URL: api.url, APIKey: api.key}), inst.ID(), sandbox.ConnectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer box.Close()
		entries, _, err := box.EgressSince(l.ctx, "", 0)
		if err != nil {
			t.Fatal(err)
		}
		if denied := sandbox.Denied(entries); !slices.Contains(denied, "b.test") || slices.Contains(denied, "a.test") {
			t.Errorf("Sandbox.Egress over the server: denied %q, want b.test and not a.test", denied)
		}
		var next struct {
			Entries []json.RawMessage
			Cursor  string
		}
		api.want(t, 200, &next, "GET", "/v1/sandboxes/"+inst.ID()+"/egress?after="+page.Cursor, nil)
		if page.More == false && (len(next.Entries) != 0 || next.Cursor != page.Cursor) {
			t.Errorf("read from the end: %d entries, cursor %q (was %q)", len(next.Entries), next.Cursor, page.Cursor)
		}
		// The summary over the API is the SDK's reading of the same record.
		var learned struct{ Allow, Denied []string }
		api.want(t, 200, &learned, "GET", "/v1/sandboxes/"+inst.ID()+"/egress/learned", nil)
		if want := sandbox.LearnAllowList(entries); !slices.Equal(learned.Allow, want) || !slices.Contains(learned.Allow, "a.test") {
			t.Errorf("egress/learned allow %q, want %q (with a.test)", learned.Allow, want)
		}
		if want := sandbox.Denied(entries); !slices.Equal(learned.Denied, want) || !slices.Contains(learned.Denied, "b.test") {
			t.Errorf("egress/learned denied %q, want %q (with b.test)", learned.Denied, want)
		}
	})
	t.Run("bound secrets", func(t *testing.T) { l.boundSecrets(t, api) })
	t.Run("e2b secrets", func(t *testing.T) { l.e2bSecrets(t, api) })
	t.Run("cli", func(t *testing.T) { testEgressCLI(t, l, rt) })
	t.Run("measure", func(t *testing.T) { l.measure(t, api, inst) })
	t.Run("set network", func(t *testing.T) {
		// A connection to a.test stays open across the change that denies a.test.
		run(t, inst, "rm -f /tmp/hold; "+egHelperIn+" hold "+egShared.String()+":80 a.test /tmp/hold >/dev/null 2>&1 &")
		waitFile(t, inst, "/tmp/hold", "held")
		api.want(t, 204, nil, "PUT", "/v1/sandboxes/"+inst.ID()+"/network", map[string]any{"allow": []string{"b.test"}})
		// SetNetwork returns once the proxy has cut it.
		waitFile(t, inst, "/tmp/hold", "cut")
		// The policy now, read back: raw, and through the Go SDK over the server.
		var got struct {
			Mode  string
			Allow []string
			Deny  []string
		}
		api.want(t, 200, &got, "GET", "/v1/sandboxes/"+inst.ID()+"/network", nil)
		if got.Mode != "allow" || !slices.Equal(got.Allow, []string{"b.test"}) || len(got.Deny) != 0 {
			t.Errorf("GET network after the change: %+v, want allow [b.test]", got)
		}
		box, err := sandbox.Connect(l.ctx, remote.New(remote.Config{URL: api.url, APIKey: api.key}), inst.ID(), sandbox.ConnectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if n, err := box.Network(l.ctx); err != nil || n.Mode != "allow" || !slices.Equal(n.Allow, []string{"b.test"}) {
			t.Errorf("Sandbox.Network over the server: %+v %v", n, err)
		}
		box.Close()
		api.want(t, 404, nil, "GET", "/v1/sandboxes/nosuchsandbox/network", nil)
		want("a.test after the change", h("dns "+gw+" udp a.test"), "err ")
		// The shared address was learned from a.test, denied now: b.test must be asked.
		want("b.test before its answer", h("http "+egShared.String()+":80 b.test"), "err ")
		want("dns b.test after the change", h("dns "+gw+" udp b.test"), "ok "+egShared.String())
		want("b.test after the change", h("http "+egShared.String()+":80 b.test"), "ok http b.test")
		want("11.22.35.1 after the change", h("connect "+egCIDR.String()+":7000"), "err ")
		// E2B's updateNetwork: allowOut wins over denyOut 0.0.0.0/0.
		api.want(t, 204, nil, "PUT", "/sandboxes/"+inst.ID()+"/network", map[string]any{"allowOut": []string{"a.test"}, "denyOut": []string{"0.0.0.0/0"}}, "X-API-Key", api.key)
		want("a.test after E2B's update", h("http "+egShared.String()+":80 a.test"), "ok http a.test")
		want("b.test after E2B's update", h("dns "+gw+" udp b.test"), "err ")
		api.want(t, 400, nil, "PUT", "/v1/sandboxes/"+inst.ID()+"/network", map[string]any{"allow": []string{"*"}})
	})
	t.Run("a proxy that does not answer", func(t *testing.T) {
		// A proxy that cannot take a policy says why in its Applied file (egress.Reload's
		// test); one that says nothing, here stopped, is named in the error with its pid.
		rec, err := l.p.lay.readRecord(inst.ID())
		if err != nil || rec.Egress == nil {
			t.Fatalf("record: %+v %v", rec, err)
		}
		pol := provider.Network{Mode: provider.NetworkAllow, Allow: []string{"a.test"}}
		if err := unix.Kill(rec.Egress.PID, unix.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		err = inst.SetNetwork(l.ctx, pol)
		unix.Kill(rec.Egress.PID, unix.SIGCONT)
		if err == nil || provider.CodeOf(err) != provider.CodeUnavailable ||
			!strings.Contains(err.Error(), "did not say it took the new policy") || !strings.Contains(err.Error(), strconv.Itoa(rec.Egress.PID)) {
			t.Fatalf("SetNetwork with the proxy stopped: %v, want unavailable naming it", err)
		}
		if d := time.Since(t0); d < policyWait || d > policyWait+2*time.Second {
			t.Errorf("SetNetwork with the proxy stopped returned after %s, want about %s", d, policyWait)
		}
		// Going again, it takes the next one (the signal it missed is no answer to it).
		if err := inst.SetNetwork(l.ctx, pol); err != nil {
			t.Fatalf("SetNetwork after the proxy went on: %v", err)
		}
		want("a.test once the proxy answers", h("http "+egShared.String()+":80 a.test"), "ok http a.test")
	})
	t.Run("policy given live", func(t *testing.T) { l.liveNetwork(t, api) })
	t.Run("paused stays paused", func(t *testing.T) {
		// The server's egress loop reads every sandbox's record each interval (100 ms
		// here); reading one is not a use, so it must not resume an auto-resume sandbox.
		var sb struct{ ID, State string }
		api.want(t, 201, &sb, "POST", "/v1/sandboxes", map[string]any{"runtime": rt,
			"network": map[string]any{"allow": []string{"a.test"}}, "timeoutMs": 120_000, "onTimeout": "pause", "autoResume": true})
		defer api.want(t, 204, nil, "DELETE", "/v1/sandboxes/"+sb.ID, nil)
		api.want(t, 204, nil, "POST", "/v1/sandboxes/"+sb.ID+"/pause", nil)
		time.Sleep(time.Second)
		api.want(t, 200, &sb, "GET", "/v1/sandboxes/"+sb.ID, nil)
		if sb.State != "paused" {
			t.Errorf("an auto-resume sandbox with a policy, paused, a second later: %s, want paused", sb.State)
		}
	})
	t.Run("teardown", func(t *testing.T) {
		rec, err := l.p.lay.readRecord(inst.ID())
		if err != nil {
			t.Fatal(err)
		}
		if rec.Egress == nil || procStart(rec.Egress.PID) != rec.Egress.Start {
			t.Fatalf("no live egress proxy recorded: %+v", rec.Egress)
		}
		api.want(t, 204, nil, "DELETE", "/v1/sandboxes/"+inst.ID(), nil)
		if procStart(rec.Egress.PID) == rec.Egress.Start {
			t.Errorf("the egress proxy (pid %d) outlived its sandbox", rec.Egress.PID)
		}
		// Every sandbox of the lab's provider is gone now (those given a policy while they
		// ran among them): nothing of theirs is left, the bridge and its rules included.
		assertNoLeftovers(t, l.p)
	})
}

// newEgressLab builds the lab's upstream namespace and its servers (upNetns, when not nil,
// runs in it too, to start more), and points the host's resolv.conf at its resolver.
func newEgressLab(t *testing.T, upNetns func()) *egressLab {
	l := &egressLab{ctx: context.Background(), seen: &tally{}, auth: &tally{}, udp: &tally{}, helper: buildHelper(t, egressHelperSource)}
	labIP(t, "", "link set lo up")
	up := filepath.Join(t.TempDir(), "upstream")
	if err := hostnet.NewNetns(l.ctx, up); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hostnet.RemoveNetns(up) })
	labIP(t, "",
		"link add tpup0 type veth peer name tpup1",
		"link set tpup1 netns "+up,
		"addr add "+labHostTransit.String()+"/30 dev tpup0",
		"link set tpup0 up",
		"route add default via "+labUpTransit.String(),
	)
	lines := []string{"link set lo up", "addr add " + labUpTransit.String() + "/30 dev tpup1", "link set tpup1 up",
		"route add default via " + labHostTransit.String()}
	for _, a := range []netip.Addr{egShared, egByAddr, egWild, egWildDen, egNoName, egCIDR, egDenied, labPrivate, labResolver, labPublic} {
		lines = append(lines, "addr add "+a.String()+"/32 dev lo")
	}
	labIP(t, up, lines...)
	cert := l.makeCerts(t)
	inNetns(t, up, func() {
		l.serve(t, cert)
		if upNetns != nil {
			upNetns()
		}
	})

	conf := filepath.Join(t.TempDir(), "resolv.conf")
	os.WriteFile(conf, []byte("nameserver "+labResolver.String()+"\n"), 0o644)
	if err := unix.Mount(conf, "/etc/resolv.conf", "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount("/etc/resolv.conf", unix.MNT_DETACH) })
	return l
}

// waitFile waits, up to 10 s, for the file at path in the sandbox to hold word.
func waitFile(t *testing.T, inst *Instance, path, word string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := strings.TrimSpace(run(t, inst, "cat "+path+" 2>/dev/null; true"))
		if strings.Contains(got, word) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %q, want %q", path, got, word)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// labAPI is a real server over the lab's provider, on loopback, running its background
// loops, with a webhook for sandbox.egress_denied on loopback too.
type labAPI struct {
	url, key string
	hooks    chan []byte // the bodies the webhook received
}

func (l *egressLab) startServer(t *testing.T) *labAPI {
	st, err := store.Open(l.ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewUnstartedServer(nil)
	srv, err := server.New(l.ctx, server.Config{Provider: l.p, Store: st, BaseURL: "http://" + ts.Listener.Addr().String(),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), ReapInterval: time.Hour, EgressInterval: 100 * time.Millisecond,
		AllowPrivateWebhooks: true})
	if err != nil {
		t.Fatal(err)
	}
	ts.Config = srv.HTTPServer()
	ts.Start()
	ctx, cancel := context.WithCancel(l.ctx)
	ran := make(chan struct{})
	go func() { srv.Run(ctx); close(ran) }()
	hooks := make(chan []byte, 100)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		select {
		case hooks <- b:
		default:
		}
	}))
	t.Cleanup(func() {
		cancel()
		<-ran
		hook.Close()
		ts.Close()
		srv.Close()
		st.Close()
	})
	_, key, err := st.CreateKey(l.ctx, "test")
	if err != nil {
		t.Fatal(err)
	}
	a := &labAPI{url: ts.URL, key: key, hooks: hooks}
	a.want(t, 201, nil, "POST", "/v1/webhooks", map[string]any{"url": hook.URL, "events": []string{"sandbox.egress_denied"}})
	return a
}

// testEgressCLI runs the tupper binary against the lab: run and create with --allow and
// --learn, and tupper network on a running sandbox. Its sandboxes are on the default
// bridge of this test's own network namespace.
func testEgressCLI(t *testing.T, l *egressLab, rt string) {
	home, err := os.MkdirTemp("/tmp", "tce")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(home, 0o711)
	tupper := func(args ...string) (string, string, int) {
		t.Helper()
		cmd := exec.Command(testenv.TupperBinary(t), args...)
		cmd.Env = append(os.Environ(), "TUPPER_HOME="+home, "TUPPER_PROVIDER=")
		return testenv.Run(t, cmd)
	}
	var made []string
	t.Cleanup(func() {
		for _, id := range made {
			tupper("rm", id)
		}
		os.RemoveAll(home)
	})
	const both = "curl -sS --max-time 10 http://a.test/; curl -sS --max-time 10 http://b.test/; true"

	// run --allow: b.test fails at once, and tupper says why on its own stderr.
	out, errOut, code := tupper("run", "--runtime", rt, "--allow", "a.test", "--", "sh", "-c", both+" 2>/dev/null")
	if code != 0 || out != "http a.test\n" {
		t.Errorf("run --allow a.test: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if !strings.Contains(errOut, "tupper: egress denied: b.test (name not allowed)\n") || strings.Contains(errOut, "denied: a.test") {
		t.Errorf("run --allow a.test: stderr %q, want one egress denied note for b.test", errOut)
	}

	// run --learn: everything passes, and the allow list that permits it is printed.
	out, errOut, code = tupper("run", "--runtime", rt, "--learn", "--", "sh", "-c", both+"; curl -sS --max-time 10 "+egByAddr.String()+":7000 2>&1 | head -c 0")
	if code != 0 || out != "http a.test\nhttp b.test\n" {
		t.Errorf("run --learn: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if want := "tupper: learned: --allow " + egByAddr.String() + " --allow a.test --allow b.test\n"; !strings.Contains(errOut, want) || strings.Contains(errOut, "egress denied") {
		t.Errorf("run --learn: stderr %q, want %q", errOut, want)
	}

	// run --secret NAME@HOST=VALUE: the command sees the placeholder, a.test the value.
	const cliValue = "cliBoundValue-0123456789"
	key := "http " + egShared.String() + " a.test"
	before := slices.Index(l.auth.peers(key), "Bearer "+cliValue)
	out, errOut, code = tupper("run", "--runtime", rt, "--secret", "TOK@a.test="+cliValue, "--",
		"sh", "-c", `curl -sS --max-time 10 -H "Authorization: Bearer $TOK" http://a.test/ && printenv TOK`)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 2 || lines[0] != "http a.test" || !strings.HasPrefix(lines[1], "tupper_secret_") {
		t.Errorf("run --secret TOK@a.test: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if before != -1 || !slices.Contains(l.auth.peers(key), "Bearer "+cliValue) {
		t.Errorf("a.test's Authorization headers %q, want the value from the CLI's sandbox", l.auth.peers(key))
	}

	// create --allow --deny, then tupper network while it runs.
	out, errOut, code = tupper("create", "--runtime", rt, "--allow", "a.test", "--allow", "b.test", "--deny", "b.test")
	id := strings.TrimSpace(out)
	if code != 0 || id == "" {
		t.Fatalf("create: exit %d, %q %q", code, out, errOut)
	}
	made = append(made, id)
	curl := func(name string) string {
		out, _, _ := tupper("exec", id, "--", "sh", "-c", "curl -sS --max-time 10 http://"+name+"/ 2>/dev/null || echo refused")
		return strings.TrimSpace(out)
	}
	if a, b := curl("a.test"), curl("b.test"); a != "http a.test" || b != "refused" {
		t.Errorf("created with --allow a.test --allow b.test --deny b.test: a.test %q, b.test %q", a, b)
	}
	if _, errOut, code := tupper("network", id, "--allow", "b.test"); code != 0 {
		t.Fatalf("network --allow b.test: exit %d: %s", code, errOut)
	}
	if a, b := curl("a.test"), curl("b.test"); a != "refused" || b != "http b.test" {
		t.Errorf("after network --allow b.test: a.test %q, b.test %q", a, b)
	}
	out, errOut, code = tupper("network", id, "--learned")
	if code != 0 || strings.TrimSpace(out) != "--allow a.test --allow b.test" {
		t.Errorf("network --learned: exit %d, %q %q", code, out, errOut)
	}
	if _, errOut, code := tupper("network", id, "--mode", "none"); code != 0 {
		t.Fatalf("network --mode none: exit %d: %s", code, errOut)
	}
	if a := curl("a.test"); a != "refused" {
		t.Errorf("after network --mode none: a.test %q", a)
	}
	if _, errOut, code := tupper("network", id, "--allow", "*"); code == 0 || !strings.Contains(errOut, `"*"`) {
		t.Errorf("network --allow '*': exit %d, %q: want a refusal naming the entry", code, errOut)
	}

	// tupper network on a sandbox created with network all: it takes the policy live.
	out, errOut, code = tupper("create", "--runtime", rt)
	id = strings.TrimSpace(out)
	if code != 0 || id == "" {
		t.Fatalf("create: exit %d, %q %q", code, out, errOut)
	}
	made = append(made, id)
	if a, b := curl("a.test"), curl("b.test"); a != "http a.test" || b != "http b.test" {
		t.Errorf("created with network all: a.test %q, b.test %q", a, b)
	}
	if _, errOut, code := tupper("network", id, "--allow", "b.test"); code != 0 {
		t.Fatalf("network --allow b.test on a sandbox of network all: exit %d: %s", code, errOut)
	}
	if a, b := curl("a.test"), curl("b.test"); a != "refused" || b != "http b.test" {
		t.Errorf("network all, then network --allow b.test: a.test %q, b.test %q", a, b)
	}
	if _, errOut, code := tupper("network", id, "--mode", "all"); code != 0 {
		t.Fatalf("network --mode all: exit %d: %s", code, errOut)
	}
	if a := curl("a.test"); a != "http a.test" {
		t.Errorf("after network --mode all: a.test %q", a)
	}
}

// want sends a JSON request with the API key (or the headers given) and checks the status.
func (a *labAPI) want(t *testing.T, status int, out any, method, path string, body any, hdr ...string) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, a.url+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if len(hdr) == 0 {
		req.Header.Set("Authorization", "Bearer "+a.key)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != status {
		t.Fatalf("%s %s: %d, want %d: %s", method, path, resp.StatusCode, status, data)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatal(err)
		}
	}
}

// makeCerts makes a test CA and a server certificate for the lab's names.
func (l *egressLab) makeCerts(t *testing.T) tls.Certificate {
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "tupper egress test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	l.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "a.test"},
		DNSNames: []string{"a.test", "b.test", "c.test", "*.w.test"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	caCert, _ := x509.ParseCertificate(caDER)
	der, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// serve starts the upstream servers; call in the upstream namespace.
func (l *egressLab) serve(t *testing.T, cert tls.Certificate) {
	zone := dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		q := r.Question[0]
		addrs, ok := egZone[strings.ToLower(q.Name)]
		if !ok {
			m.Rcode = dns.RcodeNameError
		}
		for _, a := range addrs {
			if q.Qtype == dns.TypeA {
				m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60}, A: a.AsSlice()})
			}
		}
		w.WriteMsg(m)
	})
	for _, a := range []netip.Addr{labResolver, labPublic} {
		pc, err := net.ListenPacket("udp4", net.JoinHostPort(a.String(), "53"))
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp4", net.JoinHostPort(a.String(), "53"))
		if err != nil {
			t.Fatal(err)
		}
		su, st := &dns.Server{PacketConn: pc, Handler: zone}, &dns.Server{Listener: ln, Handler: zone}
		go su.ActivateAndServe()
		go st.ActivateAndServe()
		t.Cleanup(func() { su.Shutdown(); st.Shutdown() })
	}
	handler := func(proto string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			local := r.Context().Value(http.LocalAddrContextKey).(net.Addr).(*net.TCPAddr).IP.String()
			l.seen.add(proto+" "+local, r.Host)
			l.auth.add(proto+" "+local+" "+r.Host, r.Header.Get("Authorization"))
			fmt.Fprintf(w, "%s %s\n", proto, r.Host)
		})
	}
	for _, s := range []struct {
		port  string
		proto string
	}{{"80", "http"}, {"443", "tls"}} {
		ln, err := net.Listen("tcp4", ":"+s.port)
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: handler(s.proto), ReadHeaderTimeout: 10 * time.Second}
		if s.proto == "tls" {
			ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}})
		}
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close() })
	}
	ln, err := net.Listen("tcp4", ":7000")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("hello\n"))
			c.Close()
		}
	}()
	for _, a := range []netip.Addr{egShared, egCIDR, egDenied} {
		pc, err := net.ListenPacket("udp4", net.JoinHostPort(a.String(), "7001"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pc.Close() })
		go readUDP(pc, a.String(), l.udp)
	}
}

// measure is the benchmark of a policy: HTTPS requests (a new connection each) from a
// sandbox with a policy, through its proxy, against the same from a sandbox with network
// all, straight to the server; latency with one at a time, requests per second with 8; and
// the memory of the proxy. By default a few requests, so that it runs as a test of the
// path; TUPPER_EGRESS_BENCH=N makes N requests and logs the figures for a quiet machine.
func (l *egressLab) measure(t *testing.T, api *labAPI, inst *Instance) {
	n := 20
	if v, err := strconv.Atoi(os.Getenv("TUPPER_EGRESS_BENCH")); err == nil && v > 0 {
		n = v
	}
	var all struct{ ID string }
	api.want(t, 201, &all, "POST", "/v1/sandboxes", map[string]any{"network": "all"})
	defer api.want(t, 204, nil, "DELETE", "/v1/sandboxes/"+all.ID, nil)
	pi, err := l.p.Connect(l.ctx, all.ID)
	if err != nil {
		t.Fatal(err)
	}
	direct := pi.(*Instance)
	m := uint32(0o755)
	if err := direct.WriteFile(l.ctx, egHelperIn, bytes.NewReader(l.helper), &m); err != nil {
		t.Fatal(err)
	}
	target := egShared.String() + ":443 a.test"
	for _, c := range []struct {
		what string
		inst *Instance
	}{{"network all", direct}, {"policy", inst}} {
		for _, conc := range []int{1, 8} {
			out := strings.TrimSpace(run(t, c.inst, fmt.Sprintf("%s bench %s %d %d", egHelperIn, target, n, conc)))
			if !strings.HasPrefix(out, "ok ") {
				t.Fatalf("%s, %d at a time: %s", c.what, conc, out)
			}
			t.Logf("%s, %d HTTPS requests %d at a time: %s", c.what, n, conc, strings.TrimPrefix(out, "ok "))
		}
	}
	rec, err := l.p.lay.readRecord(inst.ID())
	if err != nil || rec.Egress == nil {
		t.Fatalf("record: %v %+v", err, rec)
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", rec.Egress.PID))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if strings.HasPrefix(line, "VmRSS:") || strings.HasPrefix(line, "VmHWM:") {
			t.Logf("egress proxy (pid %d) %s", rec.Egress.PID, strings.Join(strings.Fields(line), " "))
		}
	}
}

// boundSecrets is a sandbox created over REST with network all and a secret bound to
// a.test, used by curl with the sandbox's own trust store, and attacked by its root.
func (l *egressLab) boundSecrets(t *testing.T, api *labAPI) {
	const value = "ghp_boundSecretValue0123456789"
	const plain = "plainSecretValue9876543210"
	var made struct{ ID string }
	api.want(t, 201, &made, "POST", "/v1/sandboxes", map[string]any{"network": "all",
		"secrets": map[string]any{"TOKEN": map[string]any{"value": value, "hosts": []string{"a.test"}}, "PLAIN": plain}})
	defer api.want(t, 204, nil, "DELETE", "/v1/sandboxes/"+made.ID, nil)
	pi, err := l.p.Connect(l.ctx, made.ID)
	if err != nil {
		t.Fatal(err)
	}
	inst := pi.(*Instance)
	if err := inst.WriteFile(l.ctx, "/tmp/ca.pem", bytes.NewReader(l.caPEM), nil); err != nil {
		t.Fatal(err)
	}
	ph := run(t, inst, "printenv TOKEN")
	if !strings.HasPrefix(ph, "tupper_secret_") || len(ph) != len("tupper_secret_")+32 {
		t.Fatalf("TOKEN in the sandbox is %q, want a placeholder", ph)
	}
	// The Authorization headers a server got (the other subtests' curls send none).
	auth := func(proto string, a netip.Addr, host string) []string {
		var got []string
		for _, h := range l.auth.peers(proto + " " + a.String() + " " + host) {
			if h != "" {
				got = append(got, h)
			}
		}
		return got
	}
	curl := func(args string) (string, int) {
		out, errOut, code := runCode(t, inst, `curl -sS --max-time 10 -H "Authorization: Bearer $TOKEN" `+args)
		return out + errOut, code
	}
	t.Run("used", func(t *testing.T) {
		// curl trusts the sandbox's CA through the system bundle; b.test's TLS is the lab
		// server's own, end to end (hence its CA).
		for _, c := range []struct{ args, want string }{
			{"https://a.test/", "tls a.test"}, {"http://a.test/", "http a.test"},
			{"http://b.test/", "http b.test"}, {"--cacert /tmp/ca.pem https://b.test/", "tls b.test"},
		} {
			if out, code := curl(c.args); code != 0 || out != c.want {
				t.Errorf("curl %s: exit %d, %q, want %q", c.args, code, out, c.want)
			}
		}
		for _, c := range []struct {
			proto, host, want string
		}{{"tls", "a.test", value}, {"http", "a.test", value}, {"http", "b.test", ph}, {"tls", "b.test", ph}} {
			if got := auth(c.proto, egShared, c.host); !slices.Equal(got, []string{"Bearer " + c.want}) {
				t.Errorf("%s %s saw Authorization %q, want the %s", c.proto, c.host, got, map[bool]string{true: "value", false: "placeholder"}[c.want == value])
			}
		}
		// Other clients find the bundle through the variables.
		env := run(t, inst, "echo $SSL_CERT_FILE $NODE_EXTRA_CA_CERTS $REQUESTS_CA_BUNDLE $CURL_CA_BUNDLE $GIT_SSL_CAINFO")
		if env != strings.TrimSpace(strings.Repeat(trustBundle+" ", 5)) {
			t.Errorf("trust variables: %q", env)
		}
	})
	t.Run("never readable", func(t *testing.T) {
		// Everything the sandbox can read where a value could sit: its environment (every
		// process's), /etc with the trust bundle, homes, /tmp, /run and the agent's
		// directory. The needle is decoded in the shell, so no command line holds it; the
		// plain secret, which is in the environment, shows the search finds what is there.
		key := l.hostFileChunk(t, inst.ID(), "EC PRIVATE KEY")
		grep := func(needle string) string {
			b64 := base64.StdEncoding.EncodeToString([]byte(needle))
			out, _, _ := runCode(t, inst, `v=$(echo `+b64+` | base64 -d); { env; cat /proc/self/environ; } | grep -cF -e "$v"; `+
				`grep -rlsF -e "$v" /etc /root /home /tmp /run /.tupper /workspace /proc/[0-9]*/environ 2>/dev/null; true`)
			return out
		}
		if out := grep(plain); !strings.HasPrefix(out, "2\n") || !strings.Contains(out, "/environ") {
			t.Fatalf("the search does not find the plain secret in the environment: %q", out)
		}
		for what, needle := range map[string]string{"the value": value, "the CA key": key} {
			if out := grep(needle); out != "0" {
				t.Errorf("%s is readable in the sandbox: %q", what, out)
			}
		}
		if !strings.Contains(run(t, inst, "cat "+trustBundle), "-----BEGIN CERTIFICATE-----") {
			t.Errorf("%s holds no certificate", trustBundle)
		}
		fi, err := os.Stat(l.p.lay.egressConfig(inst.ID()))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("the proxy's configuration: %v, mode %v, want 0600", err, fi.Mode())
		}
	})
	t.Run("bound name at the sandbox's address", func(t *testing.T) {
		// Root points a.test at an address of its choosing: the proxy goes to a.test's
		// address from the resolver, not there.
		run(t, inst, "echo '"+egNoName.String()+" a.test' >> /etc/hosts")
		defer run(t, inst, "sed -i '/ a.test$/d' /etc/hosts")
		for _, c := range []struct{ args, want string }{{"http://a.test/", "http a.test"}, {"https://a.test/", "tls a.test"}} {
			if out, code := curl(c.args); code != 0 || out != c.want {
				t.Errorf("curl %s with a.test at %s: exit %d, %q", c.args, egNoName, code, out)
			}
		}
		for _, proto := range []string{"http", "tls"} {
			if got := auth(proto, egNoName, "a.test"); len(got) > 0 {
				t.Errorf("%s at %s (the sandbox's choice) got Authorization %q", proto, egNoName, got)
			}
			if got := auth(proto, egShared, "a.test"); len(got) != 2 {
				t.Errorf("%s at a.test's address: %q, want a second request with the value", proto, got)
			}
		}
	})
	t.Run("SNI and Host differ", func(t *testing.T) {
		before := len(auth("tls", egShared, "b.test"))
		if out, code := curl(`-H "Host: b.test" https://a.test/`); code == 0 {
			t.Errorf("SNI a.test with Host b.test was answered: %q", out)
		}
		if got := auth("tls", egShared, "b.test"); len(got) != before {
			t.Errorf("Host b.test behind SNI a.test reached the server: %q", got)
		}
	})
	t.Run("fork and snapshot keep them", func(t *testing.T) {
		// A file of the parent's holds the placeholder: it works in the children as well.
		run(t, inst, `echo "$TOKEN" > /root/token`)
		parentCA := l.hostCA(t, inst.ID())
		var forked struct{ Sandboxes []struct{ ID string } }
		api.want(t, 201, &forked, "POST", "/v1/sandboxes/"+inst.ID()+"/fork", map[string]any{"n": 1})
		if len(forked.Sandboxes) != 1 {
			t.Fatalf("fork: %+v", forked)
		}
		var snap struct{ ID string }
		api.want(t, 201, &snap, "POST", "/v1/sandboxes/"+inst.ID()+"/snapshot", map[string]any{})
		defer api.want(t, 204, nil, "DELETE", "/v1/snapshots/"+snap.ID, nil)
		// The snapshot holds the values beside its files, host root's, mode 0600; never in
		// the files a sandbox made from it reads.
		fi, err := os.Stat(l.p.lay.snapshotSecrets(snap.ID))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("the snapshot's secrets.json: %v, mode %v, want 0600", err, fi.Mode())
		}
		if out, _ := exec.Command("grep", "-rlsF", value, l.p.lay.snapshot(snap.ID)).Output(); !strings.HasSuffix(strings.TrimSpace(string(out)), "/secrets.json") {
			t.Errorf("the search does not find the value in secrets.json: %q", out)
		}
		if out, err := exec.Command("grep", "-rlsF", "--exclude=secrets.json", value, l.p.lay.snapshot(snap.ID), l.p.lay.blocks().Dir()).Output(); len(out) > 0 {
			t.Errorf("the value is in the snapshot's files: %s %v", out, err)
		}
		var restored struct{ ID string }
		api.want(t, 201, &restored, "POST", "/v1/sandboxes", map[string]any{"from": snap.ID})
		for _, id := range []string{forked.Sandboxes[0].ID, restored.ID} {
			func() {
				defer api.want(t, 204, nil, "DELETE", "/v1/sandboxes/"+id, nil)
				pi, err := l.p.Connect(l.ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				c := pi.(*Instance)
				if got := run(t, c, "printenv TOKEN; cat /root/token"); got != ph+"\n"+ph {
					t.Errorf("%s: TOKEN and the parent's file: %q, want the parent's placeholder twice", id, got)
				}
				n := len(auth("tls", egShared, "a.test"))
				if out, _, code := runCode(t, c, `curl -sS --max-time 10 -H "Authorization: Bearer $(cat /root/token)" https://a.test/`); code != 0 || out != "tls a.test" {
					t.Errorf("%s: curl https://a.test/: exit %d, %q", id, code, out)
				}
				if got := auth("tls", egShared, "a.test"); len(got) != n+1 || got[n] != "Bearer "+value {
					t.Errorf("%s: a.test saw Authorization %q, want the value last", id, got)
				}
				// A CA of its own: the parent's is not in its bundle, its own is.
				bundle := run(t, c, "cat "+trustBundle)
				if strings.Contains(bundle, strings.TrimSpace(parentCA)) || !strings.Contains(bundle, strings.TrimSpace(l.hostCA(t, id))) {
					t.Errorf("%s: its bundle holds the parent's CA, or not its own", id)
				}
			}()
		}
	})
}

// hostCA returns the certificate of sandbox id's CA, from its proxy's configuration.
func (l *egressLab) hostCA(t *testing.T, id string) string {
	var cfg struct{ CACert string }
	b, err := os.ReadFile(l.p.lay.egressConfig(id))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &cfg); err != nil || cfg.CACert == "" {
		t.Fatalf("%s's proxy configuration has no CA: %v", id, err)
	}
	return cfg.CACert
}

// liveNetwork gives a policy to a sandbox created with network "all" while it runs, over the
// REST API: its direct connections are cut, the policy holds across pause and resume and in
// a fork's child, it goes back to all and to none, and its teardown leaves nothing. Then
// E2B's updateNetwork on a sandbox E2B created with the default network, and network
// "none", which cannot take one.
func (l *egressLab) liveNetwork(t *testing.T, api *labAPI) {
	var sb struct{ ID string }
	api.want(t, 201, &sb, "POST", "/v1/sandboxes", map[string]any{"network": "all"})
	gone := false
	defer func() {
		if !gone {
			api.want(t, 204, nil, "DELETE", "/v1/sandboxes/"+sb.ID, nil)
		}
	}()
	connect := func(id string) *Instance {
		t.Helper()
		pi, err := l.p.Connect(l.ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		inst := pi.(*Instance)
		m := uint32(0o755)
		if err := inst.WriteFile(l.ctx, egHelperIn, bytes.NewReader(l.helper), &m); err != nil {
			t.Fatal(err)
		}
		return inst
	}
	inst := connect(sb.ID)
	want := func(inst *Instance, what, args, prefix string) {
		t.Helper()
		if got := strings.TrimSpace(run(t, inst, egHelperIn+" "+args)); !strings.HasPrefix(got, prefix) {
			t.Errorf("%s: %q, want %q…", what, got, prefix)
		}
	}
	// The resolver the sandbox's resolv.conf names: asked directly under network all, the
	// proxy's under a policy.
	ns := labResolver.String() + ":53"
	want(inst, "all: an address no name has", "connect "+egNoName.String()+":7000", "ok hello")
	want(inst, "all: a.test", "dns "+ns+" udp a.test", "ok "+egShared.String())
	run(t, inst, "rm -f /tmp/hold; "+egHelperIn+" hold "+egShared.String()+":80 a.test /tmp/hold >/dev/null 2>&1 &")
	waitFile(t, inst, "/tmp/hold", "held")

	api.want(t, 204, nil, "PUT", "/v1/sandboxes/"+sb.ID+"/network", map[string]any{"allow": []string{"b.test"}})
	// The connection went straight out, past any proxy: it is cut by the time SetNetwork
	// returns.
	waitFile(t, inst, "/tmp/hold", "cut")
	rec, err := l.p.lay.readRecord(sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Network != "allow" || rec.Egress == nil || procStart(rec.Egress.PID) != rec.Egress.Start {
		t.Fatalf("the record after a policy was given: network %q, proxy %+v", rec.Network, rec.Egress)
	}
	policy := func(inst *Instance, when string) {
		t.Helper()
		want(inst, when+": a.test", "dns "+ns+" udp a.test", "err ")
		want(inst, when+": b.test", "dns "+ns+" udp b.test", "ok "+egShared.String())
		want(inst, when+": http b.test", "http "+egShared.String()+":80 b.test", "ok http b.test")
		want(inst, when+": http a.test", "http "+egShared.String()+":80 a.test", "err ")
		want(inst, when+": an address no name has", "connect "+egNoName.String()+":7000", "err ")
	}
	policy(inst, "policy given")
	if _, err := inst.Egress(l.ctx, ""); err != nil {
		t.Errorf("the egress record of a sandbox given a policy: %v", err)
	}

	api.want(t, 204, nil, "POST", "/v1/sandboxes/"+sb.ID+"/pause", nil)
	api.want(t, 204, nil, "POST", "/v1/sandboxes/"+sb.ID+"/resume", nil)
	policy(inst, "after pause and resume")

	var forked struct{ Sandboxes []struct{ ID string } }
	api.want(t, 201, &forked, "POST", "/v1/sandboxes/"+sb.ID+"/fork", map[string]any{"n": 1})
	if len(forked.Sandboxes) != 1 {
		t.Fatalf("fork: %+v", forked)
	}
	func() {
		defer api.want(t, 204, nil, "DELETE", "/v1/sandboxes/"+forked.Sandboxes[0].ID, nil)
		policy(connect(forked.Sandboxes[0].ID), "the fork's child")
	}()

	api.want(t, 204, nil, "PUT", "/v1/sandboxes/"+sb.ID+"/network", map[string]any{"mode": "all"})
	want(inst, "back to all: an address no name has", "connect "+egNoName.String()+":7000", "ok hello")
	want(inst, "back to all: a.test", "dns "+ns+" udp a.test", "ok "+egShared.String())
	api.want(t, 204, nil, "PUT", "/v1/sandboxes/"+sb.ID+"/network", map[string]any{"mode": "none"})
	want(inst, "none: b.test", "dns "+ns+" udp b.test", "err ")
	want(inst, "none: an address no name has", "connect "+egNoName.String()+":7000", "err ")

	// Teardown: the proxy, the firewall's rules for the address and the files go.
	api.want(t, 204, nil, "DELETE", "/v1/sandboxes/"+sb.ID, nil)
	gone = true
	if procStart(rec.Egress.PID) == rec.Egress.Start {
		t.Errorf("the egress proxy (pid %d) outlived its sandbox", rec.Egress.PID)
	}
	if fileExists(l.p.lay.dir(sb.ID)) || l.p.net.EgressRecorded(rec.IP) {
		t.Errorf("the sandbox's directory or egress record is left")
	}
	for _, table := range []string{"filter", "nat"} {
		out, _ := exec.Command(l.p.net.IPTables()[0], "-w", "5", "-t", table, "-S").CombinedOutput()
		if strings.Contains(string(out), rec.IP+"/32") {
			t.Errorf("iptables %s still names %s:\n%s", table, rec.IP, out)
		}
	}

	// E2B: a sandbox created with the default network takes updateNetwork.
	var e2b struct{ SandboxID string }
	api.want(t, 201, &e2b, "POST", "/sandboxes", map[string]any{"templateID": "base"}, "X-API-Key", api.key)
	func() {
		defer api.want(t, 204, nil, "DELETE", "/sandboxes/"+e2b.SandboxID, nil, "X-API-Key", api.key)
		inst := connect(e2b.SandboxID)
		api.want(t, 204, nil, "PUT", "/sandboxes/"+e2b.SandboxID+"/network", map[string]any{"allowOut": []string{"a.test"}, "denyOut": []string{"0.0.0.0/0"}}, "X-API-Key", api.key)
		want(inst, "E2B: a.test", "dns "+ns+" udp a.test", "ok "+egShared.String())
		want(inst, "E2B: http a.test", "http "+egShared.String()+":80 a.test", "ok http a.test")
		want(inst, "E2B: b.test", "dns "+ns+" udp b.test", "err ")
		api.want(t, 204, nil, "PUT", "/sandboxes/"+e2b.SandboxID+"/network", map[string]any{}, "X-API-Key", api.key)
		want(inst, "E2B: open again", "connect "+egNoName.String()+":7000", "ok hello")
	}()

	// A sandbox paused without its memory takes its first policy too (nothing runs, nothing
	// to cut), and boots under it at its resume.
	var cold struct{ ID string }
	api.want(t, 201, &cold, "POST", "/v1/sandboxes", map[string]any{"network": "all"})
	func() {
		defer api.want(t, 204, nil, "DELETE", "/v1/sandboxes/"+cold.ID, nil)
		api.want(t, 204, nil, "POST", "/v1/sandboxes/"+cold.ID+"/pause", map[string]any{"keepMemory": false})
		api.want(t, 204, nil, "PUT", "/v1/sandboxes/"+cold.ID+"/network", map[string]any{"allow": []string{"b.test"}})
		api.want(t, 204, nil, "POST", "/v1/sandboxes/"+cold.ID+"/resume", nil)
		policy(connect(cold.ID), "a policy given while paused without memory")
	}()

	// Network none has no interface to give a policy to.
	api.want(t, 201, &sb, "POST", "/v1/sandboxes", map[string]any{"network": "none"})
	defer api.want(t, 204, nil, "DELETE", "/v1/sandboxes/"+sb.ID, nil)
	api.want(t, 501, nil, "PUT", "/v1/sandboxes/"+sb.ID+"/network", map[string]any{"allow": []string{"a.test"}})
}

// e2bSecrets is E2B's stored secrets and network rules through the lab's server: a secret
// made over /secrets, a sandbox created over E2B's API with a rule that sets Authorization
// for a.test from it. a.test's server gets the value over HTTPS whatever the sandbox sends,
// and what the sandbox sent over plain HTTP; b.test gets what the sandbox sent; the sandbox
// holds nothing of it.
func (l *egressLab) e2bSecrets(t *testing.T, api *labAPI) {
	const value = "e2bStoredSecretValue-0123456789"
	e2b := []string{"X-API-Key", api.key}
	api.want(t, 201, nil, "POST", "/secrets", map[string]any{"name": "Lab-Token", "value": value}, e2b...)
	defer api.want(t, 204, nil, "DELETE", "/secrets/lab-token", nil, e2b...)
	rule := func(hdr string) []any {
		return []any{map[string]any{"transform": map[string]any{"headers": map[string]string{"Authorization": hdr}}}}
	}
	var made struct{ SandboxID string }
	api.want(t, 201, &made, "POST", "/v2/sandboxes", map[string]any{"templateID": "base", "network": map[string]any{
		"rules": map[string]any{"a.test": rule("Bearer ${e2b.secrets.lab-token}")}}}, e2b...)
	defer api.want(t, 204, nil, "DELETE", "/sandboxes/"+made.SandboxID, nil, e2b...)
	// A rule naming a secret the key does not have: refused at create, naming it.
	api.want(t, 400, nil, "POST", "/v2/sandboxes", map[string]any{"templateID": "base", "network": map[string]any{
		"rules": map[string]any{"a.test": rule("Bearer ${e2b.secrets.nope}")}}}, e2b...)
	pi, err := l.p.Connect(l.ctx, made.SandboxID)
	if err != nil {
		t.Fatal(err)
	}
	inst := pi.(*Instance)
	if err := inst.WriteFile(l.ctx, "/tmp/ca.pem", bytes.NewReader(l.caPEM), nil); err != nil {
		t.Fatal(err)
	}
	want := "Bearer " + value
	for _, c := range []struct{ args, out string }{
		{"https://a.test/", "tls a.test"},
		{`-H "Authorization: Bearer forged" https://a.test/`, "tls a.test"},
		{`-H "Authorization: Bearer mine" http://a.test/`, "http a.test"},
		{`-H "Authorization: Bearer mine" --cacert /tmp/ca.pem https://b.test/`, "tls b.test"},
		{`-H "Authorization: Bearer mine" http://b.test/`, "http b.test"},
	} {
		out, errOut, code := runCode(t, inst, "curl -sS --max-time 10 "+c.args)
		if code != 0 || strings.TrimSpace(out) != c.out {
			t.Errorf("curl %s: exit %d, %q %q", c.args, code, out, errOut)
		}
	}
	if a := l.auth.peers("tls " + egShared.String() + " a.test"); !slices.Contains(a, want) || slices.Contains(a, "Bearer forged") || slices.Contains(a, "Bearer mine") {
		t.Errorf("tls a.test saw Authorization %q: want the stored value, never the sandbox's", a)
	}
	for _, k := range []string{"http " + egShared.String() + " a.test", "tls " + egShared.String() + " b.test", "http " + egShared.String() + " b.test"} {
		if got := l.auth.peers(k); slices.Contains(got, want) || !slices.Contains(got, "Bearer mine") {
			t.Errorf("%s saw Authorization %q: want the sandbox's own, never the stored value", k, got)
		}
	}
	// Nowhere in the sandbox: the environment of every process, its files, the agent's
	// directory. The needle is decoded in the shell, so no command line holds it.
	b64 := base64.StdEncoding.EncodeToString([]byte(value))
	out, _, _ := runCode(t, inst, `v=$(echo `+b64+` | base64 -d); { env; cat /proc/self/environ; } | grep -cF -e "$v"; `+
		`grep -rlsF -e "$v" /etc /root /home /tmp /run /.tupper /workspace /proc/[0-9]*/environ 2>/dev/null; `+
		`env | grep -c E2B_RULE; true`)
	if strings.TrimSpace(out) != "0\n0" {
		t.Errorf("the sandbox holds the value or a variable for it: %q", out)
	}
}

// hostFileChunk returns a line of the sandbox's proxy configuration from the one after the
// line containing marker: a piece of the CA key, to look for in the sandbox.
func (l *egressLab) hostFileChunk(t *testing.T, id, marker string) string {
	var cfg struct{ CAKey string }
	b, err := os.ReadFile(l.p.lay.egressConfig(id))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(cfg.CAKey, "\n")
	if len(lines) < 2 || !strings.Contains(lines[0], marker) {
		t.Fatalf("the proxy's configuration has no %s", marker)
	}
	return lines[1]
}
