package local

import (
	"os"
	"testing"

	"github.com/tupper-dev/tupper/provider"
)

// TestProbeCache checks that New reuses what an earlier New probed this boot, and that a
// cache for other settings is not used.
func TestProbeCache(t *testing.T) {
	p1 := newTestProvider(t, RuntimeRunc)
	key := p1.probeKey()
	c, ok := p1.loadProbe(key)
	if !ok || c.UserNS != p1.userns || (c.NetErr == "") != (p1.net != nil) {
		t.Fatalf("New left no cache matching what it probed: %+v ok=%v (userns %v, net %v)", c, ok, p1.userns, p1.net != nil)
	}
	t.Cleanup(func() { os.Remove(p1.probeCachePath(key)) })

	// A planted result proves the next New reads the cache instead of probing.
	c.NetErr = "cached: no veth here"
	p1.saveProbe(c)
	p2, err := New(p1.cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p2.Close()
	if p2.netErr != nil || p2.runtimes[RuntimeRunc].path != "" {
		t.Fatalf("New probed the host; probing is for first use")
	}
	p2.probed()
	if p2.netErr == nil || p2.netErr.Error() != c.NetErr || p2.Capabilities().Has(provider.CapNetworkAll) {
		t.Fatalf("New did not use the cached probe: netErr %v, caps %v", p2.netErr, p2.Capabilities())
	}

	// Other settings, another key: probed afresh, the planted result ignored.
	cfg := p1.cfg
	cfg.NoUserNS = !cfg.NoUserNS
	p3, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p3.Close()
	p3.probed()
	t.Cleanup(func() { os.Remove(p3.probeCachePath(p3.probeKey())) })
	if p3.probeKey() == key || (p1.net != nil && p3.netErr != nil) {
		t.Fatalf("a cache for other settings was used: key equal %v, netErr %v", p3.probeKey() == key, p3.netErr)
	}
}
