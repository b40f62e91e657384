package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math"
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

// newBenchCmd is the whole command: its sections are in this file's siblings (the CLI and
// the SDK against docker's CLI here and in bench_local_linux.go, the HTTP APIs against Docker
// Engine's API and E2B's SDK in bench_api.go, idle density, dormant sandboxes and forks in
// bench_{density,dormant,fork}_linux.go, the Docker provider in bench_docker.go). Timings on a
// shared machine are noisy; the ratios between things measured in the same run are what to
// read.
func newBenchCmd() *cobra.Command {
	var o benchOptions
	cmd := &cobra.Command{
		Use:   "tupper-bench",
		Short: "Measure tupper against docker and the OCI runtime side by side and print the ratios",
		Long: "tupper-bench (also run as `tupper bench`) runs the same operations with tupper (local\n" +
			"provider) and, when present, with docker (against an image of this host's /bin/true and\n" +
			"/bin/sh, made with docker import, so no registry is needed) and the runtime's own exec,\n" +
			"and prints p50, p99 and ratios. The tupper it measures is --tupper, else the tupper\n" +
			"that ran `tupper bench`, else the one beside tupper-bench, else the one on PATH.\n\n" +
			"Sections (the CLI one alone unless another is asked for):\n" +
			"  --cli          tupper run / exec and the SDK in process against docker run / exec\n" +
			"  --api          a tupper serve it starts itself, with and without a warm pool, over\n" +
			"                 keep-alive HTTP, against Docker Engine's API on its unix socket, and\n" +
			"                 E2B's JS SDK against the same server (--e2b), and N creates sent\n" +
			"                 at once (--concurrent N)\n" +
			"  --stores       the API section's create, exec and --concurrent creates on a tupper\n" +
			"                 serve per store (sqlite, postgres), in turn, with PostgreSQL/SQLite\n" +
			"                 ratios; a private PostgreSQL cluster unless --postgres names one\n" +
			"  --density-max  idle sandboxes created one by one until create latency doubles, host\n" +
			"                 memory runs short or N are up, with host memory per idle sandbox\n" +
			"  --dormant      N idle sandboxes made dormant (paused with the pause that releases\n" +
			"                 memory: saved to disk, else cold), with what a dormant one costs and\n" +
			"                 how soon it answers again\n" +
			"  --fork         a running sandbox forked N times into one child and N times into\n" +
			"                 ten, per child, beside a cold create of the same runtime\n" +
			"  --metrics      the API section's exec and create → first command on a tupper serve\n" +
			"                 collecting Prometheus metrics and one with --metrics=false, in turn\n\n" +
			"See docs/performance.md for figures from this machine.",
		Example:       "  tupper bench\n  tupper bench --api --e2b test/e2b/v251\n  tupper bench --density-max 500 --density-runtimes crun,runc,runsc\n  tupper bench --dormant 200 --dormant-runtimes runsc\n  tupper bench --fork 5 --fork-runtimes runsc",
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.validate(); err != nil {
				return err
			}
			var err error
			if o.stores, err = parseStores(o.storesFlag); err != nil {
				return err
			}
			if !o.api && len(o.stores) == 0 && o.densityMax == 0 && o.dormant == 0 && o.fork == 0 && !o.metrics {
				o.cli = true
			}
			tupper, err := findTupper(o.tupper)
			if err != nil {
				return err
			}
			// The sandboxes the SDK makes in this process run the measured tupper as their
			// agent, as those of its tupper run and tupper serve do.
			if os.Getenv(agentEnv) == "" {
				os.Setenv(agentEnv, tupper)
			}
			settle = o.settle
			b := &bencher{cmd: cmd, o: o, tupper: tupper}
			return b.run(cmd.Context())
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&o.tupper, "tupper", os.Getenv(tupperEnv), "the tupper binary to measure (default: $"+tupperEnv+", which tupper bench sets to itself, else tupper beside tupper-bench, else on PATH)")
	fl.IntVar(&o.n, "n", 20, "repetitions of each operation that creates a sandbox or copies a file")
	fl.IntVar(&o.execN, "exec-n", 200, "repetitions of each exec round trip")
	fl.IntVar(&o.idle, "idle", 20, "idle sandboxes to create for the memory comparison with docker in the CLI section (0: skip)")
	fl.StringVar(&o.provider, "provider", "local", "provider to measure: local (every section), or docker (create and exec beside docker run and docker exec)")
	fl.StringVar(&o.runtime, "runtime", "", "runtime of the local provider: crun, runc or runsc (default: the provider's, see tupper doctor)")
	fl.BoolVar(&o.docker, "docker", true, "compare with docker when its CLI and daemon answer")
	fl.BoolVar(&o.cli, "cli", false, "run the CLI section (the default when no other section is asked for)")
	fl.BoolVar(&o.api, "api", false, "run the API section")
	fl.BoolVar(&o.metrics, "metrics", false, "run the metrics section: the hot path with Prometheus metrics on and off")
	fl.IntVar(&o.pool, "pool", 2, "warm pool of the API section's pooled server")
	fl.StringVar(&o.e2bDir, "e2b", "", "npm project with E2B's JS SDK installed (npm ci) for the API section (default: test/e2b/v251 under the current directory, when installed)")
	fl.IntVar(&o.densityMax, "density-max", 0, "run the density section with at most this many idle sandboxes per runtime (0: skip)")
	fl.StringVar(&o.densityRuntimes, "density-runtimes", "", "comma-separated runtimes of the density section (default: the default runtime, runc and runsc)")
	fl.IntVar(&o.dormant, "dormant", 0, "run the dormant section with this many dormant sandboxes per runtime (0: skip)")
	fl.StringVar(&o.dormantRuntimes, "dormant-runtimes", "", "comma-separated runtimes of the dormant section (default: runsc and the default runtime)")
	// The section's former names, from before "park" was retired for "dormant".
	fl.IntVar(&o.dormant, "park", 0, "")
	fl.StringVar(&o.dormantRuntimes, "park-runtimes", "", "")
	_ = fl.MarkDeprecated("park", "use --dormant")
	_ = fl.MarkDeprecated("park-runtimes", "use --dormant-runtimes")
	fl.IntVar(&o.fork, "fork", 0, "run the fork section with this many rounds of each fork per runtime (0: skip)")
	fl.StringVar(&o.forkRuntimes, "fork-runtimes", "", "comma-separated runtimes of the fork section (default: runsc and the default runtime)")
	fl.IntVar(&o.concurrent, "concurrent", 0, "in the API section, also this many creates sent at once to the server without a pool (0: skip)")
	fl.StringVar(&o.storesFlag, "stores", "", "run the stores section on these comma-separated stores: sqlite, postgres (default: skip)")
	fl.StringVar(&o.postgres, "postgres", "", "the stores section's PostgreSQL cluster: a superuser's URL, on which it creates a database for the run and drops it after (default: a private cluster started with scripts/postgres.sh)")
	fl.DurationVar(&o.settle, "settle", settle, "untimed pause after each operation when several are timed in turn (0: none); see docs/performance.md")
	return cmd
}

type benchOptions struct {
	tupper          string
	n, execN, idle  int
	provider        string
	runtime         string
	docker          bool
	cli, api        bool
	metrics         bool
	pool            int
	e2bDir          string
	densityMax      int
	densityRuntimes string
	dormant         int
	dormantRuntimes string
	fork            int
	forkRuntimes    string
	settle          time.Duration
	concurrent      int
	storesFlag      string
	stores          []string // parsed --stores
	postgres        string
}

func (o benchOptions) validate() error {
	if o.n < 1 || o.execN < 1 || o.idle < 0 || o.pool < 1 || o.densityMax < 0 || o.dormant < 0 || o.fork < 0 || o.settle < 0 || o.concurrent < 0 {
		return fmt.Errorf("--n, --exec-n and --pool must be at least 1, --idle, --density-max, --dormant, --fork, --settle and --concurrent not negative")
	}
	if o.provider != "local" && o.provider != "docker" {
		return fmt.Errorf("--provider %s: bench measures local or docker", o.provider)
	}
	return nil
}

type bencher struct {
	cmd    *cobra.Command
	o      benchOptions
	tupper string // the tupper binary measured
	e2bKey string // the API section's key for E2B's SDK
	rows   []*benchRow
}

// benchRow is one line of a section's table: a measured operation (s), or a figure (value).
type benchRow struct {
	op, what string
	s        stats
	value    string
	vs       []string // comparisons
}

// stats summarizes timed repetitions.
type stats struct {
	n        int
	p50, p99 time.Duration
}

// samples are the durations of timed repetitions.
type samples []time.Duration

// percentile is the nearest-rank p-th percentile (0 < p <= 100) of s: the smallest sample
// that at least p% of the samples do not exceed. s need not be sorted; 0 when empty.
func (s samples) percentile(p float64) time.Duration {
	if len(s) == 0 {
		return 0
	}
	sorted := slices.Clone(s)
	slices.Sort(sorted)
	rank := int(math.Ceil(float64(len(sorted)) * p / 100))
	return sorted[min(max(rank, 1), len(sorted))-1]
}

func (s samples) stats() stats { return stats{n: len(s), p50: s.percentile(50), p99: s.percentile(99)} }

// repeat calls f once as a warm-up (timed false), then n times timed, stopping at the first
// error.
func repeat(n int, f func(timed bool) error) error {
	if err := f(false); err != nil {
		return err
	}
	for range n {
		if err := f(true); err != nil {
			return err
		}
	}
	return nil
}

// measure times n calls of f after one warm-up.
func measure(n int, f func() error) (stats, error) {
	s, err := measureEach(n, f)
	return s[0], err
}

// settle is the untimed pause after each call when measureEach alternates several
// operations (--settle): what one leaves running when it returns (Docker's shim and runc
// exiting after an exec, a destroy's teardown) would otherwise be timed as part of the next
// one, on a 2-core machine most of it. It also means that every operation starts from an
// idle machine, as an agent's command a few seconds after the last one does, which costs
// more than a tight loop: caches and CPUs have gone cold (docs/performance.md measures both).
var settle = 50 * time.Millisecond

// measureEach times n rounds of fs after one warm-up round, each round calling every f in
// turn, so that a shared host's drift from minute to minute weighs on all of them alike.
func measureEach(n int, fs ...func() error) ([]stats, error) {
	ds := make([]samples, len(fs))
	err := repeat(n, func(timed bool) error {
		for i, f := range fs {
			start := time.Now()
			if err := f(); err != nil {
				return err
			}
			if timed {
				ds[i] = append(ds[i], time.Since(start))
			}
			if len(fs) > 1 && settle > 0 {
				time.Sleep(settle)
			}
		}
		return nil
	})
	out := make([]stats, len(fs))
	for i, d := range ds {
		out[i] = d.stats()
	}
	return out, err
}

// add appends a row of measured stats and returns it, for comparisons.
func (b *bencher) add(op, what string, s stats) *benchRow {
	r := &benchRow{op: op, what: what, s: s}
	b.rows = append(b.rows, r)
	return r
}

// figure appends a row of one figure.
func (b *bencher) figure(op, what, value string, notes ...string) {
	b.rows = append(b.rows, &benchRow{op: op, what: what, value: value, vs: notes})
}

// versus notes on r how it compares with other (named name): how many times faster at p50
// and p99.
func (r *benchRow) versus(other stats, name string) {
	if r == nil || r.s.p50 <= 0 || r.s.p99 <= 0 || other.p50 <= 0 {
		return
	}
	r.vs = append(r.vs, versus(r.s, other, name))
}

func versus(this, other stats, name string) string {
	r50 := float64(other.p50) / float64(this.p50)
	r99 := float64(other.p99) / float64(this.p99)
	if r50 >= 1 {
		return fmt.Sprintf("%.1fx faster than %s (p99 %.1fx)", r50, name, r99)
	}
	return fmt.Sprintf("%.1fx slower than %s (p99 %.1fx)", 1/r50, name, 1/r99)
}

// flush prints the rows gathered since the last flush under title: the timings, then the
// figures.
func (b *bencher) flush(title string) error {
	w := b.cmd.OutOrStdout()
	fmt.Fprintf(w, "\n%s\n", title)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	timings, figures := 0, 0
	for _, r := range b.rows {
		if r.value != "" {
			continue
		}
		if timings++; timings == 1 {
			fmt.Fprintln(tw, "OPERATION\tWHAT\tN\tP50\tP99\tCOMPARED")
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", r.op, r.what, r.s.n, fmtDur(r.s.p50), fmtDur(r.s.p99), strings.Join(r.vs, "; "))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, r := range b.rows {
		if r.value == "" {
			continue
		}
		if figures++; figures == 1 {
			if timings > 0 {
				fmt.Fprintln(tw)
			}
			fmt.Fprintln(tw, "MEASURE\tWHAT\tVALUE\tNOTES")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.op, r.what, r.value, strings.Join(r.vs, "; "))
	}
	b.rows = nil
	return tw.Flush()
}

// note prints a line on stderr: what was skipped and why, or progress.
func (b *bencher) note(format string, args ...any) {
	fmt.Fprintf(b.cmd.ErrOrStderr(), "bench: "+format+"\n", args...)
}

// agentEnv names the agent of the local provider's sandboxes (providers/local).
const agentEnv = "TUPPER_AGENT"

func fmtDur(d time.Duration) string {
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.2f s", d.Seconds())
	case d >= time.Millisecond:
		return fmt.Sprintf("%.1f ms", float64(d)/1e6)
	}
	return fmt.Sprintf("%.0f µs", float64(d)/1e3)
}

// doubledAt reports whether the median of the last w latencies is at least twice that of the
// first w (the windows apart), and if so how many sandboxes were live before the last window
// began.
func doubledAt(lat samples, w int) (int, bool) {
	n := len(lat)
	if n < 2*w {
		return 0, false
	}
	if lat[n-w:].percentile(50) >= 2*lat[:w].percentile(50) {
		return n - w, true
	}
	return 0, false
}

// runTrue runs true in box: the round trip every section times.
func runTrue(ctx context.Context, box *sandbox.Sandbox) error {
	res, err := box.Run(ctx, "true", sandbox.RunOptions{})
	if err == nil && !res.OK {
		err = fmt.Errorf("true failed: %+v", res)
	}
	return err
}

// createRunTrue creates a sandbox with opts, runs true in it and destroys it: a create's
// whole cost as a user feels it.
func createRunTrue(ctx context.Context, prov provider.Provider, opts sandbox.CreateOptions) error {
	box, err := sandbox.Create(ctx, prov, opts)
	if err != nil {
		return err
	}
	defer box.Destroy(context.WithoutCancel(ctx))
	return runTrue(ctx, box)
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

// benchLabels mark every sandbox the bench makes; whatever an interrupted run leaves is
// reaped by the next.
var benchLabels = map[string]string{"tupper-bench": "1"}

func (b *bencher) run(ctx context.Context) error {
	if b.o.provider == "docker" {
		image := ""
		if b.o.docker {
			var err error
			if image, err = dockerImage(ctx); err != nil {
				b.note("docker's CLI not found, reporting tupper alone: %v", err)
			}
		}
		return b.dockerSection(ctx, image)
	}
	return b.localSections(ctx)
}

func fmtMiB(bytes float64) string { return fmt.Sprintf("%.1f MiB", bytes/(1<<20)) }

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

// hostProc is a process on the host, as /proc shows it.
type hostProc struct {
	pid     int
	comm    string
	cmdline string // arguments joined by spaces
	memcg   string // its memory cgroup: the v1 memory hierarchy's path, else the v2 path
}

// hostProcs lists the host's processes; those that end while it reads are left out.
func hostProcs() []hostProc {
	entries, _ := os.ReadDir("/proc")
	var out []hostProc
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		dir := "/proc/" + e.Name() + "/"
		comm, err1 := os.ReadFile(dir + "comm")
		cmdline, err2 := os.ReadFile(dir + "cmdline")
		cg, err3 := os.ReadFile(dir + "cgroup")
		if err1 != nil || err2 != nil || err3 != nil {
			continue
		}
		out = append(out, hostProc{
			pid: pid, comm: strings.TrimSpace(string(comm)),
			cmdline: strings.TrimSpace(strings.ReplaceAll(string(cmdline), "\x00", " ")),
			memcg:   memoryCgroup(string(cg)),
		})
	}
	return out
}

// memoryCgroup is the memory cgroup in a /proc/PID/cgroup file: the path of the v1 memory
// hierarchy when there is one, else the v2 path.
func memoryCgroup(file string) string {
	v2 := ""
	for _, line := range strings.Split(file, "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if slices.Contains(strings.Split(parts[1], ","), "memory") {
			return parts[2]
		}
		if parts[0] == "0" && parts[1] == "" {
			v2 = parts[2]
		}
	}
	return v2
}

// procPSS is the proportional set size of pid in bytes (shared pages split among the
// processes that map them), or 0 when it cannot be read.
func procPSS(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/smaps_rollup")
	if err != nil {
		return 0
	}
	return kbField(string(b), "Pss")
}

// kbField is the value of a "Name:   123 kB" line of a /proc file, in bytes, or 0.
func kbField(file, name string) int64 {
	sc := bufio.NewScanner(strings.NewReader(file))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), name+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				return 0
			}
			return kb << 10
		}
	}
	return 0
}

// meminfo is a field of /proc/meminfo, in bytes.
func meminfo(name string) int64 {
	b, _ := os.ReadFile("/proc/meminfo")
	return kbField(string(b), name)
}

// shimPSS is the proportional set size of every containerd shim process, in bytes.
func shimPSS() int64 {
	var total int64
	for _, p := range hostProcs() {
		if strings.HasPrefix(p.comm, "containerd-shim") {
			total += procPSS(p.pid)
		}
	}
	return total
}

// hostMemory is what a set of sandboxes costs the host.
type hostMemory struct {
	cgroup int64 // charged to the sandboxes' cgroups
	procs  int64 // proportional set size of host processes outside them that serve them
	nprocs int
}

func (m hostMemory) total() int64 { return m.cgroup + m.procs }

func (m hostMemory) String() string {
	return fmt.Sprintf("cgroups %s, %d host processes outside them %s", fmtMiB(float64(m.cgroup)), m.nprocs, fmtMiB(float64(m.procs)))
}

// sandboxMemory measures the host memory of the local provider's sandboxes ids: the charge
// of each one's cgroup (tupper/ID), which covers the processes inside it (the agent; under
// runsc the sentry and the gofer too), plus the proportional set size of any host process
// outside those cgroups whose arguments name one of the sandboxes.
func sandboxMemory(ids []string) hostMemory {
	var m hostMemory
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
		m.cgroup += cgroupMemory("tupper/" + id)
	}
	for _, p := range hostProcs() {
		if inSandboxCgroup(p.memcg, want) || !namesOne(p.cmdline, want) {
			continue
		}
		m.procs += procPSS(p.pid)
		m.nprocs++
	}
	return m
}

// inSandboxCgroup reports whether memory cgroup path cg is one of ids' (…/tupper/ID…).
func inSandboxCgroup(cg string, ids map[string]bool) bool {
	parts := strings.Split(cg, "/")
	for i := 0; i+1 < len(parts); i++ {
		if parts[i] == "tupper" && ids[parts[i+1]] {
			return true
		}
	}
	return false
}

// namesOne reports whether a command line contains one of ids as a word (ids are lower-case
// letters and digits, so anything else separates words).
func namesOne(cmdline string, ids map[string]bool) bool {
	for _, w := range strings.FieldsFunc(cmdline, func(r rune) bool {
		return (r < 'a' || r > 'z') && (r < '0' || r > '9')
	}) {
		if ids[w] {
			return true
		}
	}
	return false
}

// dockerImage checks that docker's CLI and daemon answer and imports a minimal image made of
// this host's /bin/sh, /bin/true, /bin/sleep and /bin/cat with their shared libraries, so
// the comparison needs no registry.
func dockerImage(ctx context.Context) (string, error) {
	if _, err := exec.LookPath("docker"); err != nil {
		return "", err
	}
	if err := runQuiet(ctx, "docker", "info"); err != nil {
		return "", err
	}
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
