package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/providers/local"
	"github.com/tupper-dev/tupper/sandbox"
)

// localSections measures the local provider: the SDK and CLI beside docker and the runtime
// (--cli), the API (--api), density (--density-max).
func (b *bencher) localSections(ctx context.Context) error {
	resolved, err := provider.Resolve(ctx, provider.ResolveOptions{Name: "local"})
	if err != nil {
		return err
	}
	prov, ok := resolved.(*local.Provider)
	if !ok {
		return fmt.Errorf("bench measures the local provider, not %T", resolved)
	}
	defer sandbox.Reap(context.WithoutCancel(ctx), prov, sandbox.ReapOptions{Labels: benchLabels})
	sandbox.Reap(ctx, prov, sandbox.ReapOptions{Labels: benchLabels})
	rt := b.o.runtime
	if rt == "" {
		var why string
		rt, why = prov.DefaultRuntime()
		b.note("runtime %s, the default here: %s", rt, why)
	}
	image := ""
	if b.o.docker {
		if image, err = dockerImage(ctx); err != nil {
			b.note("docker not found, reporting tupper alone: %v", err)
		}
	}
	if b.o.cli {
		if err := b.cliSection(ctx, prov, rt, image); err != nil {
			return err
		}
	}
	if b.o.api {
		if err := b.apiSection(ctx, rt, image); err != nil {
			return err
		}
	}
	if len(b.o.stores) > 0 {
		if err := b.storesSection(ctx, rt); err != nil {
			return err
		}
	}
	if b.o.metrics {
		if err := b.metricsSection(ctx, rt); err != nil {
			return err
		}
	}
	if b.o.densityMax > 0 {
		if err := b.densitySection(ctx, prov, rt); err != nil {
			return err
		}
	}
	if b.o.dormant > 0 {
		if err := b.dormantSection(ctx, prov, rt); err != nil {
			return err
		}
	}
	if b.o.fork > 0 {
		if err := b.forkSection(ctx, prov, rt); err != nil {
			return err
		}
	}
	return nil
}

// cliSection: the SDK in process and the tupper CLI against the docker CLI and the runtime's
// own exec.
func (b *bencher) cliSection(ctx context.Context, prov *local.Provider, rt, image string) error {
	opts := sandbox.CreateOptions{Network: sandbox.NetworkNone, Runtime: b.o.runtime, Labels: benchLabels}
	dockerOK := image != ""

	// 1. Create → first command done, each way in turn.
	sdkCreate := func() error { return createRunTrue(ctx, prov, opts) }
	runArgs := []string{"run", "--provider", "local", "--network", "none"}
	if b.o.runtime != "" {
		runArgs = append(runArgs, "--runtime", b.o.runtime)
	}
	runArgs = append(runArgs, "--", "true")
	fs := []func() error{sdkCreate, func() error { return runQuiet(ctx, b.tupper, runArgs...) }}
	if dockerOK {
		fs = append(fs, func() error {
			return runQuiet(ctx, "docker", "run", "--rm", "--network", "none", image, "/bin/true")
		})
	}
	s, err := measureEach(b.o.n, fs...)
	if err != nil {
		return err
	}
	b.add("create → first command", "tupper SDK in process ("+rt+")", s[0])
	runRow := b.add("create → first command", "tupper run -- true (whole process, incl. destroy)", s[1])
	if dockerOK {
		b.add("create → first command", "docker run --rm true (whole process)", s[2])
		runRow.versus(s[2], "docker run --rm")
	}

	// 2. Exec round trip of true, each way in turn.
	box, err := sandbox.Create(ctx, prov, opts)
	if err != nil {
		return err
	}
	defer box.Destroy(context.WithoutCancel(ctx))
	// names for the comparisons, labels for the rows
	names, labels := []string{}, []string{"tupper SDK in process", "tupper exec (whole process)"}
	fs = []func() error{
		func() error { return runTrue(ctx, box) },
		func() error { return runQuiet(ctx, b.tupper, "exec", "--provider", "local", box.ID, "--", "true") },
	}
	if rtBin, err := exec.LookPath(rt); err == nil {
		args := []string{"--root", filepath.Join(prov.Home(), rt), "exec", box.ID, "/bin/true"}
		if err := runQuiet(ctx, rtBin, args...); err != nil {
			b.note("skipping %s exec: %v", rt, err)
		} else {
			names, labels = append(names, rt+" exec"), append(labels, rt+" exec into the same sandbox (whole process)")
			fs = append(fs, func() error { return runQuiet(ctx, rtBin, args...) })
		}
	}
	var container string
	if dockerOK {
		out, err := exec.CommandContext(ctx, "docker", "run", "-d", "--network", "none", image, "/bin/sh", "-c", "exec sleep 3600 || while :; do read x; done").Output()
		if err != nil {
			return fmt.Errorf("docker run -d: %v", err)
		}
		container = strings.TrimSpace(string(out))
		defer exec.Command("docker", "rm", "-f", container).Run()
		names, labels = append(names, "docker exec"), append(labels, "docker exec true into a running container (whole process)")
		fs = append(fs, func() error { return runQuiet(ctx, "docker", "exec", container, "/bin/true") })
	}
	s, err = measureEach(b.o.execN, fs...)
	if err != nil {
		return err
	}
	sdkRow := b.add("exec true", labels[0], s[0])
	execRow := b.add("exec true", labels[1], s[1])
	for i := 2; i < len(s); i++ {
		b.add("exec true", labels[i], s[i])
		execRow.versus(s[i], names[i-2])
		if i == 2 && len(names) > 0 && names[0] == rt+" exec" {
			// The in-process round trip against the runtime's own exec into the same
			// sandbox, in the same run: the ratio the bench smoke test guards.
			sdkRow.versus(s[i], names[0])
		}
	}

	// 2b. The CLI's own start-up: a whole process that does nothing else. Every command
	// pays it, `tupper exec` included (docs/performance.md: package init).
	s1, err := measure(b.o.execN, func() error { return runQuiet(ctx, b.tupper, "version") })
	if err != nil {
		return err
	}
	b.add("start-up", "tupper version (whole process)", s1)

	// 3. Write then read 64 MiB.
	data := make([]byte, 64<<20)
	rand.Read(data)
	fs = []func() error{func() error {
		if err := box.Files.Write(ctx, "/tmp/bench.bin", data, sandbox.WriteOptions{}); err != nil {
			return err
		}
		got, err := box.Files.Read(ctx, "/tmp/bench.bin")
		if err == nil && !bytes.Equal(got, data) {
			err = fmt.Errorf("read back different bytes")
		}
		return err
	}}
	cpOK := dockerOK
	if cpOK {
		dir, err := os.MkdirTemp("", "tupper-bench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		in, back := filepath.Join(dir, "in"), filepath.Join(dir, "back")
		if err := os.WriteFile(in, data, 0o600); err != nil {
			return err
		}
		// The image is a few files without /tmp: the copy goes to its root directory.
		dockerCp := func() error {
			if err := runQuiet(ctx, "docker", "cp", in, container+":/bench.bin"); err != nil {
				return err
			}
			return runQuiet(ctx, "docker", "cp", container+":/bench.bin", back)
		}
		if err := dockerCp(); err != nil {
			b.note("skipping docker cp: %v", err)
			cpOK = false
		} else {
			fs = append(fs, dockerCp)
		}
	}
	s, err = measureEach(b.o.n, fs...)
	if err != nil {
		return err
	}
	mbps := func(d time.Duration) float64 { return float64(2*len(data)) / d.Seconds() / 1e6 }
	rwRow := b.add("write+read 64 MiB", fmt.Sprintf("tupper Files (%.0f MB/s at p50)", mbps(s[0].p50)), s[0])
	if cpOK {
		b.add("write+read 64 MiB", fmt.Sprintf("docker cp in and out (%.0f MB/s at p50)", mbps(s[1].p50)), s[1])
		rwRow.versus(s[1], "docker cp")
	}

	// 4. Host memory per idle sandbox: what the sandboxes' cgroups are charged (processes,
	// page cache and tmpfs of their writable layers, kernel memory) plus the proportional
	// set size of host processes kept per sandbox (none for tupper; a containerd shim per
	// container for docker), averaged.
	if b.o.idle > 0 {
		var ids []string
		for range b.o.idle {
			box, err := sandbox.Create(ctx, prov, opts)
			if err != nil {
				return err
			}
			defer box.Destroy(context.WithoutCancel(ctx))
			box.Close()
			ids = append(ids, box.ID)
		}
		time.Sleep(time.Second)
		m := sandboxMemory(ids)
		per := float64(m.total()) / float64(b.o.idle)
		b.figure("memory per idle sandbox", fmt.Sprintf("tupper, %d sandboxes (%s)", b.o.idle, m), fmtMiB(per))
		if dockerOK {
			before := shimPSS()
			var cids []string
			for range b.o.idle {
				out, err := exec.CommandContext(ctx, "docker", "run", "-d", "--network", "none", image, "/bin/sh", "-c", "exec sleep 3600").Output()
				if err != nil {
					return fmt.Errorf("docker run -d: %v", err)
				}
				id := strings.TrimSpace(string(out))
				cids = append(cids, id)
				defer exec.Command("docker", "rm", "-f", id).Run()
			}
			time.Sleep(time.Second)
			total := shimPSS() - before
			for _, id := range cids {
				total += cgroupMemory("docker/" + id)
			}
			per2 := float64(total) / float64(b.o.idle)
			b.figure("memory per idle sandbox", fmt.Sprintf("docker, %d containers (cgroup + containerd shim)", b.o.idle), fmtMiB(per2), fmt.Sprintf("%.1fx tupper's", per2/per))
		}
	}
	return b.flush("CLI and SDK (local provider) against the docker CLI")
}
