//go:build linux

package local

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	agentspec "github.com/tupper-dev/tupper/agent/spec"
	"github.com/tupper-dev/tupper/provider"
)

// BenchmarkCreateFirstCommand: create a sandbox, run `true`, destroy (destroy not timed).
func BenchmarkCreateFirstCommand(b *testing.B) {
	for _, rt := range runtimes {
		b.Run(rt, func(b *testing.B) {
			p := newTestProvider(b, rt)
			var durs []time.Duration
			for b.Loop() {
				durs = append(durs, createFirstCommand(b, p))
			}
			reportP50(b, durs)
		})
	}
}

// createFirstCommand times create → `true` done on p, then destroys the sandbox untimed.
func createFirstCommand(b *testing.B, p *Provider) time.Duration {
	ctx := context.Background()
	start := time.Now()
	inst, err := p.Create(ctx, provider.CreateSpec{Network: netNone})
	if err != nil {
		b.Fatal(err)
	}
	if res, err := inst.Exec(ctx, provider.ExecRequest{Command: "true"}); err != nil || res.ExitCode != 0 {
		b.Fatal(res, err)
	}
	d := time.Since(start)
	b.StopTimer()
	defer b.StartTimer()
	inst.Close()
	if err := p.Destroy(ctx, inst.(*Instance).ID()); err != nil {
		b.Fatal(err)
	}
	return d
}

// BenchmarkExecTrue: the round trip of `true` through the agent.
func BenchmarkExecTrue(b *testing.B) {
	for _, rt := range runtimes {
		b.Run(rt, func(b *testing.B) {
			p := newTestProvider(b, rt)
			inst := create(b, p, provider.CreateSpec{Network: netNone})
			ctx := context.Background()
			var durs []time.Duration
			for b.Loop() {
				start := time.Now()
				if res, err := inst.Exec(ctx, provider.ExecRequest{Command: "true"}); err != nil || res.ExitCode != 0 {
					b.Fatal(res, err)
				}
				durs = append(durs, time.Since(start))
			}
			reportP50(b, durs)
		})
	}
}

// BenchmarkWriteRead64MiB: write 64 MiB into the sandbox, then read it back.
func BenchmarkWriteRead64MiB(b *testing.B) {
	const size = 64 << 20
	data := bytes.Repeat([]byte("0123456789abcdef"), size/16)
	for _, rt := range runtimes {
		b.Run(rt, func(b *testing.B) {
			p := newTestProvider(b, rt)
			inst := create(b, p, provider.CreateSpec{Network: netNone, Size: provider.Size{MemoryMB: 1024, DiskGB: 1}})
			ctx := context.Background()
			b.SetBytes(2 * size)
			for b.Loop() {
				if err := inst.WriteFile(ctx, "/workspace/big", bytes.NewReader(data), nil); err != nil {
					b.Fatal(err)
				}
				rc, err := inst.ReadFile(ctx, "/workspace/big")
				if err != nil {
					b.Fatal(err)
				}
				n, err := io.Copy(io.Discard, rc)
				rc.Close()
				if err != nil || n != size {
					b.Fatal(n, err)
				}
			}
		})
	}
}

// BenchmarkIdleSandboxes reports the host memory each idle sandbox costs, with 100 of them
// (runc, crun) or 20 (runsc, slower to start): the drop of MemAvailable per sandbox and the
// sandboxes' own cgroup memory use. It asserts nothing.
func BenchmarkIdleSandboxes(b *testing.B) {
	for _, rt := range runtimes {
		n := 100
		if rt == RuntimeRunsc {
			n = 20
		}
		b.Run(fmt.Sprintf("%s/%d", rt, n), func(b *testing.B) {
			p := newTestProvider(b, rt)
			ctx := context.Background()
			for b.Loop() {
				dropCaches()
				before := memAvailable()
				var ids []string
				for range n {
					inst, err := p.Create(ctx, provider.CreateSpec{Network: netNone})
					if err != nil {
						b.Fatal(err)
					}
					ids = append(ids, inst.(*Instance).ID())
					inst.Close()
				}
				time.Sleep(time.Second)
				dropCaches()
				after := memAvailable()
				var cg, pss int64
				for _, id := range ids {
					cg += cgroupMemory(id)
					if rec, err := p.lay.readRecord(id); err == nil {
						pss += procPss(rec.InitPID)
					}
				}
				b.ReportMetric(float64(pss)/float64(n)/(1<<20), "MiB-init-pss/sandbox")
				b.ReportMetric(float64(before-after)/float64(n)/(1<<20), "MiB-host/sandbox")
				b.ReportMetric(float64(cg)/float64(n)/(1<<20), "MiB-cgroup/sandbox")
				for _, id := range ids {
					if err := p.Destroy(ctx, id); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}

func reportP50(b *testing.B, durs []time.Duration) {
	if len(durs) == 0 {
		return
	}
	sort.Slice(durs, func(i, j int) bool { return durs[i] < durs[j] })
	b.ReportMetric(float64(durs[len(durs)/2].Microseconds())/1000, "ms-p50")
}

func dropCaches() { os.WriteFile("/proc/sys/vm/drop_caches", []byte("3"), 0o644) }

// memAvailable is MemAvailable from /proc/meminfo, in bytes.
func memAvailable() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(s.Text(), "MemAvailable:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

func cgroupMemory(id string) int64 {
	for _, p := range []string{"/sys/fs/cgroup/memory/tupper/" + id + "/memory.usage_in_bytes", "/sys/fs/cgroup/tupper/" + id + "/memory.current"} {
		if b, err := os.ReadFile(p); err == nil {
			v, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
			return v
		}
	}
	return 0
}

// procPss is the proportional set size of pid (shared pages split among their users).
func procPss(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/smaps_rollup")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "Pss:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

var benchDensity = flag.Int("density", 1000, "live sandboxes for BenchmarkCreateAtDensity")

// BenchmarkCreateAtDensity reports the create → first command p50 (destroy not timed) with no
// other sandbox of this Home alive, with -density idle ones alive, and with none again once
// they are destroyed (the two empty figures bracket how the machine's speed drifted over the
// run), their ratio, and the p50 of each step of Create at both. The cost of a create must
// not grow with the sandboxes that exist. Beside each figure it times the alternative that
// holds nothing of Tupper's: the same runtime running a bare container to its end (bareRun),
// so a growth that is the host's and the runtime's shows as such. It asserts nothing.
func BenchmarkCreateAtDensity(b *testing.B) {
	for _, rt := range []string{RuntimeRunc, RuntimeCrun} {
		b.Run(fmt.Sprintf("%s/%d", rt, *benchDensity), func(b *testing.B) {
			p := newTestProvider(b, rt)
			bare := newBareRun(b, rt, p.cfg.AgentPath)
			ctx := context.Background()
			const samples = 30
			var mu sync.Mutex
			var steps map[string][]time.Duration // per step, while measuring
			var order []string                   // the steps, in Create's order
			stepHook = func(name string, d time.Duration) {
				mu.Lock()
				defer mu.Unlock()
				if steps != nil {
					if _, ok := steps[name]; !ok && !slices.Contains(order, name) {
						order = append(order, name)
					}
					steps[name] = append(steps[name], d)
				}
			}
			defer func() { stepHook = nil }()
			measure := func() (time.Duration, map[string][]time.Duration) {
				mu.Lock()
				steps = map[string][]time.Duration{}
				mu.Unlock()
				var durs []time.Duration
				for range samples {
					durs = append(durs, createFirstCommand(b, p))
				}
				mu.Lock()
				st := steps
				steps = nil
				mu.Unlock()
				return median(durs), st
			}
			for b.Loop() {
				empty, emptySteps := measure()
				bareEmpty := bare.p50(samples)
				// Fill from two goroutines: the machine has two cores.
				var ids []string
				errc := make(chan error, 2)
				for w := range 2 {
					go func() {
						for i := w; i < *benchDensity; i += 2 {
							inst, err := p.Create(ctx, provider.CreateSpec{Network: netNone})
							if err != nil {
								errc <- err
								return
							}
							inst.Close()
							mu.Lock()
							ids = append(ids, inst.(*Instance).ID())
							mu.Unlock()
						}
						errc <- nil
					}()
				}
				for range 2 {
					if err := <-errc; err != nil {
						b.Fatalf("filling to %d: %v", *benchDensity, err)
					}
				}
				full, fullSteps := measure()
				bareFull := bare.p50(samples)
				for _, id := range ids {
					if err := p.Destroy(ctx, id); err != nil {
						b.Fatal(err)
					}
				}
				emptyAgain, _ := measure()
				bareAgain := bare.p50(samples)
				b.ReportMetric(float64(empty.Microseconds())/1000, "ms-p50-empty")
				b.ReportMetric(float64(full.Microseconds())/1000, "ms-p50-full")
				b.ReportMetric(float64(emptyAgain.Microseconds())/1000, "ms-p50-empty-after")
				b.ReportMetric(float64(full)/float64(empty), "full/empty")
				b.ReportMetric(float64(bareFull)/float64(bareEmpty), "bare-full/empty")
				b.Logf("bare %s run, p50: %.1f ms empty, %.1f ms full, %.1f ms empty again", rt,
					float64(bareEmpty.Microseconds())/1000, float64(bareFull.Microseconds())/1000, float64(bareAgain.Microseconds())/1000)
				for _, name := range order {
					b.Logf("step %-20s p50 %8.1f ms empty, %8.1f ms full", name,
						float64(median(emptySteps[name]).Microseconds())/1000, float64(median(fullSteps[name]).Microseconds())/1000)
				}
			}
		})
	}
}

// bareRun is a container with nothing of Tupper's in it, run by the runtime alone: a root
// file system holding one static binary, read-only; the namespaces, the /proc, /dev and /sys
// mounts and the cgroup limits of a sandbox (resources, with the default size); its process
// prints the agent's protocol version and exits. `runtime run` in the foreground creates it,
// starts it, waits for it and deletes it.
type bareRun struct {
	b      *testing.B
	rt     string
	bundle string
	n      int
}

func newBareRun(b *testing.B, rt, agentPath string) *bareRun {
	dir := b.TempDir()
	rootfs := filepath.Join(dir, "rootfs")
	for _, d := range []string{"proc", "dev", "sys"} {
		if err := os.MkdirAll(filepath.Join(rootfs, d), 0o755); err != nil {
			b.Fatal(err)
		}
	}
	bin, err := os.ReadFile(agentPath)
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(rootfs, "tupper"), bin, 0o755); err != nil {
		b.Fatal(err)
	}
	res := resources(bundleSpec{cpu: 1, memoryMB: 1024, limitSwap: swapAccounted(), pids: 1024})
	s := specs.Spec{
		Version: ociVersion,
		Root:    &specs.Root{Path: rootfs, Readonly: true},
		Process: &specs.Process{Args: []string{"/tupper", "agent", agentspec.ProbeFlag}, Cwd: "/", Env: []string{"PATH=/"}},
		Mounts: []specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc"},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "mode=755"}},
			{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
		},
		Linux: &specs.Linux{
			Namespaces: []specs.LinuxNamespace{{Type: specs.PIDNamespace}, {Type: specs.IPCNamespace},
				{Type: specs.UTSNamespace}, {Type: specs.MountNamespace}, {Type: specs.NetworkNamespace}},
			// Beside the sandboxes' cgroups, as theirs are; the runs are one at a time.
			CgroupsPath: fmt.Sprintf("/tupper/tupper-bare-%d", os.Getpid()),
			Resources:   res,
		},
	}
	js, err := json.Marshal(s)
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), js, 0o600); err != nil {
		b.Fatal(err)
	}
	return &bareRun{b: b, rt: rt, bundle: dir}
}

// p50 runs the bare container n times, one after another, and returns the median.
func (r *bareRun) p50(n int) time.Duration {
	var durs []time.Duration
	for range n {
		r.n++
		id := fmt.Sprintf("tupper-bare-%d-%d", os.Getpid(), r.n)
		start := time.Now()
		out, err := exec.Command(r.rt, "run", "--bundle", r.bundle, id).CombinedOutput()
		durs = append(durs, time.Since(start))
		if err != nil || !strings.Contains(string(out), agentspec.ProbeReply) {
			r.b.Fatalf("bare %s run: %v: %s", r.rt, err, out)
		}
	}
	return median(durs)
}

// median returns the median of durs (zero for none); it sorts durs.
func median(durs []time.Duration) time.Duration {
	if len(durs) == 0 {
		return 0
	}
	sort.Slice(durs, func(i, j int) bool { return durs[i] < durs[j] })
	return durs[len(durs)/2]
}
