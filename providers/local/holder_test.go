//go:build linux

package local

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tupper-dev/tupper/internal/testenv"
	"github.com/tupper-dev/tupper/provider"
)

// TestMountsOutsideHostNamespace: creating sandboxes adds no mount to the host's mount
// namespace, under every runtime and with network none and all (runsc's bound network
// namespace included). Each sandbox's mounts are in its holder's namespace, where the host
// reaches its files; the holder shares the sandbox's cgroups; destroy removes the holder and
// with it every mount of the sandbox, in any namespace.
func TestMountsOutsideHostNamespace(t *testing.T) {
	forRuntimes(t, func(t *testing.T, rt string) {
		p := newTestProvider(t, rt)
		if p.net == nil {
			testenv.Skip(t, fmt.Sprintf("network all is unavailable: %v", p.netErr))
		}
		hostMounts := func() []string {
			b, err := os.ReadFile("/proc/self/mountinfo")
			if err != nil {
				t.Fatal(err)
			}
			return mountPointsUnder(string(b), p.cfg.Home)
		}
		before := hostMounts()
		var insts []*Instance
		for i, mode := range []provider.NetworkMode{provider.NetworkNone, provider.NetworkAll, provider.NetworkNone} {
			inst := create(t, p, provider.CreateSpec{Network: provider.Network{Mode: mode}})
			insts = append(insts, inst)
			run(t, inst, "echo "+strconv.Itoa(i)+" > /workspace/mark")
		}
		if after := hostMounts(); len(after) != len(before) {
			t.Errorf("the host's mount namespace has %d mounts under Home with %d sandboxes, %d without: %v",
				len(after), len(insts), len(before), after)
		}
		type holder struct {
			pid   int
			start uint64
		}
		var holders []holder
		for i, inst := range insts {
			rec, err := p.lay.readRecord(inst.ID())
			if err != nil {
				t.Fatal(err)
			}
			if !holderAlive(rec) {
				t.Fatalf("%s: no live holder in the record: pid %d", inst.ID(), rec.HolderPID)
			}
			holders = append(holders, holder{rec.HolderPID, rec.HolderStart})
			// The sandbox's files, through the holder: the overlay and the tmpfs under it.
			rootfs, err := p.nsPath(rec, p.lay.rootfs(inst.ID()))
			if err != nil {
				t.Fatal(err)
			}
			if b, err := os.ReadFile(filepath.Join(rootfs, "workspace", "mark")); err != nil || string(b) != strconv.Itoa(i)+"\n" {
				t.Errorf("%s: /workspace/mark through the holder: %q, %v", inst.ID(), b, err)
			}
			disk, err := p.diskDir(rec)
			if err != nil {
				t.Fatal(err)
			}
			if b, err := os.ReadFile(filepath.Join(disk, "upper", "workspace", "mark")); err != nil || string(b) != strconv.Itoa(i)+"\n" {
				t.Errorf("%s: the upper layer through the holder: %q, %v", inst.ID(), b, err)
			}
			// The same paths on the host are plain directories.
			var st unix.Statfs_t
			if err := unix.Statfs(p.lay.disk(inst.ID()), &st); err != nil || st.Type == unix.TMPFS_MAGIC {
				t.Errorf("%s: the host's %s is a tmpfs (%v)", inst.ID(), p.lay.disk(inst.ID()), err)
			}
			// In the sandbox's cgroups, the same as its init's.
			hc, err1 := os.ReadFile("/proc/" + strconv.Itoa(rec.HolderPID) + "/cgroup")
			ic, err2 := os.ReadFile("/proc/" + strconv.Itoa(rec.InitPID) + "/cgroup")
			if err1 != nil || err2 != nil || string(hc) != string(ic) {
				t.Errorf("%s: the holder's cgroups differ from the init's (%v, %v):\n%s\ninit:\n%s", inst.ID(), err1, err2, hc, ic)
			}
		}
		ctx := context.Background()
		for _, inst := range insts {
			if err := p.Destroy(ctx, inst.ID()); err != nil {
				t.Fatal(err)
			}
		}
		for _, h := range holders {
			if procStart(h.pid) == h.start {
				t.Errorf("holder %d survived its sandbox", h.pid)
			}
		}
		assertNoLeftovers(t, p)
	})
}

// TestHolderGone: a sandbox whose holder died runs on and is not reaped; only its files are
// out of the host's reach, so a snapshot fails saying so; destroy removes it all.
func TestHolderGone(t *testing.T) {
	p := newTestProvider(t, RuntimeRunc)
	ctx := context.Background()
	inst := create(t, p, provider.CreateSpec{Network: netNone})
	rec, err := p.lay.readRecord(inst.ID())
	if err != nil {
		t.Fatal(err)
	}
	stopHolder(rec)(holderExitTimeout)
	if holderAlive(rec) {
		t.Fatal("the holder survived SIGKILL")
	}
	if list, err := p.List(ctx, provider.ListFilter{}); err != nil || len(list) != 1 || list[0].State != provider.StateRunning {
		t.Errorf("list without the holder: %+v, %v", list, err)
	}
	if out := run(t, inst, "echo ok > /workspace/x; cat /workspace/x"); out != "ok" {
		t.Errorf("a command without the holder: %q", out)
	}
	_, err = inst.Snapshot(ctx, 0)
	if provider.CodeOf(err) != provider.CodeUnavailable || !strings.Contains(err.Error(), "holding its mounts") {
		t.Errorf("snapshot without the holder: %v; want unavailable, saying why", err)
	}
	if in, err := inst.Info(ctx); err != nil || in.State != provider.StateRunning {
		t.Errorf("after the failed snapshot: %+v, %v", in, err)
	}
	if err := p.Destroy(ctx, inst.ID()); err != nil {
		t.Fatal(err)
	}
	assertNoLeftovers(t, p)
}

// crashEnv names the Home of a child process that TestCreatorKilled kills mid-create; the
// child's Create stops at the stage in crashStageEnv, prints "at ID HOLDERPID" and waits.
const (
	crashEnv      = "TUPPER_TEST_CRASH_HOME"
	crashStageEnv = "TUPPER_TEST_CRASH_STAGE"
	crashRTEnv    = "TUPPER_TEST_CRASH_RUNTIME"
)

// crashChild is the child's side of TestCreatorKilled, run from TestMain.
func crashChild(home string) int {
	p, err := New(Config{Home: home, AgentPath: os.Getenv("TUPPER_AGENT"), Subnet: testSubnet, Bridge: testBridge,
		Runtime: os.Getenv(crashRTEnv)})
	if err == nil {
		err = p.Available(context.Background())
	}
	if err != nil {
		fmt.Println("error provider:", err)
		return 1
	}
	stop := func(id string, pid int) {
		fmt.Printf("at %s %d\n", id, pid)
		select {} // until the parent's SIGKILL
	}
	switch stage := os.Getenv(crashStageEnv); stage {
	case "runtime":
		testHookCreated = func(id string) error { stop(id, 0); return nil }
	default:
		testHookHolder = func(id, s string, pid int) {
			if s == stage {
				stop(id, pid)
			}
		}
	}
	_, err = p.Create(context.Background(), provider.CreateSpec{Network: provider.Network{Mode: provider.NetworkAll}})
	fmt.Println("error create returned:", err)
	return 1
}

// TestCreatorKilled: a process killed (SIGKILL) in the middle of a Create — once the
// container exists, once the holder runs but is not yet recorded, once it holds the
// namespace — leaves nothing once the half-made sandbox is reaped: no holder, no mount in
// any namespace, no container, cgroup, veth or lease.
func TestCreatorKilled(t *testing.T) {
	forRuntimes(t, func(t *testing.T, rt string) {
		p := newTestProvider(t, rt)
		if p.net == nil {
			testenv.Skip(t, fmt.Sprintf("network all is unavailable: %v", p.netErr))
		}
		for _, stage := range []string{"runtime", "started", "held"} {
			t.Run(stage, func(t *testing.T) {
				child, stdout := startChild(t, crashEnv+"="+p.cfg.Home, crashStageEnv+"="+stage,
					crashRTEnv+"="+rt, "TUPPER_AGENT="+p.cfg.AgentPath)
				line, err := bufio.NewReader(stdout).ReadString('\n')
				child.Process.Kill()
				child.Wait()
				var id string
				var holderPID int
				if n, _ := fmt.Sscanf(line, "at %s %d", &id, &holderPID); n != 2 {
					t.Fatalf("the child said %q (%v)", line, err)
				}
				if holderPID != 0 {
					holderStart := procStart(holderPID)
					if stage == "started" {
						// Nothing records it: it must go by itself.
						deadline := time.Now().Add(5 * time.Second)
						for procStart(holderPID) == holderStart && holderStart != 0 && time.Now().Before(deadline) {
							time.Sleep(10 * time.Millisecond)
						}
						if holderStart != 0 && procStart(holderPID) == holderStart {
							t.Errorf("the unrecorded holder %d outlived the process that made it", holderPID)
						}
					} else if holderStart == 0 {
						t.Errorf("the recorded holder %d died with the process that made it", holderPID)
					}
				}
				rec, err := p.lay.readRecord(id)
				if err != nil {
					t.Fatal(err)
				}
				if rec.Status != statusCreating {
					t.Fatalf("record status %q, want %q", rec.Status, statusCreating)
				}
				if p.dead(rec, time.Now()) {
					t.Error("a Create of a moment ago is dead to the reaper")
				}
				// As if its time to finish had passed.
				rec.CreatedAt = rec.CreatedAt.Add(-p.cfg.ReadyTimeout - 2*time.Minute)
				if err := p.lay.writeRecord(rec); err != nil {
					t.Fatal(err)
				}
				if n, err := p.Reap(context.Background()); err != nil || n != 1 {
					t.Errorf("reap: %d, %v; want 1", n, err)
				}
				if rec.HolderPID != 0 && holderAlive(rec) {
					t.Errorf("holder %d outlived the reap", rec.HolderPID)
				}
				assertNoLeftovers(t, p)
				assertGone(t, p, []string{id})
			})
		}
	})
}

// firstLine returns what a script printed once the script has exited, even while a
// background process it started still holds its output (here for 3 s, as one whose
// redirections have not applied yet on a loaded machine): cmd.Output waited for it, and its
// WaitDelay failed the start of a holder in CI. A failing script's standard error is its
// error's message.
func TestFirstLine(t *testing.T) {
	start := time.Now()
	out, err := firstLine(exec.Command("sh", "-c", "sleep 3 & echo $!"))
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("took %v: waited for the background process", d)
	}
	if pid, err := strconv.Atoi(strings.TrimSpace(string(out))); err != nil || pid <= 0 {
		t.Errorf("printed %q", out)
	}
	_, err = firstLine(exec.Command("sh", "-c", "sleep 3 & echo no such thing >&2; exit 3"))
	if err == nil || !strings.Contains(err.Error(), "exit status 3: no such thing") {
		t.Errorf("failing script: %v", err)
	}
}
