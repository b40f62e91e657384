//go:build linux

package local

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/tupper-dev/tupper/internal/flock"
	"golang.org/x/sys/unix"
)

// Network "all" is a veth pair per sandbox: one end (eth0) in the sandbox's network
// namespace with an address from Config.Subnet, the other on a host bridge whose address is
// the sandbox's gateway; iptables masquerades the subnet's traffic leaving through any other
// interface. Bridge ports are isolated from each other, so sandboxes do not reach one
// another, and the firewall (firewall.go) lets them reach the public internet only: not the
// host, not private or link-local ranges. The bridge and the iptables rules exist while at
// least one sandbox uses them: the last sandbox's teardown removes them.
type network struct {
	subnet  netip.Prefix
	gateway netip.Addr
	bridge  string
	lay     layout
	allow   []netip.Prefix // Config.AllowPrivate
	// dir holds the address leases and the lock of the bridge. The bridge, its rules and
	// its addresses are host-wide and vanish at reboot, so they are kept in /run, shared by
	// every Home that uses the bridge: /run/tupper/net-BRIDGE.
	dir     string
	ipPath  string
	ssPath  string // ss (iproute2): the connections of a sandbox given a policy live
	nsenter string
	// iptables and iptables-restore; ip6tables and ip6tables-restore, "" on a host without
	// IPv6.
	iptPath, iptRestore   string
	ip6tPath, ip6tRestore string
}

func newNetwork(lay layout, subnet, bridge string, allow []netip.Prefix) (*network, error) {
	p, err := netip.ParsePrefix(subnet)
	if err != nil || !p.Addr().Is4() || p.Bits() < 8 || p.Bits() > 28 {
		return nil, fmt.Errorf("subnet %q: want an IPv4 prefix between /8 and /28", subnet)
	}
	p = p.Masked()
	n := &network{subnet: p, gateway: p.Addr().Next(), bridge: bridge, lay: lay, allow: allow,
		dir: filepath.Join("/run/tupper", "net-"+bridge)}
	if len(bridge) == 0 || len(bridge) > 15 {
		return nil, fmt.Errorf("bridge name %q: want 1 to 15 characters", bridge)
	}
	return n, nil
}

// findTools looks up the programs network "all" runs.
func (n *network) findTools() error {
	var err error
	if n.ipPath, err = findBinary("ip"); err != nil {
		return errors.New("ip (iproute2) not found")
	}
	if n.ssPath, err = findBinary("ss"); err != nil {
		return errors.New("ss (iproute2) not found")
	}
	for _, t := range []struct {
		path *string
		name string
		need bool
	}{
		{&n.iptPath, "iptables", true},
		{&n.iptRestore, "iptables-restore", true},
		{&n.ip6tPath, "ip6tables", hostIPv6()},
		{&n.ip6tRestore, "ip6tables-restore", hostIPv6()},
	} {
		if !t.need {
			continue
		}
		if *t.path, err = findBinary(t.name); err != nil {
			return errors.New(t.name + " not found")
		}
	}
	if n.nsenter, err = findBinary("nsenter"); err != nil {
		return errors.New("nsenter (util-linux) not found")
	}
	return nil
}

// hostIPv6 reports whether the kernel has IPv6 (it is off with ipv6.disable=1).
func hostIPv6() bool { return fileExists("/proc/sys/net/ipv6") }

// probe reports why network "all" cannot work here, or nil. It checks the tools and that the
// kernel lets us make a veth pair (created and deleted at once) and read the nat table (and,
// with IPv6, the ip6tables filter table).
func (n *network) probe(ctx context.Context) error {
	if err := n.findTools(); err != nil {
		return err
	}
	// Random, not the pid: two providers probing at once in one process (runc and runsc
	// side by side) must not collide, or the loser declares network "all" unavailable.
	var rnd [3]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return err
	}
	name := fmt.Sprintf("tpprobe%x", rnd) // 14 characters with the peer's "p": under IFNAMSIZ
	if err := n.ip(ctx, "", "link add "+name+" type veth peer name "+name+"p"); err != nil {
		return fmt.Errorf("veth: %w", err)
	}
	n.ip(ctx, "", "link del "+name)
	if err := n.run(ctx, n.iptPath, "-t", "nat", "-S", "POSTROUTING"); err != nil {
		return fmt.Errorf("iptables nat: %w", err)
	}
	if n.ip6tPath != "" {
		if err := n.run(ctx, n.ip6tPath, "-t", "filter", "-S", "FORWARD"); err != nil {
			return fmt.Errorf("ip6tables: %w", err)
		}
	}
	return nil
}

// ip runs `ip -batch -` with the given lines, inside the network namespace at nsPath when it
// is not empty.
func (n *network) ip(ctx context.Context, nsPath string, lines ...string) error {
	var cmd *exec.Cmd
	if nsPath == "" {
		cmd = exec.CommandContext(ctx, n.ipPath, "-batch", "-")
	} else {
		cmd = exec.CommandContext(ctx, n.nsenter, "--net="+nsPath, n.ipPath, "-batch", "-")
	}
	cmd.Stdin = strings.NewReader(strings.Join(lines, "\n") + "\n")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %q: %w: %s", lines, err, bytes.TrimSpace(out))
	}
	return nil
}

// ensureBridge creates the bridge if it is missing and writes its firewall for the sandboxes
// leased now. Call with the network lock held.
func (n *network) ensureBridge(ctx context.Context) error {
	exists, up := linkState(n.bridge)
	if !exists {
		gw := netip.PrefixFrom(n.gateway, n.subnet.Bits())
		// A MAC address of its own: otherwise the bridge takes its lowest port's, which
		// changes when that sandbox goes, and the others' cached gateway address goes stale
		// (their traffic stops until the entry expires).
		var mac [6]byte
		if _, err := rand.Read(mac[:]); err != nil {
			return err
		}
		mac[0] = mac[0]&^1 | 2 // unicast, locally administered
		// No IPv6 link-local address, ever: the bridge is up only with IPv6 off below.
		if err := n.ip(ctx, "",
			"link add "+n.bridge+" type bridge",
			"link set "+n.bridge+" address "+net.HardwareAddr(mac[:]).String(),
			"link set "+n.bridge+" addrgenmode none",
			"addr add "+gw.String()+" dev "+n.bridge,
		); err != nil {
			n.ip(ctx, "", "link del "+n.bridge)
			return err
		}
	}
	// Sandboxes have IPv4 only; with IPv6 off on the bridge the host neither answers nor
	// forwards IPv6 from it (the ip6tables rules refuse it too).
	if hostIPv6() {
		if err := os.WriteFile("/proc/sys/net/ipv6/conf/"+n.bridge+"/disable_ipv6", []byte("1"), 0o644); err != nil {
			return fmt.Errorf("turn IPv6 off on %s: %w", n.bridge, err)
		}
	}
	if !up {
		if err := n.ip(ctx, "", "link set "+n.bridge+" up"); err != nil {
			return err
		}
	}
	// Forwarding is host-wide; NAT needs it. It is left on when the bridge goes away, since
	// other software may rely on it by then.
	if err := os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0o644); err != nil {
		return fmt.Errorf("enable ip_forward: %w", err)
	}
	return n.applyFirewall(ctx)
}

// removeBridge deletes the bridge and its rules. Call with the network lock held, when no
// lease is left.
func (n *network) removeBridge(ctx context.Context) error {
	var errs []error
	if err := n.removeFirewall(ctx); err != nil {
		errs = append(errs, err)
	}
	if linkExists(n.bridge) {
		if err := n.ip(ctx, "", "link del "+n.bridge); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// linkExists reports whether the network interface name exists in this process's network
// namespace (/sys/class/net shows the namespace that mounted sysfs, which may be another).
func linkExists(name string) bool {
	exists, _ := linkState(name)
	return exists
}

// linkState reports whether the interface name exists, and whether it is up.
func linkState(name string) (exists, up bool) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return false, false
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return false, false
	}
	if unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr) != nil {
		return false, false
	}
	return true, ifr.Uint16()&unix.IFF_UP != 0
}

func (n *network) lock(ctx context.Context) (*flock.Lock, error) {
	if err := os.MkdirAll(n.leases(), 0o700); err != nil {
		return nil, err
	}
	return flock.Acquire(ctx, filepath.Join(n.dir, "lock"))
}

func (n *network) leases() string { return filepath.Join(n.dir, "leases") }

// allocate leases a free address of the subnet for id, which may reach the non-public
// address:port pairs mirror (its template's mirror) besides Config.AllowPrivate's ranges.
// Call with the lock held.
func (n *network) allocate(id string, mirror []netip.AddrPort) (netip.Addr, error) {
	base := binary.BigEndian.Uint32(n.subnet.Addr().AsSlice())
	size := uint32(1) << (32 - n.subnet.Bits())
	// .0 is the network, .1 the gateway, the last the broadcast address.
	addr := func(i int) netip.Addr {
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], base+2+uint32(i))
		return netip.AddrFrom4(b)
	}
	i, err := leaseAny(n.leases(), int(size-3), func(i int) string { return addr(i).String() }, leaseHolder(n.lay, id))
	if errors.Is(err, errLeasesExhausted) {
		return netip.Addr{}, errors.New("no free address in " + n.subnet.String())
	}
	if err != nil {
		return netip.Addr{}, err
	}
	if err := n.setAllowances(addr(i), leaseHolder(n.lay, id), mirror); err != nil {
		release(n.leases(), addr(i).String(), leaseHolder(n.lay, id))
		return netip.Addr{}, err
	}
	return addr(i), nil
}

// vethNames are the host and (before renaming to eth0) sandbox ends of a sandbox's pair.
func vethNames(id string) (host, peer string) { return "tp" + id[:12], "tq" + id[:12] }

// attach creates id's veth pair, moves one end into the namespace at nsPath as eth0 with
// address a, and puts the other on the bridge. Call ensureBridge first.
func (n *network) attach(ctx context.Context, id, nsPath string, a netip.Addr) error {
	host, peer := vethNames(id)
	if err := n.ip(ctx, "",
		"link add "+host+" type veth peer name "+peer,
		"link set "+peer+" netns "+nsPath,
		"link set "+host+" master "+n.bridge,
		"link set dev "+host+" type bridge_slave isolated on",
		"link set "+host+" up",
	); err != nil {
		n.ip(ctx, "", "link del "+host)
		return err
	}
	addr := netip.PrefixFrom(a, n.subnet.Bits())
	if err := n.ip(ctx, nsPath,
		"link set lo up",
		"link set "+peer+" name eth0",
		"addr add "+addr.String()+" dev eth0",
		"link set eth0 up",
		"route add default via "+n.gateway.String(),
	); err != nil {
		n.ip(ctx, "", "link del "+host)
		return err
	}
	return nil
}

// detach removes id's host veth (the pair goes with it) and releases its address; when no
// address is leased any more, it removes the bridge and the rules too.
func (n *network) detach(ctx context.Context, id, ip string) error {
	var errs []error
	if err := n.unplug(ctx, id); err != nil {
		errs = append(errs, err)
	}
	lk, err := n.lock(ctx)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	defer lk.Unlock()
	opened := false
	if ip != "" {
		opened = n.clearRecord(recAllow, ip, leaseHolder(n.lay, id))
		if n.clearRecord(recEgress, ip, leaseHolder(n.lay, id)) {
			opened = true
		}
		if err := release(n.leases(), ip, leaseHolder(n.lay, id)); err != nil {
			errs = append(errs, err)
		}
	}
	if empty, err := dirEmpty(n.leases()); err == nil && empty {
		if err := n.removeBridge(ctx); err != nil {
			errs = append(errs, err)
		}
	} else if opened && linkExists(n.bridge) {
		// Close what AllowPrivate or a template's mirror opened to this address before it is leased again (the
		// next create rewrites the rules too).
		if err := n.applyFirewall(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// unplug removes id's host veth, and the pair with it, if it is there; the address stays
// leased. A pair whose namespace is gone (its container's, under runc and crun) goes with it,
// but the kernel removes a namespace's devices some time after its last process.
func (n *network) unplug(ctx context.Context, id string) error {
	host, _ := vethNames(id)
	if !linkExists(host) {
		return nil
	}
	// The pair vanishes with its namespace, possibly while we look ("Cannot find device",
	// or the kernel's "No such device"): a failed delete is an error only if the link is
	// still there.
	if err := n.ip(ctx, "", "link del "+host); err != nil && linkExists(host) {
		return err
	}
	return nil
}

// dirEmpty reports whether dir has no entries, reading at most one: the work does not grow
// with the number of leases.
func dirEmpty(dir string) (bool, error) {
	f, err := os.Open(dir)
	if err != nil {
		return false, err
	}
	defer f.Close()
	names, err := f.Readdirnames(1)
	if errors.Is(err, io.EOF) {
		return true, nil
	}
	return len(names) == 0, err
}

// newNetns makes a persistent network namespace bound at path (for runsc, which must be
// given a namespace that already has its interfaces).
func newNetns(ctx context.Context, path string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	f.Close()
	unsharePath, err := findBinary("unshare")
	if err != nil {
		return errors.New("unshare (util-linux) not found")
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(cctx, unsharePath, "--net="+path, "true").CombinedOutput()
	if err != nil {
		os.Remove(path)
		return fmt.Errorf("unshare --net: %w: %s", err, bytes.TrimSpace(out))
	}
	return nil
}

// removeNetns unbinds and removes a namespace made by newNetns.
func removeNetns(path string) error {
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// netnsPath is where the host enters the network namespace of running sandbox rec: under
// runsc the namespace bound in its directory, which only its mount namespace shows (reached
// through the holder's root); under runc and crun the container's, its init's.
func (p *Provider) netnsPath(rec *record) (string, error) {
	if rec.Runtime == RuntimeRunsc {
		if !holderAlive(rec) {
			return "", fmt.Errorf("sandbox %s's holder is gone: its network namespace is out of reach", rec.ID)
		}
		return fmt.Sprintf("/proc/%d/root%s", rec.HolderPID, p.lay.netns(rec.ID)), nil
	}
	if rec.InitPID <= 0 || procStart(rec.InitPID) != rec.InitStart {
		return "", fmt.Errorf("sandbox %s's init process is gone", rec.ID)
	}
	return fmt.Sprintf("/proc/%d/ns/net", rec.InitPID), nil
}

// tcpConn is one TCP connection of a sandbox: its local and peer addresses.
type tcpConn struct{ local, peer netip.AddrPort }

// connections lists the established TCP connections from local address a in the network
// namespace at nsPath (loopback's are not).
func (n *network) connections(ctx context.Context, nsPath, a string) ([]tcpConn, error) {
	out, err := exec.CommandContext(ctx, n.nsenter, "--net="+nsPath, n.ssPath, "-Htn", "state", "established").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("ss: %w: %s", err, bytes.TrimSpace(out))
	}
	return parseConnections(string(out), a), nil
}

// parseConnections reads `ss -Htn state established`: per line the queues, then the local
// and the peer address.
func parseConnections(out, a string) []tcpConn {
	var conns []tcpConn
	for _, line := range strings.Split(out, "\n") {
		var addrs []netip.AddrPort
		for _, f := range strings.Fields(line) {
			if ap, err := netip.ParseAddrPort(f); err == nil {
				addrs = append(addrs, ap)
			}
		}
		if len(addrs) == 2 && addrs[0].Addr().String() == a {
			conns = append(conns, tcpConn{addrs[0], addrs[1]})
		}
	}
	return conns
}

// cutConnections destroys the connections conns in the network namespace at nsPath (ss -K,
// the kernel's SOCK_DESTROY: the sandbox's socket fails with ECONNABORTED and the peer gets
// a reset). Those that are gone already are skipped.
func (n *network) cutConnections(ctx context.Context, nsPath string, conns []tcpConn) error {
	if len(conns) == 0 {
		return nil
	}
	args := []string{"--net=" + nsPath, n.ssPath, "-HtnK", "state", "established"}
	for i, c := range conns {
		if i > 0 {
			args = append(args, "or")
		}
		args = append(args, "(", "sport", "=", ":"+strconv.Itoa(int(c.local.Port())),
			"and", "dst", c.peer.Addr().String(), "and", "dport", "=", ":"+strconv.Itoa(int(c.peer.Port())), ")")
	}
	out, err := exec.CommandContext(ctx, n.nsenter, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ss -K: %w: %s", err, bytes.TrimSpace(out))
	}
	return nil
}
