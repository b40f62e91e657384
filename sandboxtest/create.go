package sandboxtest

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/sandbox"
)

func createCases() []testCase {
	return []testCase{
		{"Defaults", createDefaults},
		{"KeyGetOrCreate", createKeyGetOrCreate},
		{"KeysAreDistinct", createKeysDistinct},
		{"KeyBestEffort", createKeyBestEffort},
		{"KeyExactConcurrent", createKeyExactConcurrent},
		{"KeyExactUnsupported", createKeyExactUnsupported},
		{"LocatorWithLock", createLocatorWithLock},
		{"LocatorWithoutLock", createLocatorWithoutLock},
		{"LocatorStaleID", createLocatorStale},
		{"KeyExactLocatorWithoutLock", createKeyExactLocatorNoLock},
		{"Labels", createLabels},
		{"Env", createEnv},
		{"InvalidOptions", createInvalid},
		{"NetworkNone", createNetworkNone},
		{"NetworkAllow", createNetworkAllow},
		{"BoundSecrets", createBoundSecrets},
		{"EgressProxy", createEgressProxy},
		{"Size", createSize},
		{"Timeout", createTimeout},
		{"IdleTimeout", createIdleTimeout},
		{"From", createFrom},
		{"CancelledContext", createCancelled},
		{"TrackChanges", createTrackChanges},
	}
}

func createDefaults(c *C) {
	before := time.Now()
	b := c.Box()
	if b.ID == "" {
		c.Errorf("ID is empty")
	}
	Eq(c, "Provider", b.Provider, c.P().Name())
	Eq(c, "Created", b.Created, true)
	Eq(c, "Key", b.Key, "")
	Eq(c, "Labels[sandbox.SDKLabel]", b.Labels[sandbox.SDKLabel], "true")
	Eq(c, "Labels[run]", b.Labels[RunLabel], c.s.runID)
	if b.Files == nil || b.Git == nil || b.Native == nil {
		c.Errorf("Files, Git or Native is nil")
	}
	in, err := b.Info(c.Ctx)
	c.NoErr("Info", err)
	Eq(c, "Info.ID", in.ID, b.ID)
	Eq(c, "Info.State", in.State, provider.StateRunning)
	if in.CreatedAt.Before(before.Add(-2*time.Second)) || in.CreatedAt.After(time.Now().Add(2*time.Second)) {
		c.Errorf("Info.CreatedAt = %v, want between %v and now", in.CreatedAt, before)
	}
	res := c.MustRun(b, "echo hello")
	Eq(c, "stdout", res.Stdout, "hello\n")
}

func createKeyGetOrCreate(c *C) {
	key := "sbt-key-" + c.caseID
	a := c.Create(sandbox.CreateOptions{Key: key})
	Eq(c, "first Created", a.Created, true)
	Eq(c, "first Key", a.Key, key)
	c.Write(a, "marker", "from-a")
	b := c.Create(sandbox.CreateOptions{Key: key})
	Eq(c, "second Created", b.Created, false)
	Eq(c, "second ID", b.ID, a.ID)
	Eq(c, "second Key", b.Key, key)
	Eq(c, "file seen through the second handle", c.Read(b, "marker"), "from-a")
	Eq(c, "sandboxes with this case's label", len(c.listCase()), 1)
}

func createKeysDistinct(c *C) {
	a := c.Create(sandbox.CreateOptions{Key: "sbt-a-" + c.caseID})
	b := c.Create(sandbox.CreateOptions{Key: "sbt-b-" + c.caseID})
	if a.ID == b.ID {
		c.Errorf("two keys gave the same sandbox %s", a.ID)
	}
	if !a.Created || !b.Created {
		c.Errorf("Created = %v, %v; want true, true", a.Created, b.Created)
	}
}

func createKeyBestEffort(c *C) {
	key := "sbt-be-" + c.caseID
	a := c.Create(sandbox.CreateOptions{Key: key, KeyMode: sandbox.KeyBestEffort})
	b := c.Create(sandbox.CreateOptions{Key: key, KeyMode: sandbox.KeyBestEffort})
	Eq(c, "Created", [2]bool{a.Created, b.Created}, [2]bool{true, false})
	Eq(c, "same sandbox", b.ID, a.ID)
}

// concurrentCreate creates with opts from n goroutines at once and returns the handles.
func concurrentCreate(c *C, n int, opts sandbox.CreateOptions) ([]*sandbox.Sandbox, []error) {
	boxes := make([]*sandbox.Sandbox, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			o := opts
			o.Labels = c.labels(nil)
			boxes[i], errs[i] = sandbox.Create(c.Ctx, c.P(), o)
		}()
	}
	close(start)
	wg.Wait()
	for i, b := range boxes {
		if b != nil {
			c.destroyLater(b)
		}
		c.CheckErr("concurrent Create", errs[i])
	}
	return boxes, errs
}

// oneSandbox checks that the handles all name one sandbox, exactly one of them created it,
// and the provider lists exactly one sandbox for the case.
func oneSandbox(c *C, boxes []*sandbox.Sandbox, errs []error) {
	c.Helper()
	created := 0
	ids := map[string]bool{}
	for i, b := range boxes {
		if errs[i] != nil {
			c.Errorf("Create %d: %v", i, errs[i])
			continue
		}
		ids[b.ID] = true
		if b.Created {
			created++
		}
	}
	if len(ids) != 1 {
		c.Errorf("%d concurrent exact creates gave %d sandboxes %v; want 1", len(boxes), len(ids), ids)
	}
	Eq(c, "handles with Created true", created, 1)
	Eq(c, "sandboxes listed for the key", len(c.listCase()), 1)
}

func createKeyExactConcurrent(c *C) {
	c.Need(provider.CapExactKey)
	boxes, errs := concurrentCreate(c, 8, sandbox.CreateOptions{Key: "sbt-exact-" + c.caseID, KeyMode: sandbox.KeyExact})
	oneSandbox(c, boxes, errs)
}

func createKeyExactUnsupported(c *C) {
	c.NeedNot(provider.CapExactKey, "Create/KeyExactConcurrent")
	_, err := c.TryCreate(sandbox.CreateOptions{Key: "sbt-x-" + c.caseID, KeyMode: sandbox.KeyExact})
	c.WantCode("Create with KeyExact and no locator", err, sandbox.CodeUnsupported)
	c.nothingCreated("KeyExact unsupported")
}

// memLocator is a Locator kept in memory; slow widens any race between Get and Set.
type memLocator struct {
	mu      sync.Mutex
	ids     map[string]string
	gets    atomic.Int32
	sets    atomic.Int32
	deletes atomic.Int32
	slow    time.Duration
}

func newLocator() *memLocator { return &memLocator{ids: map[string]string{}} }

func (l *memLocator) Get(ctx context.Context, key string) (string, error) {
	l.gets.Add(1)
	l.mu.Lock()
	id := l.ids[key]
	l.mu.Unlock()
	if l.slow > 0 {
		time.Sleep(l.slow)
	}
	return id, nil
}

func (l *memLocator) Set(ctx context.Context, key, id string) error {
	l.sets.Add(1)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ids[key] = id
	return nil
}

func (l *memLocator) Delete(ctx context.Context, key string) error {
	l.deletes.Add(1)
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.ids, key)
	return nil
}

// lockingLocator adds WithLock: a per-key mutex standing in for a distributed lock.
type lockingLocator struct {
	*memLocator
	lockMu sync.Mutex
	locks  map[string]*sync.Mutex
	held   atomic.Int32
	maxH   atomic.Int32
}

func (l *lockingLocator) WithLock(ctx context.Context, key string, action func(ctx context.Context) error) error {
	l.lockMu.Lock()
	m := l.locks[key]
	if m == nil {
		m = &sync.Mutex{}
		l.locks[key] = m
	}
	l.lockMu.Unlock()
	m.Lock()
	defer m.Unlock()
	h := l.held.Add(1)
	defer l.held.Add(-1)
	if h > l.maxH.Load() {
		l.maxH.Store(h)
	}
	return action(ctx)
}

func createLocatorWithLock(c *C) {
	loc := &lockingLocator{memLocator: newLocator(), locks: map[string]*sync.Mutex{}}
	loc.slow = 20 * time.Millisecond
	key := "sbt-lock-" + c.caseID
	boxes, errs := concurrentCreate(c, 6, sandbox.CreateOptions{Key: key, KeyMode: sandbox.KeyExact, Locator: loc})
	oneSandbox(c, boxes, errs)
	if loc.sets.Load() != 1 {
		c.Errorf("Locator.Set called %d times; want 1", loc.sets.Load())
	}
	if boxes[0] != nil {
		loc.mu.Lock()
		Eq(c, "locator holds the sandbox id", loc.ids[key], boxes[0].ID)
		loc.mu.Unlock()
	}
}

func createLocatorWithoutLock(c *C) {
	loc := newLocator()
	key := "sbt-loc-" + c.caseID
	a := c.Create(sandbox.CreateOptions{Key: key, Locator: loc})
	Eq(c, "first Created", a.Created, true)
	loc.mu.Lock()
	Eq(c, "locator holds the new id", loc.ids[key], a.ID)
	loc.mu.Unlock()
	b := c.Create(sandbox.CreateOptions{Key: key, Locator: loc})
	Eq(c, "second Created", b.Created, false)
	Eq(c, "second ID", b.ID, a.ID)
	if loc.gets.Load() < 2 {
		c.Errorf("Locator.Get called %d times; want at least 2", loc.gets.Load())
	}
}

func createLocatorStale(c *C) {
	loc := newLocator()
	key := "sbt-stale-" + c.caseID
	a := c.Create(sandbox.CreateOptions{Key: key, Locator: loc})
	c.NoErr("Destroy", a.Destroy(c.Ctx))
	b := c.Create(sandbox.CreateOptions{Key: key, Locator: loc})
	Eq(c, "Created after the old sandbox was destroyed", b.Created, true)
	if b.ID == a.ID {
		c.Errorf("got the destroyed sandbox's id %s back", a.ID)
	}
	if loc.deletes.Load() != 1 {
		c.Errorf("Locator.Delete called %d times for a stale id; want 1", loc.deletes.Load())
	}
	loc.mu.Lock()
	Eq(c, "locator holds the new id", loc.ids[key], b.ID)
	loc.mu.Unlock()
}

// createKeyExactLocatorNoLock: exact mode promises one sandbox per key. A Locator without
// WithLock cannot give that, so Create must either refuse (unsupported, nothing created) or
// still deliver exactly one sandbox.
func createKeyExactLocatorNoLock(c *C) {
	loc := newLocator()
	loc.slow = 50 * time.Millisecond
	boxes, errs := concurrentCreate(c, 4, sandbox.CreateOptions{Key: "sbt-enl-" + c.caseID, KeyMode: sandbox.KeyExact, Locator: loc})
	unsupported := 0
	for _, err := range errs {
		if errors.Is(err, sandbox.CodeUnsupported) {
			unsupported++
		}
	}
	if unsupported == len(errs) {
		c.nothingCreated("KeyExact with a non-locking locator")
		return
	}
	oneSandbox(c, boxes, errs)
}

func createLabels(c *C) {
	b := c.Create(sandbox.CreateOptions{Labels: map[string]string{"team": "a", "app.kubernetes.io/name": "x"}})
	Eq(c, "Labels[team]", b.Labels["team"], "a")
	Eq(c, "Labels[app.kubernetes.io/name]", b.Labels["app.kubernetes.io/name"], "x")
	Eq(c, "Labels[sandbox.SDKLabel]", b.Labels[sandbox.SDKLabel], "true")
	in, err := b.Info(c.Ctx)
	c.NoErr("Info", err)
	Eq(c, "Info.Labels[team]", in.Labels["team"], "a")
	Eq(c, "Info.Labels[sandbox.SDKLabel]", in.Labels[sandbox.SDKLabel], "true")
	for _, bad := range []string{"", "-x", "a b", strings.Repeat("k", 64), "é"} {
		_, err := c.TryCreate(sandbox.CreateOptions{Labels: map[string]string{bad: "v"}})
		c.WantCode("label key "+bad, err, sandbox.CodeInvalidArgument)
	}
	Eq(c, "sandboxes after the invalid labels", len(c.listCase()), 1)
}

func createEnv(c *C) {
	b := c.Create(sandbox.CreateOptions{Env: map[string]string{"GREETING": "hello world", "EMPTY": ""}})
	Eq(c, "GREETING", c.Out(b, `printf '%s' "$GREETING"`), "hello world")
	Eq(c, "EMPTY is set", c.Out(b, `printf '%s' "${EMPTY-unset}"`), "")
	for _, bad := range []string{"1A", "A-B", "A B", "", "A=B"} {
		_, err := c.TryCreate(sandbox.CreateOptions{Env: map[string]string{bad: "v"}})
		c.WantCode("env name "+bad, err, sandbox.CodeInvalidArgument)
	}
	_, err := c.TryCreate(sandbox.CreateOptions{Env: map[string]string{"A": "x\x00y"}})
	c.WantCode("env value with NUL", err, sandbox.CodeInvalidArgument)
	Eq(c, "sandboxes after the invalid env", len(c.listCase()), 1)
}

func createInvalid(c *C) {
	cases := map[string]sandbox.CreateOptions{
		"key mode":             {Key: "k", KeyMode: "sometimes"},
		"exact without key":    {KeyMode: sandbox.KeyExact},
		"long key":             {Key: strings.Repeat("k", 257)},
		"negative timeout":     {Timeout: -time.Second},
		"negative idle":        {IdleTimeout: -time.Second},
		"port 0":               {Ports: []int{0}},
		"port 70000":           {Ports: []int{70000}},
		"size name":            {Size: sandbox.Size{Name: "huge"}},
		"size cpu":             {Size: sandbox.Size{CPU: -1, MemoryMB: 512, DiskGB: 1}},
		"network mode":         {Network: sandbox.Network{Mode: "some"}},
		"empty allow list":     {Network: sandbox.Network{Mode: provider.NetworkAllow}},
		"allow list with none": {Network: sandbox.Network{Mode: provider.NetworkNone, Allow: []string{"example.com"}}},
	}
	for what, o := range cases {
		_, err := c.TryCreate(o)
		c.WantCode(what, err, sandbox.CodeInvalidArgument)
	}
	c.nothingCreated("invalid options")
}

// failClosed checks that opts is refused with unsupported and creates nothing.
func failClosed(c *C, what string, opts sandbox.CreateOptions) {
	c.Helper()
	_, err := c.TryCreate(opts)
	c.WantCode(what, err, sandbox.CodeUnsupported)
	c.nothingCreated(what)
}

func createNetworkNone(c *C) {
	if !c.Has(provider.CapNetworkNone) {
		failClosed(c, "network none", sandbox.CreateOptions{Network: sandbox.NetworkNone})
		return
	}
	b := c.Create(sandbox.CreateOptions{Network: sandbox.NetworkNone})
	if !c.Has(provider.CapShell) {
		// Without a shell there is no way to look at interfaces; the sandbox must still run.
		c.MustRun(b, "true")
		return
	}
	// Only the loopback interface may exist.
	out := c.Out(b, `tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '`)
	for _, ifc := range strings.Fields(out) {
		if ifc != "lo" {
			c.Errorf("network none: interface %q exists; want only lo (have %q)", ifc, out)
		}
	}
}

func createNetworkAllow(c *C) {
	opts := sandbox.CreateOptions{Network: sandbox.NetworkAllowList("example.com")}
	if !c.Has(provider.CapNetworkPolicy) {
		failClosed(c, "network allow list", opts)
		return
	}
	b := c.Create(opts)
	c.MustRun(b, "true")
}

// createBoundSecrets: a provider with bound-secrets gives the sandbox a placeholder, never
// the value; one without refuses them, through the SDK and when asked directly.
func createBoundSecrets(c *C) {
	const value = "sandboxtest-bound-value"
	opts := sandbox.CreateOptions{BoundSecrets: map[string]sandbox.BoundSecret{"BOUND": {Value: value, Hosts: []string{"api.example.com"}}}}
	if !c.Has(provider.CapBoundSecrets) {
		failClosed(c, "bound secrets", opts)
		inst, err := c.P().Create(c.Ctx, provider.CreateSpec{BoundSecrets: opts.BoundSecrets})
		if err == nil {
			inst.Close()
			c.Errorf("provider.Create with bound secrets succeeded without the bound-secrets capability")
		} else if !errors.Is(err, provider.CodeUnsupported) {
			c.Errorf("provider.Create with bound secrets: %v, want unsupported", err)
		}
		c.nothingCreated("bound secrets, directly")
		return
	}
	b := c.Create(opts)
	if !c.Has(provider.CapShell) {
		c.MustRun(b, "true")
		return
	}
	// The SDK redacts the value: were it in the sandbox, this would read "***".
	if got := strings.TrimSpace(c.Out(b, "printenv BOUND")); !strings.HasPrefix(got, "tupper_secret_") {
		c.Errorf("BOUND in the sandbox is %q, want a placeholder", got)
	}
}

// createEgressProxy: a provider with egress-proxy takes a SOCKS5 proxy at a public address
// (nothing is dialled until the sandbox connects somewhere) and reports it without its
// password, and refuses one at a loopback address before anything is made; one without
// refuses any.
func createEgressProxy(c *C) {
	px := &sandbox.EgressProxy{Address: "1.1.1.1:1080", Username: "u", Password: "sandboxtest-proxy-password"}
	opts := sandbox.CreateOptions{Network: sandbox.Network{Proxy: px}}
	if !c.Has(provider.CapEgressProxy) {
		failClosed(c, "egress proxy", opts)
		return
	}
	_, err := c.TryCreate(sandbox.CreateOptions{Network: sandbox.Network{Proxy: &sandbox.EgressProxy{Address: "127.0.0.1:1080"}}})
	c.WantCode("egress proxy at a loopback address", err, sandbox.CodeInvalidArgument)
	c.nothingCreated("egress proxy at a loopback address")
	b := c.Create(opts)
	c.MustRun(b, "true")
	n, err := b.Network(c.Ctx)
	if sandbox.CodeOf(err) == sandbox.CodeUnsupported {
		return
	}
	if err != nil || n.Proxy == nil || n.Proxy.Address != px.Address || n.Proxy.Username != "u" || n.Proxy.Password != "" {
		c.Errorf("Network: %+v, %v; want the proxy without its password", n.Proxy, err)
	}
}

func createSize(c *C) {
	if !c.Has(provider.CapSize) {
		failClosed(c, "size small", sandbox.CreateOptions{Size: sandbox.SizeSmall})
		failClosed(c, "custom size", sandbox.CreateOptions{Size: sandbox.Size{CPU: 1, MemoryMB: 512, DiskGB: 1}})
		return
	}
	b := c.Create(sandbox.CreateOptions{Size: sandbox.SizeSmall})
	c.MustRun(b, "true")
	if c.Has(provider.CapShell) {
		// small is 1 GiB: the cgroup limit must say so, or, where the sandbox is a whole
		// machine of its own (gVisor shows an unlimited cgroup inside and enforces the limit
		// on the sandbox from outside), its total memory.
		out := strings.TrimSpace(c.Out(b, `cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes`))
		if out == "max" || out == "9223372036854775807" {
			out = strings.TrimSpace(c.Out(b, `sed -n 's/^MemTotal: *\([0-9]*\) kB$/\1/p' /proc/meminfo`))
			if out != "1048576" {
				c.Errorf("size small: cgroup unlimited inside and MemTotal %q kB; want 1048576", out)
			}
		} else if out != "1073741824" {
			c.Errorf("size small: memory limit %q; want 1073741824", out)
		}
	}
}

// gone reports whether the sandbox id no longer runs: the provider no longer lists it, or
// lists it as stopped. It uses List, which touches no sandbox, so that looking does not
// count as activity.
func gone(c *C, id string) bool {
	infos, err := c.P().List(c.Ctx, provider.ListFilter{Labels: c.caseFilter()})
	if err != nil {
		return false
	}
	for _, in := range infos {
		if in.ID == id {
			return in.State == provider.StateStopped
		}
	}
	return true
}

func createTimeout(c *C) {
	if !c.Has(provider.CapTimeout) {
		failClosed(c, "timeout", sandbox.CreateOptions{Timeout: time.Hour})
		return
	}
	b := c.Create(sandbox.CreateOptions{Timeout: 1500 * time.Millisecond})
	c.MustRun(b, "true")
	if !c.waitFor(15*time.Second, func() bool { return gone(c, b.ID) }) {
		c.Errorf("a sandbox with a 1.5 s lifetime still runs 15 s later")
	}
}

func createIdleTimeout(c *C) {
	if !c.Has(provider.CapIdleTimeout) {
		failClosed(c, "idle timeout", sandbox.CreateOptions{IdleTimeout: time.Hour})
		return
	}
	b := c.Create(sandbox.CreateOptions{IdleTimeout: time.Second})
	c.MustRun(b, "true")
	if !c.waitFor(15*time.Second, func() bool { return gone(c, b.ID) }) {
		c.Errorf("a sandbox with a 1 s idle timeout still runs 15 s after its last command")
	}
}

func createFrom(c *C) {
	if !c.Has(provider.CapSnapshot) {
		failClosed(c, "from a snapshot", sandbox.CreateOptions{From: "snap-does-not-exist"})
		return
	}
	// Declared: an unknown snapshot fails and creates nothing (Lifecycle/SnapshotFrom tests
	// a real one).
	_, err := c.TryCreate(sandbox.CreateOptions{From: "snap-does-not-exist-" + c.caseID})
	if err == nil {
		c.Errorf("Create from an unknown snapshot succeeded")
	} else if code := sandbox.CodeOf(err); code != sandbox.CodeNotFound && code != sandbox.CodeInvalidArgument {
		c.Errorf("Create from an unknown snapshot: code %s (%v); want not_found or invalid_argument", code, err)
	}
	c.nothingCreated("from an unknown snapshot")
}

func createCancelled(c *C) {
	ctx, cancel := context.WithCancel(c.Ctx)
	cancel()
	b, err := sandbox.Create(ctx, c.P(), sandbox.CreateOptions{Labels: c.labels(nil)})
	if b != nil {
		c.destroyLater(b)
	}
	c.WantCode("Create with a cancelled ctx", err, sandbox.CodeAborted)
	c.nothingCreated("cancelled create")
}

// hasChanges reports whether Files.Mark/Changes can work: a native tracker or git.
func hasChanges(c *C, b *sandbox.Sandbox) bool {
	_, native := b.Native.(provider.ChangeTracker)
	return native || c.Has(provider.CapGit)
}

func needChanges(c *C, b *sandbox.Sandbox) {
	c.Helper()
	if !hasChanges(c, b) {
		c.Skipf("provider %s has no provider.ChangeTracker and does not declare capability %q", c.P().Name(), provider.CapGit)
	}
}

func createTrackChanges(c *C) {
	probe := c.Box()
	needChanges(c, probe)
	b := c.Create(sandbox.CreateOptions{TrackChanges: true})
	ch, err := b.Files.Changes(c.Ctx, sandbox.ChangesOptions{})
	c.NoErr("Changes right after create", err)
	if len(ch.Added)+len(ch.Modified)+len(ch.Removed) != 0 {
		c.Errorf("Changes right after create = %+v; want none", ch)
	}
	c.Write(b, "new.txt", "x\n")
	ch, err = b.Files.Changes(c.Ctx, sandbox.ChangesOptions{})
	c.NoErr("Changes", err)
	Eq(c, "Added", strings.Join(ch.Added, ","), "/workspace/new.txt")
}

var _ = regexp.MustCompile
