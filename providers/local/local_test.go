//go:build linux

package local

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	agentspec "github.com/tupper-dev/tupper/agent/spec"
	"github.com/tupper-dev/tupper/internal/testenv"
	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/providers/local/internal/hostnet"
	"golang.org/x/sys/unix"
)

var netNone = provider.Network{Mode: provider.NetworkNone}

func TestCreateExecDestroy(t *testing.T) {
	forRuntimes(t, func(t *testing.T, rt string) {
		p := newTestProvider(t, rt)
		inst := create(t, p, provider.CreateSpec{Network: netNone, Labels: map[string]string{"a": "b"},
			Env: map[string]string{"FOO": "bar"}, Secrets: map[string]string{"TOKEN": "s3cret"}})
		if !validID(inst.ID()) {
			t.Errorf("id %q is not 20 lowercase letters and digits", inst.ID())
		}
		if got := run(t, inst, "echo hi; id -u; pwd; echo $FOO $TOKEN"); got != "hi\n0\n/workspace\nbar s3cret" {
			t.Errorf("got %q", got)
		}
		ctx := context.Background()
		var out bytes.Buffer
		res, err := inst.Exec(ctx, provider.ExecRequest{Command: "cat; exit 3", Stdin: strings.NewReader("in"), Stdout: &out,
			Env: map[string]string{"X": "1"}, Cwd: "/tmp"})
		if err != nil || res.ExitCode != 3 || out.String() != "in" {
			t.Errorf("exec with stdin: %+v %v %q", res, err, out.String())
		}
		res, err = inst.Exec(ctx, provider.ExecRequest{Command: "kill -9 $$"})
		if err != nil || res.ExitCode != 137 || res.Signal != "SIGKILL" {
			t.Errorf("killed: %+v %v", res, err)
		}
		if got := run(t, inst, "id -un; echo $HOME"); got != "root\n/root" {
			t.Errorf("default user: %q", got)
		}
		o, _, _ := runCode(t, inst, "true")
		_ = o
		res, err = inst.Exec(ctx, provider.ExecRequest{Command: "id -un; pwd", User: "user", Cwd: "/home/user", Stdout: &out})
		if err != nil || res.ExitCode != 0 {
			t.Errorf("as user: %+v %v", res, err)
		}
		list, err := p.List(ctx, provider.ListFilter{Labels: map[string]string{"a": "b"}})
		if err != nil || len(list) != 1 || list[0].ID != inst.ID() || list[0].State != provider.StateRunning || list[0].Runtime != rt {
			t.Errorf("list: %+v %v", list, err)
		}
		if list, _ := p.List(ctx, provider.ListFilter{Labels: map[string]string{"a": "c"}}); len(list) != 0 {
			t.Errorf("list with another label: %+v", list)
		}
		if err := p.Destroy(ctx, inst.ID()); err != nil {
			t.Fatal(err)
		}
		if _, err := p.Connect(ctx, inst.ID()); provider.CodeOf(err) != provider.CodeNotFound {
			t.Errorf("connect after destroy: %v", err)
		}
		if err := p.Destroy(ctx, inst.ID()); provider.CodeOf(err) != provider.CodeNotFound {
			t.Errorf("second destroy: %v", err)
		}
		assertNoLeftovers(t, p)
	})
}

// assertNoLeftovers checks that no sandbox state, mount (in any mount namespace, so no holder
// either) or interface of p remains.
func assertNoLeftovers(t *testing.T, p *Provider) {
	t.Helper()
	if ids, _ := p.lay.ids(); len(ids) != 0 {
		t.Errorf("sandbox directories left: %v", ids)
	}
	// In the host's namespace, and in any other: a holder that outlived its sandbox keeps
	// the sandbox's namespace, and so its mounts, alive.
	// A create's namespace thread (nsworker.go) is ended by the Go runtime a moment after
	// its goroutine returns, and its namespace with it: what stays longer is left.
	left := mountsUnder(t, p.cfg.Home)
	for start := time.Now(); len(left) > 0 && time.Since(start) < 5*time.Second; {
		time.Sleep(50 * time.Millisecond)
		left = mountsUnder(t, p.cfg.Home)
	}
	for ns, m := range left {
		t.Errorf("mounts left under %s in mount namespace %s: %v", p.cfg.Home, ns, m)
	}
	// Other test processes may share the bridge: it and its rules must be gone only when
	// no address is leased on it.
	if p.net == nil {
		return
	}
	// Under the network's lock, as creates and destroys take it: another process cannot
	// lease an address and make the bridge between the look at the leases and at the bridge.
	lk, err := p.net.Lock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Unlock()
	if ents, _ := os.ReadDir(p.net.Leases().Path()); len(ents) > 0 {
		return
	}
	if hostnet.LinkExists(p.cfg.Bridge) {
		t.Errorf("bridge %s left", p.cfg.Bridge)
	}
	for _, ipt := range p.net.IPTables() {
		for _, table := range []string{"filter", "nat"} {
			out, _ := exec.Command(ipt, "-w", "5", "-t", table, "-S").CombinedOutput()
			for _, s := range append([]string{"tupper " + p.cfg.Bridge + `"`}, p.net.Chains()...) {
				if strings.Contains(string(out), s) {
					t.Errorf("%s %s: %q of %s left", filepath.Base(ipt), table, s, p.cfg.Bridge)
				}
			}
		}
	}
}

func TestFiles(t *testing.T) {
	forRuntimes(t, func(t *testing.T, rt string) {
		p := newTestProvider(t, rt)
		inst := create(t, p, provider.CreateSpec{Network: netNone})
		ctx := context.Background()
		mode := uint32(0o640)
		if err := inst.WriteFile(ctx, "/workspace/a/b.txt", strings.NewReader("hello"), &mode); err != nil {
			t.Fatal(err)
		}
		rc, err := inst.ReadFile(ctx, "/workspace/a/b.txt")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(rc)
		rc.Close()
		if string(b) != "hello" {
			t.Errorf("read %q", b)
		}
		fi, err := inst.Stat(ctx, "/workspace/a/b.txt")
		if err != nil || fi.Type != provider.TypeFile || fi.Size != 5 || fi.Mode != 0o640 {
			t.Errorf("stat: %+v %v", fi, err)
		}
		if _, err := inst.ReadFile(ctx, "/workspace/missing"); provider.CodeOf(err) != provider.CodeNotFound {
			t.Errorf("missing: %v", err)
		}
		list, err := inst.ListDir(ctx, "/workspace", true)
		if err != nil || len(list) != 2 {
			t.Errorf("list: %+v %v", list, err)
		}
		if err := inst.Remove(ctx, "/workspace/a", false); err == nil {
			t.Errorf("removing a non-empty directory without recursive worked")
		}
		if err := inst.Remove(ctx, "/workspace/a", true); err != nil {
			t.Error(err)
		}
		// The sandbox's root is writable, the host's /usr under it is not.
		run(t, inst, "touch /usr/bin/tupper-was-here")
		if _, err := os.Stat("/usr/bin/tupper-was-here"); err == nil {
			os.Remove("/usr/bin/tupper-was-here")
			t.Fatalf("a sandbox wrote into the host's /usr")
		}
	})
}

// TestOutlivesProvider: a sandbox lives on after its provider object is gone, and another
// provider with the same Home finds, uses and destroys it.
func TestOutlivesProvider(t *testing.T) {
	p1 := newTestProvider(t, RuntimeRunc)
	inst := create(t, p1, provider.CreateSpec{Network: netNone, Key: "k1"})
	run(t, inst, "echo kept > /workspace/f")
	inst.Close()
	p1.Close()

	p2, err := New(p1.cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p2.Close()
	ctx := context.Background()
	got, err := p2.Connect(ctx, inst.ID())
	if err != nil {
		t.Fatal(err)
	}
	if out := run(t, got, "cat /workspace/f"); out != "kept" {
		t.Errorf("got %q", out)
	}
	byKey, err := p2.FindByKey(ctx, "k1")
	if err != nil || byKey.(*Instance).ID() != inst.ID() {
		t.Errorf("find by key: %v", err)
	}
	if err := p2.Destroy(ctx, inst.ID()); err != nil {
		t.Fatal(err)
	}
	assertNoLeftovers(t, p2)
}

// TestCrashCleanup kills a sandbox's init from the host; the next List removes what it left.
func TestCrashCleanup(t *testing.T) {
	forRuntimes(t, func(t *testing.T, rt string) {
		p := newTestProvider(t, rt)
		inst := create(t, p, provider.CreateSpec{Network: provider.Network{Mode: provider.NetworkAll}})
		rec, err := p.lay.readRecord(inst.ID())
		if err != nil {
			t.Fatal(err)
		}
		if err := syscall.Kill(rec.InitPID, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		deadline := time.Now().Add(10 * time.Second)
		for alive(rec) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if i, err := inst.Info(ctx); err != nil || i.State != provider.StateStopped {
			t.Errorf("info after kill: %+v %v", i, err)
		}
		list, err := p.List(ctx, provider.ListFilter{})
		if err != nil || len(list) != 0 {
			t.Errorf("list after kill: %+v %v", list, err)
		}
		assertNoLeftovers(t, p)
		if _, err := os.Stat("/sys/class/net/" + rec.HostVeth); err == nil {
			t.Errorf("veth %s left", rec.HostVeth)
		}
	})
}

func TestLimits(t *testing.T) {
	forRuntimes(t, func(t *testing.T, rt string) {
		p := newTestProvider(t, rt)
		inst := create(t, p, provider.CreateSpec{Network: netNone, Size: provider.Size{CPU: 0.5, MemoryMB: 2048, DiskGB: 1}})
		// The host's view, for every runtime.
		want := map[string]string{
			"memory/tupper/" + inst.ID() + "/memory.limit_in_bytes": strconv.Itoa(2048 << 20),
			"pids/tupper/" + inst.ID() + "/pids.max":                "1024",
			"cpu/tupper/" + inst.ID() + "/cpu.cfs_quota_us":         "50000",
		}
		if rt != RuntimeRunsc {
			// The commands' own cgroup has the limit, the sandbox's room for the agent too.
			want["pids/tupper/"+inst.ID()+"/pids.max"] = strconv.Itoa(1024 + agentPidsReserve)
			want["pids/tupper/"+inst.ID()+"/"+commandCgroupName+"/pids.max"] = "1024"
		}
		for file, want := range want {
			b, err := os.ReadFile("/sys/fs/cgroup/" + file)
			if err != nil {
				testenv.Skip(t, "no cgroup v1 "+file+": "+err.Error())
			}
			if got := strings.TrimSpace(string(b)); got != want {
				t.Errorf("%s = %s, want %s", file, got, want)
			}
		}
		if rt != RuntimeRunsc {
			// The sandbox's own view.
			if got := run(t, inst, "cat /sys/fs/cgroup/memory/memory.limit_in_bytes"); got != strconv.Itoa(2048<<20) {
				t.Errorf("memory limit inside: %s", got)
			}
			if got := run(t, inst, "cat /proc/self/uid_map"); strings.Fields(got)[1] == "0" {
				t.Errorf("root inside is root outside: %s", got)
			}
		}
		// The writable layer is bounded by the disk size. (It lives in memory and is charged
		// to the sandbox's memory limit, so this sandbox has more memory than disk.)
		_, errOut, code := runCode(t, inst, "dd if=/dev/zero of=/tmp/big bs=1M count=1100")
		if code == 0 {
			t.Errorf("wrote 1100 MB into a 1 GB disk")
		}
		run(t, inst, "rm -f /tmp/big")
		_ = errOut
	})
}

func TestDefaultLimits(t *testing.T) {
	p := newTestProvider(t, RuntimeRunc)
	inst := create(t, p, provider.CreateSpec{Network: netNone})
	for file, want := range map[string]string{
		"memory/tupper/" + inst.ID() + "/memory.limit_in_bytes":            strconv.Itoa(1024 << 20),
		"pids/tupper/" + inst.ID() + "/" + commandCgroupName + "/pids.max": "1024",
	} {
		b, err := os.ReadFile("/sys/fs/cgroup/" + file)
		if err != nil {
			testenv.Skip(t, "no cgroup v1 "+file)
		}
		if got := strings.TrimSpace(string(b)); got != want {
			t.Errorf("%s = %s, want %s", file, got, want)
		}
	}
}

// TestForkBomb: commands run in a pids cgroup of their own below the sandbox's
// (commandcgroup.go), limited to Config.PidsLimit, with room above it for the agent's own
// threads; a command that fills the limit gets resource_exhausted for the next command, never
// an agent the Go runtime ends for want of a thread (which ended the whole sandbox before).
// (Not runsc: there the limit counts the sentry's host threads; see the security suite.)
func TestForkBomb(t *testing.T) {
	for _, rt := range []string{RuntimeRunc, RuntimeCrun} {
		t.Run(rt, func(t *testing.T) { testForkBomb(t, rt) })
	}
}

func testForkBomb(t *testing.T, rt string) {
	const limit = 64
	p := newTestProvider(t, rt)
	p.cfg.PidsLimit = limit
	inst := create(t, p, provider.CreateSpec{Network: netNone})
	cmds := commandCgroupDir(inst.ID())
	cg := filepath.Dir(cmds)
	if got := readTrim(cmds + "/pids.max"); got != strconv.Itoa(limit) {
		testenv.Skip(t, "no cgroup v1 pids controller at "+cmds+": pids.max = "+got)
	}
	if got := readTrim(cg + "/pids.max"); got != strconv.Itoa(limit+agentPidsReserve) {
		t.Errorf("the sandbox's pids.max = %s, want %d", got, limit+agentPidsReserve)
	}
	// A command, and what it starts, are in the commands' cgroup; the agent is not.
	want := "pids:/tupper/" + inst.ID() + "/" + commandCgroupName
	if got := run(t, inst, "grep :pids: /proc/self/cgroup | cut -d: -f2-; sh -c 'grep :pids: /proc/self/cgroup | cut -d: -f2-'"); got != want+"\n"+want {
		t.Errorf("a command's and its child's pids cgroup: %q, want %q twice", got, want)
	}
	rec, _ := p.lay.readRecord(inst.ID())
	if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", rec.InitPID)); !strings.Contains(string(b), ":pids:/tupper/"+inst.ID()+"\n") {
		t.Errorf("the agent's cgroups: %s", b)
	}

	setMax := func(v string) {
		if err := os.WriteFile(cmds+"/pids.max", []byte(v), 0); err != nil {
			t.Fatal(err)
		}
	}
	// With the commands' limit set to what they hold, a command cannot start: that is
	// resource_exhausted, the sandbox's state and worth a retry, never the request's fault
	// (invalid_argument). The agent lives on (it asks for threads meanwhile), and once the
	// limit leaves room, commands run again.
	setMax(readTrim(cmds + "/pids.current"))
	for range 20 {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err := inst.Exec(ctx, provider.ExecRequest{Command: "echo alive"})
		cancel()
		if c := provider.CodeOf(err); c != provider.CodeResourceExhausted {
			t.Fatalf("exec at the limit: code %s (%v), want %s", c, err, provider.CodeResourceExhausted)
		}
	}
	setMax(strconv.Itoa(limit))
	if got := run(t, inst, "echo alive"); got != "alive" {
		t.Errorf("after the limit was raised again: %q", got)
	}

	// dash exits non-zero when it cannot fork, leaving the sleepers it started.
	_, _, code := runCode(t, inst, "for i in $(seq 100); do sleep 2 & done 2>/dev/null; wait")
	if code == 0 {
		t.Errorf("100 processes started under a limit of %d", limit)
	}
	// The sandbox recovers once the sleepers exit; until then a command may find no room
	// to start, which must again be resource_exhausted.
	var got string
	for start := time.Now(); time.Since(start) < 15*time.Second; time.Sleep(200 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		var out bytes.Buffer
		_, err := inst.Exec(ctx, provider.ExecRequest{Command: "echo alive", Stdout: &out})
		cancel()
		if err != nil {
			if c := provider.CodeOf(err); c != provider.CodeResourceExhausted {
				t.Fatalf("exec while the sleepers hold the limit: code %s (%v), want %s", c, err, provider.CodeResourceExhausted)
			}
			continue
		}
		if got = strings.TrimSpace(out.String()); got == "alive" {
			break
		}
	}
	if got != "alive" {
		t.Errorf("after fork bomb: %q", got)
	}
}

func TestNetworkNone(t *testing.T) {
	forRuntimes(t, func(t *testing.T, rt string) {
		p := newTestProvider(t, rt)
		inst := create(t, p, provider.CreateSpec{Network: netNone})
		ifaces := run(t, inst, "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '")
		if ifaces != "lo" {
			t.Errorf("interfaces %q, want only lo", ifaces)
		}
		routes := run(t, inst, "tail -n +2 /proc/net/route")
		if routes != "" {
			t.Errorf("routes: %q", routes)
		}
		rec, _ := p.lay.readRecord(inst.ID())
		if rec.HostVeth != "" {
			t.Errorf("network none has a veth")
		}
	})
}

// TestNetworkAll: eth0 beside lo, the host reaches the sandbox through the bridge, and the
// sandbox does not reach the host, not even at its gateway (what it does reach, the public
// internet only, is TestSecurityNetwork's).
func TestNetworkAll(t *testing.T) {
	forRuntimes(t, func(t *testing.T, rt string) {
		p := newTestProvider(t, rt)
		if !p.Capabilities().Has(provider.CapNetworkAll) {
			testenv.Skip(t, "network all unavailable: "+fmt.Sprint(p.netErr))
		}
		inst := create(t, p, provider.CreateSpec{Network: provider.Network{Mode: provider.NetworkAll}})
		if got := run(t, inst, "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | sort | tr '\\n' ' '"); got != "eth0 lo" {
			t.Errorf("interfaces %q", got)
		}
		ctx := context.Background()
		mode := uint32(0o755)
		if err := inst.WriteFile(ctx, helperIn, bytes.NewReader(buildSecHelper(t)), &mode); err != nil {
			t.Fatal(err)
		}
		rec, err := p.lay.readRecord(inst.ID())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := inst.Exec(ctx, provider.ExecRequest{Command: helperIn + " listen 0.0.0.0:8080 /tmp/conns", Detach: true}); err != nil {
			t.Fatal(err)
		}
		var derr error
		for start := time.Now(); time.Since(start) < 10*time.Second; time.Sleep(50 * time.Millisecond) {
			var c net.Conn
			if c, derr = net.DialTimeout("tcp", rec.IP+":8080", time.Second); derr == nil {
				c.Close()
				break
			}
		}
		if derr != nil {
			t.Errorf("the host cannot reach the sandbox at %s:8080: %v", rec.IP, derr)
		}

		ln, accepted := countingListener(t, "tcp", net.JoinHostPort(p.net.Gateway().String(), "0"))
		port := ln.Addr().(*net.TCPAddr).Port
		_, stderr, code := runCode(t, inst, fmt.Sprintf("bash -c 'exec 3<>/dev/tcp/%s/%d'", p.net.Gateway(), port))
		if code == 0 || !strings.Contains(stderr, "No route to host") || accepted.Load() != 0 {
			t.Errorf("the sandbox to the host's gateway address: exit %d, %q, %d accepted; want No route to host", code, stderr, accepted.Load())
		}
	})
}

func TestPreview(t *testing.T) {
	testenv.Require(t, fileExists("/usr/bin/python3"), "needs /usr/bin/python3 on the host for an HTTP server")
	forRuntimes(t, func(t *testing.T, rt string) {
		p := newTestProvider(t, rt)
		inst := create(t, p, provider.CreateSpec{Network: netNone})
		ctx := context.Background()
		run(t, inst, "mkdir -p /tmp/www && echo preview-ok > /tmp/www/index.html")
		res, err := inst.Exec(ctx, provider.ExecRequest{Command: "cd /tmp/www && exec python3 -m http.server 8080 --bind 127.0.0.1", Detach: true})
		if err != nil || res.PID <= 0 {
			t.Fatalf("detach: %+v %v", res, err)
		}
		url, err := inst.PreviewURL(ctx, 8080)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(url, "http://127.0.0.1:") {
			t.Errorf("url %s is not on loopback", url)
		}
		var body string
		for start := time.Now(); time.Since(start) < 15*time.Second; time.Sleep(50 * time.Millisecond) {
			resp, err := http.Get(url + "index.html")
			if err != nil {
				continue
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 {
				body = strings.TrimSpace(string(b))
				break
			}
		}
		if body != "preview-ok" {
			t.Errorf("preview body %q", body)
		}
		if err := p.Destroy(ctx, inst.ID()); err != nil {
			t.Fatal(err)
		}
		if _, err := http.Get(url); err == nil {
			t.Errorf("preview listener still open after destroy")
		}
	})
}

func TestPauseResume(t *testing.T) {
	forRuntimes(t, func(t *testing.T, rt string) {
		p := newTestProvider(t, rt)
		if !provider.CapabilitiesOf(p).Has(provider.CapPause) {
			testenv.Skip(t, "no freezer")
		}
		inst := create(t, p, provider.CreateSpec{Network: netNone})
		ctx := context.Background()
		run(t, inst, "true")
		if err := inst.Pause(ctx); err != nil {
			t.Fatal(err)
		}
		if i, _ := inst.Info(ctx); i.State != provider.StatePaused {
			t.Errorf("state %s", i.State)
		}
		if _, err := inst.Exec(ctx, provider.ExecRequest{Command: "true"}); provider.CodeOf(err) != provider.CodeConflict {
			t.Errorf("exec while paused: %v", err)
		}
		if err := inst.Resume(ctx); err != nil {
			t.Fatal(err)
		}
		if got := run(t, inst, "echo back"); got != "back" {
			t.Errorf("got %q", got)
		}
		// A paused sandbox can be destroyed.
		if err := inst.Pause(ctx); err != nil {
			t.Fatal(err)
		}
		if err := p.Destroy(ctx, inst.ID()); err != nil {
			t.Fatal(err)
		}
		assertNoLeftovers(t, p)
	})
}

func TestExactKey(t *testing.T) {
	p := newTestProvider(t, RuntimeRunc)
	ctx := context.Background()
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		ids     = map[string]int{}
		created int
		errs    []error
	)
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			inst, c, err := p.GetOrCreate(ctx, provider.CreateSpec{Key: "exact", Network: netNone})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			ids[inst.(*Instance).ID()]++
			if c {
				created++
			}
			inst.Close()
		}()
	}
	wg.Wait()
	if len(errs) > 0 || len(ids) != 1 || created != 1 {
		t.Errorf("ids %v, created %d, errors %v", ids, created, errs)
	}
}

func TestDeadlines(t *testing.T) {
	p := newTestProvider(t, RuntimeRunc)
	ctx := context.Background()
	hard := create(t, p, provider.CreateSpec{Network: netNone, Timeout: time.Hour})
	idle := create(t, p, provider.CreateSpec{Network: netNone, IdleTimeout: time.Second})
	keep := create(t, p, provider.CreateSpec{Network: netNone})
	// The host enforces the hard deadline whatever the agent does: move it to the past
	// behind the agent's back.
	rec, _ := p.lay.readRecord(hard.ID())
	rec.Deadline = time.Now().Add(-time.Second)
	p.lay.writeRecord(rec)
	if err := keep.SetTimeout(ctx, time.Hour); err != nil {
		t.Fatal(err)
	}
	// The agent ends the idle sandbox from inside; the next List cleans up.
	time.Sleep(2500 * time.Millisecond)
	list, err := p.List(ctx, provider.ListFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].ID != keep.ID() || list[0].Deadline.IsZero() {
		t.Errorf("list: %+v", list)
	}
	if _, err := p.Connect(ctx, hard.ID()); !errors.Is(err, provider.CodeNotFound) {
		t.Errorf("expired sandbox: %v", err)
	}
	_ = idle
}

// TestRefusedCreate: a create refused for its spec (a network policy that is not one) is
// refused before anything is made, and leaves nothing behind.
func TestRefusedCreate(t *testing.T) {
	p := newTestProvider(t, RuntimeRunc)
	ctx := context.Background()
	_, err := p.Create(ctx, provider.CreateSpec{Network: provider.Network{Mode: provider.NetworkAllow, Allow: []string{"*"}}})
	if provider.CodeOf(err) != provider.CodeInvalidArgument {
		t.Errorf("allow list of everything: %v", err)
	}
	if ids, _ := p.lay.ids(); len(ids) != 0 {
		t.Errorf("a refused create left %v", ids)
	}
}

// TestCreateUndo: a create that fails halfway (the agent binary answers the protocol probe
// but exits when started) leaves nothing behind.
func TestCreateUndo(t *testing.T) {
	p := newTestProvider(t, RuntimeRunc)
	bad := filepath.Join(t.TempDir(), "not-an-agent")
	script := fmt.Sprintf("#!/bin/sh\n[ \"$2\" = %s ] && echo %s %d && exit 0\necho not really an agent >&2\nexit 1\n",
		agentspec.ProbeFlag, agentspec.ProbeReply, agentspec.Version)
	if err := os.WriteFile(bad, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	p.cfg.AgentPath = bad
	p.agent = agentState{} // find it again
	p.cfg.ReadyTimeout = 5 * time.Second
	_, err := p.Create(context.Background(), provider.CreateSpec{Network: provider.Network{Mode: provider.NetworkAll}})
	if err == nil {
		t.Fatal("create with a broken agent worked")
	}
	t.Log(err)
	assertNoLeftovers(t, p)
	ents, _ := os.ReadDir(p.uidLeases())
	for _, e := range ents {
		if strings.Contains(leasesIn(p.uidLeases()).Holder(e.Name()), p.cfg.Home) {
			t.Errorf("uid lease %s left", e.Name())
		}
	}
	if ents, _ := os.ReadDir(p.net.Leases().Path()); len(ents) != 0 {
		for _, e := range ents {
			if strings.Contains(p.net.Leases().Holder(e.Name()), p.cfg.Home) {
				t.Errorf("ip lease %s left", e.Name())
			}
		}
	}
}

// TestSecuritySmoke: a few attacks that must fail under both runtimes. (The full security
// suite of the issue lives with the conformance tests.)
func TestSecuritySmoke(t *testing.T) {
	testenv.Require(t, fileExists("/usr/bin/python3"), "needs /usr/bin/python3 on the host")
	forRuntimes(t, func(t *testing.T, rt string) {
		p := newTestProvider(t, rt)
		inst := create(t, p, provider.CreateSpec{Network: netNone})
		for name, cmd := range map[string]string{
			"raw socket":     `python3 -c 'import socket; socket.socket(socket.AF_INET, socket.SOCK_RAW, 1)'`,
			"user namespace": `python3 -c 'import os; os.unshare(os.CLONE_NEWUSER)'`,
			"ptrace":         `python3 -c 'import ctypes, sys; libc = ctypes.CDLL(None, use_errno=True); sys.exit(0 if libc.ptrace(16, 1, 0, 0) == 0 else 1)'`,
			"kernel module":  `python3 -c 'import ctypes, sys; libc = ctypes.CDLL(None, use_errno=True); sys.exit(0 if libc.syscall(313, 0, b"", 0) == 0 else 1)'`,
			"host /root":     `ls /root/.pyenv`,
			"state root":     `ls ` + p.cfg.Home,
		} {
			if out, errOut, code := runCode(t, inst, cmd); code == 0 {
				t.Errorf("%s: %q worked: %s %s", name, cmd, out, errOut)
			}
		}
		// Writes to /usr land in the sandbox's own layer, never on the host.
		run(t, inst, "touch /usr/tupper-was-here")
		if _, err := os.Stat("/usr/tupper-was-here"); err == nil {
			os.Remove("/usr/tupper-was-here")
			t.Errorf("ESCAPE: a sandbox wrote into the host's /usr")
		}
		if rt == RuntimeRunsc {
			// Under runc the agent keeps CAP_SYS_ADMIN for its own mount namespace; commands
			// lose it only when the agent drops it (see the package doc).
			if _, _, code := runCode(t, inst, "mount -t tmpfs x /mnt"); code == 0 {
				t.Errorf("mount worked")
			}
		}
		// Host processes are invisible: the sandbox sees its agent, the shell and ps.
		if got, _ := strconv.Atoi(run(t, inst, "ps -e --no-headers | wc -l")); got == 0 || got > 6 {
			t.Errorf("the sandbox sees %d processes", got)
		}
	})
}

// TestCreateUndoAfterContainer: a create that fails once the container exists (here, before
// its network is plumbed) kills the container and removes its cgroups too.
func TestCreateUndoAfterContainer(t *testing.T) {
	forRuntimes(t, func(t *testing.T, rt string) {
		p := newTestProvider(t, rt)
		var made string
		testHookCreated = func(id string) error { made = id; return errors.New("injected failure") }
		defer func() { testHookCreated = nil }()
		_, err := p.Create(context.Background(), provider.CreateSpec{Network: provider.Network{Mode: provider.NetworkAll}})
		testHookCreated = nil
		if err == nil || made == "" {
			t.Fatalf("create: %v (container %q)", err, made)
		}
		assertNoLeftovers(t, p)
		if ents, _ := filepath.Glob("/sys/fs/cgroup/*/tupper/" + made); len(ents) != 0 {
			t.Errorf("cgroups left: %v", ents)
		}
		if out, _ := exec.Command("pgrep", "-f", made).Output(); len(out) != 0 {
			t.Errorf("processes left: %s", out)
		}
	})
}

// TestSocketSymlink: a sandbox that swaps its agent socket for a symlink to another
// sandbox's socket does not make the host talk to the other sandbox.
func TestSocketSymlink(t *testing.T) {
	p := newTestProvider(t, RuntimeRunc)
	a := create(t, p, provider.CreateSpec{Network: netNone})
	b := create(t, p, provider.CreateSpec{Network: netNone})
	run(t, b, "echo i-am-b > /workspace/who")
	sock := p.lay.socket(a.ID())
	if err := os.Rename(sock, sock+".real"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(p.lay.socket(b.ID()), sock); err != nil {
		t.Fatal(err)
	}
	fresh, err := p.Connect(context.Background(), a.ID())
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	var out bytes.Buffer
	_, err = fresh.Exec(context.Background(), provider.ExecRequest{Command: "cat /workspace/who", Stdout: &out})
	if err == nil || strings.Contains(out.String(), "i-am-b") {
		t.Errorf("exec through a symlinked socket: %v, output %q", err, out.String())
	}
	os.Remove(sock)
	if err := os.Rename(sock+".real", sock); err != nil {
		t.Fatal(err)
	}
	if got := run(t, fresh, "echo a"); got != "a" {
		t.Errorf("after restoring the socket: %q", got)
	}
}

// TestLockOfAGoneSandbox: a call that locks a sandbox already torn down — a Destroy, a reap
// or a pause from another process that read its id just before — finds it gone and leaves
// no lock file of its own making in the state directory (they were left, one per such race,
// and a bench run counted one as a sandbox left behind).
func TestLockOfAGoneSandbox(t *testing.T) {
	p := newTestProvider(t, "")
	ctx := context.Background()
	inst := create(t, p, provider.CreateSpec{Network: provider.Network{Mode: provider.NetworkNone}})
	id := inst.ID()
	if err := p.Destroy(ctx, id); err != nil {
		t.Fatal(err)
	}
	for _, gone := range []string{id, newID()} {
		if err := p.Destroy(ctx, gone); !errors.Is(err, provider.CodeNotFound) {
			t.Errorf("destroy of %s, gone: %v, want not_found", gone, err)
		}
		if _, err := p.lockSandbox(ctx, gone); !errors.Is(err, provider.CodeNotFound) {
			t.Errorf("lock of %s, gone: %v, want not_found", gone, err)
		}
	}
	left, err := os.ReadDir(p.lay.sandboxes())
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range left {
		t.Errorf("left in %s: %s", p.lay.sandboxes(), e.Name())
	}
}

// TestSweepCgroups: Reap's sweep removes an empty sandbox cgroup older than the cutoff, and
// neither a younger one (a create may be about to use it) nor one that holds a process (a
// live sandbox's: the kernel refuses) nor the shared tupper parent.
func TestSweepCgroups(t *testing.T) {
	testenv.RequireRoot(t)
	parent := "/sys/fs/cgroup/pids/tupper"
	if _, err := os.Stat("/sys/fs/cgroup/pids"); err != nil {
		testenv.Skip(t, "no cgroup v1 pids hierarchy: "+err.Error())
	}
	if err := os.MkdirAll(parent, 0o755); err != nil {
		t.Fatal(err)
	}
	empty, busy := filepath.Join(parent, newID()), filepath.Join(parent, newID())
	for _, d := range []string{empty, busy} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	sleep := exec.Command("sleep", "60")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sleep.Process.Kill()
		sleep.Wait()
		// Out of the cgroup (to the hierarchy's root), so it can go.
		os.WriteFile("/sys/fs/cgroup/pids/cgroup.procs", []byte(strconv.Itoa(sleep.Process.Pid)), 0)
		unix.Rmdir(busy)
		unix.Rmdir(empty)
	})
	if err := os.WriteFile(filepath.Join(busy, "cgroup.procs"), []byte(strconv.Itoa(sleep.Process.Pid)), 0); err != nil {
		t.Fatal(err)
	}

	sweepCgroups(time.Now().Add(-time.Hour)) // both are younger than the cutoff
	for _, d := range []string{empty, busy} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("a cgroup younger than the cutoff was swept: %v", err)
		}
	}
	sweepCgroups(time.Now().Add(time.Hour)) // both are older
	if _, err := os.Stat(empty); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the old empty cgroup is still there: %v", err)
	}
	if _, err := os.Stat(busy); err != nil {
		t.Errorf("the cgroup with a process was swept: %v", err)
	}
	if _, err := os.Stat(parent); err != nil {
		t.Errorf("the tupper parent was removed: %v", err)
	}
}
