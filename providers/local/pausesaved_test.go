//go:build linux

package local

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tupper-dev/tupper/provider"
)

// sandboxMemory returns what the memory cgroup of sandbox id charges (bytes; 0 when it has
// none) and how many processes of its runtime run: those in its cgroups besides the holder,
// and any whose command line names runsc and id.
func sandboxMemory(t testing.TB, rec *record) (bytes int64, procs int) {
	t.Helper()
	pids := map[int]bool{}
	for _, d := range cgroupDirs(rec.ID) {
		for _, f := range []string{"memory.usage_in_bytes", "memory.current"} {
			if b, err := os.ReadFile(filepath.Join(d, f)); err == nil {
				v, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
				bytes = max(bytes, v)
			}
		}
		b, _ := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		for _, f := range strings.Fields(string(b)) {
			if pid, _ := strconv.Atoi(f); pid > 0 && pid != rec.HolderPID {
				pids[pid] = true
			}
		}
	}
	all, _ := filepath.Glob("/proc/[0-9]*")
	for _, pr := range all {
		b, err := os.ReadFile(filepath.Join(pr, "cmdline"))
		if err != nil || !strings.Contains(string(b), "runsc") {
			continue
		}
		for _, a := range strings.Split(string(b), "\x00") {
			if a == rec.ID {
				pid, _ := strconv.Atoi(filepath.Base(pr))
				pids[pid] = true
			}
		}
	}
	return bytes, len(pids)
}

// Under runsc, pause saves the sandbox to disk and releases its memory; resume restores it
// in place. A process that counts in memory counts on, a value held only in a process's
// memory is still there, files are kept, the sandbox's runtime processes are gone while it
// is paused (and their memory with them), a new provider object (a restarted server)
// lists it paused and resumes it, and destroying a paused sandbox removes everything.
func TestPauseFreesMemory(t *testing.T) {
	p := newTestProvider(t, RuntimeRunsc)
	ctx := context.Background()
	a := create(t, p, provider.CreateSpec{Network: provider.Network{Mode: provider.NetworkNone}, Timeout: 10 * time.Minute})
	if !a.Capabilities().Has(provider.CapPauseFreesMemory) {
		t.Fatalf("a runsc sandbox lacks %s: %v", provider.CapPauseFreesMemory, a.Capabilities())
	}
	// 96 MiB held by a process, a secret that exists only in a shell's memory once its file
	// is gone, and a counter that shell writes every 50 ms.
	run(t, a, `set -e; echo kept > /workspace/file; echo s3cr3t-in-memory > /workspace/secret
perl -e '$x = "m" x (96 << 20); open(F, ">/workspace/held"); close F; sleep 1 while 1' >/dev/null 2>&1 &
`+counterLoop+`
sleep 0.5; rm /workspace/secret
i=0; until [ -e /workspace/held ]; do i=$((i+1)); [ $i -lt 300 ] || exit 1; sleep 0.1; done`)
	count := func(inst provider.Instance) (string, int) { return readCounter(t, inst) }
	_, before := count(a)
	rec, err := p.lay.readRecord(a.id)
	if err != nil {
		t.Fatal(err)
	}
	mem, procs := sandboxMemory(t, rec)
	t.Logf("running: %d processes, its cgroup charged %d MiB", procs, mem>>20)
	if procs == 0 || mem < 96<<20 {
		t.Fatalf("a running sandbox holding 96 MiB: %d processes, its cgroup charged %d bytes", procs, mem)
	}

	start := time.Now()
	if err := a.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("paused in %v", time.Since(start))
	mem, procs = sandboxMemory(t, rec)
	t.Logf("paused: %d processes, its cgroup charged %d bytes", procs, mem)
	if procs != 0 || mem != 0 {
		t.Errorf("paused: %d processes of its runtime, %d bytes charged, want none", procs, mem)
	}
	rec, err = p.lay.readRecord(a.id)
	if err != nil {
		t.Fatal(err)
	}
	if alive(rec) || !rec.Saved || !holderAlive(rec) {
		t.Errorf("paused record: init alive %v, saved %v, holder alive %v", alive(rec), rec.Saved, holderAlive(rec))
	}
	img := p.lay.saved(a.id)
	if fi, err := os.Stat(img); err != nil || fi.Mode().Perm()&0o077 != 0 {
		t.Errorf("the image %s: %v, %v: want a directory only host root reaches", img, fi, err)
	}
	for _, d := range cgroupDirs(a.id) {
		if _, err := os.Stat(d); err == nil {
			t.Errorf("the sandbox's cgroup %s outlived its runtime", d)
		}
	}
	in, err := a.Info(ctx)
	if err != nil || in.State != provider.StatePaused {
		t.Errorf("info while paused: %+v, %v", in, err)
	}
	if _, err := a.Exec(ctx, provider.ExecRequest{Command: "true"}); !errors.Is(err, provider.CodeConflict) {
		t.Errorf("exec in a paused sandbox: %v, want conflict", err)
	}
	// A reap, a list and a connect see it paused, not dead.
	if _, err := p.Reap(ctx); err != nil {
		t.Fatal(err)
	}
	list, err := p.List(ctx, provider.ListFilter{})
	if err != nil || len(list) != 1 || list[0].State != provider.StatePaused {
		t.Fatalf("list while paused: %+v, %v", list, err)
	}

	start = time.Now()
	if err := a.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("resumed in %v", time.Since(start))
	if got := run(t, a, "cat /workspace/file"); got != "kept" {
		t.Errorf("file after resume: %q", got)
	}
	v, n1 := count(a)
	if v != "s3cr3t-in-memory" || n1 < before {
		t.Errorf("after resume: value %q, count %d (before the pause: %d)", v, n1, before)
	}
	if !advances(func() int { _, n := count(a); return n }, n1, runningWait) {
		t.Errorf("the counter stopped after resume (at %d)", n1)
	}
	if out := run(t, a, "pgrep -c perl || ps ax | grep -c '[p]erl'"); out == "0" {
		t.Errorf("the process holding memory is gone after resume")
	}
	if _, err := os.Stat(img); !os.IsNotExist(err) {
		t.Errorf("the image outlived the resume: %v", err)
	}
	rec, _ = p.lay.readRecord(a.id)
	if mem, procs = sandboxMemory(t, rec); procs == 0 || mem < 96<<20 {
		t.Errorf("resumed: %d processes, %d bytes charged, want the 96 MiB back", procs, mem)
	}

	// Paused again, then a new provider object on the same Home resumes it.
	if err := a.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	p2, err := New(p.cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p2.Close()
	inst, err := p2.Connect(ctx, a.id)
	if err != nil {
		t.Fatalf("connect from a new provider to a paused sandbox: %v", err)
	}
	defer inst.Close()
	if in, err := inst.Info(ctx); err != nil || in.State != provider.StatePaused {
		t.Fatalf("a new provider's info: %+v, %v", in, err)
	}
	if err := inst.(provider.Pauser).Resume(ctx); err != nil {
		t.Fatal(err)
	}
	_, n2 := count(inst)
	if !advances(func() int { _, n := count(inst); return n }, n2, runningWait) {
		t.Errorf("the counter stopped after a resume by a new provider (at %d)", n2)
	}
	// The first handle works on: its record is re-read.
	if got := run(t, a, "cat /workspace/file"); got != "kept" {
		t.Errorf("the old handle after a resume elsewhere: %q", got)
	}

	// Destroying a paused sandbox removes everything: holder, image, directory, cgroups.
	if err := a.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	rec, err = p.lay.readRecord(a.id)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Destroy(ctx, a.id); err != nil {
		t.Fatal(err)
	}
	if holderAlive(rec) {
		t.Errorf("the holder (pid %d) outlived destroy", rec.HolderPID)
	}
	if _, err := os.Stat(p.lay.dir(a.id)); !os.IsNotExist(err) {
		t.Errorf("the sandbox's directory outlived destroy: %v", err)
	}
	if _, n := sandboxMemory(t, rec); n != 0 {
		t.Errorf("%d runsc processes outlived destroy", n)
	}
	if m := mountsUnder(t, p.lay.dir(a.id)); len(m) != 0 {
		t.Errorf("mounts outlived destroy: %v", m)
	}
	if _, err := p.Connect(ctx, a.id); !errors.Is(err, provider.CodeNotFound) {
		t.Errorf("connect after destroy: %v", err)
	}
}

// A server listening in a paused runsc sandbox answers after resume: through the preview
// port opened before the pause (network none), and at the sandbox's unchanged address
// (network all, whose pause is the freezer: gVisor cannot checkpoint the host's network
// stack, and the sandbox does not declare pause-frees-memory).
func TestPauseFreesMemoryNetwork(t *testing.T) {
	p := newTestProvider(t, RuntimeRunsc)
	ctx := context.Background()
	ask := func(addr string) string {
		t.Helper()
		var out string
		deadline := time.Now().Add(20 * time.Second)
		for {
			c, err := net.DialTimeout("tcp", addr, 2*time.Second)
			if err == nil {
				c.SetDeadline(time.Now().Add(5 * time.Second))
				b, _ := io.ReadAll(c)
				c.Close()
				if out = strings.TrimSpace(string(b)); out == "pong" {
					return out
				}
			}
			if time.Now().After(deadline) {
				return out
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	for _, mode := range []provider.NetworkMode{provider.NetworkNone, provider.NetworkAll} {
		t.Run(string(mode), func(t *testing.T) {
			a := create(t, p, provider.CreateSpec{Network: provider.Network{Mode: mode}, Timeout: 10 * time.Minute})
			if got, want := a.Capabilities().Has(provider.CapPauseFreesMemory), mode == provider.NetworkNone; got != want {
				t.Errorf("network %s: pause-frees-memory %v, want %v", mode, got, want)
			}
			run(t, a, `perl -MIO::Socket::INET -e '$s = IO::Socket::INET->new(LocalPort => 8080, Listen => 5, ReuseAddr => 1) or die; open(F, ">/tmp/listening"); close F; while (1) { $c = $s->accept or next; print $c "pong\n"; close $c }' >/dev/null 2>&1 &
i=0; until [ -e /tmp/listening ]; do i=$((i+1)); [ $i -lt 300 ] || exit 1; sleep 0.1; done`)
			rec, err := p.lay.readRecord(a.id)
			if err != nil {
				t.Fatal(err)
			}
			pv, err := a.PreviewURL(ctx, 8080)
			if err != nil {
				t.Fatal(err)
			}
			addrs := []string{strings.TrimSuffix(strings.TrimPrefix(pv, "http://"), "/")}
			if mode == provider.NetworkAll {
				addrs = append(addrs, net.JoinHostPort(rec.IP, "8080"))
			}
			for _, addr := range addrs {
				if got := ask(addr); got != "pong" {
					t.Fatalf("before the pause, %s answered %q", addr, got)
				}
			}
			if err := a.Pause(ctx); err != nil {
				t.Fatal(err)
			}
			paused, _ := p.lay.readRecord(a.id)
			if paused == nil || paused.Saved != (mode == provider.NetworkNone) {
				t.Errorf("network %s: paused record %+v", mode, paused)
			}
			if err := a.Resume(ctx); err != nil {
				t.Fatal(err)
			}
			after, err := p.lay.readRecord(a.id)
			if err != nil {
				t.Fatal(err)
			}
			if after.IP != rec.IP || after.HostVeth != rec.HostVeth {
				t.Errorf("resumed with address %s (veth %s), was %s (%s)", after.IP, after.HostVeth, rec.IP, rec.HostVeth)
			}
			for _, addr := range addrs {
				if got := ask(addr); got != "pong" {
					out, _, _ := runCode(t, a, "ps ax 2>&1 | grep -v ' ps ' | tail -5")
					t.Errorf("after resume, %s answered %q; processes: %s", addr, got, out)
				}
			}
		})
	}
}
