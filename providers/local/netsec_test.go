//go:build linux

package local

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tupper-dev/tupper/internal/testenv"
	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/providers/local/internal/hostnet"
)

// TestSecurityNetwork is what a sandbox with network "all" reaches, per runtime: the public
// internet, and nothing else unless an operator opens it. Its traffic never meets a real
// private or metadata address: each runtime's run happens in a child process of the test
// binary with network and mount namespaces of its own, where the test plays every part.
//
//   - The child's namespace is the host: the provider's bridge, firewall and NAT live there,
//     with a Docker-like FORWARD chain made beforehand (policy DROP, a DOCKER-USER chain
//     jumped to first, holding an operator's rule that refuses one public address and one
//     that accepts a private one), a TCP listener on every address, and a UDP socket joined
//     to a multicast group on the bridge.
//   - An "upstream" namespace, the host's default route, plays the internet and the private
//     networks: it holds a public stand-in address, one address in each range of nonPublic,
//     a fake metadata service at 169.254.169.254:80, a fake resolver at 10.77.0.53:53 (the
//     child's /etc/resolv.conf is a bind mount naming it, a loopback stub and an IPv6
//     server) and an IPv6 service at fd77::10.
//
// One provider opens 172.31.77.0/24 and 10.99.0.0/30 (which holds the host's own transit
// address) with AllowPrivate, a second shares its bridge and opens nothing.
func TestSecurityNetwork(t *testing.T) {
	forRuntimesInNetns(t, true, func(t *testing.T, rt string) {
		newNetLab(t, rt).run(t)
	})
}

// netnsChildEnv names, in a child started by inPrivateNetns, the test it is to run.
const netnsChildEnv = "TUPPER_TEST_NETNS"

// inPrivateNetns reports whether t runs in a child made for it by an earlier call: a child
// process of the test binary running only t, in new network and mount namespaces. In the
// parent it starts that child, reports its result in t, and returns false; the test then
// returns. Everything the child does to networking — interfaces, addresses, routes,
// iptables rules, a sysctl — and every mount it makes vanish with it, even if it crashes.
func inPrivateNetns(t *testing.T) bool {
	t.Helper()
	if os.Getenv(netnsChildEnv) == t.Name() {
		return true
	}
	testenv.RequireRoot(t)
	unshare := testenv.RequireBinary(t, "unshare")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var pattern []string
	for _, part := range strings.Split(t.Name(), "/") {
		pattern = append(pattern, "^"+regexp.QuoteMeta(part)+"$")
	}
	args := []string{"--net", "--mount", "--propagation", "private", "--", exe,
		"-test.run", strings.Join(pattern, "/"), "-test.v", "-test.count", "1"}
	if d, ok := t.Deadline(); ok {
		args = append(args, "-test.timeout", time.Until(d).Round(time.Second).String())
	}
	cmd := exec.Command(unshare, args...)
	// The child uses the agent built here rather than building its own.
	cmd.Env = append(os.Environ(), netnsChildEnv+"="+t.Name(), "TUPPER_AGENT="+buildAgent(t))
	out, err := cmd.CombinedOutput()
	switch {
	case err != nil:
		t.Errorf("the child in a private network namespace failed: %v\n%s", err, out)
	case strings.Contains(string(out), "--- SKIP: "+t.Name()):
		testenv.Skip(t, "skipped in the child:\n"+string(out))
	default:
		t.Logf("child:\n%s", out)
	}
	return false
}

// Addresses of the lab. The upstream namespace holds every address it serves on its
// loopback; 10.99.0.0/30 joins it to the host.
var (
	labHostTransit  = netip.MustParseAddr("10.99.0.1")
	labUpTransit    = netip.MustParseAddr("10.99.0.2")
	labPublic       = netip.MustParseAddr("11.22.33.44") // a public stand-in, reachable
	labRefused      = netip.MustParseAddr("11.22.33.45") // public, refused by the operator's DOCKER-USER rule
	labResolver     = netip.MustParseAddr("10.77.0.53")
	labPrivate      = netip.MustParseAddr("10.77.0.10")
	labMetadata     = netip.MustParseAddr("169.254.169.254")
	labOpened       = netip.MustParseAddr("172.31.77.10") // in AllowPrivate
	labClosed       = netip.MustParseAddr("172.31.78.10") // next to it, not
	labGroup        = netip.MustParseAddr("239.255.77.1")
	labAllow        = []netip.Prefix{netip.MustParsePrefix("172.31.77.0/24"), netip.MustParsePrefix("10.99.0.0/30")}
	labHostTransit6 = netip.MustParseAddr("fd77:99::1")
	labUpTransit6   = netip.MustParseAddr("fd77:99::2")
	labService6     = netip.MustParseAddr("fd77::10")
	labBridge6      = netip.MustParseAddr("fd77:215::1") // given to the bridge by the IPv6 step
	labSandbox6     = netip.MustParseAddr("fd77:215::2")
)

const (
	labPort  = 7000 // every TCP listener
	labUPort = 7001 // every UDP socket
)

// probeAddr is an address inside a nonPublic range that can carry unicast TCP, or false.
func probeAddr(p netip.Prefix) (netip.Addr, bool) {
	switch {
	case p.Contains(netip.MustParseAddr("0.0.0.1")), p.Addr().IsLoopback(), p.Addr().IsMulticast():
		// "this network" is never a destination; 127/8 is the sandbox's own loopback;
		// multicast is probed with UDP.
		return netip.Addr{}, false
	case p.Contains(labMetadata):
		return labMetadata, true
	case p.Contains(labPrivate):
		return labPrivate, true
	case p.Contains(labClosed):
		return labClosed, true
	}
	b := p.Addr().As4()
	b[3] += 10
	return netip.AddrFrom4(b), true
}

type netLab struct {
	rt      string
	ctx     context.Context
	up      string // the upstream namespace
	bridge  string
	subnet  netip.Prefix
	p, q    *Provider // p opens labAllow, q nothing
	upTCP   *tally    // connections accepted upstream, by local address
	upUDP   *tally    // datagrams received upstream, by local address
	hostTCP *tally    // connections accepted by the host
	hostUDP *tally    // datagrams received by the host
	helper  []byte
}

// tally records what listeners saw: peers by local address.
type tally struct {
	mu   sync.Mutex
	seen map[string][]string
}

func (c *tally) add(local, peer string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seen == nil {
		c.seen = map[string][]string{}
	}
	c.seen[local] = append(c.seen[local], peer)
}

func (c *tally) peers(local string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.seen[local])
}

// all is a copy of everything recorded.
func (c *tally) all() map[string][]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string][]string{}
	for k, v := range c.seen {
		out[k] = slices.Clone(v)
	}
	return out
}

func (c *tally) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return fmt.Sprint(c.seen)
}

func newNetLab(t *testing.T, rt string) *netLab { return newNetLabOn(t, rt, "tpnet"+rt) }

// newNetLabOn is newNetLab with a bridge of its own name: its leases live in
// /run/tupper/net-BRIDGE, which every network namespace of the host shares, so two tests
// that may run at once each need their own.
func newNetLabOn(t *testing.T, rt, bridge string) *netLab {
	l := &netLab{rt: rt, ctx: context.Background(), bridge: bridge, subnet: netip.MustParsePrefix("10.216.200.0/24"),
		upTCP: &tally{}, upUDP: &tally{}, hostTCP: &tally{}, hostUDP: &tally{}, helper: buildSecHelper(t)}
	if hostnet.LinkExists("eth0") || hostnet.LinkExists(testBridge) {
		t.Fatal("not in a fresh network namespace")
	}
	labIP(t, "", "link set lo up")

	// The upstream namespace, the host's default route, on IPv4 and IPv6.
	l.up = filepath.Join(t.TempDir(), "upstream")
	if err := hostnet.NewNetns(l.ctx, l.up); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hostnet.RemoveNetns(l.up) })
	labIP(t, "",
		"link add tpup0 type veth peer name tpup1",
		"link set tpup1 netns "+l.up,
		"addr add "+labHostTransit.String()+"/30 dev tpup0",
		"addr add "+labHostTransit6.String()+"/64 dev tpup0 nodad",
		"link set tpup0 up",
		"route add default via "+labUpTransit.String(),
		"route add ::/0 via "+labUpTransit6.String(),
	)
	if err := os.WriteFile("/proc/sys/net/ipv6/conf/all/forwarding", []byte("1"), 0o644); err != nil {
		t.Fatal(err) // a host that forwards IPv6, like one running Docker with IPv6
	}
	upAddrs := []netip.Addr{labPublic, labRefused, labResolver, labOpened}
	for _, np := range hostnet.NonPublic {
		if a, ok := probeAddr(np.Prefix); ok {
			upAddrs = append(upAddrs, a)
		}
	}
	lines := []string{"link set lo up", "addr add " + labUpTransit.String() + "/30 dev tpup1",
		"addr add " + labUpTransit6.String() + "/64 dev tpup1 nodad", "link set tpup1 up",
		"route add default via " + labHostTransit.String(), "route add ::/0 via " + labHostTransit6.String(),
		"addr add " + labService6.String() + "/128 dev lo"}
	for _, a := range upAddrs {
		lines = append(lines, "addr add "+a.String()+"/32 dev lo")
	}
	labIP(t, l.up, lines...)
	inNetns(t, l.up, func() {
		l.serveTCP(t, ":"+strconv.Itoa(labPort), l.upTCP)
		l.serveTCP(t, net.JoinHostPort(labMetadata.String(), "80"), l.upTCP)
		l.serveTCP(t, net.JoinHostPort(labResolver.String(), "53"), l.upTCP)
		for _, a := range []netip.Addr{labPublic, labPrivate, labResolver} {
			port := labUPort
			if a == labResolver {
				port = 53
			}
			l.serveUDP(t, net.JoinHostPort(a.String(), strconv.Itoa(port)), l.upUDP)
		}
	})
	l.serveTCP(t, ":"+strconv.Itoa(labPort), l.hostTCP)

	// A Docker-like FORWARD chain, made before the provider's rules.
	for _, args := range [][]string{
		{"-P", "FORWARD", "DROP"},
		{"-N", "DOCKER-USER"},
		{"-A", "DOCKER-USER", "-d", labRefused.String() + "/32", "-j", "REJECT", "--reject-with", "icmp-net-prohibited"},
		// An operator's accept of a refused range does not open it: our refusals come
		// first (AllowPrivate is the way).
		{"-A", "DOCKER-USER", "-d", "192.168.0.10/32", "-j", "ACCEPT"},
		{"-A", "DOCKER-USER", "-j", "RETURN"},
		{"-I", "FORWARD", "1", "-j", "DOCKER-USER"},
	} {
		labRun(t, "iptables", args...)
	}

	// The host's resolver configuration, as sandboxes will see it.
	conf := filepath.Join(t.TempDir(), "resolv.conf")
	os.WriteFile(conf, []byte("nameserver 127.0.0.53\nnameserver "+labResolver.String()+"\nnameserver fd77::53\noptions edns0\n"), 0o644)
	if err := unix.Mount(conf, "/etc/resolv.conf", "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount("/etc/resolv.conf", unix.MNT_DETACH) })

	cfg := Config{Runtime: rt, Subnet: l.subnet.String(), Bridge: l.bridge}
	l.q = newTestProviderConfig(t, cfg)
	cfg.AllowPrivate = labAllow
	l.p = newTestProviderConfig(t, cfg)
	return l
}

// inNetns runs f on a thread in the network namespace at path; sockets f makes stay there.
func inNetns(t *testing.T, path string, f func()) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		// The thread is never unlocked, so it ends with this goroutine rather than serve
		// others from the wrong namespace.
		runtime.LockOSThread()
		ns, err := os.Open(path)
		if err != nil {
			done <- err
			return
		}
		defer ns.Close()
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			done <- err
			return
		}
		f()
		done <- nil
	}()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// serveTCP accepts connections on addr for the rest of the test, recording each in tl.
func (l *netLab) serveTCP(t *testing.T, addr string, tl *tally) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Errorf("listen %s: %v", addr, err)
		return
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			local := c.LocalAddr().(*net.TCPAddr)
			tl.add(net.JoinHostPort(local.IP.String(), strconv.Itoa(local.Port)), c.RemoteAddr().String())
			c.Close()
		}
	}()
}

// serveUDP records every datagram to addr in tl.
func (l *netLab) serveUDP(t *testing.T, addr string, tl *tally) {
	pc, err := net.ListenPacket("udp4", addr)
	if err != nil {
		t.Errorf("listen udp %s: %v", addr, err)
		return
	}
	t.Cleanup(func() { pc.Close() })
	go readUDP(pc, addr, tl)
}

func readUDP(pc net.PacketConn, local string, tl *tally) {
	buf := make([]byte, 2048)
	for {
		_, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		tl.add(local, from.String())
	}
}

// labIP runs `ip -batch` in the namespace at ns ("" for the test's own).
func labIP(t *testing.T, ns string, lines ...string) {
	t.Helper()
	args := []string{"ip", "-batch", "-"}
	if ns != "" {
		args = append([]string{"nsenter", "--net=" + ns}, args...)
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin = strings.NewReader(strings.Join(lines, "\n") + "\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ip %q in %q: %v: %s", lines, ns, err, out)
	}
}

func labRun(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %q: %v: %s", name, args, err, out)
	}
	return string(out)
}

// sandboxNetns is the network namespace of the sandbox id of p.
func sandboxNetns(t *testing.T, p *Provider, id string) string {
	t.Helper()
	rec, err := p.lay.readRecord(id)
	if err != nil {
		t.Fatal(err)
	}
	if ns := p.lay.netns(id); fileExists(ns) {
		// runsc: the namespace the provider made, bound in the sandbox's mount namespace.
		ns, err := p.nsPath(rec, ns)
		if err != nil {
			t.Fatal(err)
		}
		return ns
	}
	return fmt.Sprintf("/proc/%d/ns/net", rec.InitPID)
}

func (l *netLab) create(t *testing.T, p *Provider, mode provider.NetworkMode) *Instance {
	t.Helper()
	inst := create(t, p, provider.CreateSpec{Network: provider.Network{Mode: mode}})
	m := uint32(0o755)
	if err := inst.WriteFile(l.ctx, helperIn, bytes.NewReader(l.helper), &m); err != nil {
		t.Fatal(err)
	}
	return inst
}

// connect runs the helper's connect in inst and returns its result.
func (l *netLab) connect(t *testing.T, inst *Instance, addr string) string {
	t.Helper()
	out := run(t, inst, helperIn+" connect "+addr)
	_, r, _ := strings.Cut(strings.TrimSpace(out), " ")
	return r
}

func (l *netLab) expect(t *testing.T, inst *Instance, who string, addr netip.Addr, port int, want string) {
	t.Helper()
	hp := net.JoinHostPort(addr.String(), strconv.Itoa(port))
	if got := l.connect(t, inst, hp); got != want {
		t.Errorf("%s to %s: %s, want %s", who, hp, got, want)
	}
}

func (l *netLab) run(t *testing.T) {
	a := l.create(t, l.p, provider.NetworkAll) // AllowPrivate: labAllow
	b := l.create(t, l.q, provider.NetworkAll) // nothing opened
	gw := l.q.net.Gateway()
	const refused = "EHOSTUNREACH" // our REJECT: ICMP administratively prohibited

	t.Run("resolv.conf", func(t *testing.T) {
		// The loopback stub and the IPv6 server are left out; the private one stays.
		if got := run(t, b, "cat /etc/resolv.conf"); got != "nameserver "+labResolver.String() {
			t.Errorf("the sandbox's resolv.conf: %q", got)
		}
	})

	t.Run("public", func(t *testing.T) {
		for name, inst := range map[string]*Instance{"a": a, "b": b} {
			l.expect(t, inst, name, labPublic, labPort, "connected")
		}
		// Masqueraded: upstream sees the host's transit address.
		for _, peer := range l.upTCP.peers(net.JoinHostPort(labPublic.String(), strconv.Itoa(labPort))) {
			if !strings.HasPrefix(peer, labHostTransit.String()+":") {
				t.Errorf("upstream saw a connection from %s, want the host's %s", peer, labHostTransit)
			}
		}
		// The operator's DOCKER-USER rule still decides about sandbox traffic.
		l.expect(t, b, "b", labRefused, labPort, "ENETUNREACH")
	})

	t.Run("non-public", func(t *testing.T) {
		for _, np := range hostnet.NonPublic {
			addr, ok := probeAddr(np.Prefix)
			if !ok {
				continue
			}
			l.expect(t, b, "b ("+np.Why+")", addr, labPort, refused)
			if np.Prefix.Contains(labOpened) {
				continue // a's AllowPrivate opens part of it: below
			}
			l.expect(t, a, "a ("+np.Why+")", addr, labPort, refused)
		}
		l.expect(t, b, "b (metadata)", labMetadata, 80, refused)
	})

	t.Run("host", func(t *testing.T) {
		// Every address of the host: the gateway, and the transit address, which a's
		// AllowPrivate covers.
		for _, addr := range []netip.Addr{gw, labHostTransit} {
			l.expect(t, a, "a", addr, labPort, refused)
			l.expect(t, b, "b", addr, labPort, refused)
		}
	})

	t.Run("resolver", func(t *testing.T) {
		l.expect(t, b, "b", labResolver, 53, "connected")
		l.expect(t, b, "b", labResolver, labPort, refused)
	})

	t.Run("allow-private", func(t *testing.T) {
		l.expect(t, a, "a", labOpened, labPort, "connected")
		l.expect(t, a, "a", labUpTransit, labPort, "connected")
		l.expect(t, a, "a", labClosed, labPort, refused)
		l.expect(t, a, "a", labPrivate, labPort, refused)
		// b shares the bridge, but its provider opened nothing.
		l.expect(t, b, "b", labOpened, labPort, refused)
		l.expect(t, b, "b", labUpTransit, labPort, refused)
	})

	t.Run("udp", func(t *testing.T) {
		bcast := l.subnet.Addr().As4()
		bcast[3] = 255
		// The host's socket gets anything sent to any of its addresses on labUPort, and to
		// the multicast group on the bridge.
		br, err := net.InterfaceByName(l.bridge)
		if err != nil {
			t.Fatal(err)
		}
		mc, err := net.ListenMulticastUDP("udp4", br, &net.UDPAddr{IP: labGroup.AsSlice(), Port: labUPort})
		if err != nil {
			t.Fatal(err)
		}
		defer mc.Close()
		go readUDP(mc, "host", l.hostUDP)
		hp := func(a netip.Addr, port int) string { return net.JoinHostPort(a.String(), strconv.Itoa(port)) }
		// The datagrams that must arrive go last.
		out := run(t, b, helperIn+" udp "+strings.Join([]string{
			hp(labPrivate, labUPort), hp(gw, labUPort), hp(netip.AddrFrom4(bcast), labUPort), hp(labGroup, labUPort),
			hp(labHostTransit, labUPort), hp(labPublic, labUPort), hp(labResolver, 53)}, " "))
		t.Logf("sent: %s", strings.Join(strings.Fields(out), " "))
		for start := time.Now(); time.Since(start) < 10*time.Second; time.Sleep(20 * time.Millisecond) {
			if len(l.upUDP.peers(hp(labPublic, labUPort))) > 0 && len(l.upUDP.peers(hp(labResolver, 53))) > 0 {
				break
			}
		}
		if len(l.upUDP.peers(hp(labPublic, labUPort))) == 0 || len(l.upUDP.peers(hp(labResolver, 53))) == 0 {
			t.Errorf("the public stand-in or the resolver got no datagram: %v", l.upUDP)
		}
		if got := l.upUDP.peers(hp(labPrivate, labUPort)); len(got) != 0 {
			t.Errorf("a private address got datagrams from %v", got)
		}
		if got := l.hostUDP.peers("host"); len(got) != 0 {
			t.Errorf("the host got datagrams (unicast, broadcast or multicast) from %v", got)
		}
	})

	t.Run("ipv6", func(t *testing.T) {
		// As deployed: the bridge has no IPv6 address for a sandbox to reach.
		for _, addr := range bridgeAddrs6(t, l.bridge) {
			hp := net.JoinHostPort(addr.String(), strconv.Itoa(labPort))
			if addr.IsLinkLocalUnicast() {
				hp = net.JoinHostPort(addr.String()+"%eth0", strconv.Itoa(labPort))
			}
			t.Errorf("the bridge has the IPv6 address %s; b connecting to it: %s", addr, l.connect(t, b, hp))
		}
		if got := readTrim("/proc/sys/net/ipv6/conf/" + l.bridge + "/disable_ipv6"); got != "1" {
			t.Errorf("disable_ipv6 on the bridge: %q", got)
		}
		if got := l.connect(t, b, net.JoinHostPort(labService6.String(), strconv.Itoa(labPort))); got != "ENETUNREACH" {
			t.Errorf("b to %s: %s, want ENETUNREACH (no IPv6 route)", labService6, got)
		}
		// Should IPv6 come back (an operator, another tool) and a sandbox get an address
		// and a route, ip6tables still refuses both the host and the way out.
		os.WriteFile("/proc/sys/net/ipv6/conf/"+l.bridge+"/disable_ipv6", []byte("0"), 0o644)
		labIP(t, "", "addr add "+labBridge6.String()+"/64 dev "+l.bridge+" nodad")
		br, err := net.InterfaceByName(l.bridge)
		if err != nil {
			t.Fatal(err)
		}
		// Neighbour entries are given both ways, since the host answers no neighbour
		// solicitation (nor takes an advertisement): the packets below reach the host's
		// ip6tables, and its refusals get back.
		bns := sandboxNetns(t, l.q, b.ID())
		link := strings.Fields(labRun(t, "nsenter", "--net="+bns, "ip", "-br", "link", "show", "eth0"))
		if len(link) < 3 {
			t.Fatalf("b's eth0: %q", link)
		}
		labIP(t, bns, "addr add "+labSandbox6.String()+"/64 dev eth0 nodad",
			"route add ::/0 via "+labBridge6.String(),
			"neigh replace "+labBridge6.String()+" lladdr "+br.HardwareAddr.String()+" dev eth0 nud permanent")
		labIP(t, "", "neigh replace "+labSandbox6.String()+" lladdr "+link[2]+" dev "+l.bridge+" nud permanent")
		defer func() {
			labIP(t, "", "addr del "+labBridge6.String()+"/64 dev "+l.bridge)
			os.WriteFile("/proc/sys/net/ipv6/conf/"+l.bridge+"/disable_ipv6", []byte("1"), 0o644)
		}()
		for _, addr := range []netip.Addr{labBridge6, labHostTransit6, labService6} {
			// ICMPv6 "administratively prohibited" is EACCES.
			l.expect(t, b, "b over IPv6", addr, labPort, "EACCES")
		}
		if got := l.upTCP.peers(net.JoinHostPort(labService6.String(), strconv.Itoa(labPort))); len(got) != 0 {
			t.Errorf("the IPv6 service accepted %v", got)
		}
	})

	t.Run("placement", func(t *testing.T) {
		fwd := strings.Split(labRun(t, "iptables", "-S", "FORWARD"), "\n")
		idx := func(sub string) int {
			return slices.IndexFunc(fwd, func(s string) bool { return strings.Contains(s, sub) })
		}
		jump, user, accept := idx("-j "+l.q.net.ForwardChain()), idx("-j DOCKER-USER"), idx("-j ACCEPT")
		if jump < 0 || user < 0 || accept < 0 || jump > user || accept < user {
			t.Errorf("FORWARD: our refusals at %d, DOCKER-USER at %d, our accept at %d (want refusals before DOCKER-USER, the accept after):\n%s", jump, user, accept, strings.Join(fwd, "\n"))
		}
		if fwd[0] != "-P FORWARD DROP" {
			t.Errorf("the FORWARD policy changed: %q", fwd[0])
		}
	})

	// Nothing reached anything it should not have.
	for local, peers := range l.hostTCP.all() {
		t.Errorf("ESCAPE: the host's listener at %s accepted %v", local, peers)
	}
	allowed := []string{net.JoinHostPort(labPublic.String(), strconv.Itoa(labPort)),
		net.JoinHostPort(labResolver.String(), "53"), net.JoinHostPort(labOpened.String(), strconv.Itoa(labPort)),
		net.JoinHostPort(labUpTransit.String(), strconv.Itoa(labPort))}
	for local, peers := range l.upTCP.all() {
		if !slices.Contains(allowed, local) {
			t.Errorf("ESCAPE: upstream %s accepted %v", local, peers)
		}
	}
	// The datagrams that had to be dropped have had the whole test to arrive.
	if got := l.hostUDP.peers("host"); len(got) != 0 {
		t.Errorf("ESCAPE: the host got datagrams from %v", got)
	}
	if got := l.upUDP.peers(net.JoinHostPort(labPrivate.String(), strconv.Itoa(labUPort))); len(got) != 0 {
		t.Errorf("ESCAPE: a private address got datagrams from %v", got)
	}

	// a's exemption goes with it; b keeps working (the bridge keeps its MAC address when
	// a's port, perhaps the lowest, goes).
	ctx, cancel := context.WithTimeout(l.ctx, time.Minute)
	defer cancel()
	aIP := ipOf(t, l.p, a)
	if err := l.p.Destroy(ctx, a.ID()); err != nil {
		t.Fatal(err)
	}
	if rules := labRun(t, "iptables", "-S", l.q.net.ForwardChain()); strings.Contains(rules, aIP+"/32") {
		t.Errorf("a's exemption outlived it:\n%s", rules)
	}
	l.expect(t, b, "b", labPublic, labPort, "connected")
	if err := l.q.Destroy(ctx, b.ID()); err != nil {
		t.Fatal(err)
	}
	// The last sandbox took the bridge and every rule of ours, and nothing of the operator's.
	assertNoLeftovers(t, l.q)
	if got := labRun(t, "iptables", "-S"); !strings.Contains(got, "-P FORWARD DROP") || !strings.Contains(got, "-A FORWARD -j DOCKER-USER") ||
		!strings.Contains(got, labRefused.String()) {
		t.Errorf("the operator's rules changed:\n%s", got)
	}
}

// bridgeAddrs6 are the IPv6 addresses of the interface name.
func bridgeAddrs6(t *testing.T, name string) []netip.Addr {
	t.Helper()
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		t.Fatal(err)
	}
	addrs, err := ifi.Addrs()
	if err != nil {
		t.Fatal(err)
	}
	var out []netip.Addr
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().Is6() {
			out = append(out, p.Addr())
		}
	}
	return out
}

func ipOf(t *testing.T, p *Provider, inst *Instance) string {
	t.Helper()
	rec, err := p.lay.readRecord(inst.ID())
	if err != nil || rec.IP == "" {
		t.Fatalf("%s's address: %+v %v", inst.ID(), rec, err)
	}
	return rec.IP
}
