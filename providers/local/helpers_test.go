//go:build linux

package local

import (
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tupper-dev/tupper/internal/testenv"
	"github.com/tupper-dev/tupper/provider"
)

func TestMain(m *testing.M) {
	if home := os.Getenv(stressEnv); home != "" {
		os.Exit(stressChild(home))
	}
	if home := os.Getenv(crashEnv); home != "" {
		os.Exit(crashChild(home))
	}
	if home := os.Getenv(coldCrashEnv); home != "" {
		os.Exit(coldCrashChild(home))
	}
	if home := os.Getenv(blocksCrashEnv); home != "" {
		os.Exit(blocksCrashChild(home))
	}
	os.Exit(testenv.Main(m))
}

// startChild starts this test binary again as a child that TestMain sends to one of the
// crash and stress children above (env names which, and with what), and returns it with its
// standard output; its standard error is the test's.
func startChild(t testing.TB, env ...string) (*exec.Cmd, io.Reader) {
	t.Helper()
	child := exec.Command(os.Args[0], "-test.run", "^$")
	child.Env = append(os.Environ(), env...)
	child.Stderr = os.Stderr
	stdout, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	return child, stdout
}

// counterLoop starts a shell in the background that reads /workspace/secret once, holds it
// in memory only, and writes it with a count to /workspace/count every 50 ms: a process
// whose memory and progress a pause, a snapshot or a restore must keep (readCounter reads it).
const counterLoop = `(v=$(cat /workspace/secret); i=0; while :; do i=$((i+1)); echo "$v $i" > /workspace/count.tmp; mv /workspace/count.tmp /workspace/count; sleep 0.05; done) >/dev/null 2>&1 &`

// readCounter reads what counterLoop last wrote in inst: the value and the count.
func readCounter(t testing.TB, inst provider.Instance) (string, int) {
	t.Helper()
	f := strings.Fields(run(t, inst, "cat /workspace/count"))
	if len(f) != 2 {
		t.Fatalf("count file: %q", f)
	}
	n, _ := strconv.Atoi(f[1])
	return f[0], n
}

// buildAgent is the agent: the tupper binary itself, built from this checkout (or
// $TUPPER_AGENT), since a test binary is not tupper.
func buildAgent(t testing.TB) string { return testenv.TupperBinary(t) }

// The subnet and bridge of test providers, so tests never touch a real installation's. (The
// bridge's rules changed with the egress firewall; a new name keeps test runs of older
// code, which share a host, from meeting them.)
const (
	testSubnet = "10.215.1.0/24"
	testBridge = "tupperlt1"
)

// newTestProvider returns a provider with its own Home, subnet and bridge, for rt ("": the
// default runtime), after checking the host can run it.
func newTestProvider(t testing.TB, rt string) *Provider {
	t.Helper()
	return newTestProviderConfig(t, Config{Runtime: rt})
}

// newTestProviderConfig is newTestProvider with cfg's settings; its Home and AgentPath are
// the test's, and an empty Subnet and Bridge mean the test ones.
func newTestProviderConfig(t testing.TB, cfg Config) *Provider {
	t.Helper()
	testenv.RequireRoot(t)
	if cfg.Runtime != "" {
		testenv.RequireBinary(t, cfg.Runtime)
	}
	home := t.TempDir()
	// t.TempDir's parent is private; a user namespace's root must traverse it.
	if err := os.Chmod(filepath.Dir(home), 0o711); err != nil {
		t.Fatal(err)
	}
	cfg.Home, cfg.AgentPath = home, buildAgent(t)
	if cfg.Subnet == "" && cfg.Bridge == "" {
		cfg.Subnet, cfg.Bridge = testSubnet, testBridge
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Available(context.Background()); err != nil {
		testenv.Skip(t, err.Error())
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		ids, _ := p.lay.ids()
		for _, id := range ids {
			if err := p.Destroy(ctx, id); err != nil {
				t.Errorf("cleanup: destroy %s: %v", id, err)
			}
		}
		p.Close()
	})
	return p
}

func create(t testing.TB, p *Provider, spec provider.CreateSpec) *Instance {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	inst, err := p.Create(ctx, spec)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	t.Cleanup(func() { inst.Close() })
	return inst.(*Instance)
}

// run runs a command and returns its stdout, failing t on an error or a non-zero exit.
func run(t testing.TB, inst provider.Instance, cmd string) string {
	t.Helper()
	out, errOut, code := runCode(t, inst, cmd)
	if code != 0 {
		t.Fatalf("%q: exit %d\nstdout: %s\nstderr: %s", cmd, code, out, errOut)
	}
	return out
}

func runCode(t testing.TB, inst provider.Instance, cmd string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var o, e bytes.Buffer
	res, err := inst.Exec(ctx, provider.ExecRequest{Command: cmd, Stdout: &o, Stderr: &e})
	if err != nil {
		t.Fatalf("exec %q: %v", cmd, err)
	}
	return strings.TrimSpace(o.String()), strings.TrimSpace(e.String()), res.ExitCode
}

// countingListener listens on address and counts the connections it accepts, closing each
// at once; the listener is closed when the test ends.
func countingListener(t testing.TB, network, address string) (net.Listener, *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen(network, address)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var accepted atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	return ln, &accepted
}

// runtimes are the runtimes a test runs under.
var runtimes = []string{RuntimeRunc, RuntimeRunsc, RuntimeCrun}

// forRuntimes runs f as a subtest per runtime.
func forRuntimes(t *testing.T, f func(t *testing.T, rt string)) {
	for _, rt := range runtimes {
		t.Run(rt, func(t *testing.T) { f(t, rt) })
	}
}

// forRuntimesAsRoot runs f as a parallel subtest per runtime, each skipped without root.
func forRuntimesAsRoot(t *testing.T, f func(t *testing.T, rt string)) {
	forRuntimes(t, func(t *testing.T, rt string) {
		t.Parallel()
		testenv.RequireRoot(t)
		f(t, rt)
	})
}

// forRuntimesInNetns runs f as a subtest per runtime in a network namespace of the test's
// own (inPrivateNetns), where it plays the host's network; each is skipped without root or
// the runtime's binary. With parallel the runtimes' subtests run at once.
func forRuntimesInNetns(t *testing.T, parallel bool, f func(t *testing.T, rt string)) {
	forRuntimes(t, func(t *testing.T, rt string) {
		if parallel {
			t.Parallel()
		}
		testenv.RequireRoot(t)
		testenv.RequireBinary(t, rt)
		if inPrivateNetns(t) {
			f(t, rt)
		}
	})
}

// mountsUnder returns the mount points under dir in every mount namespace on the host that
// a process is in (each read once), keyed by namespace, and in this process's threads' too:
// a sandbox's mounts live in a namespace of their own, and nothing of them may outlive it.
func mountsUnder(t testing.TB, dir string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	seen := map[string]bool{}
	var tasks []string
	procs, _ := filepath.Glob("/proc/[0-9]*")
	tasks = append(tasks, procs...)
	threads, _ := filepath.Glob("/proc/self/task/[0-9]*")
	tasks = append(tasks, threads...)
	for _, task := range tasks {
		ns, err := os.Readlink(filepath.Join(task, "ns", "mnt"))
		if err != nil || seen[ns] {
			continue // gone meanwhile, or read already
		}
		b, err := os.ReadFile(filepath.Join(task, "mountinfo"))
		if err != nil {
			continue
		}
		seen[ns] = true
		for _, m := range mountPointsUnder(string(b), dir) {
			out[ns+" ("+task+")"] = append(out[ns+" ("+task+")"], m)
		}
	}
	return out
}

// mountPointsUnder returns the mount points of a mountinfo text that are under dir.
func mountPointsUnder(mountinfo, dir string) []string {
	var out []string
	for _, line := range strings.Split(mountinfo, "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		// Field 5 is the mount point, with spaces and the like octal-escaped.
		if mp := f[4]; strings.HasPrefix(mp, dir+"/") || mp == dir {
			out = append(out, mp)
		}
	}
	return out
}

// advances reports whether read returns more than from within d, polling. A process in a
// restored (or just snapshotted) runsc sandbox on a loaded machine may take far longer than
// its own period to run again, so a check that it runs waits for it, up to d.
func advances(read func() int, from int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		if read() > from {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// runningWait is how long a check that a process still runs waits for it to advance.
const runningWait = 30 * time.Second
