package memory

import (
	"context"
	"errors"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tupper-dev/tupper/provider"
)

var bg = context.Background()

func TestRegistration(t *testing.T) {
	r, ok := provider.Lookup("memory")
	if !ok {
		t.Fatal("memory is not registered")
	}
	p1, err := r.Factory()
	if err != nil {
		t.Fatal(err)
	}
	p2, _ := r.Factory()
	if p1 != p2 {
		t.Error("the factory should return one process-wide provider")
	}
	got, err := provider.Resolve(bg, provider.ResolveOptions{Name: "memory"})
	if err != nil || got.Name() != "memory" {
		t.Errorf("Resolve(memory) = %v, %v", got, err)
	}
	if got, err := provider.Resolve(bg, provider.ResolveOptions{}); err == nil && got.Name() == "memory" {
		t.Error("Resolve picked memory implicitly")
	}
}

func TestCapabilities(t *testing.T) {
	got := provider.CapabilitiesOf(New()).List()
	want := []provider.Capability{provider.CapExactKey, provider.CapIdleTimeout, provider.CapNetworkNone, provider.CapSnapshot, provider.CapTimeout}
	if !slices.Equal(got, want) {
		t.Errorf("capabilities %v, want %v", got, want)
	}
}

func TestLifecycle(t *testing.T) {
	p := New()
	inst, err := p.Create(bg, provider.CreateSpec{Key: "k1", Labels: map[string]string{"team": "a"}})
	if err != nil {
		t.Fatal(err)
	}
	info, err := inst.Info(bg)
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^[a-z0-9]{20}$`).MatchString(info.ID) {
		t.Errorf("id %q is not 20 characters of [a-z0-9]", info.ID)
	}
	if info.Key != "k1" || info.Labels["team"] != "a" || info.State != provider.StateRunning || info.CreatedAt.IsZero() {
		t.Errorf("info %+v", info)
	}
	if found, err := p.FindByKey(bg, "k1"); err != nil || mustInfo(t, found).ID != info.ID {
		t.Errorf("FindByKey: %v", err)
	}
	if c, err := p.Connect(bg, info.ID); err != nil || mustInfo(t, c).ID != info.ID {
		t.Errorf("Connect: %v", err)
	}
	if _, err := p.Create(bg, provider.CreateSpec{Labels: map[string]string{"team": "b"}}); err != nil {
		t.Fatal(err)
	}
	list, _ := p.List(bg, provider.ListFilter{Labels: map[string]string{"team": "a"}})
	if len(list) != 1 || list[0].ID != info.ID {
		t.Errorf("List by label: %+v", list)
	}
	if all, _ := p.List(bg, provider.ListFilter{}); len(all) != 2 {
		t.Errorf("List all: %d", len(all))
	}
	if err := inst.Close(); err != nil || inst.Close() != nil {
		t.Error("Close is not idempotent")
	}
	if err := p.Destroy(bg, info.ID); err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{
		"Destroy again": p.Destroy(bg, info.ID),
		"Connect":       second(p.Connect(bg, info.ID)),
		"FindByKey":     second(p.FindByKey(bg, "k1")),
		"Info":          second(inst.Info(bg)),
		"ReadFile":      second(inst.ReadFile(bg, "/etc/hostname")),
	} {
		if !errors.Is(err, provider.CodeNotFound) {
			t.Errorf("%s after destroy: %v, want not_found", name, err)
		}
	}
}

func mustInfo(t *testing.T, in provider.Instance) provider.Info {
	t.Helper()
	info, err := in.Info(bg)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

func second[T any](_ T, err error) error { return err }

func TestCreateOptions(t *testing.T) {
	p := New()
	for _, mode := range []provider.NetworkMode{"", provider.NetworkAll, provider.NetworkNone} {
		if _, err := p.Create(bg, provider.CreateSpec{Network: provider.Network{Mode: mode}}); err != nil {
			t.Errorf("network %q: %v", mode, err)
		}
	}
	checks := map[string]struct {
		spec provider.CreateSpec
		code provider.Code
	}{
		"allow list":   {provider.CreateSpec{Network: provider.Network{Mode: provider.NetworkAllow, Allow: []string{"x"}}}, provider.CodeUnsupported},
		"template":     {provider.CreateSpec{Template: "python"}, provider.CodeNotFound},
		"runtime":      {provider.CreateSpec{Runtime: "runsc"}, provider.CodeUnsupported},
		"snapshot":     {provider.CreateSpec{From: "nosuchsnapshot"}, provider.CodeNotFound},
		"neg. timeout": {provider.CreateSpec{Timeout: -1}, provider.CodeInvalidArgument},
	}
	for name, c := range checks {
		if _, err := p.Create(bg, c.spec); !errors.Is(err, c.code) {
			t.Errorf("%s: %v, want %s", name, err, c.code)
		}
	}
	ctx, cancel := context.WithCancel(bg)
	cancel()
	if _, err := p.Create(ctx, provider.CreateSpec{}); err == nil {
		t.Error("Create with a cancelled context succeeded")
	}
	inst, _ := p.Create(bg, provider.CreateSpec{})
	if _, err := inst.PreviewURL(bg, 8080); !errors.Is(err, provider.CodeUnsupported) {
		t.Errorf("PreviewURL: %v", err)
	}
}

func TestGetOrCreateIsAtomic(t *testing.T) {
	p := New()
	var wg sync.WaitGroup
	var mu sync.Mutex
	ids := map[string]bool{}
	created := 0
	for range 16 {
		wg.Go(func() {
			inst, c, err := p.GetOrCreate(bg, provider.CreateSpec{Key: "same"})
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			ids[mustInfo(t, inst).ID] = true
			if c {
				created++
			}
		})
	}
	wg.Wait()
	if len(ids) != 1 || created != 1 {
		t.Errorf("%d sandboxes, %d created; want 1 and 1", len(ids), created)
	}
	if _, _, err := p.GetOrCreate(bg, provider.CreateSpec{}); !errors.Is(err, provider.CodeInvalidArgument) {
		t.Errorf("GetOrCreate without a key: %v", err)
	}
}

func gone(p *Provider, id string) bool {
	_, err := p.Connect(bg, id)
	return errors.Is(err, provider.CodeNotFound)
}

// The deadline tests run in a synctest bubble: the sandboxes' timers run on the bubble's
// fake clock, so each sleep is exact and instant, and synctest.Wait lets the timer
// goroutines finish before the test looks.

func TestLifetimeTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := New()
		inst, _ := p.Create(bg, provider.CreateSpec{Timeout: 100 * time.Millisecond})
		id := inst.(*Instance).ID()
		if d := mustInfo(t, inst).Deadline; !d.Equal(time.Now().Add(100 * time.Millisecond)) {
			t.Errorf("Info.Deadline %v; want 100ms from now", d)
		}
		time.Sleep(99 * time.Millisecond)
		synctest.Wait()
		if gone(p, id) {
			t.Fatal("expired before its deadline")
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if !gone(p, id) {
			t.Fatal("still there at its deadline")
		}

		inst, _ = p.Create(bg, provider.CreateSpec{Timeout: 100 * time.Millisecond})
		id = inst.(*Instance).ID()
		if err := inst.(provider.TimeoutSetter).SetTimeout(bg, time.Hour); err != nil {
			t.Fatal(err)
		}
		if d := mustInfo(t, inst).Deadline; !d.Equal(time.Now().Add(time.Hour)) {
			t.Errorf("SetTimeout(1h) moved the deadline to %v; want an hour from now", d)
		}
		time.Sleep(250 * time.Millisecond)
		synctest.Wait()
		if gone(p, id) {
			t.Error("the sandbox expired at its old deadline")
		}
		if err := inst.(provider.TimeoutSetter).SetTimeout(bg, 50*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
		synctest.Wait()
		if !gone(p, id) {
			t.Error("still there at the shortened deadline")
		}
		if err := inst.(provider.TimeoutSetter).SetTimeout(bg, time.Second); !errors.Is(err, provider.CodeNotFound) {
			t.Errorf("SetTimeout after expiry: %v", err)
		}
	})
}

func TestIdleTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := New()
		inst, _ := p.Create(bg, provider.CreateSpec{IdleTimeout: 150 * time.Millisecond})
		in := inst.(*Instance)
		// A running detached job keeps it alive past the idle timeout.
		if _, err := in.Exec(bg, provider.ExecRequest{Command: "sleep 0.4", Detach: true}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(399 * time.Millisecond)
		synctest.Wait()
		if gone(p, in.ID()) {
			t.Fatal("expired while a job ran")
		}
		// The job ends at 400ms; the sandbox is idle from then, and goes at most one idle
		// period after.
		time.Sleep(time.Millisecond + 150*time.Millisecond + 150*time.Millisecond)
		synctest.Wait()
		if !gone(p, in.ID()) {
			t.Fatal("still there two idle periods after its job ended")
		}

		// Calls count as activity.
		inst, _ = p.Create(bg, provider.CreateSpec{IdleTimeout: 150 * time.Millisecond})
		in = inst.(*Instance)
		for range 8 {
			time.Sleep(100 * time.Millisecond)
			synctest.Wait()
			if _, err := in.Info(bg); err != nil {
				t.Fatalf("expired while used: %v", err)
			}
		}
		time.Sleep(149 * time.Millisecond)
		synctest.Wait()
		if gone(p, in.ID()) {
			t.Fatal("expired less than an idle period after its last use")
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if !gone(p, in.ID()) {
			t.Fatal("still there an idle period after its last use")
		}
	})
}

func TestSnapshot(t *testing.T) {
	p := New()
	inst, _ := p.Create(bg, provider.CreateSpec{})
	in := inst.(*Instance)
	if err := in.WriteFile(bg, "/workspace/a.txt", strings.NewReader("v1"), nil); err != nil {
		t.Fatal(err)
	}
	snap, err := in.Snapshot(bg, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := in.WriteFile(bg, "/workspace/a.txt", strings.NewReader("v2"), nil); err != nil {
		t.Fatal(err)
	}
	if err := p.Destroy(bg, in.ID()); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		inst2, err := p.Create(bg, provider.CreateSpec{From: snap})
		if err != nil {
			t.Fatal(err)
		}
		in2 := inst2.(*Instance)
		if s, _ := readFile(t, in2, "/workspace/a.txt"); s != "v1" {
			t.Errorf("from snapshot: %q", s)
		}
		sh(t, in2, "echo changed > /workspace/a.txt")
	}
	if _, err := in.Snapshot(bg, -time.Second); !errors.Is(err, provider.CodeNotFound) && !errors.Is(err, provider.CodeInvalidArgument) {
		t.Errorf("snapshot of a destroyed sandbox: %v", err)
	}
	inst3, _ := p.Create(bg, provider.CreateSpec{})
	if _, err := inst3.(*Instance).Snapshot(bg, -time.Second); !errors.Is(err, provider.CodeInvalidArgument) {
		t.Errorf("negative expiry: %v", err)
	}
}

func TestSnapshotExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := New()
		inst, _ := p.Create(bg, provider.CreateSpec{})
		short, err := inst.(*Instance).Snapshot(bg, 30*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(29 * time.Millisecond)
		if _, err := p.Create(bg, provider.CreateSpec{From: short}); err != nil {
			t.Errorf("snapshot before its expiry: %v", err)
		}
		time.Sleep(time.Millisecond)
		if _, err := p.Create(bg, provider.CreateSpec{From: short}); !errors.Is(err, provider.CodeNotFound) {
			t.Errorf("expired snapshot: %v", err)
		}
	})
}

func TestFileAPI(t *testing.T) {
	in := newInstance(t, provider.CreateSpec{})
	mode := uint32(0o750)
	if err := in.WriteFile(bg, "/workspace/new/dir/f.sh", strings.NewReader("echo hi\n"), &mode); err != nil {
		t.Fatal(err)
	}
	fi, err := in.Stat(bg, "/workspace/new/dir/f.sh")
	if err != nil || fi.Type != provider.TypeFile || fi.Mode != 0o750 || fi.Size != 8 || fi.Path != "/workspace/new/dir/f.sh" {
		t.Errorf("Stat: %+v, %v", fi, err)
	}
	expect(t, in, "/workspace/new/dir/f.sh", "hi\n", 0)
	// Writes keep the mode when none is given.
	_ = in.WriteFile(bg, "/workspace/new/dir/f.sh", strings.NewReader("x"), nil)
	if fi, _ := in.Stat(bg, "/workspace/new/dir/f.sh"); fi.Mode != 0o750 {
		t.Errorf("mode after rewrite %o", fi.Mode)
	}
	bad := uint32(0o10000)
	codes := map[string]struct {
		err  error
		code provider.Code
	}{
		"read missing":      {second(in.ReadFile(bg, "/nope")), provider.CodeNotFound},
		"read a directory":  {second(in.ReadFile(bg, "/workspace")), provider.CodeInvalidArgument},
		"relative read":     {second(in.ReadFile(bg, "workspace/x")), provider.CodeInvalidArgument},
		"mode out of range": {in.WriteFile(bg, "/workspace/m", strings.NewReader(""), &bad), provider.CodeInvalidArgument},
		"write over a dir":  {in.WriteFile(bg, "/workspace", strings.NewReader(""), nil), provider.CodeInvalidArgument},
		"stat missing":      {second(in.Stat(bg, "/nope")), provider.CodeNotFound},
		"list missing":      {second(in.ListDir(bg, "/nope", false)), provider.CodeNotFound},
		"list a file":       {second(in.ListDir(bg, "/etc/hostname", false)), provider.CodeInvalidArgument},
		"remove missing":    {in.Remove(bg, "/nope", false), provider.CodeNotFound},
		"remove non-empty":  {in.Remove(bg, "/workspace/new", false), provider.CodeInvalidArgument},
		"mkdir over a file": {in.MakeDir(bg, "/etc/hostname/x"), provider.CodeInvalidArgument},
		"rename missing":    {in.Rename(bg, "/nope", "/x"), provider.CodeNotFound},
		"rename into self":  {in.Rename(bg, "/workspace/new", "/workspace/new/dir/x"), provider.CodeInvalidArgument},
	}
	for name, c := range codes {
		if !errors.Is(c.err, c.code) {
			t.Errorf("%s: %v, want %s", name, c.err, c.code)
		}
	}
	if err := in.MakeDir(bg, "/workspace/a/b/c"); err != nil || in.MakeDir(bg, "/workspace/a/b/c") != nil {
		t.Errorf("MakeDir: %v", err)
	}
	if err := in.Rename(bg, "/workspace/new/dir/f.sh", "/workspace/a/g.sh"); err != nil {
		t.Fatal(err)
	}
	list, err := in.ListDir(bg, "/workspace", true)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, f := range list {
		paths = append(paths, f.Path+":"+string(f.Type))
	}
	want := []string{"/workspace/a:dir", "/workspace/a/b:dir", "/workspace/a/b/c:dir", "/workspace/a/g.sh:file", "/workspace/new:dir", "/workspace/new/dir:dir"}
	if !slices.Equal(paths, want) {
		t.Errorf("ListDir recursive:\n got %v\nwant %v", paths, want)
	}
	if err := in.Remove(bg, "/workspace/a", true); err != nil {
		t.Fatal(err)
	}
	if _, err := in.Stat(bg, "/workspace/a"); !errors.Is(err, provider.CodeNotFound) {
		t.Errorf("after Remove: %v", err)
	}
	if err := in.Remove(bg, "/workspace/new/dir", false); err != nil {
		t.Errorf("removing an empty directory: %v", err)
	}
}

func TestSymlinksStayInside(t *testing.T) {
	in := newInstance(t, provider.CreateSpec{})
	sh(t, in, "ln -s ../../../../../etc /workspace/up; ln -s /etc/hostname /workspace/abs; ln -s /tmp/made-by-link /workspace/dangling; ln -s loop1 /workspace/loop2; ln -s loop2 /workspace/loop1")
	if s, err := readFile(t, in, "/workspace/up/hostname"); err != nil || s != "sandbox\n" {
		t.Errorf("relative link above the root: %q, %v", s, err)
	}
	if s, _ := readFile(t, in, "/workspace/abs"); s != "sandbox\n" {
		t.Errorf("absolute link: %q", s)
	}
	// Writing through a dangling link creates its target inside the sandbox.
	if err := in.WriteFile(bg, "/workspace/dangling", strings.NewReader("in"), nil); err != nil {
		t.Fatal(err)
	}
	if s, _ := readFile(t, in, "/tmp/made-by-link"); s != "in" {
		t.Errorf("through a dangling link: %q", s)
	}
	fi, err := in.Stat(bg, "/workspace/abs")
	if err != nil || fi.Type != provider.TypeSymlink || fi.Target != "/etc/hostname" {
		t.Errorf("Stat of a link: %+v, %v", fi, err)
	}
	if _, err := readFile(t, in, "/workspace/loop1"); !errors.Is(err, provider.CodeInvalidArgument) {
		t.Errorf("a link loop: %v", err)
	}
	expect(t, in, "cat loop1 2>&1", "cat: loop1: Too many levels of symbolic links\n", 1)
}

func TestSearch(t *testing.T) {
	in := newInstance(t, provider.CreateSpec{})
	sh(t, in, `mkdir -p s/sub; printf 'foo one\nbar\nfoo two\n' > s/a.go; printf 'foo\n' > s/sub/b.txt; printf 'foo\000bin\n' > s/c.go; ln -s a.go s/link.go`)
	m, err := in.Search(bg, "foo", "/workspace/s", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, x := range m {
		got = append(got, x.Path+":"+strings.TrimSpace(x.Text)+":"+strconv.Itoa(x.Line))
	}
	want := []string{"/workspace/s/a.go:foo one:1", "/workspace/s/a.go:foo two:3", "/workspace/s/sub/b.txt:foo:1"}
	if !slices.Equal(got, want) {
		t.Errorf("Search:\n got %v\nwant %v", got, want)
	}
	if m, _ := in.Search(bg, "foo", "/workspace/s", "*.go", 0); len(m) != 2 {
		t.Errorf("glob *.go: %d matches", len(m))
	}
	if m, _ := in.Search(bg, "foo", "/workspace/s", "", 1); len(m) != 1 {
		t.Errorf("max 1: %d matches", len(m))
	}
	if _, err := in.Search(bg, "foo", "/nope", "", 0); !errors.Is(err, provider.CodeNotFound) {
		t.Errorf("missing dir: %v", err)
	}
	if _, err := in.Search(bg, "foo", "/workspace", "[", 0); !errors.Is(err, provider.CodeInvalidArgument) {
		t.Errorf("bad glob: %v", err)
	}
}

func TestSandboxesAreSeparate(t *testing.T) {
	p := New()
	a, _ := p.Create(bg, provider.CreateSpec{})
	b, _ := p.Create(bg, provider.CreateSpec{})
	sh(t, a.(*Instance), "echo a > /workspace/f")
	if _, err := readFile(t, b.(*Instance), "/workspace/f"); !errors.Is(err, provider.CodeNotFound) {
		t.Errorf("a file of one sandbox is visible in another: %v", err)
	}
	// A pid of one sandbox is unknown to the other.
	res, _ := a.Exec(bg, provider.ExecRequest{Command: "sleep 5", Detach: true})
	r := sh(t, b.(*Instance), "kill -0 "+itoa(res.PID))
	if r.code != 1 {
		t.Errorf("kill -0 of another sandbox's pid: exit %d", r.code)
	}
	_ = p.Destroy(bg, mustInfo(t, a).ID)
}

func itoa(n int) string { return strconv.Itoa(n) }
