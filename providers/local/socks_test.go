//go:build linux

package local

import (
	"context"
	"encoding/json"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/tupper-dev/tupper/internal/sockstest"
	"github.com/tupper-dev/tupper/internal/testenv"
	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/sandbox"
)

// TestSocksEgress is E2B's network.egressProxy on a real sandbox in the egress lab: the
// SOCKS5 server is in the lab's upstream namespace, at its public stand-in address; the
// sandbox is made, read and changed through a real server's E2B API. A request from inside
// reaches the lab's server through the SOCKS server (which saw the CONNECT, by name, and
// the login); with the SOCKS server stopped the same request fails (no direct way out);
// an update without the proxy goes out directly again, as E2B's does. A proxy at a
// private address is refused before anything is made. The password is in no answer and
// nowhere in the sandbox.
func TestSocksEgress(t *testing.T) {
	rt := RuntimeRunc
	testenv.RequireRoot(t)
	testenv.RequireBinary(t, rt)
	if !inPrivateNetns(t) {
		return
	}
	const pass = "socksPassw0rd-not-for-the-sandbox"
	socks := &sockstest.Server{User: "lab", Pass: pass}
	socksAddr := netip.AddrPortFrom(labPublic, 1080).String()
	var ln net.Listener
	l := newEgressLab(t, func() {
		var err error
		if ln, err = net.Listen("tcp4", socksAddr); err != nil {
			t.Fatal(err)
		}
		go socks.Serve(ln)
	})
	t.Cleanup(func() { ln.Close() })
	l.p = newTestProviderConfig(t, Config{Runtime: rt, Subnet: "10.216.202.0/24", Bridge: "tpsk" + rt, EgressRoots: l.caPEM})
	api := l.startServer(t)
	e2b := []string{"X-API-Key", api.key}
	var answers []string
	get := func(id string) map[string]any {
		t.Helper()
		var raw json.RawMessage
		api.want(t, 200, &raw, "GET", "/sandboxes/"+id, nil, e2b...)
		answers = append(answers, string(raw))
		var d struct{ Network map[string]any }
		json.Unmarshal(raw, &d)
		return d.Network
	}

	// Private, loopback, metadata: refused (400) before anything is made.
	for _, addr := range []string{"127.0.0.1:1080", "10.77.0.10:1080", "169.254.169.254:80", "localhost:1080"} {
		var e struct{ Message string }
		api.want(t, 400, &e, "POST", "/v2/sandboxes", map[string]any{"templateID": "base", "network": map[string]any{
			"egressProxy": map[string]any{"address": addr}}}, e2b...)
		if !strings.Contains(e.Message, "egress proxy") {
			t.Errorf("%s: %q, want it to say why", addr, e.Message)
		}
	}
	// The native API's network.proxy: the same check.
	api.want(t, 400, nil, "POST", "/v1/sandboxes", map[string]any{"network": map[string]any{
		"allow": []string{"a.test"}, "proxy": map[string]any{"address": "127.0.0.1:1080"}}})
	if infos, err := l.p.List(l.ctx, provider.ListFilter{}); err != nil || len(infos) != 0 {
		t.Fatalf("after refused creates the provider has %d sandboxes (%v), want none", len(infos), err)
	}

	var made struct{ SandboxID string }
	api.want(t, 201, &made, "POST", "/v2/sandboxes", map[string]any{"templateID": "base", "network": map[string]any{
		"allowOut": []string{"a.test"}, "denyOut": []string{"0.0.0.0/0"},
		"egressProxy": map[string]any{"address": socksAddr, "username": "lab", "password": pass}}}, e2b...)
	defer api.want(t, 204, nil, "DELETE", "/sandboxes/"+made.SandboxID, nil, e2b...)
	pi, err := l.p.Connect(l.ctx, made.SandboxID)
	if err != nil {
		t.Fatal(err)
	}
	inst := pi.(*Instance)
	if err := inst.WriteFile(l.ctx, "/tmp/ca.pem", strings.NewReader(string(l.caPEM)), nil); err != nil {
		t.Fatal(err)
	}
	if n := get(made.SandboxID); n["egressProxy"] == nil || n["egressProxy"].(map[string]any)["address"] != socksAddr ||
		n["egressProxy"].(map[string]any)["username"] != "lab" || n["egressProxy"].(map[string]any)["password"] != nil {
		t.Errorf("sandbox info network: %v, want egressProxy {address %s, username lab} without password", n, socksAddr)
	}

	curl := func(args string) (string, int) {
		out, _, code := runCode(t, inst, "curl -sS --max-time 10 "+args)
		return strings.TrimSpace(out), code
	}
	before := len(l.seen.peers("http " + egShared.String()))
	if out, code := curl("http://a.test/"); code != 0 || out != "http a.test" {
		t.Fatalf("through the SOCKS server: exit %d, %q", code, out)
	}
	if out, code := curl("--cacert /tmp/ca.pem https://a.test/"); code != 0 || out != "tls a.test" {
		t.Errorf("TLS through the SOCKS server: exit %d, %q", code, out)
	}
	if out, code := curl("http://b.test/"); code == 0 {
		t.Errorf("b.test (not allowed): %q, want refused", out)
	}
	_, connects, logins := socks.Seen()
	want := []sockstest.Connect{{ATYP: 3, Target: "a.test:80"}, {ATYP: 3, Target: "a.test:443"}}
	if len(connects) != 2 || connects[0] != want[0] || connects[1] != want[1] {
		t.Errorf("the SOCKS server saw %v, want %v (names, remote DNS; nothing for b.test)", connects, want)
	}
	if len(logins) != 2 || logins[0] != "lab:"+pass {
		t.Errorf("logins %q", logins)
	}

	// The native API's view of the network: the proxy, without its password.
	var nn struct{ Proxy map[string]any }
	var raw json.RawMessage
	api.want(t, 200, &raw, "GET", "/v1/sandboxes/"+made.SandboxID+"/network", nil)
	answers = append(answers, string(raw))
	if json.Unmarshal(raw, &nn); nn.Proxy["address"] != socksAddr || nn.Proxy["username"] != "lab" || nn.Proxy["password"] != nil {
		t.Errorf("GET /v1/sandboxes/{id}/network: %s, want the proxy without its password", raw)
	}

	// A snapshot keeps the password host-side only: in egress-proxy.json (mode 0600),
	// never in its metadata or its files.
	snapID, err := inst.SnapshotKind(l.ctx, provider.SnapshotRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(l.p.lay.snapshotProxy(snapID)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the snapshot's egress-proxy.json: %v %v, want mode 0600", fi, err)
	}
	if out, _ := exec.Command("grep", "-rlF", pass, l.p.lay.snapshot(snapID)).Output(); strings.TrimSpace(string(out)) != l.p.lay.snapshotProxy(snapID) {
		t.Errorf("files of the snapshot holding the password: %q, want egress-proxy.json alone", out)
	}
	if err := l.p.DeleteSnapshot(l.ctx, snapID); err != nil {
		t.Fatal(err)
	}

	// A fork's children tunnel through the same proxy, logged in: the snapshot that carries
	// them keeps the password beside its redacted policy (mode 0600), and it goes with it.
	parent, err := sandbox.Connect(l.ctx, l.p, made.SandboxID, sandbox.ConnectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kids, err := parent.Fork(l.ctx, sandbox.ForkOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kid := kids[0]
	t.Cleanup(func() { kid.Destroy(context.Background()) })
	if res, err := kid.Run(l.ctx, "curl -sS --max-time 10 --cacert /tmp/ca.pem https://a.test/", sandbox.RunOptions{}); err != nil || strings.TrimSpace(res.Stdout) != "tls a.test" {
		t.Errorf("a fork's child through the SOCKS server: %+v %v", res, err)
	}
	if _, _, logins := socks.Seen(); len(logins) != 3 || logins[2] != "lab:"+pass {
		t.Errorf("logins after the child's request: %q, want a third with the password", logins)
	}
	if n, err := kid.Network(l.ctx); err != nil || n.Proxy == nil || n.Proxy.Address != socksAddr || n.Proxy.Password != "" {
		t.Errorf("the child's network: %+v %v, want the proxy, without its password", n, err)
	}
	if ents, _ := os.ReadDir(l.p.lay.snapshots()); len(ents) != 0 {
		t.Errorf("the fork left %d entries in the snapshot store", len(ents))
	}
	kid.Destroy(l.ctx)

	// The password: in no answer, nowhere in the sandbox, not in the proxy's log.
	out, _, _ := runCode(t, inst, `grep -rlsF -e "`+pass[:10]+`" /etc /root /tmp /run /.tupper /workspace /proc/[0-9]*/environ 2>/dev/null; true`)
	if strings.TrimSpace(out) != "" {
		t.Errorf("the sandbox holds the proxy's password in %s", out)
	}
	if b, _ := os.ReadFile(l.p.lay.egressLog(made.SandboxID)); strings.Contains(string(b), pass) {
		t.Errorf("the egress log holds the proxy's password")
	}
	if fi, err := os.Stat(l.p.lay.egressPolicy(made.SandboxID)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the policy file (which holds the password): %v, %v; want mode 0600", fi, err)
	}

	// Fails closed: the SOCKS server stopped, the same request fails, and never reaches
	// the lab's server directly.
	ln.Close()
	if out, code := curl("http://a.test/"); code == 0 {
		t.Errorf("with the SOCKS server stopped: %q, want a failure", out)
	}
	if got := len(l.seen.peers("http " + egShared.String())); got != before+1 {
		t.Errorf("the lab's server had %d requests since the start, want 1 (through the SOCKS server)", got-before)
	}

	// An update without egressProxy stops tunnelling (E2B's semantics): out directly now.
	api.want(t, 204, nil, "PUT", "/sandboxes/"+made.SandboxID+"/network", map[string]any{
		"allowOut": []string{"a.test"}, "denyOut": []string{"0.0.0.0/0"}}, e2b...)
	if out, code := curl("http://a.test/"); code != 0 || out != "http a.test" {
		t.Errorf("after an update without the proxy: exit %d, %q", code, out)
	}
	if n := get(made.SandboxID); n != nil && n["egressProxy"] != nil {
		t.Errorf("after an update without the proxy, info still shows %v", n["egressProxy"])
	}
	// And a live update to a private proxy is refused, the policy left as it was.
	api.want(t, 400, nil, "PUT", "/sandboxes/"+made.SandboxID+"/network", map[string]any{
		"egressProxy": map[string]any{"address": "127.0.0.1:1080"}}, e2b...)
	if out, code := curl("http://a.test/"); code != 0 || out != "http a.test" {
		t.Errorf("after a refused update: exit %d, %q", code, out)
	}
	for _, a := range answers {
		if strings.Contains(a, pass) {
			t.Errorf("an answer holds the password: %s", a)
		}
	}
}
