//go:build linux

package hostnet

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tupper-dev/tupper/internal/flock"
	"github.com/tupper-dev/tupper/providers/local/internal/hostbin"
	"github.com/tupper-dev/tupper/providers/local/internal/lease"
)

// Network is the host side of network "all" for one bridge. It is a veth pair per sandbox:
// one end (eth0) in the sandbox's network namespace with an address from Config.Subnet, the
// other on a host bridge whose address is the sandbox's gateway; iptables masquerades the
// subnet's traffic leaving through any other interface. Bridge ports are isolated from each other, so sandboxes do not reach one
// another, and the firewall (firewall.go) lets them reach the public internet only: not the
// host, not private or link-local ranges. The bridge and the iptables rules exist while at
// least one sandbox uses them: the last sandbox's teardown removes them.
type Network struct {
	subnet  netip.Prefix
	gateway netip.Addr
	bridge  string
	allow   []netip.Prefix // Config.AllowPrivate
	stale   func(holder string) bool
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

// Config is a Network's configuration.
type Config struct {
	// Subnet is the sandboxes' IPv4 subnet (a /8 to a /28); its first address is the
	// bridge's, the sandboxes' gateway.
	Subnet string
	// Bridge is the bridge's name (at most 15 characters).
	Bridge string
	// AllowPrivate are the non-public ranges sandboxes may reach all the same.
	AllowPrivate []netip.Prefix
	// Stale reports whether an address lease's holder is gone for good (package lease).
	Stale func(holder string) bool
}

// New is the network of bridge c.Bridge; nothing is looked up or made yet (FindTools,
// Probe, EnsureBridge).
func New(c Config) (*Network, error) {
	subnet, bridge := c.Subnet, c.Bridge
	p, err := netip.ParsePrefix(subnet)
	if err != nil || !p.Addr().Is4() || p.Bits() < 8 || p.Bits() > 28 {
		return nil, fmt.Errorf("subnet %q: want an IPv4 prefix between /8 and /28", subnet)
	}
	p = p.Masked()
	n := &Network{subnet: p, gateway: p.Addr().Next(), bridge: bridge, allow: c.AllowPrivate, stale: c.Stale,
		dir: filepath.Join("/run/tupper", "net-"+bridge)}
	if len(bridge) == 0 || len(bridge) > 15 {
		return nil, fmt.Errorf("bridge name %q: want 1 to 15 characters", bridge)
	}
	return n, nil
}

// FindTools looks up the programs network "all" runs.
func (n *Network) FindTools() error {
	var err error
	if n.ipPath, err = hostbin.Find("ip"); err != nil {
		return errors.New("ip (iproute2) not found")
	}
	if n.ssPath, err = hostbin.Find("ss"); err != nil {
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
		if *t.path, err = hostbin.Find(t.name); err != nil {
			return errors.New(t.name + " not found")
		}
	}
	if n.nsenter, err = hostbin.Find("nsenter"); err != nil {
		return errors.New("nsenter (util-linux) not found")
	}
	return nil
}

// hostIPv6 reports whether the kernel has IPv6 (it is off with ipv6.disable=1).
func hostIPv6() bool { _, err := os.Stat("/proc/sys/net/ipv6"); return err == nil }

// Probe reports why network "all" cannot work here, or nil. It checks the tools and that the
// kernel lets us make a veth pair (created and deleted at once) and read the nat table (and,
// with IPv6, the ip6tables filter table).
func (n *Network) Probe(ctx context.Context) error {
	if err := n.FindTools(); err != nil {
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
func (n *Network) ip(ctx context.Context, nsPath string, lines ...string) error {
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

// EnsureBridge creates the bridge if it is missing and writes its firewall for the sandboxes
// leased now. Call with the network lock held.
func (n *Network) EnsureBridge(ctx context.Context) error {
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
	return n.ApplyFirewall(ctx)
}

// removeBridge deletes the bridge and its rules. Call with the network lock held, when no
// lease is left.
func (n *Network) removeBridge(ctx context.Context) error {
	var errs []error
	if err := n.removeFirewall(ctx); err != nil {
		errs = append(errs, err)
	}
	if LinkExists(n.bridge) {
		if err := n.ip(ctx, "", "link del "+n.bridge); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// LinkExists reports whether the network interface name exists in this process's network
// namespace (/sys/class/net shows the namespace that mounted sysfs, which may be another).
func LinkExists(name string) bool {
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

// Lock takes the bridge's lock, host-wide: it serializes leases, records, and the bridge's
// and firewall's setup and teardown.
func (n *Network) Lock(ctx context.Context) (*flock.Lock, error) {
	if err := os.MkdirAll(n.Leases().Path(), 0o700); err != nil {
		return nil, err
	}
	return flock.Acquire(ctx, filepath.Join(n.dir, "lock"))
}

// Leases are the addresses leased on the bridge, by address, host-wide.
func (n *Network) Leases() lease.Dir { return lease.New(filepath.Join(n.dir, "leases"), n.stale) }

// Gateway is the bridge's address, the sandboxes' gateway.
func (n *Network) Gateway() netip.Addr { return n.gateway }

// AllowPrivate are the non-public ranges sandboxes may reach all the same (Config).
func (n *Network) AllowPrivate() []netip.Prefix { return n.allow }

// Allocate leases a free address of the subnet for holder, which may reach the non-public
// address:port pairs mirror (its template's mirror) besides Config.AllowPrivate's ranges.
// Call with the lock held.
func (n *Network) Allocate(holder string, mirror []netip.AddrPort) (netip.Addr, error) {
	base := binary.BigEndian.Uint32(n.subnet.Addr().AsSlice())
	size := uint32(1) << (32 - n.subnet.Bits())
	// .0 is the network, .1 the gateway, the last the broadcast address.
	addr := func(i int) netip.Addr {
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], base+2+uint32(i))
		return netip.AddrFrom4(b)
	}
	i, err := n.Leases().Any(int(size-3), func(i int) string { return addr(i).String() }, holder)
	if errors.Is(err, lease.ErrExhausted) {
		return netip.Addr{}, errors.New("no free address in " + n.subnet.String())
	}
	if err != nil {
		return netip.Addr{}, err
	}
	if err := n.setAllowances(addr(i), holder, mirror); err != nil {
		n.Leases().Release(addr(i).String(), holder)
		return netip.Addr{}, err
	}
	return addr(i), nil
}

// VethNames are the host and (before renaming to eth0) sandbox ends of a sandbox's pair.
func VethNames(id string) (host, peer string) { return "tp" + id[:12], "tq" + id[:12] }

// Attach creates id's veth pair, moves one end into the namespace at nsPath as eth0 with
// address a, and puts the other on the bridge. Call EnsureBridge first.
func (n *Network) Attach(ctx context.Context, id, nsPath string, a netip.Addr) error {
	host, peer := VethNames(id)
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

// Detach removes id's host veth (the pair goes with it) and releases its address (leased by
// holder, its records with it); when no
// address is leased any more, it removes the bridge and the rules too.
func (n *Network) Detach(ctx context.Context, id, holder, ip string) error {
	var errs []error
	if err := n.Unplug(ctx, id); err != nil {
		errs = append(errs, err)
	}
	lk, err := n.Lock(ctx)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	defer lk.Unlock()
	opened := false
	if ip != "" {
		opened = n.clearRecord(recAllow, ip, holder)
		if n.clearRecord(recEgress, ip, holder) {
			opened = true
		}
		if err := n.Leases().Release(ip, holder); err != nil {
			errs = append(errs, err)
		}
	}
	if empty, err := n.Leases().Empty(); err == nil && empty {
		if err := n.removeBridge(ctx); err != nil {
			errs = append(errs, err)
		}
	} else if opened && LinkExists(n.bridge) {
		// Close what AllowPrivate or a template's mirror opened to this address before it is leased again (the
		// next create rewrites the rules too).
		if err := n.ApplyFirewall(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Unplug removes id's host veth, and the pair with it, if it is there; the address stays
// leased. A pair whose namespace is gone (its container's, under runc and crun) goes with it,
// but the kernel removes a namespace's devices some time after its last process.
func (n *Network) Unplug(ctx context.Context, id string) error {
	host, _ := VethNames(id)
	if !LinkExists(host) {
		return nil
	}
	// The pair vanishes with its namespace, possibly while we look ("Cannot find device",
	// or the kernel's "No such device"): a failed delete is an error only if the link is
	// still there.
	if err := n.ip(ctx, "", "link del "+host); err != nil && LinkExists(host) {
		return err
	}
	return nil
}

// NewNetns makes a persistent network namespace bound at path (for runsc, which must be
// given a namespace that already has its interfaces).
func NewNetns(ctx context.Context, path string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	f.Close()
	unsharePath, err := hostbin.Find("unshare")
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

// RemoveNetns unbinds and removes a namespace made by NewNetns.
func RemoveNetns(path string) error {
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// Conn is one TCP connection of a sandbox: its local and peer addresses.
type Conn struct{ local, peer netip.AddrPort }

// Connections lists the established TCP connections from local address a in the network
// namespace at nsPath (loopback's are not).
func (n *Network) Connections(ctx context.Context, nsPath, a string) ([]Conn, error) {
	out, err := exec.CommandContext(ctx, n.nsenter, "--net="+nsPath, n.ssPath, "-Htn", "state", "established").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("ss: %w: %s", err, bytes.TrimSpace(out))
	}
	return parseConnections(string(out), a), nil
}

// parseConnections reads `ss -Htn state established`: per line the queues, then the local
// and the peer address.
func parseConnections(out, a string) []Conn {
	var conns []Conn
	for _, line := range strings.Split(out, "\n") {
		var addrs []netip.AddrPort
		for _, f := range strings.Fields(line) {
			if ap, err := netip.ParseAddrPort(f); err == nil {
				addrs = append(addrs, ap)
			}
		}
		if len(addrs) == 2 && addrs[0].Addr().String() == a {
			conns = append(conns, Conn{addrs[0], addrs[1]})
		}
	}
	return conns
}

// CutConnections destroys the connections conns in the network namespace at nsPath (ss -K,
// the kernel's SOCK_DESTROY: the sandbox's socket fails with ECONNABORTED and the peer gets
// a reset). Those that are gone already are skipped.
func (n *Network) CutConnections(ctx context.Context, nsPath string, conns []Conn) error {
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
