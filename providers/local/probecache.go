//go:build linux

package local

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/tupper-dev/tupper/providers/local/internal/hostbin"
)

// probeCache keeps what New learned by forking processes (a user namespace, a veth pair and
// the nat table, runsc's version) for the rest of this boot, so a short-lived process — every
// `tupper exec` — does not pay for the probes again. It lives on /run (a tmpfs, emptied at
// boot), is keyed by the kernel's boot id and by what the probes depend on (the runtime
// binaries' paths, sizes and times, the tools, the network settings), and anything it cannot
// read or trust simply means probing again. A failed user-namespace probe is never cached:
// it makes runc and crun unusable (see probe), and the next process probes again.
type probeCache struct {
	Key       string `json:"key"`
	UserNS    bool   `json:"userns"`
	NetErr    string `json:"netErr"`
	RunscDate int    `json:"runscDate"`
}

const probeCacheDir = "/run/tupper"

func (p *Provider) probeKey() string {
	h := sha256.New()
	boot, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	fmt.Fprintf(h, "v2|%s|%s|%s|%v|%d|", strings.TrimSpace(string(boot)), p.cfg.Subnet, p.cfg.Bridge, p.cfg.NoUserNS, p.cfg.UIDBase)
	paths := []string{p.runtimes[RuntimeRunc].path, p.runtimes[RuntimeRunsc].path, p.runtimes[RuntimeCrun].path}
	for _, tool := range []string{"ip", "iptables", "iptables-restore", "ip6tables", "ip6tables-restore", "nsenter", "true"} {
		path, _ := hostbin.Find(tool)
		paths = append(paths, path)
	}
	for _, path := range paths {
		if fi, err := os.Stat(path); err == nil {
			fmt.Fprintf(h, "%s:%d:%d|", path, fi.Size(), fi.ModTime().UnixNano())
		} else {
			fmt.Fprintf(h, "%s:-|", path)
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

func (p *Provider) probeCachePath(key string) string {
	return filepath.Join(probeCacheDir, "probe-"+key[:16]+".json")
}

// loadProbe returns the cached results for key, if any.
func (p *Provider) loadProbe(key string) (probeCache, bool) {
	b, err := os.ReadFile(p.probeCachePath(key))
	if err != nil {
		return probeCache{}, false
	}
	var c probeCache
	if json.Unmarshal(b, &c) != nil || c.Key != key {
		return probeCache{}, false
	}
	return c, true
}

// saveProbe stores c atomically; a failure only costs the next process a probe.
func (p *Provider) saveProbe(c probeCache) {
	if os.MkdirAll(probeCacheDir, 0o755) != nil {
		return
	}
	if b, err := json.Marshal(c); err == nil {
		writeFileAtomic(p.probeCachePath(c.Key), b)
	}
}
