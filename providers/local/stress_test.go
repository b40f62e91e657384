//go:build linux

package local

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tupper-dev/tupper/internal/testenv"
	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/providers/local/internal/hostnet"
)

// Creates and destroys from many goroutines in several processes share host state: the
// cgroup parents, the bridge and its iptables rules, the address and uid-range leases, the
// template, the probe cache. TestConcurrentCreateDestroy runs stressPairs create → exec →
// destroy pairs from stressWorkers goroutines in this process and as many in a child
// process (the test binary again, on the same Home), over runc, crun and runsc with network
// none and all, and requires every one to succeed and nothing of any sandbox to be left.
const (
	stressWorkers = 4
	stressPairs   = 25 // per worker: 2 processes × 4 workers × 25 = 200 pairs
	stressEnv     = "TUPPER_TEST_STRESS_HOME"
)

// stressSpec is pair i's runtime and network: every tenth under gVisor (its create is an
// order of magnitude slower), the rest alternating runc and crun; network all on every other.
func stressSpec(i int) (string, provider.NetworkMode) {
	rt := RuntimeRunc
	switch {
	case i%10 == 9:
		rt = RuntimeRunsc
	case i%2 == 1:
		rt = RuntimeCrun
	}
	mode := provider.NetworkNone
	if (i/2)%2 == 1 {
		mode = provider.NetworkAll
	}
	return rt, mode
}

// stress runs this process's pairs on p and writes "made ID HOLDERPID HOLDERSTART" and
// "error …" lines to w.
func stress(p *Provider, w func(string)) {
	var wg sync.WaitGroup
	for g := range stressWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range stressPairs {
				rt, mode := stressSpec(g*stressPairs + i)
				if err := stressPair(p, rt, mode, w); err != nil {
					w(fmt.Sprintf("error %s/%s: %v", rt, mode, err))
				}
			}
		}()
	}
	wg.Wait()
}

func stressPair(p *Provider, rt string, mode provider.NetworkMode, w func(string)) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pi, err := p.Create(ctx, provider.CreateSpec{Runtime: rt, Network: provider.Network{Mode: mode}})
	if err != nil {
		return fmt.Errorf("create: %w", err)
	}
	inst := pi.(*Instance)
	rec, err := p.lay.readRecord(inst.ID())
	if err != nil {
		p.Destroy(context.Background(), inst.ID())
		return fmt.Errorf("record: %w", err)
	}
	w(fmt.Sprintf("made %s %d %d", inst.ID(), rec.HolderPID, rec.HolderStart))
	defer inst.Close()
	var out bytes.Buffer
	res, err := inst.Exec(ctx, provider.ExecRequest{Command: "echo ok", Stdout: &out})
	if err == nil && (res.ExitCode != 0 || strings.TrimSpace(out.String()) != "ok") {
		err = fmt.Errorf("exit %d, output %q", res.ExitCode, out.String())
	}
	if err != nil {
		p.Destroy(context.Background(), inst.ID())
		return fmt.Errorf("exec: %w", err)
	}
	if err := p.Destroy(ctx, inst.ID()); err != nil {
		return fmt.Errorf("destroy: %w", err)
	}
	return nil
}

// stressChild is the child process's side, run from TestMain when stressEnv is set.
func stressChild(home string) int {
	p, err := New(Config{Home: home, AgentPath: os.Getenv("TUPPER_AGENT"), Subnet: testSubnet, Bridge: testBridge})
	if err == nil {
		err = p.Available(context.Background())
	}
	if err != nil {
		fmt.Println("error provider:", err)
		return 1
	}
	var mu sync.Mutex
	stress(p, func(line string) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Println(line)
	})
	return 0
}

func TestConcurrentCreateDestroy(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: 200 sandboxes")
	}
	for _, rt := range []string{RuntimeCrun, RuntimeRunsc} {
		testenv.RequireBinary(t, rt)
	}
	p := newTestProvider(t, RuntimeRunc)
	if err := p.unusable[RuntimeCrun]; err != nil {
		testenv.Skip(t, err.Error())
	}
	if p.net == nil {
		testenv.Skip(t, fmt.Sprintf("network all is unavailable: %v", p.netErr))
	}

	child, stdout := startChild(t, stressEnv+"="+p.cfg.Home, "TUPPER_AGENT="+p.cfg.AgentPath)

	var (
		mu       sync.Mutex
		made     []string
		holders  [][2]uint64 // pid, start time
		failures []string
	)
	record := func(line string) {
		mu.Lock()
		defer mu.Unlock()
		var id string
		var pid, start uint64
		switch {
		case strings.HasPrefix(line, "made "):
			if n, _ := fmt.Sscanf(line, "made %s %d %d", &id, &pid, &start); n != 3 || pid == 0 {
				failures = append(failures, "no holder: "+line)
			}
			made = append(made, id)
			holders = append(holders, [2]uint64{pid, start})
		case line != "" && !strings.HasPrefix(line, "PASS") && !strings.HasPrefix(line, "ok"):
			failures = append(failures, line)
		}
	}
	childDone := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			record(sc.Text())
		}
		childDone <- child.Wait()
	}()
	start := time.Now()
	stress(p, record)
	if err := <-childDone; err != nil {
		t.Errorf("child process: %v", err)
	}
	t.Logf("%d pairs in %v", len(made), time.Since(start).Round(time.Millisecond))

	for _, e := range failures {
		t.Error(e)
	}
	if want := 2 * stressWorkers * stressPairs; len(made) != want {
		t.Errorf("%d sandboxes made (%d failures), want %d", len(made), len(failures), want)
	}
	assertNoLeftovers(t, p)
	assertGone(t, p, made)
	for _, h := range holders {
		if procStart(int(h[0])) == h[1] {
			t.Errorf("holder %d outlived its sandbox", h[0])
		}
	}
}

// assertGone checks that nothing of the sandboxes ids is left on the host: cgroups, veths,
// leases, runtime state, network namespaces.
func assertGone(t *testing.T, p *Provider, ids []string) {
	t.Helper()
	for _, id := range ids {
		if left, _ := filepath.Glob("/sys/fs/cgroup/*/tupper/" + id); len(left) != 0 {
			t.Errorf("%s: cgroups left: %v", id, left)
		}
		if left, _ := filepath.Glob("/sys/fs/cgroup/tupper/" + id); len(left) != 0 {
			t.Errorf("%s: cgroup v2 left: %v", id, left)
		}
		host, _ := hostnet.VethNames(id)
		if _, err := os.Stat("/sys/class/net/" + host); err == nil {
			t.Errorf("%s: veth %s left", id, host)
		}
		for _, rt := range runtimes {
			if _, err := os.Stat(filepath.Join(p.lay.runtimeRoot(rt), id)); err == nil {
				t.Errorf("%s: %s state left", id, rt)
			}
		}
	}
	ours := " " + p.cfg.Home
	for _, dir := range []string{p.uidLeases(), p.net.Leases().Path()} {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if strings.HasSuffix(leasesIn(dir).Holder(e.Name()), ours) {
				t.Errorf("lease %s/%s left: %s", dir, e.Name(), leasesIn(dir).Holder(e.Name()))
			}
		}
	}
}

// TestCgroupParentsStay: a teardown leaves the cgroup parents every sandbox shares
// (/sys/fs/cgroup/<controller>/tupper), even when its sandbox was the last one in them: a
// create running beside it may be between making the parent and the child (see
// removeCgroups).
func TestCgroupParentsStay(t *testing.T) {
	forRuntimes(t, func(t *testing.T, rt string) {
		p := newTestProvider(t, rt)
		inst := create(t, p, provider.CreateSpec{Network: netNone})
		dirs, _ := filepath.Glob("/sys/fs/cgroup/*/tupper/" + inst.ID())
		v2, _ := filepath.Glob("/sys/fs/cgroup/tupper/" + inst.ID())
		dirs = append(dirs, v2...)
		if len(dirs) == 0 {
			t.Fatalf("%s made no cgroup for the sandbox under /sys/fs/cgroup/*/tupper", rt)
		}
		if err := p.Destroy(context.Background(), inst.ID()); err != nil {
			t.Fatal(err)
		}
		for _, d := range dirs {
			if _, err := os.Stat(d); err == nil {
				t.Errorf("%s left after destroy", d)
			}
			if _, err := os.Stat(filepath.Dir(d)); err != nil {
				t.Errorf("the shared parent %s was removed: %v", filepath.Dir(d), err)
			}
		}
	})
}

// TestKeyIndex: a keyed sandbox is found through the key index, not by reading every record;
// the entry goes with the sandbox; a Home from before the index gets one on first lookup.
func TestKeyIndex(t *testing.T) {
	p := newTestProvider(t, RuntimeRunc)
	ctx := context.Background()
	inst, created, err := p.GetOrCreate(ctx, provider.CreateSpec{Key: "user:1", Network: netNone})
	if err != nil || !created {
		t.Fatalf("get-or-create: %v, created %v", err, created)
	}
	id := inst.(*Instance).ID()
	inst.Close()
	if _, err := os.Stat(p.lay.keyEntry("user:1")); err != nil {
		t.Fatalf("no index entry: %v", err)
	}
	// A record the index does not name is not found by key: the lookup reads the index only.
	other := create(t, p, provider.CreateSpec{Network: netNone})
	rec, err := p.lay.readRecord(other.ID())
	if err != nil {
		t.Fatal(err)
	}
	rec.Key = "user:2"
	if err := p.lay.writeRecord(rec); err != nil {
		t.Fatal(err)
	}
	if _, err := p.FindByKey(ctx, "user:2"); provider.CodeOf(err) != provider.CodeNotFound {
		t.Errorf("found a key the index does not have: %v", err)
	}
	// Without the index (a Home from an older version), the first lookup builds it.
	if err := os.RemoveAll(p.lay.keys()); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{"user:1": id, "user:2": other.ID()} {
		got, err := p.FindByKey(ctx, key)
		if err != nil {
			t.Fatalf("find %s after rebuilding the index: %v", key, err)
		}
		if got.(*Instance).ID() != want {
			t.Errorf("find %s: %s, want %s", key, got.(*Instance).ID(), want)
		}
		got.Close()
	}
	again, created, err := p.GetOrCreate(ctx, provider.CreateSpec{Key: "user:1", Network: netNone})
	if err != nil || created || again.(*Instance).ID() != id {
		t.Fatalf("second get-or-create: %v, created %v", err, created)
	}
	again.Close()
	if err := p.Destroy(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p.lay.keyEntry("user:1")); err == nil {
		t.Error("the index entry outlived its sandbox")
	}
	if _, err := p.FindByKey(ctx, "user:1"); provider.CodeOf(err) != provider.CodeNotFound {
		t.Errorf("find after destroy: %v", err)
	}
}
