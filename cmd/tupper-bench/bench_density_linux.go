package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tupper-dev/tupper/providers/local"
	"github.com/tupper-dev/tupper/sandbox"
)

// The density section: for each runtime, idle sandboxes (network none, the default size)
// are created one at a time and kept, until the median create time of the last
// densityWindow creates is twice that of the first densityWindow, the host's available
// memory falls below a fifth of it, a create fails, or --density-max are up. It reports how
// many were live when creates got twice as slow, and the host memory per idle sandbox: the
// charge of the sandboxes' cgroups plus host processes outside them that serve them.

// densityWindow is how many consecutive creates a median of the density section takes.
const densityWindow = 10

func (b *bencher) densitySection(ctx context.Context, prov *local.Provider, defaultRT string) error {
	return b.perRuntime(ctx, prov, densityRuntimes(b.o.densityRuntimes, defaultRT), b.density,
		fmt.Sprintf("Idle density (local provider, %d MiB of memory, at most %d sandboxes per runtime)", meminfo("MemTotal")>>20, b.o.densityMax))
}

// perRuntime runs a section's measure for each runtime and prints its rows under title.
func (b *bencher) perRuntime(ctx context.Context, prov *local.Provider, runtimes []string, measure func(context.Context, *local.Provider, string) error, title string) error {
	for _, rt := range runtimes {
		if err := measure(ctx, prov, rt); err != nil {
			return err
		}
	}
	return b.flush(title)
}

// densityRuntimes are the runtimes of the density section: list (comma-separated), else the
// default runtime, runc and runsc.
func densityRuntimes(list, defaultRT string) []string {
	var out []string
	if list == "" {
		list = strings.Join([]string{defaultRT, local.RuntimeRunc, local.RuntimeRunsc}, ",")
	}
	for _, rt := range strings.Split(list, ",") {
		if rt = strings.TrimSpace(rt); rt != "" && !slices.Contains(out, rt) {
			out = append(out, rt)
		}
	}
	return out
}

// sectionRuntimes are the runtimes of the dormant and fork sections: list (comma-separated),
// else runsc and the default runtime.
func sectionRuntimes(list, defaultRT string) []string {
	if list == "" {
		list = local.RuntimeRunsc + "," + defaultRT
	}
	return densityRuntimes(list, defaultRT)
}

func (b *bencher) density(ctx context.Context, prov *local.Provider, rt string) error {
	opts := sandbox.CreateOptions{Network: sandbox.NetworkNone, Runtime: rt, Labels: benchLabels}
	before := meminfo("MemAvailable")
	var lat samples
	doubled := -1
	ids, stop := fillHost(ctx, prov, opts, b.o.densityMax, "--density-max", func(box *sandbox.Sandbox, d time.Duration) string {
		box.Close()
		lat = append(lat, d)
		if at, ok := doubledAt(lat, densityWindow); ok {
			doubled = at
			return "create latency doubled"
		}
		if len(lat)%50 == 0 {
			b.note("density %s: %d idle sandboxes, the last create took %s", rt, len(lat), fmtDur(d))
		}
		return ""
	})
	defer destroyAll(context.WithoutCancel(ctx), prov, ids)
	if len(ids) == 0 {
		b.figure("idle density", rt, "0", stop)
		return nil
	}
	time.Sleep(2 * time.Second) // let the last agents settle
	mem := sandboxMemory(ids)
	drop := before - meminfo("MemAvailable")
	n := len(ids)
	w := min(densityWindow, n)
	firstW, lastW := lat[:w].percentile(50), lat[n-w:].percentile(50)
	value := fmt.Sprintf("≥ %d", n) // creates never got twice as slow
	if doubled >= 0 {
		value = fmt.Sprintf("%d", doubled)
	}
	b.figure("idle density", fmt.Sprintf("%s: idle sandboxes live before create got 2x slower", rt), value,
		fmt.Sprintf("stopped at %d: %s; median create of the first %d %s, of the last %d %s (%.1fx)", n, stop, w, fmtDur(firstW), w, fmtDur(lastW), float64(lastW)/float64(firstW)))
	b.figure("memory per idle sandbox", fmt.Sprintf("%s, %d sandboxes (%s)", rt, n, mem), fmtMiB(float64(mem.total())/float64(n)),
		fmt.Sprintf("host MemAvailable fell %s per sandbox", fmtMiB(float64(drop)/float64(n))))
	return nil
}

// fillHost creates sandboxes with opts one at a time and hands each to made (open, with how
// long its create took), until max are made, the host's available memory falls below a
// fifth, a create fails, or made says why to stop. It returns the sandboxes made, for the
// caller to destroy, and why it stopped: "FLAG MAX reached" when nothing else stopped it.
func fillHost(ctx context.Context, prov *local.Provider, opts sandbox.CreateOptions, max int, flag string,
	made func(box *sandbox.Sandbox, took time.Duration) (stop string)) (ids []string, stop string) {
	total := meminfo("MemTotal")
	for len(ids) < max {
		if meminfo("MemAvailable") < total/5 {
			return ids, "the host's available memory fell below a fifth"
		}
		start := time.Now()
		box, err := sandbox.Create(ctx, prov, opts)
		if err != nil {
			return ids, fmt.Sprintf("create %d failed: %v", len(ids)+1, err)
		}
		ids = append(ids, box.ID)
		if stop := made(box, time.Since(start)); stop != "" {
			return ids, stop
		}
	}
	return ids, fmt.Sprintf("%s %d reached", flag, max)
}

// destroyAll destroys the sandboxes ids, a few at a time.
func destroyAll(ctx context.Context, prov *local.Provider, ids []string) {
	work := make(chan string)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range work {
				prov.Destroy(ctx, id)
			}
		}()
	}
	for _, id := range ids {
		work <- id
	}
	close(work)
	wg.Wait()
}
