//go:build linux

package hostnet

import (
	"net/netip"
	"os"
	"slices"
	"strings"
)

// Nameservers returns the nameservers of sandboxes with network "all": the host's IPv4
// nameservers that are not loopback addresses (sandboxes have no IPv6, and the host's
// loopback is not theirs). When the host's resolv.conf names only a loopback stub, such as
// systemd-resolved's 127.0.0.53, they are the upstream servers systemd-resolved lists in
// /run/systemd/resolve/resolv.conf, if it runs. The firewall lets sandboxes reach port 53
// of exactly these addresses, even where they are private or the host's own.
func Nameservers() []netip.Addr {
	return nameservers("/etc/resolv.conf", "/run/systemd/resolve/resolv.conf")
}

// nameservers reads conf, and upstream when conf names only loopback servers.
func nameservers(conf, upstream string) []netip.Addr {
	ns, stub := parseNameservers(conf)
	if len(ns) == 0 && stub {
		ns, _ = parseNameservers(upstream)
	}
	return ns
}

// parseNameservers returns the usable nameservers of a resolv.conf file, and whether it
// named a loopback one.
func parseNameservers(path string) (ns []netip.Addr, loopback bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != "nameserver" {
			continue
		}
		a, err := netip.ParseAddr(f[1])
		if err != nil {
			continue
		}
		a = a.Unmap()
		switch {
		case a.IsLoopback():
			loopback = true
		case a.Is4() && !a.IsUnspecified() && !slices.Contains(ns, a):
			ns = append(ns, a)
		}
	}
	return ns, loopback
}
