package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/sandbox"
)

// bench measures tupper side by side with the alternatives present on this machine, in one
// run, and prints each ratio. Timings on a shared machine are noisy; the ratios between
// things measured in the same run are what to read.
func newBenchCmd() *cobra.Command {
	var (
		n       int
		idle    int
		runtime string
		docker  bool
	)
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure tupper against docker and the OCI runtime side by side and print the ratios",
		Long: "bench runs the same operations with tupper (local provider) and, when present, with\n" +
			"docker (docker run / docker exec against an image of this host's /bin/true and /bin/sh,\n" +
			"made with docker import, so no registry is needed) and the runtime's own exec (runc exec,\n" +
			"or crun exec / runsc exec with --runtime, into the same container tupper made), and prints\n" +
			"medians and ratios.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if n < 1 || idle < 0 {
				return fmt.Errorf("--n must be at least 1 and --idle not negative")
			}
			b := &bencher{cmd: cmd, n: n, runtime: runtime, self: selfPath()}
			return b.run(cmd.Context(), idle, docker)
		},
	}
	cmd.Flags().IntVar(&n, "n", 20, "repetitions of each operation")
	cmd.Flags().IntVar(&idle, "idle", 20, "idle sandboxes to create for the memory measurement (0: skip)")
	cmd.Flags().StringVar(&runtime, "runtime", "", "runtime of the local provider: runc (default), runsc or crun")
	cmd.Flags().BoolVar(&docker, "docker", true, "compare with docker when the docker CLI answers")
	return cmd
}

type bencher struct {
	cmd     *cobra.Command
	n       int
	runtime string
	self    string
	rows    [][]string
}

func selfPath() string {
	p, err := os.Executable()
	if err != nil {
		return "tupper"
	}
	return p
}

// measure runs f n times and returns the median.
func (b *bencher) measure(f func() error) (time.Duration, error) {
	ds := make([]time.Duration, 0, b.n)
	for range b.n {
		start := time.Now()
		if err := f(); err != nil {
			return 0, err
		}
		ds = append(ds, time.Since(start))
	}
	slices.Sort(ds)
	return ds[len(ds)/2], nil
}

func (b *bencher) row(op, what string, d time.Duration, base time.Duration) {
	ratio := ""
	if base > 0 && d > 0 {
		ratio = fmt.Sprintf("%.1fx", float64(d)/float64(base))
	}
	b.rows = append(b.rows, []string{op, what, fmtDur(d), ratio})
}

func fmtDur(d time.Duration) string {
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.2f s", d.Seconds())
	case d >= time.Millisecond:
		return fmt.Sprintf("%.1f ms", float64(d)/1e6)
	}
	return fmt.Sprintf("%.0f µs", float64(d)/1e3)
}

func runQuiet(ctx context.Context, name string, args ...string) error {
	c := exec.CommandContext(ctx, name, args...)
	var errb bytes.Buffer
	c.Stderr = &errb
	if err := c.Run(); err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return nil
}

func (b *bencher) run(ctx context.Context, idle int, withDocker bool) error {
	prov, err := provider.Resolve(ctx, provider.ResolveOptions{Name: "local"})
	if err != nil {
		return err
	}
	opts := sandbox.CreateOptions{Network: sandbox.NetworkNone, Runtime: b.runtime, Labels: map[string]string{"tupper-bench": "1"}}
	defer sandbox.Reap(context.WithoutCancel(ctx), prov, sandbox.ReapOptions{Labels: opts.Labels})

	dockerOK := withDocker && exec.Command("docker", "info").Run() == nil
	image := ""
	if dockerOK {
		if image, err = dockerImage(ctx); err != nil {
			fmt.Fprintln(b.cmd.ErrOrStderr(), "bench: skipping docker:", err)
			dockerOK = false
		}
	}

	// 1. Create → first command done.
	createFirst, err := b.measure(func() error {
		box, err := sandbox.Create(ctx, prov, opts)
		if err != nil {
			return err
		}
		res, err := box.Run(ctx, "true", sandbox.RunOptions{})
		if err == nil && !res.OK {
			err = fmt.Errorf("true failed: %+v", res)
		}
		defer box.Destroy(context.WithoutCancel(ctx))
		return err
	})
	if err != nil {
		return err
	}
	b.row("create → first command", "tupper (SDK, in process)", createFirst, 0)
	tupperRun, err := b.measure(func() error {
		args := []string{"run", "--provider", "local", "--network", "none"}
		if b.runtime != "" {
			args = append(args, "--runtime", b.runtime)
		}
		return runQuiet(ctx, b.self, append(args, "--", "true")...)
	})
	if err != nil {
		return err
	}
	b.row("create → first command", "tupper run -- true (whole process, incl. destroy)", tupperRun, 0)
	if dockerOK {
		d, err := b.measure(func() error { return runQuiet(ctx, "docker", "run", "--rm", "--network", "none", image, "/bin/true") })
		if err != nil {
			return err
		}
		b.row("create → first command", "docker run --rm true (whole process)", d, 0)
		b.rows[len(b.rows)-1][3] = fmt.Sprintf("%.1fx tupper run", float64(d)/float64(tupperRun))
	}

	// 2. Exec round trip of true.
	box, err := sandbox.Create(ctx, prov, opts)
	if err != nil {
		return err
	}
	defer box.Destroy(context.WithoutCancel(ctx))
	sdkExec, err := b.measure(func() error {
		res, err := box.Run(ctx, "true", sandbox.RunOptions{})
		if err == nil && !res.OK {
			err = fmt.Errorf("true failed")
		}
		return err
	})
	if err != nil {
		return err
	}
	b.row("exec true", "tupper (SDK, in process)", sdkExec, 0)
	cliExec, err := b.measure(func() error { return runQuiet(ctx, b.self, "exec", "--provider", "local", box.ID, "--", "true") })
	if err != nil {
		return err
	}
	b.row("exec true", "tupper exec (whole process)", cliExec, 0)
	rt := b.runtime
	if rt == "" {
		rt = "runc"
	}
	if rtBin, err := exec.LookPath(rt); err == nil {
		root := filepath.Join(tupperHome(), rt)
		d, err := b.measure(func() error { return runQuiet(ctx, rtBin, "--root", root, "exec", box.ID, "/bin/true") })
		if err != nil {
			fmt.Fprintln(b.cmd.ErrOrStderr(), "bench: skipping", rt, "exec:", err)
		} else {
			b.row("exec true", rt+" exec into the same sandbox (whole process)", d, cliExec)
			b.rows[len(b.rows)-1][3] += " tupper exec"
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
		d, err := b.measure(func() error { return runQuiet(ctx, "docker", "exec", container, "/bin/true") })
		if err != nil {
			return err
		}
		b.row("exec true", "docker exec true (whole process)", d, cliExec)
		b.rows[len(b.rows)-1][3] += " tupper exec"
	}

	// 3. Write then read 64 MiB.
	data := make([]byte, 64<<20)
	rand.Read(data)
	rw, err := b.measure(func() error {
		if err := box.Files.Write(ctx, "/tmp/bench.bin", data, sandbox.WriteOptions{}); err != nil {
			return err
		}
		got, err := box.Files.Read(ctx, "/tmp/bench.bin")
		if err == nil && !bytes.Equal(got, data) {
			err = fmt.Errorf("read back different bytes")
		}
		return err
	})
	if err != nil {
		return err
	}
	b.row("write+read 64 MiB", fmt.Sprintf("tupper Files (%.0f MB/s)", float64(2*len(data))/rw.Seconds()/1e6), rw, 0)
	if dockerOK {
		tmp, err := os.CreateTemp("", "tupper-bench-")
		if err == nil {
			tmp.Write(data)
			tmp.Close()
			defer os.Remove(tmp.Name())
			d, err := b.measure(func() error {
				if err := runQuiet(ctx, "docker", "cp", tmp.Name(), container+":/tmp/bench.bin"); err != nil {
					return err
				}
				return runQuiet(ctx, "docker", "cp", container+":/tmp/bench.bin", tmp.Name()+".back")
			})
			os.Remove(tmp.Name() + ".back")
			if err == nil {
				b.row("write+read 64 MiB", fmt.Sprintf("docker cp in and out (%.0f MB/s)", float64(2*len(data))/d.Seconds()/1e6), d, rw)
				b.rows[len(b.rows)-1][3] += " tupper"
			}
		}
	}

	// 4. Host memory per idle sandbox: what the sandboxes' cgroups are charged (processes,
	// page cache and tmpfs of their writable layers, kernel memory) plus the resident memory
	// of host processes kept per sandbox (none for tupper; a containerd shim per container
	// for docker), averaged.
	if idle > 0 {
		var boxes []*sandbox.Sandbox
		for range idle {
			box, err := sandbox.Create(ctx, prov, opts)
			if err != nil {
				return err
			}
			defer box.Destroy(context.WithoutCancel(ctx))
			boxes = append(boxes, box)
		}
		time.Sleep(time.Second)
		var total int64
		for _, box := range boxes {
			total += cgroupMemory("tupper/" + box.ID)
		}
		per := float64(total) / float64(idle) / (1 << 20)
		b.rows = append(b.rows, []string{"memory per idle sandbox", fmt.Sprintf("tupper, %d sandboxes (cgroup, no host process)", idle), fmt.Sprintf("%.1f MiB", per), ""})
		if dockerOK {
			before := shimRSS()
			var ids []string
			for range idle {
				out, err := exec.CommandContext(ctx, "docker", "run", "-d", "--network", "none", image, "/bin/sh", "-c", "exec sleep 3600").Output()
				if err != nil {
					return fmt.Errorf("docker run -d: %v", err)
				}
				id := strings.TrimSpace(string(out))
				ids = append(ids, id)
				defer exec.Command("docker", "rm", "-f", id).Run()
			}
			time.Sleep(time.Second)
			total := shimRSS() - before
			for _, id := range ids {
				total += cgroupMemory("docker/" + id)
			}
			per2 := float64(total) / float64(idle) / (1 << 20)
			b.rows = append(b.rows, []string{"memory per idle sandbox", fmt.Sprintf("docker, %d containers (cgroup + containerd shim)", idle), fmt.Sprintf("%.1f MiB", per2), fmt.Sprintf("%.1fx tupper", per2/per)})
		}
	}

	tw := tabwriter.NewWriter(b.cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "OPERATION\tWHAT (median of %d)\tTIME\tRATIO\n", b.n)
	for _, r := range b.rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}

// cgroupMemory is the memory charged to a cgroup under the memory hierarchy (v1 or v2), in
// bytes, or 0 when it cannot be read.
func cgroupMemory(rel string) int64 {
	for _, f := range []string{
		"/sys/fs/cgroup/memory/" + rel + "/memory.usage_in_bytes",
		"/sys/fs/cgroup/" + rel + "/memory.current",
		"/sys/fs/cgroup/system.slice/docker-" + strings.TrimPrefix(rel, "docker/") + ".scope/memory.current",
	} {
		if b, err := os.ReadFile(f); err == nil {
			n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
			if err == nil {
				return n
			}
		}
	}
	return 0
}

// shimRSS is the resident memory of every containerd shim process, in bytes.
func shimRSS() int64 {
	var total int64
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		comm, err := os.ReadFile("/proc/" + e.Name() + "/comm")
		if err != nil || !strings.HasPrefix(strings.TrimSpace(string(comm)), "containerd-shim") {
			continue
		}
		f, err := os.Open("/proc/" + e.Name() + "/status")
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
				total += kb << 10
			}
		}
		f.Close()
	}
	return total
}

func tupperHome() string {
	if h := os.Getenv("TUPPER_HOME"); h != "" {
		return h
	}
	return "/var/lib/tupper"
}

// dockerImage imports a minimal image made of this host's /bin/sh, /bin/true, /bin/sleep and
// /bin/cat with their shared libraries, so the comparison needs no registry.
func dockerImage(ctx context.Context) (string, error) {
	const name = "tupper-bench:host"
	if exec.CommandContext(ctx, "docker", "image", "inspect", name).Run() == nil {
		return name, nil
	}
	files := map[string]bool{}
	for _, bin := range []string{"/bin/sh", "/bin/true", "/bin/sleep", "/bin/cat"} {
		real, err := filepath.EvalSymlinks(bin)
		if err != nil {
			return "", err
		}
		files[bin], files[real] = true, true
		out, err := exec.CommandContext(ctx, "ldd", real).Output()
		if err != nil {
			continue // static
		}
		for _, line := range strings.Split(string(out), "\n") {
			for _, f := range strings.Fields(line) {
				if strings.HasPrefix(f, "/") {
					files[f] = true
					if r, err := filepath.EvalSymlinks(f); err == nil {
						files[r] = true
					}
				}
			}
		}
	}
	list := make([]string, 0, len(files))
	for f := range files {
		list = append(list, strings.TrimPrefix(f, "/"))
	}
	slices.Sort(list)
	tar := exec.CommandContext(ctx, "tar", append([]string{"-C", "/", "-chf", "-", "--"}, list...)...)
	imp := exec.CommandContext(ctx, "docker", "import", "-", name)
	pipe, err := tar.StdoutPipe()
	if err != nil {
		return "", err
	}
	imp.Stdin = pipe
	var errb bytes.Buffer
	imp.Stderr = &errb
	if err := tar.Start(); err != nil {
		return "", err
	}
	if err := imp.Run(); err != nil {
		return "", fmt.Errorf("docker import: %v: %s", err, errb.String())
	}
	if err := tar.Wait(); err != nil {
		return "", err
	}
	return name, nil
}
