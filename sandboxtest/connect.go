package sandboxtest

import (
	"context"
	"errors"
	"sort"
	"time"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/sandbox"
)

func connectCases() []testCase {
	return []testCase{
		{"NotFound", connectNotFound},
		{"EmptyID", connectEmpty},
		{"Existing", connectExisting},
		{"RecoverSecrets", connectRecoverSecrets},
		{"KeyHitRecoversSecrets", connectKeyHitRecovers},
		{"SkipRecoverSecrets", connectSkipRecover},
		{"ExtraSecrets", connectExtraSecrets},
		{"CloseKeepsSandbox", connectClose},
	}
}

func connectNotFound(c *C) {
	_, err := sandbox.Connect(c.Ctx, c.P(), "sbt-no-such-sandbox-"+c.caseID, sandbox.ConnectOptions{})
	c.WantCode("Connect to a missing id", err, sandbox.CodeNotFound)
	if !errors.Is(err, sandbox.CodeNotFound) {
		c.Errorf("errors.Is(err, sandbox.CodeNotFound) is false for %v", err)
	}
}

func connectEmpty(c *C) {
	_, err := sandbox.Connect(c.Ctx, c.P(), "", sandbox.ConnectOptions{})
	c.WantCode("Connect with an empty id", err, sandbox.CodeInvalidArgument)
	_, err = sandbox.Connect(c.Ctx, nil, "x", sandbox.ConnectOptions{})
	c.WantCode("Connect with a nil provider", err, sandbox.CodeInvalidArgument)
}

func connectExisting(c *C) {
	a := c.Create(sandbox.CreateOptions{Key: "sbt-conn-" + c.caseID, Labels: map[string]string{"x": "1"}})
	c.Write(a, "shared.txt", "hello")
	b, err := sandbox.Connect(c.Ctx, c.P(), a.ID, sandbox.ConnectOptions{})
	c.NoErr("Connect", err)
	defer b.Close()
	Eq(c, "ID", b.ID, a.ID)
	Eq(c, "Key", b.Key, a.Key)
	Eq(c, "Created", b.Created, false)
	Eq(c, "Provider", b.Provider, c.P().Name())
	Eq(c, "Labels[x]", b.Labels["x"], "1")
	Eq(c, "Labels[sandbox.SDKLabel]", b.Labels[sandbox.SDKLabel], "true")
	Eq(c, "file through the second handle", c.Out(b, "cat shared.txt"), "hello")
}

func connectRecoverSecrets(c *C) {
	sec := newSecret()
	a := c.Create(sandbox.CreateOptions{Secrets: map[string]string{"API_TOKEN": sec, "OTHER": newSecret()}})
	b, err := sandbox.Connect(c.Ctx, c.P(), a.ID, sandbox.ConnectOptions{})
	c.NoErr("Connect", err)
	defer b.Close()
	res := c.MustRun(b, `echo "v=$API_TOKEN"`)
	c.noLeak(sec, map[string]string{"Stdout through a fresh Connect": res.Stdout, "Output": res.Output})
	Eq(c, "Stdout", res.Stdout, "v="+sandbox.Redacted+"\n")
	// The secret is still set in the environment.
	res = c.Run(b, `test "$API_TOKEN" = "$WANT"`, sandbox.RunOptions{Env: map[string]string{"WANT": sec}})
	Eq(c, "secret still in the environment", res.OK, true)
}

// A get-or-create that finds the sandbox is a new handle on it: it recovers the secrets the
// sandbox was made with, whether or not the second create names any.
func connectKeyHitRecovers(c *C) {
	sec := newSecret()
	key := "sbt-key-" + randHex(6)
	a := c.Create(sandbox.CreateOptions{Key: key, Secrets: map[string]string{"API_TOKEN": sec}})
	for _, opts := range []sandbox.CreateOptions{{Key: key}, {Key: key, Secrets: map[string]string{"OTHER": newSecret()}}} {
		b := c.Create(opts)
		if b.ID != a.ID || b.Created {
			c.Fatalf("the second create with key %q made %s (created %v), want the existing %s", key, b.ID, b.Created, a.ID)
		}
		res := c.MustRun(b, `echo "v=$API_TOKEN"`)
		c.noLeak(sec, map[string]string{"Stdout through a get-or-create hit": res.Stdout, "Output": res.Output})
		Eq(c, "Stdout", res.Stdout, "v="+sandbox.Redacted+"\n")
	}
}

func connectSkipRecover(c *C) {
	sec := newSecret()
	a := c.Create(sandbox.CreateOptions{Secrets: map[string]string{"API_TOKEN": sec}})
	b, err := sandbox.Connect(c.Ctx, c.P(), a.ID, sandbox.ConnectOptions{SkipRecoverSecrets: true})
	c.NoErr("Connect", err)
	defer b.Close()
	Eq(c, "Stdout with SkipRecoverSecrets", c.Out(b, `echo "v=$API_TOKEN"`), "v="+sec+"\n")
}

func connectExtraSecrets(c *C) {
	extra := newSecret()
	a := c.Box()
	b, err := sandbox.Connect(c.Ctx, c.P(), a.ID, sandbox.ConnectOptions{Secrets: map[string]string{"MINE": extra}})
	c.NoErr("Connect", err)
	defer b.Close()
	res := c.MustRun(b, "echo "+extra)
	c.noLeak(extra, map[string]string{"Stdout": res.Stdout, "Command": res.Command})
	Eq(c, "Stdout", res.Stdout, sandbox.Redacted+"\n")
	// The first handle does not know the value.
	Eq(c, "Stdout on the first handle", c.Out(a, "echo "+extra), extra+"\n")
	// AddSecrets adds one later.
	later := newSecret()
	a.AddSecrets(map[string]string{"LATER": later})
	Eq(c, "Stdout after AddSecrets", c.Out(a, "echo "+later), sandbox.Redacted+"\n")
}

func connectClose(c *C) {
	a := c.Box()
	b, err := sandbox.Connect(c.Ctx, c.P(), a.ID, sandbox.ConnectOptions{})
	c.NoErr("Connect", err)
	c.NoErr("Close", b.Close())
	if err := b.Close(); err != nil {
		c.Errorf("second Close: %v; Close must be idempotent", err)
	}
	// The sandbox lives on.
	c.MustRun(a, "true")
	in, err := a.Info(c.Ctx)
	c.NoErr("Info", err)
	Eq(c, "State after Close of another handle", in.State, provider.StateRunning)
}

func listCases() []testCase {
	return []testCase{
		{"LabelsFilter", listLabels},
		{"Fields", listFields},
		{"AfterDestroy", listAfterDestroy},
		{"OnlySDKSandboxes", listOnlySDK},
	}
}

func listLabels(c *C) {
	a := c.Create(sandbox.CreateOptions{Labels: map[string]string{"tier": "one"}})
	b := c.Create(sandbox.CreateOptions{Labels: map[string]string{"tier": "two"}})
	got := func(l map[string]string) []string {
		f := c.caseFilter()
		for k, v := range l {
			f[k] = v
		}
		infos, err := sandbox.List(c.Ctx, c.P(), sandbox.ListOptions{Labels: f})
		c.NoErr("List", err)
		var ids []string
		for _, in := range infos {
			ids = append(ids, in.ID)
		}
		sort.Strings(ids)
		return ids
	}
	one := got(map[string]string{"tier": "one"})
	if len(one) != 1 || one[0] != a.ID {
		c.Errorf("List tier=one = %v; want [%s]", one, a.ID)
	}
	two := got(map[string]string{"tier": "two"})
	if len(two) != 1 || two[0] != b.ID {
		c.Errorf("List tier=two = %v; want [%s]", two, b.ID)
	}
	if all := got(nil); len(all) != 2 {
		c.Errorf("List with the case label = %v; want both", all)
	}
	if none := got(map[string]string{"tier": "three"}); len(none) != 0 {
		c.Errorf("List tier=three = %v; want none", none)
	}
}

func listFields(c *C) {
	before := time.Now()
	key := "sbt-list-" + c.caseID
	b := c.Create(sandbox.CreateOptions{Key: key, Labels: map[string]string{"k": "v"}})
	after := time.Now()
	infos := c.listCase()
	if len(infos) != 1 {
		c.Fatalf("List = %d sandboxes; want 1", len(infos))
	}
	in := infos[0]
	Eq(c, "ID", in.ID, b.ID)
	Eq(c, "Key", in.Key, key)
	Eq(c, "Labels[k]", in.Labels["k"], "v")
	Eq(c, "Labels[sandbox.SDKLabel]", in.Labels[sandbox.SDKLabel], "true")
	Eq(c, "State", in.State, provider.StateRunning)
	if in.CreatedAt.Before(before.Add(-2*time.Second)) || in.CreatedAt.After(after.Add(2*time.Second)) {
		c.Errorf("CreatedAt = %v; want between %v and %v", in.CreatedAt, before, after)
	}
}

func listAfterDestroy(c *C) {
	a := c.Box()
	b := c.Box()
	c.NoErr("Destroy", a.Destroy(c.Ctx))
	infos := c.listCase()
	if len(infos) != 1 || infos[0].ID != b.ID {
		c.Errorf("List after destroying one of two = %+v; want only %s", infos, b.ID)
	}
	// Destroying again is not an error.
	if err := a.Destroy(c.Ctx); err != nil {
		c.Errorf("second Destroy: %v; want nil", err)
	}
	_, err := sandbox.Connect(c.Ctx, c.P(), a.ID, sandbox.ConnectOptions{})
	c.WantCode("Connect to a destroyed sandbox", err, sandbox.CodeNotFound)
}

// listOnlySDK: a sandbox made directly through the provider, without the SDK's label, is not
// the SDK's and List must not show it.
func listOnlySDK(c *C) {
	inst, err := c.P().Create(c.Ctx, provider.CreateSpec{Labels: c.labels(nil)})
	c.NoErr("provider.Create", err)
	info, err := inst.Info(c.Ctx)
	c.NoErr("Instance.Info", err)
	c.Cleanup(func() {
		// c.Ctx has ended by the time cleanups run.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = c.P().Destroy(ctx, info.ID)
		inst.Close()
	})
	if infos := c.listCase(); len(infos) != 0 {
		c.Errorf("sandbox.List shows %d sandbox(es) without the SDK label; want 0", len(infos))
	}
	n, err := sandbox.Reap(c.Ctx, c.P(), sandbox.ReapOptions{Labels: c.caseFilter()})
	c.NoErr("Reap", err)
	Eq(c, "Reap count of a non-SDK sandbox", n, 0)
}

func reapCases() []testCase {
	return []testCase{
		{"Labels", reapLabels},
		{"OlderThan", reapOlderThan},
		{"IdleOnlyKeepsBackgroundProcess", reapIdleProcess},
		{"IdleOnlyKeepsRunningCommand", reapIdleCommand},
	}
}

func reapLabels(c *C) {
	a := c.Create(sandbox.CreateOptions{Labels: map[string]string{"reap": "yes"}})
	b := c.Create(sandbox.CreateOptions{Labels: map[string]string{"reap": "yes"}})
	keep := c.Create(sandbox.CreateOptions{Labels: map[string]string{"reap": "no"}})
	f := c.caseFilter()
	f["reap"] = "yes"
	n, err := sandbox.Reap(c.Ctx, c.P(), sandbox.ReapOptions{Labels: f})
	c.NoErr("Reap", err)
	Eq(c, "Reap count", n, 2)
	infos := c.listCase()
	if len(infos) != 1 || infos[0].ID != keep.ID {
		c.Errorf("after Reap: %+v; want only %s (reaped %s and %s)", infos, keep.ID, a.ID, b.ID)
	}
}

func reapOlderThan(c *C) {
	old := c.Box()
	time.Sleep(3 * time.Second) // age is wall time: there is nothing to wait on
	young := c.Box()
	n, err := sandbox.Reap(c.Ctx, c.P(), sandbox.ReapOptions{Labels: c.caseFilter(), OlderThan: time.Hour})
	c.NoErr("Reap older than an hour", err)
	Eq(c, "Reap count (older than an hour)", n, 0)
	// The cut lies midway between the two creation times, as the provider reports them, so
	// that however long the creates and the first Reap took (a loaded machine), the old one
	// is older than it and the young one is not, with half the gap to spare.
	oi, err := old.Info(c.Ctx)
	c.NoErr("Info of the old one", err)
	yi, err := young.Info(c.Ctx)
	c.NoErr("Info of the young one", err)
	gap := yi.CreatedAt.Sub(oi.CreatedAt)
	if gap < time.Second {
		c.Fatalf("created %v apart, 3 s slept between: the provider's creation times are off (%v, %v)", gap, oi.CreatedAt, yi.CreatedAt)
	}
	cut := time.Since(yi.CreatedAt) + gap/2
	n, err = sandbox.Reap(c.Ctx, c.P(), sandbox.ReapOptions{Labels: c.caseFilter(), OlderThan: cut})
	c.NoErr("Reap older than the cut", err)
	Eq(c, "Reap count (older than the cut between them)", n, 1)
	infos := c.listCase()
	if len(infos) != 1 || infos[0].ID != young.ID {
		c.Errorf("after Reap: %+v; want only the young %s (old %s)", infos, young.ID, old.ID)
	}
}

// needActivity skips unless the core can tell a busy sandbox: a native ActivityReporter or a
// shell with /proc.
func needActivity(c *C, b *sandbox.Sandbox) {
	c.Helper()
	if _, ok := b.Native.(provider.ActivityReporter); !ok && !c.Has(provider.CapShell) {
		c.Skipf("provider %s has no provider.ActivityReporter and does not declare capability %q", c.P().Name(), provider.CapShell)
	}
}

func reapIdleProcess(c *C) {
	busy := c.Box()
	needActivity(c, busy)
	idle := c.Box()
	p, err := busy.Start(c.Ctx, "sleep 300", sandbox.StartOptions{})
	c.NoErr("Start", err)
	n, err := sandbox.Reap(c.Ctx, c.P(), sandbox.ReapOptions{Labels: c.caseFilter(), IdleOnly: true})
	c.NoErr("Reap", err)
	Eq(c, "Reap count", n, 1)
	infos := c.listCase()
	if len(infos) != 1 || infos[0].ID != busy.ID {
		c.Errorf("after Reap idle-only: %+v; want only the busy %s (idle %s)", infos, busy.ID, idle.ID)
	}
	// Once the process is stopped, the sandbox is idle.
	c.NoErr("Stop", p.Stop(c.Ctx, sandbox.StopOptions{Grace: time.Second}))
	n, err = sandbox.Reap(c.Ctx, c.P(), sandbox.ReapOptions{Labels: c.caseFilter(), IdleOnly: true})
	c.NoErr("Reap", err)
	Eq(c, "Reap count after Stop", n, 1)
}

func reapIdleCommand(c *C) {
	busy := c.Box()
	needActivity(c, busy)
	h := busy.Stream(c.Ctx, "echo started; sleep 30", sandbox.RunOptions{Timeout: 40 * time.Second})
	for ch := range h.Chunks() {
		if ch.Text != "" {
			break // the command is in flight
		}
	}
	n, err := sandbox.Reap(c.Ctx, c.P(), sandbox.ReapOptions{Labels: c.caseFilter(), IdleOnly: true})
	c.NoErr("Reap", err)
	Eq(c, "Reap count with a command in flight", n, 0)
	Eq(c, "sandboxes left", len(c.listCase()), 1)
}
