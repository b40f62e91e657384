// Package hostnet is the host side of the local provider's sandbox networks: a bridge with
// a veth pair per sandbox, the addresses leased on it, its iptables firewall, and the rules
// that send a sandbox with an egress policy to its proxy. Linux only; it runs ip, ss,
// nsenter, unshare, iptables and ip6tables (FindTools).
//
// Its invariants:
//
//   - Sandboxes reach the public internet only: not the host, not each other, not private,
//     link-local or reserved ranges (NonPublic), except port 53 of the nameservers they are
//     given (Nameservers) and what Config.AllowPrivate or a sandbox's template mirror
//     opens. Sandboxes have IPv4 only; IPv6 from the bridge is refused.
//   - The bridge and its rules exist while at least one address is leased on it: the first
//     lease's EnsureBridge makes them and the last Detach removes them. Each rewrite of the
//     rules is one iptables-restore transaction per address family, so a sandbox never sees
//     a moment without its refusals.
//   - Everything is host-wide and shared by every provider (every Home) that names the same
//     bridge: leases and per-address records live in /run/tupper/net-BRIDGE, serialized by
//     Lock. A record counts only while the lease it was written under holds, so a record a
//     crash left never applies to the address's next holder.
//   - A sandbox with an egress record (SetEgress) has its DNS and TCP redirected to its
//     proxy's sockets on the gateway (ListenEgress), and nothing else leaves but UDP to the
//     prefixes its policy allows.
//
// What a sandbox is, its namespaces and its lifecycle are the provider's: this package
// knows sandboxes only by id (for interface names) and lease holder.
package hostnet
