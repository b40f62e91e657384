//go:build linux

package local

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tupper-dev/tupper/internal/testenv"
	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/providers/local/internal/hostnet"
)

// TestPauseCold: a pause without memory (PauseCold) under each runtime and network mode,
// in a network namespace of the test's own whose default route leads to an "upstream"
// namespace serving on a public stand-in address. While paused: no process of the sandbox
// runs, its cgroups (and so the memory they charged) are gone, its holder lives, Info, List
// and a reap see it paused, calls are refused. After Resume: the files (the writable layer
// and /tmp) are there, no process from before runs, new commands do, the address and veth
// names are the same and egress works again (network all and allow); a destroy then leaves
// nothing. The durations of the pause and the resume are logged (the machine is shared:
// not asserted).
func TestPauseCold(t *testing.T) {
	forRuntimesInNetns(t, false, testPauseCold)
}

func testPauseCold(t *testing.T, rt string) {
	ctx := context.Background()
	if hostnet.LinkExists("eth0") || hostnet.LinkExists(testBridge) {
		t.Fatal("not in a fresh network namespace")
	}
	coldUpstream(t)
	// A subnet and bridge of its own: the address leases in /run are shared with tests
	// running in the host's namespace.
	p := newTestProviderConfig(t, Config{Runtime: rt, Subnet: "10.217.3.0/24", Bridge: "tpcold" + rt})
	if p.net == nil {
		testenv.Skip(t, fmt.Sprintf("network all is unavailable: %v", p.netErr))
	}
	// ask reads what the upstream server says to the sandbox, "" when it cannot reach it.
	ask := func(a *Instance) string {
		out, _, _ := runCode(t, a, fmt.Sprintf("timeout 10 bash -c 'exec 3<>/dev/tcp/%s/%d; head -n1 <&3'", labPublic, labPort))
		return out
	}
	for _, mode := range []provider.NetworkMode{provider.NetworkNone, provider.NetworkAll, provider.NetworkAllow} {
		t.Run(string(mode), func(t *testing.T) {
			spec := provider.CreateSpec{Network: provider.Network{Mode: mode}, Timeout: 10 * time.Minute, Labels: map[string]string{"kept": "yes"}}
			if mode == provider.NetworkAllow {
				spec.Network.Allow = []string{labPublic.String()}
			}
			a := create(t, p, spec)
			if caps := provider.CapabilitiesOfInstance(p, a); !caps.Has(provider.CapPauseCold) {
				t.Fatalf("a %s sandbox with network %s lacks %s: %v", rt, mode, provider.CapPauseCold, caps)
			}
			// 64 MiB held by a process, and a counter written every 50 ms.
			run(t, a, `set -e; echo kept > /workspace/file; echo in-tmp > /tmp/file; echo v > /workspace/secret
perl -e '$x = "m" x (64 << 20); open(F, ">/workspace/held"); close F; sleep 1 while 1' >/dev/null 2>&1 &
`+counterLoop+`
i=0; until [ -e /workspace/held ] && [ -e /workspace/count ]; do i=$((i+1)); [ $i -lt 300 ] || exit 1; sleep 0.1; done`)
			if mode != provider.NetworkNone {
				if got := ask(a); got != "pong" {
					t.Fatalf("before the pause, upstream answered %q", got)
				}
			}
			rec, err := p.lay.readRecord(a.id)
			if err != nil {
				t.Fatal(err)
			}
			mem, procs := sandboxMemory(t, rec)
			if procs == 0 || mem < 64<<20 {
				t.Fatalf("a running sandbox holding 64 MiB: %d processes, its cgroup charged %d bytes", procs, mem)
			}

			start := time.Now()
			if err := a.PauseCold(ctx); err != nil {
				t.Fatal(err)
			}
			pausedIn := time.Since(start)
			paused, err := p.lay.readRecord(a.id)
			if err != nil {
				t.Fatal(err)
			}
			if !paused.Paused || !paused.Cold || alive(rec) || !holderAlive(paused) {
				t.Errorf("paused record: paused %v, cold %v, old init alive %v, holder alive %v", paused.Paused, paused.Cold, alive(rec), holderAlive(paused))
			}
			if mem, procs := sandboxMemory(t, paused); procs != 0 || mem != 0 {
				t.Errorf("paused: %d processes of its runtime, %d bytes charged, want none", procs, mem)
			}
			for _, d := range cgroupDirs(a.id) {
				if _, err := os.Stat(d); err == nil {
					t.Errorf("the sandbox's cgroup %s outlived its container", d)
				}
			}
			if in, err := a.Info(ctx); err != nil || in.State != provider.StatePaused {
				t.Errorf("info while paused: %+v, %v", in, err)
			}
			if _, err := a.Exec(ctx, provider.ExecRequest{Command: "true"}); !errors.Is(err, provider.CodeConflict) {
				t.Errorf("exec while paused: %v, want conflict", err)
			}
			if _, err := p.Reap(ctx); err != nil {
				t.Fatal(err)
			}
			list, err := p.List(ctx, provider.ListFilter{})
			if err != nil || len(list) != 1 || list[0].State != provider.StatePaused || list[0].Labels["kept"] != "yes" {
				t.Fatalf("list while paused: %+v, %v", list, err)
			}
			if err := a.PauseCold(ctx); err != nil {
				t.Errorf("a second PauseCold: %v", err)
			}
			if again, _ := p.lay.readRecord(a.id); again == nil || !again.Cold || again.HolderPID != paused.HolderPID {
				t.Errorf("a second PauseCold changed the record: %+v", again)
			}

			start = time.Now()
			if err := a.Resume(ctx); err != nil {
				t.Fatal(err)
			}
			resumedIn := time.Since(start)
			t.Logf("%s, network %s: cold pause %v, resume %v", rt, mode, pausedIn.Round(time.Millisecond), resumedIn.Round(time.Millisecond))
			after, err := p.lay.readRecord(a.id)
			if err != nil {
				t.Fatal(err)
			}
			if after.Paused || after.Cold || !alive(after) || after.InitPID == rec.InitPID && after.InitStart == rec.InitStart {
				t.Errorf("resumed record: paused %v, cold %v, init alive %v (pid %d, was %d)", after.Paused, after.Cold, alive(after), after.InitPID, rec.InitPID)
			}
			if after.IP != rec.IP || after.HostVeth != rec.HostVeth || after.HolderPID != rec.HolderPID {
				t.Errorf("resumed with address %s (veth %s, holder %d), was %s (%s, %d)", after.IP, after.HostVeth, after.HolderPID, rec.IP, rec.HostVeth, rec.HolderPID)
			}
			if in, err := a.Info(ctx); err != nil || in.State != provider.StateRunning || in.ID != a.id || in.Labels["kept"] != "yes" {
				t.Errorf("info after resume: %+v, %v", in, err)
			}
			if got := run(t, a, "cat /workspace/file /tmp/file"); got != "kept\nin-tmp" {
				t.Errorf("files after resume: %q", got)
			}
			if got := run(t, a, "pgrep -x perl || echo none"); got != "none" {
				t.Errorf("the process holding memory runs after resume: %q", got)
			}
			_, n := readCounter(t, a)
			time.Sleep(300 * time.Millisecond)
			if _, n2 := readCounter(t, a); n2 != n {
				t.Errorf("the counter went on after resume: %d, then %d", n, n2)
			}
			if got := run(t, a, "echo back"); got != "back" {
				t.Errorf("a command after resume: %q", got)
			}
			if _, procs := sandboxMemory(t, after); procs == 0 {
				t.Errorf("resumed: no process in the sandbox's cgroups")
			}
			if mode != provider.NetworkNone {
				if got := ask(a); got != "pong" {
					t.Errorf("after resume, upstream answered %q", got)
				}
			}

			// Destroyed while paused so: nothing left.
			if err := a.PauseCold(ctx); err != nil {
				t.Fatal(err)
			}
			if err := p.Destroy(ctx, a.id); err != nil {
				t.Fatal(err)
			}
			if holderAlive(after) {
				t.Errorf("the holder (pid %d) outlived destroy", after.HolderPID)
			}
			assertNoLeftovers(t, p)
		})
	}
}

// coldUpstream makes the upstream namespace, the default route of the test's namespace,
// with labPublic on its loopback, where a server answers "pong" on labPort.
func coldUpstream(t *testing.T) {
	labIP(t, "", "link set lo up")
	up := filepath.Join(t.TempDir(), "upstream")
	if err := hostnet.NewNetns(context.Background(), up); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hostnet.RemoveNetns(up) })
	labIP(t, "",
		"link add tpup0 type veth peer name tpup1",
		"link set tpup1 netns "+up,
		"addr add "+labHostTransit.String()+"/30 dev tpup0",
		"link set tpup0 up",
		"route add default via "+labUpTransit.String(),
	)
	labIP(t, up, "link set lo up", "addr add "+labUpTransit.String()+"/30 dev tpup1", "link set tpup1 up",
		"route add default via "+labHostTransit.String(), "addr add "+labPublic.String()+"/32 dev lo")
	inNetns(t, up, func() {
		ln, err := net.Listen("tcp", netip.AddrPortFrom(labPublic, labPort).String())
		if err != nil {
			t.Errorf("listen upstream: %v", err)
			return
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				c.Write([]byte("pong\n"))
				c.Close()
			}
		}()
	})
}

// The crash test's child (see TestPauseColdCrash): it stops a PauseCold, or a Resume of a
// cold-paused sandbox, at a stage, prints "at STAGE" and waits for the parent's SIGKILL.
const (
	coldCrashEnv   = "TUPPER_TEST_COLD_HOME"
	coldCrashID    = "TUPPER_TEST_COLD_ID"
	coldCrashStage = "TUPPER_TEST_COLD_STAGE"
)

func coldCrashChild(home string) int {
	p, err := New(Config{Home: home, AgentPath: os.Getenv("TUPPER_AGENT"), Subnet: testSubnet, Bridge: testBridge})
	if err == nil {
		err = p.Available(context.Background())
	}
	if err != nil {
		fmt.Println("error provider:", err)
		return 1
	}
	inst, err := p.Connect(context.Background(), os.Getenv(coldCrashID))
	if err != nil {
		fmt.Println("error connect:", err)
		return 1
	}
	stage := os.Getenv(coldCrashStage)
	stop := func() {
		fmt.Println("at " + stage)
		select {} // until the parent's SIGKILL
	}
	switch stage {
	case "intent": // the record says cold-paused; the container runs on
		testHookCold = func(string) { stop() }
		err = inst.(*Instance).PauseCold(context.Background())
	case "boot": // a resume's new container exists; the record still says cold-paused
		testHookCreated = func(string) error { stop(); return nil }
		err = inst.(*Instance).Resume(context.Background())
	}
	fmt.Println("error returned:", err)
	return 1
}

// TestPauseColdCrash: a process killed (SIGKILL) in a PauseCold once the record says
// cold-paused but before the container is killed, or in a Resume once the new container
// exists but before the record says it runs, leaves a sandbox that is cold-paused, never
// lost: Info says paused, calls are refused, a reap keeps it; PauseCold finishes the pause,
// Resume boots it (ending what the crash left first, so nothing from before the pause runs),
// and Destroy removes everything. (The reverse, a container gone while the record says it
// runs, cannot happen: the record is written before the kill.) A boot that fails leaves it
// cold-paused, nothing of it running, and a second Resume boots it.
func TestPauseColdCrash(t *testing.T) {
	forRuntimes(t, func(t *testing.T, rt string) {
		p := newTestProvider(t, rt)
		ctx := context.Background()
		mode := provider.NetworkAll // the veth made again at the boot (runc, crun)
		if p.net == nil {
			mode = provider.NetworkNone
		}
		a := create(t, p, provider.CreateSpec{Network: provider.Network{Mode: mode}, Timeout: 10 * time.Minute})
		rt0, err := p.runtimeOf(a.rec)
		if err != nil {
			t.Fatal(err)
		}
		crash := func(stage string) {
			t.Helper()
			child, stdout := startChild(t, coldCrashEnv+"="+p.cfg.Home, coldCrashID+"="+a.id, coldCrashStage+"="+stage, "TUPPER_AGENT="+p.cfg.AgentPath)
			line, err := bufio.NewReader(stdout).ReadString('\n')
			child.Process.Kill()
			child.Wait()
			if strings.TrimSpace(line) != "at "+stage {
				t.Fatalf("the child said %q (%v)", line, err)
			}
		}
		// container reports whether the runtime knows the sandbox's container.
		container := func() bool {
			_, err := rt0.state(ctx, runscNetwork(a.rec), a.id)
			return err == nil
		}
		record := func() *record {
			t.Helper()
			rec, err := p.lay.readRecord(a.id)
			if err != nil {
				t.Fatal(err)
			}
			return rec
		}
		pausedSo := func(when string) {
			t.Helper()
			rec := record()
			if !rec.Paused || !rec.Cold || !holderAlive(rec) {
				t.Errorf("%s: record paused %v, cold %v, holder alive %v", when, rec.Paused, rec.Cold, holderAlive(rec))
			}
			if in, err := a.Info(ctx); err != nil || in.State != provider.StatePaused {
				t.Errorf("%s: info %+v, %v", when, in, err)
			}
			if _, err := a.Exec(ctx, provider.ExecRequest{Command: "true"}); !errors.Is(err, provider.CodeConflict) {
				t.Errorf("%s: exec %v, want conflict", when, err)
			}
			if n, err := p.Reap(ctx); err != nil || n != 0 {
				t.Errorf("%s: reap removed %d (%v)", when, n, err)
			}
		}
		runsAgain := func(when string) {
			t.Helper()
			if got := run(t, a, "cat /workspace/file; pgrep -f '^sleep 4242' || echo none"); got != "kept\nnone" {
				t.Errorf("%s: file and processes from before: %q, want kept and none", when, got)
			}
			if rec := record(); rec.Paused || rec.Cold || !alive(rec) {
				t.Errorf("%s: record paused %v, cold %v, init alive %v", when, rec.Paused, rec.Cold, alive(rec))
			}
		}
		start := func() {
			t.Helper()
			run(t, a, "echo kept > /workspace/file; setsid sleep 4242 </dev/null >/dev/null 2>&1 &")
		}

		// Killed between the record's word and the kill: the container still runs.
		start()
		crash("intent")
		if !alive(record()) {
			t.Fatal("the container died with the process pausing it")
		}
		pausedSo("intent written, container alive")
		if err := a.Resume(ctx); err != nil {
			t.Fatal(err)
		}
		runsAgain("resumed after a crash at the intent")

		// The same, then PauseCold finishes the pause.
		start()
		crash("intent")
		if err := a.PauseCold(ctx); err != nil {
			t.Fatal(err)
		}
		if rec := record(); alive(rec) || container() {
			t.Errorf("PauseCold after a crash: init alive %v, container known %v", alive(rec), container())
		}
		pausedSo("finished after a crash")

		// Killed in a resume once the new container exists.
		crash("boot")
		if !container() {
			t.Fatal("no container after a crash in the boot")
		}
		pausedSo("crashed in the boot")
		if err := a.PauseCold(ctx); err != nil {
			t.Fatal(err)
		}
		if container() {
			t.Errorf("PauseCold left the container a crashed resume made")
		}
		crash("boot")
		if err := a.Resume(ctx); err != nil {
			t.Fatal(err)
		}
		runsAgain("resumed after a crash in the boot")

		// A boot that fails leaves it cold-paused, nothing of it running.
		if err := a.PauseCold(ctx); err != nil {
			t.Fatal(err)
		}
		testHookCreated = func(string) error { return errors.New("injected failure") }
		err = a.Resume(ctx)
		testHookCreated = nil
		if err == nil || !strings.Contains(err.Error(), "injected failure") {
			t.Fatalf("a failing boot: %v", err)
		}
		if container() {
			t.Errorf("a failed boot left its container")
		}
		pausedSo("after a failed boot")
		if err := a.Resume(ctx); err != nil {
			t.Fatal(err)
		}
		runsAgain("resumed after a failed boot")

		// Killed in a resume, then destroyed: nothing left.
		if err := a.PauseCold(ctx); err != nil {
			t.Fatal(err)
		}
		crash("boot")
		rec := record()
		if err := p.Destroy(ctx, a.id); err != nil {
			t.Fatal(err)
		}
		if holderAlive(rec) || container() {
			t.Errorf("after destroy: holder alive %v, container known %v", holderAlive(rec), container())
		}
		assertNoLeftovers(t, p)
	})
}

// TestPauseColdDeadline: the agent a resume boots starts with the record's deadline, not the
// one its sandbox was created with: a sandbox whose timeout was extended, cold-paused past
// its first deadline, resumes and runs on (an agent started past its deadline ends the
// sandbox); and the record's deadline still rules while it is paused.
func TestPauseColdDeadline(t *testing.T) {
	p := newTestProviderConfig(t, Config{ReadyTimeout: 10 * time.Second})
	ctx := context.Background()
	a := create(t, p, provider.CreateSpec{Network: provider.Network{Mode: provider.NetworkNone}, Timeout: 2 * time.Second})
	if err := a.SetTimeout(ctx, 10*time.Minute); err != nil {
		t.Fatal(err)
	}
	first := time.Now().Add(2*time.Second + p.cfg.ReadyTimeout) // the latest the create's could be
	if err := a.PauseCold(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(first) + 1500*time.Millisecond)
	if err := a.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond) // the agent checks its deadline every second or so
	if got := run(t, a, "echo alive"); got != "alive" {
		t.Errorf("after resume past the first deadline: %q", got)
	}
	if in, err := a.Info(ctx); err != nil || in.State != provider.StateRunning {
		t.Errorf("info: %+v, %v", in, err)
	}

	// Paused past its deadline: the reaper removes it, as it would a running one.
	if err := a.SetTimeout(ctx, time.Second); err != nil {
		t.Fatal(err)
	}
	if err := a.PauseCold(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	if _, err := p.Reap(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Connect(ctx, a.id); !errors.Is(err, provider.CodeNotFound) {
		t.Errorf("connect to a paused sandbox past its deadline: %v", err)
	}
	assertNoLeftovers(t, p)
}
