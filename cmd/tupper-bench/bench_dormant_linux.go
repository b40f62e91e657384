package main

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/providers/local"
	"github.com/tupper-dev/tupper/sandbox"
)

// The dormant section: for each runtime, idle sandboxes (network none) are created and paused
// one at a time with the pause that releases memory — under runsc gVisor's checkpoint
// ("pause-frees-memory"), elsewhere the pause that drops memory ("pause-cold") — until
// --dormant are paused, the host's available memory falls below a fifth, or a create or pause
// fails. It reports create and pause times, the host memory, disk and CPU that dormant
// sandboxes cost, and how long a dormant sandbox takes to answer a command again.

// dormantResumes is how many dormant sandboxes the section resumes, each then running `true`.
const dormantResumes = 10

func (b *bencher) dormantSection(ctx context.Context, prov *local.Provider, defaultRT string) error {
	return b.perRuntime(ctx, prov, sectionRuntimes(b.o.dormantRuntimes, defaultRT), b.dormant,
		fmt.Sprintf("Dormant sandboxes (local provider, %d MiB of memory, at most %d per runtime)", meminfo("MemTotal")>>20, b.o.dormant))
}

func (b *bencher) dormant(ctx context.Context, prov *local.Provider, rt string) error {
	opts := sandbox.CreateOptions{Network: sandbox.NetworkNone, Runtime: rt, Labels: benchLabels}
	before := meminfo("MemAvailable")
	idleBefore := cpuBusy(5 * time.Second)
	var creates, pauses samples
	kind, skipped := "", false
	ids, stop := fillHost(ctx, prov, opts, b.o.dormant, "--dormant", func(box *sandbox.Sandbox, d time.Duration) string {
		defer box.Close()
		creates = append(creates, d)
		pause := sandbox.PauseOptions{}
		switch {
		case box.Capabilities.Has(provider.CapPauseFreesMemory):
			kind = "saved to disk (pause-frees-memory)"
		case box.Capabilities.Has(provider.CapPauseCold):
			kind, pause.DropMemory = "memory dropped (pause-cold)", true
		default:
			skipped = true
			return "no pause that releases memory"
		}
		start := time.Now()
		if err := box.PauseWith(ctx, pause); err != nil {
			return fmt.Sprintf("pause %d failed: %v", len(creates), err)
		}
		pauses = append(pauses, time.Since(start))
		if len(pauses)%50 == 0 {
			b.note("dormant %s: %d paused", rt, len(pauses))
		}
		return ""
	})
	defer destroyAll(context.WithoutCancel(ctx), prov, ids)
	if skipped {
		b.note("dormant %s: no pause that releases memory under this runtime; skipped", rt)
		return nil
	}
	n := len(pauses)
	if n == 0 {
		b.figure("dormant sandboxes", rt, "0", stop)
		return nil
	}
	time.Sleep(2 * time.Second) // let the last teardowns settle
	drop := before - meminfo("MemAvailable")
	busy := cpuBusy(5 * time.Second)
	disk := dirBytes(filepath.Join(prov.Home(), "sandboxes"), ids[:n])

	var resumes samples
	for _, id := range ids[:min(dormantResumes, n)] {
		box, err := sandbox.Connect(ctx, prov, id, sandbox.ConnectOptions{})
		if err != nil {
			return fmt.Errorf("dormant %s: connect %s: %w", rt, id, err)
		}
		start := time.Now()
		err = box.Resume(ctx)
		if err == nil {
			var res *sandbox.RunResult
			if res, err = box.Run(ctx, "true", sandbox.RunOptions{}); err == nil && !res.OK {
				err = fmt.Errorf("true: %+v", res)
			}
		}
		box.Close()
		if err != nil {
			return fmt.Errorf("dormant %s: resume %s: %w", rt, id, err)
		}
		resumes = append(resumes, time.Since(start))
	}

	b.add("create", rt, creates.stats())
	b.add("pause", fmt.Sprintf("%s: %s", rt, kind), pauses.stats())
	b.add("resume → first command", rt, resumes.stats())
	b.figure("dormant sandboxes", rt, strconv.Itoa(n), "stopped: "+stop)
	b.figure("host memory per dormant sandbox", rt, fmtMiB(float64(drop)/float64(n)), "host MemAvailable before the first create and with all dormant")
	b.figure("disk per dormant sandbox", rt, fmtMiB(float64(disk)/float64(n)), "its directory: checkpoint image, record, logs")
	b.figure("host CPU busy", fmt.Sprintf("%s, %d dormant", rt, n), fmt.Sprintf("%.1f%%", busy*100),
		fmt.Sprintf("%.1f%% before the first create (over 5 s each, both cores)", idleBefore*100))
	return nil
}

// cpuBusy is the share of all CPUs' time, over d, not idle (from /proc/stat); -1 when
// unreadable.
func cpuBusy(d time.Duration) float64 {
	read := func() (busy, all int64, ok bool) {
		b, err := os.ReadFile("/proc/stat")
		if err != nil {
			return 0, 0, false
		}
		line, _, _ := strings.Cut(string(b), "\n")
		f := strings.Fields(line)
		if len(f) < 6 || f[0] != "cpu" {
			return 0, 0, false
		}
		for i, s := range f[1:] {
			v, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				return 0, 0, false
			}
			all += v
			if i != 3 && i != 4 { // idle, iowait
				busy += v
			}
		}
		return busy, all, true
	}
	b0, a0, ok0 := read()
	time.Sleep(d)
	b1, a1, ok1 := read()
	if !ok0 || !ok1 || a1 == a0 {
		return -1
	}
	return float64(b1-b0) / float64(a1-a0)
}

// dirBytes is the apparent size of the files under dir/<id> for ids.
func dirBytes(dir string, ids []string) int64 {
	var n int64
	for _, id := range ids {
		filepath.WalkDir(filepath.Join(dir, id), func(_ string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return nil
			}
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
			return nil
		})
	}
	return n
}
