//go:build linux

package local

import (
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/tupper-dev/tupper/provider"
)

// Config configures the local provider. The zero value is the default.
type Config struct {
	// Home is the state root. "" means $TUPPER_HOME, else /var/lib/tupper.
	Home string
	// Runtime is the default OCI runtime: "runc", "crun" (a C runtime that starts faster,
	// same isolation) or "runsc" (gVisor). "" (the default) picks the fastest runtime with
	// runc's isolation that works on this host: crun when it is installed and usable here,
	// else runc; DefaultRuntime says which and why. CreateSpec.Runtime picks another per
	// sandbox.
	Runtime string
	// RuncPath, RunscPath and CrunPath are the runtime binaries; "" looks them up on PATH
	// and in the sbin directories.
	RuncPath, RunscPath, CrunPath string
	// AgentPath is the tupper binary run as every sandbox's PID 1 ("tupper agent"). ""
	// means $TUPPER_AGENT, else the running program when it is tupper, else tupper beside
	// the running program or on PATH (see agent.go). The binary is copied into Home.
	AgentPath string
	// Subnet is the IPv4 network of sandboxes with network "all"; "" means 10.213.0.0/16.
	// Its first address is the host bridge's.
	Subnet string
	// Bridge is the host bridge of network "all"; "" means "tupper0".
	Bridge string
	// AllowPrivate are IPv4 ranges that sandboxes with network "all" may reach although
	// they are not public: by default such a sandbox reaches the public internet only, never
	// private (RFC 1918), carrier-grade NAT, link-local (cloud metadata), loopback,
	// documentation, benchmarking, multicast or reserved addresses (see docs/security.md).
	// For example 10.1.2.0/24 for a package mirror on the company network. The host itself
	// stays out of reach whatever is listed. Each sandbox keeps its own provider's list, also
	// when providers with different lists share a bridge.
	AllowPrivate []netip.Prefix
	// NoTemplateMirror keeps the sandboxes of a template made from a package mirror (the
	// built-in debian and base templates: template.Template.Mirror) from reaching that
	// mirror when it is on a non-public address. By default they reach exactly its
	// recorded addresses on its port and nothing else of the private ranges
	// (docs/network.md); AllowPrivate still opens what it lists.
	NoTemplateMirror bool
	// EgressRoots are CA certificates (PEM) the egress proxy trusts, besides the host's
	// roots, when it verifies the servers of bound secrets' hosts (a company CA, or a
	// test's). The host's roots are those of the host, never the sandbox's.
	EgressRoots []byte
	// UIDBase is the first host uid (and gid) of the sandboxes' user namespaces: sandbox n
	// maps 0..65535 inside to UIDBase+n*65536 on. 0 means 0x70000000. Nothing else on the
	// host should own ids in that range.
	UIDBase uint32
	// NoUserNS runs runc and crun sandboxes without a user namespace (root inside is root
	// outside, still confined by capabilities, seccomp and namespaces). For hosts that
	// forbid them.
	NoUserNS bool
	// DefaultSize is the size of a sandbox created without one; its zero fields mean 1 CPU,
	// 1024 MB of memory and 5 GB of disk.
	DefaultSize provider.Size
	// PidsLimit bounds the number of processes and threads a sandbox's commands run; 0
	// means 1024. Under runc and crun the agent's own threads have agentPidsReserve more
	// (commandcgroup.go); under runsc the limit is the sentry's host threads'.
	PidsLimit int64
	// ReadyTimeout bounds how long Create waits for the agent to answer; 0 means 30 s.
	ReadyTimeout time.Duration
	// Pool is how many ready sandboxes of the default shape (default runtime, template and
	// size, network "none") the provider keeps started in the background, from New until
	// Close, for Create to hand out; 0 (the default) keeps none. For long-lived users
	// (tupper serve --pool); see pool.go.
	Pool int
	// BootImages makes the first runsc create of a shape (template, size, network "none")
	// save a checkpoint of its freshly booted sandbox under Home/bootimages, and later creates
	// of that shape restore it instead of booting (tupper serve --boot-images); see
	// bootimage.go. Off by default: with this host's runsc (20240729) a restore starts a new
	// sandbox process just as a boot does, and measured 0.99 to 1.17 times as fast as a boot
	// under load (docs/local.md).
	BootImages bool
}

// Validate reports a configuration New cannot use.
func (c Config) Validate() error {
	switch c.Runtime {
	case "", RuntimeRunc, RuntimeRunsc, RuntimeCrun:
	default:
		return provider.Errorf(provider.CodeInvalidArgument, "local: runtime %q: want runc, runsc or crun", c.Runtime)
	}
	if c.Home != "" && !filepath.IsAbs(c.Home) {
		return provider.Errorf(provider.CodeInvalidArgument, "local: home %q is not absolute", c.Home)
	}
	if c.UIDBase != 0 && uint64(c.UIDBase)+1<<30 > 1<<32-1 {
		return provider.Errorf(provider.CodeInvalidArgument, "local: uid base %d leaves too few ids", c.UIDBase)
	}
	if c.PidsLimit < 0 || c.ReadyTimeout < 0 || c.Pool < 0 {
		return provider.Errorf(provider.CodeInvalidArgument, "local: negative limit")
	}
	for _, r := range c.AllowPrivate {
		if !r.IsValid() || !r.Addr().Is4() {
			return provider.Errorf(provider.CodeInvalidArgument, "local: allow-private range %v: want an IPv4 prefix (sandboxes have no IPv6)", r)
		}
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.Home == "" {
		c.Home = os.Getenv("TUPPER_HOME")
	}
	if c.Home == "" {
		c.Home = "/var/lib/tupper"
	}
	if c.Subnet == "" {
		c.Subnet = "10.213.0.0/16"
	}
	if c.Bridge == "" {
		c.Bridge = "tupper0"
	}
	if c.UIDBase == 0 {
		c.UIDBase = 0x70000000
	}
	if c.DefaultSize.CPU == 0 {
		c.DefaultSize.CPU = 1
	}
	if c.DefaultSize.MemoryMB == 0 {
		c.DefaultSize.MemoryMB = 1024
	}
	if c.DefaultSize.DiskGB == 0 {
		c.DefaultSize.DiskGB = 5
	}
	if c.PidsLimit == 0 {
		c.PidsLimit = 1024
	}
	if c.ReadyTimeout == 0 {
		c.ReadyTimeout = 30 * time.Second
	}
	return c
}
