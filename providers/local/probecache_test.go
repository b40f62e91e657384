//go:build linux

package local

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/tupper-dev/tupper/internal/testenv"
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

// TestUserNSFailsClosed checks that a failed user-namespace probe never lets runc or crun run
// a sandbox's root as host root: they become unavailable (runsc, which needs none, stays),
// nothing is cached, and a cached "no user namespace" is not believed. Only NoUserNS runs
// them without one.
func TestUserNSFailsClosed(t *testing.T) {
	p1 := newTestProvider(t, RuntimeRunc)
	if !p1.userns {
		testenv.Skip(t, "this host has no user namespaces to fail")
	}
	key := p1.probeKey()
	os.Remove(p1.probeCachePath(key))
	t.Cleanup(func() { os.Remove(p1.probeCachePath(key)) })
	usernsProbe = func() bool { return false }
	t.Cleanup(func() { usernsProbe = usernsWorks })

	p2, err := New(p1.cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p2.Close()
	err = p2.Available(context.Background())
	if !errors.Is(err, provider.CodeUnavailable) || !strings.Contains(err.Error(), "user namespace") {
		t.Fatalf("runc without a user namespace: Available = %v, want unavailable", err)
	}
	if p2.userns {
		t.Fatal("userns is set after a failed probe")
	}
	if c, ok := p2.loadProbe(key); ok {
		t.Fatalf("a failed probe was cached: %+v", c)
	}
	if _, err := p2.Create(context.Background(), provider.CreateSpec{Network: netNone}); !errors.Is(err, provider.CodeUnavailable) {
		t.Fatalf("create under runc after a failed probe: %v, want unavailable", err)
	}
	// A crun sandbox of the same provider is refused too; a runsc one is not affected.
	if _, ok := p2.runtimes[RuntimeCrun]; ok {
		if _, err := p2.create(context.Background(), provider.CreateSpec{Runtime: RuntimeCrun, Network: netNone}, false); !errors.Is(err, provider.CodeUnavailable) {
			t.Fatalf("create under crun after a failed probe: %v, want unavailable", err)
		}
	}

	// A planted negative cache (as an older release wrote) is not believed: the probe runs.
	probes := 0
	usernsProbe = func() bool { probes++; return usernsWorks() }
	p1.saveProbe(probeCache{Key: key, UserNS: false})
	p3, err := New(p1.cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p3.Close()
	if err := p3.Available(context.Background()); err != nil || !p3.userns || probes != 1 {
		t.Fatalf("after a cached negative: Available %v, userns %v, probes %d; want a fresh probe that works", err, p3.userns, probes)
	}

	// The operator's NoUserNS is the only way to run without one.
	cfg := p1.cfg
	cfg.NoUserNS = true
	usernsProbe = func() bool { t.Error("probed a user namespace with NoUserNS"); return false }
	p4, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p4.Close()
	t.Cleanup(func() { os.Remove(p4.probeCachePath(p4.probeKey())) })
	if err := p4.Available(context.Background()); err != nil || p4.userns {
		t.Fatalf("NoUserNS: Available %v, userns %v", err, p4.userns)
	}
}
