package sandboxtest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/sandbox"
)

func lifecycleCases() []testCase {
	return []testCase{
		{"PauseUnsupported", lifePauseUnsupported},
		{"PauseResume", lifePauseResume},
		{"PauseColdUnsupported", lifePauseColdUnsupported},
		{"PauseCold", lifePauseCold},
		{"SnapshotUnsupported", lifeSnapshotUnsupported},
		{"SnapshotExpiryValidation", lifeSnapshotExpiry},
		{"SnapshotFrom", lifeSnapshotFrom},
		{"SnapshotExpires", lifeSnapshotExpires},
		{"TerminalUnsupported", lifeTerminalUnsupported},
		{"Terminal", lifeTerminal},
		{"SetTimeout", lifeSetTimeout},
		{"DestroyIdempotent", lifeDestroy},
		{"Capabilities", lifeCapabilities},
	}
}

func lifePauseUnsupported(c *C) {
	c.NeedNot(provider.CapPause, "Lifecycle/PauseResume")
	b := c.Box()
	c.WantCode("Pause", b.Pause(c.Ctx), sandbox.CodeUnsupported)
	c.WantCode("Resume", b.Resume(c.Ctx), sandbox.CodeUnsupported)
	c.MustRun(b, "true")
}

func lifePauseResume(c *C) {
	c.Need(provider.CapPause)
	b := c.Box()
	h := b.Stream(c.Ctx, "for i in $(seq 1 20); do echo $i; sleep 0.05; done", sandbox.RunOptions{})
	type arrival struct {
		at   time.Time
		text string
	}
	arrivals := make(chan arrival, 100)
	go func() {
		for ch := range h.Chunks() {
			arrivals <- arrival{time.Now(), ch.Text}
		}
		close(arrivals)
	}()
	first := <-arrivals
	if first.text == "" {
		c.Fatalf("no output before pausing")
	}
	c.NoErr("Pause", b.Pause(c.Ctx))
	paused := time.Now()
	in, err := b.Info(c.Ctx)
	c.NoErr("Info", err)
	Eq(c, "State while paused", in.State, provider.StatePaused)
	time.Sleep(time.Second) // the pause must hold for a while: there is nothing to wait on
	resumeAt := time.Now()
	c.NoErr("Resume", b.Resume(c.Ctx))
	var all strings.Builder
	all.WriteString(first.text)
	for a := range arrivals {
		// Allow a little for output that was in flight when Pause returned.
		if a.at.After(paused.Add(100*time.Millisecond)) && a.at.Before(resumeAt) {
			c.Errorf("output %q arrived %v into the pause", a.text, a.at.Sub(paused))
		}
		all.WriteString(a.text)
	}
	res, err := h.Wait()
	c.NoErr("Wait", err)
	Eq(c, "the command finished after Resume", res.Stdout, seqText(20))
	Eq(c, "OK", res.OK, true)
	in, err = b.Info(c.Ctx)
	c.NoErr("Info", err)
	Eq(c, "State after Resume", in.State, provider.StateRunning)
}

func lifePauseColdUnsupported(c *C) {
	c.NeedNot(provider.CapPauseCold, "Lifecycle/PauseCold")
	b := c.Box()
	c.WantCode("PauseWith DropMemory", b.PauseWith(c.Ctx, sandbox.PauseOptions{DropMemory: true}), sandbox.CodeUnsupported)
	in, err := b.Info(c.Ctx)
	c.NoErr("Info", err)
	Eq(c, "State after a refused pause", in.State, provider.StateRunning)
	c.MustRun(b, "true")
}

// lifePauseCold: a pause without memory keeps the sandbox's files, id and labels and ends
// its processes; Resume boots it again; a second pause, either way, changes nothing; a
// sandbox so paused is destroyed like any other (the suite's final check lists none).
func lifePauseCold(c *C) {
	c.Need(provider.CapPause, provider.CapPauseCold)
	b := c.Create(sandbox.CreateOptions{Labels: map[string]string{"kept": "yes"}})
	c.Write(b, "kept.txt", "on the sandbox's disk")
	c.Write(b, "/tmp/kept.txt", "in /tmp")
	proc := start(c, b, "sleep 1000", sandbox.StartOptions{Name: "sleeper"})
	// A detached process (its own session), outside the SDK's bookkeeping.
	detached := func() string {
		return strings.TrimSpace(c.Out(b, `n=0; for f in /proc/[0-9]*/cmdline; do tr '\0' ' ' < "$f" 2>/dev/null | grep -q '^sleep 4242' && n=$((n+1)); done; echo $n`))
	}
	if c.Has(provider.CapShell) {
		c.MustRun(b, "setsid sleep 4242 </dev/null >/dev/null 2>&1 &")
		c.waitFor(5*time.Second, func() bool { return detached() == "1" })
		Eq(c, "detached processes before the pause", detached(), "1")
	}
	cold := sandbox.PauseOptions{DropMemory: true}

	// Paused with its memory first: a pause without it then changes nothing.
	c.NoErr("Pause", b.Pause(c.Ctx))
	c.NoErr("PauseWith DropMemory of a paused sandbox", b.PauseWith(c.Ctx, cold))
	c.NoErr("Resume", b.Resume(c.Ctx))
	st, err := proc.Status(c.Ctx)
	c.NoErr("Status", err)
	Eq(c, "a process after a pause with memory and a refused cold one", st, sandbox.ProcessRunning)

	c.NoErr("PauseWith DropMemory", b.PauseWith(c.Ctx, cold))
	in, err := b.Info(c.Ctx)
	c.NoErr("Info", err)
	Eq(c, "State while paused without memory", in.State, provider.StatePaused)
	_, err = b.Run(c.Ctx, "true", sandbox.RunOptions{})
	c.WantCode("Run while paused", err, sandbox.CodeConflict)
	c.NoErr("second PauseWith DropMemory", b.PauseWith(c.Ctx, cold))
	in, err = b.Info(c.Ctx)
	c.NoErr("Info", err)
	Eq(c, "State after a second pause", in.State, provider.StatePaused)
	infos := c.listCase()
	if Eq(c, "sandboxes listed while paused", len(infos), 1) {
		Eq(c, "listed state", infos[0].State, provider.StatePaused)
	}

	c.NoErr("Resume", b.Resume(c.Ctx))
	in, err = b.Info(c.Ctx)
	c.NoErr("Info", err)
	Eq(c, "State after Resume", in.State, provider.StateRunning)
	Eq(c, "ID after Resume", in.ID, b.ID)
	Eq(c, "label after Resume", in.Labels["kept"], "yes")
	Eq(c, "file after Resume", c.Read(b, "kept.txt"), "on the sandbox's disk")
	Eq(c, "/tmp file after Resume", c.Read(b, "/tmp/kept.txt"), "in /tmp")
	st, err = proc.Status(c.Ctx)
	c.NoErr("Status", err)
	Eq(c, "a process from before the pause, after Resume", st, sandbox.ProcessExited)
	if c.Has(provider.CapShell) {
		Eq(c, "detached processes from before the pause, after Resume", detached(), "0")
	}
	Eq(c, "a new command after Resume", strings.TrimSpace(c.Out(b, "echo booted")), "booted")
	again := start(c, b, "sleep 1000", sandbox.StartOptions{Name: "sleeper2"})
	st, err = again.Status(c.Ctx)
	c.NoErr("Status", err)
	Eq(c, "a process started after Resume", st, sandbox.ProcessRunning)

	// Destroyed while paused so: gone, and nothing left (the suite's final check).
	c.NoErr("PauseWith DropMemory", b.PauseWith(c.Ctx, cold))
	c.NoErr("Destroy while paused", b.Destroy(c.Ctx))
	_, err = sandbox.Connect(c.Ctx, c.P(), b.ID, sandbox.ConnectOptions{})
	c.WantCode("Connect after Destroy", err, sandbox.CodeNotFound)
}

func lifeSnapshotUnsupported(c *C) {
	c.NeedNot(provider.CapSnapshot, "Lifecycle/SnapshotFrom")
	b := c.Box()
	_, err := b.Snapshot(c.Ctx, sandbox.SnapshotOptions{})
	c.WantCode("Snapshot", err, sandbox.CodeUnsupported)
}

func lifeSnapshotExpiry(c *C) {
	b := c.Box()
	for _, d := range []time.Duration{-time.Millisecond, -time.Hour, 1500 * time.Microsecond, time.Nanosecond} {
		_, err := b.Snapshot(c.Ctx, sandbox.SnapshotOptions{ExpiresIn: d})
		c.WantCode(fmt.Sprintf("Snapshot ExpiresIn %v", d), err, sandbox.CodeInvalidArgument)
	}
}

func lifeSnapshotFrom(c *C) {
	c.Need(provider.CapSnapshot)
	b := c.Box()
	c.Write(b, "carried.txt", "from the snapshot")
	c.NoErr("Write", b.Files.Write(c.Ctx, "/tmp/mode.txt", []byte("m"), sandbox.WriteOptions{Mode: sandbox.Mode(0o600)}))
	id, err := b.Snapshot(c.Ctx, sandbox.SnapshotOptions{})
	c.NoErr("Snapshot", err)
	if id == "" {
		c.Fatalf("Snapshot returned an empty id")
	}
	c.Write(b, "carried.txt", "changed after the snapshot")
	c.Write(b, "later.txt", "later")
	nb := c.Create(sandbox.CreateOptions{From: id})
	Eq(c, "Created", nb.Created, true)
	if nb.ID == b.ID {
		c.Errorf("the new sandbox has the original's id")
	}
	Eq(c, "carried file", c.Read(nb, "carried.txt"), "from the snapshot")
	ok, err := nb.Files.Exists(c.Ctx, "later.txt")
	c.NoErr("Exists", err)
	Eq(c, "a file written after the snapshot exists", ok, false)
	st, err := nb.Files.Stat(c.Ctx, "/tmp/mode.txt")
	c.NoErr("Stat", err)
	Eq(c, "mode carried", st.Mode&0o7777, uint32(0o600))
	// The two sandboxes are independent.
	c.Write(nb, "carried.txt", "new sandbox")
	Eq(c, "original unaffected", c.Read(b, "carried.txt"), "changed after the snapshot")
	// And the original still works after being snapshotted.
	c.MustRun(b, "true")
}

func lifeSnapshotExpires(c *C) {
	c.Need(provider.CapSnapshot)
	b := c.Box()
	c.Write(b, "f.txt", "x")
	id, err := b.Snapshot(c.Ctx, sandbox.SnapshotOptions{ExpiresIn: 500 * time.Millisecond})
	if err != nil {
		// A provider that cannot honour an expiry must say so rather than ignore it.
		if code := sandbox.CodeOf(err); code != sandbox.CodeUnsupported && code != sandbox.CodeInvalidArgument {
			c.Errorf("Snapshot with an expiry: %v; want success, unsupported or invalid_argument", err)
		}
		return
	}
	expired := c.waitFor(15*time.Second, func() bool {
		nb, err := c.TryCreate(sandbox.CreateOptions{From: id})
		if err != nil {
			return true
		}
		_ = nb.Destroy(context.Background())
		return false
	})
	if !expired {
		c.Errorf("a snapshot with a 500 ms expiry still works 15 s later")
	}
}

func lifeTerminalUnsupported(c *C) {
	c.NeedNot(provider.CapTerminal, "Lifecycle/Terminal")
	b := c.Box()
	_, err := b.Terminal(c.Ctx, 80, 24)
	c.WantCode("Terminal", err, sandbox.CodeUnsupported)
}

func lifeTerminal(c *C) {
	c.Need(provider.CapTerminal)
	b := c.Box()
	for _, sz := range [][2]int{{0, 24}, {80, 0}, {1001, 24}} {
		_, err := b.Terminal(c.Ctx, sz[0], sz[1])
		c.WantCode(fmt.Sprintf("Terminal %dx%d", sz[0], sz[1]), err, sandbox.CodeInvalidArgument)
	}
	term, err := b.Terminal(c.Ctx, 80, 24)
	c.NoErr("Terminal", err)
	defer term.Close()
	c.NoErr("Resize", term.Resize(c.Ctx, 100, 30))
	if _, err := term.Write([]byte("stty size; echo term-$((40+2))\n")); err != nil {
		c.Fatalf("Write: %v", err)
	}
	var out strings.Builder
	buf := make([]byte, 4096)
	deadline := time.Now().Add(15 * time.Second)
	for !strings.Contains(out.String(), "term-42") && time.Now().Before(deadline) {
		n, err := term.Read(buf)
		out.Write(buf[:n])
		if err != nil {
			break
		}
	}
	if !strings.Contains(out.String(), "term-42") {
		c.Errorf("terminal output lacks the command's output: %q", out.String())
	}
	if !strings.Contains(out.String(), "30 100") {
		c.Errorf("terminal size after Resize is not 30 rows, 100 cols: %q", out.String())
	}
	c.NoErr("Close", term.Close())
	if err := term.Close(); err != nil {
		c.Errorf("second Close: %v", err)
	}
}

func lifeSetTimeout(c *C) {
	b := c.Box()
	c.WantCode("SetTimeout 0", b.SetTimeout(c.Ctx, 0), sandbox.CodeInvalidArgument)
	c.WantCode("SetTimeout negative", b.SetTimeout(c.Ctx, -time.Second), sandbox.CodeInvalidArgument)
	if !c.Has(provider.CapTimeout) {
		c.WantCode("SetTimeout without the timeout capability", b.SetTimeout(c.Ctx, time.Hour), sandbox.CodeUnsupported)
		return
	}
	c.NoErr("SetTimeout 1h", b.SetTimeout(c.Ctx, time.Hour))
	if in, err := b.Info(c.Ctx); err == nil && !in.Deadline.IsZero() {
		if d := time.Until(in.Deadline); d < 59*time.Minute || d > 61*time.Minute {
			c.Errorf("deadline after SetTimeout(1h) is %v away", d)
		}
	}
	c.MustRun(b, "true")
	c.NoErr("SetTimeout 1s", b.SetTimeout(c.Ctx, time.Second))
	if !c.waitFor(15*time.Second, func() bool { return gone(c, b.ID) }) {
		c.Errorf("the sandbox still runs 15 s after SetTimeout(1s)")
	}
}

func lifeDestroy(c *C) {
	b := c.Box()
	c.NoErr("Destroy", b.Destroy(c.Ctx))
	c.NoErr("second Destroy", b.Destroy(c.Ctx))
	_, err := sandbox.Connect(c.Ctx, c.P(), b.ID, sandbox.ConnectOptions{})
	c.WantCode("Connect after Destroy", err, sandbox.CodeNotFound)
	if !errors.Is(err, sandbox.CodeNotFound) {
		c.Errorf("errors.Is(err, CodeNotFound) is false after Destroy")
	}
}

// lifeCapabilities: the handle reports what the provider lists (provider.CapabilitiesOf), no
// provider declares the name of an optional interface (implementing it is the declaration),
// and a refusal (provider.Refuser) is CodeUnsupported. That a sandbox refuses each call of an
// interface its listing lacks is what the …Unsupported cases test.
func lifeCapabilities(c *C) {
	b := c.Box()
	for _, cp := range c.s.caps.List() {
		if !b.Capabilities.Has(cp) {
			c.Errorf("Sandbox.Capabilities lacks %q, which the provider lists", cp)
		}
	}
	declared := c.P().Capabilities()
	if cr, ok := b.Native.(provider.CapabilityReporter); ok {
		maps.Copy(declared, cr.Capabilities())
	}
	for cp := range declared {
		if provider.NamesInterface(cp) {
			c.Errorf("capability %q is declared: it names an optional interface, which only implementing it declares", cp)
		}
	}
	if c.Has(provider.CapTimeout) && !is[provider.TimeoutSetter](b.Native) {
		c.Errorf("capability %q is declared but the sandbox is no provider.TimeoutSetter", provider.CapTimeout)
	}
	for _, cp := range []provider.Capability{provider.CapPause, provider.CapPauseCold, provider.CapSnapshot, provider.CapTerminal, provider.CapVolumes, provider.CapExactKey} {
		if err := provider.Refusal(c.P(), cp); err != nil && !errors.Is(err, provider.CodeUnsupported) {
			c.Errorf("Refuse(%q) = %v, want nil or CodeUnsupported", cp, err)
		}
	}
	if err := c.P().Available(c.Ctx); err != nil {
		c.Errorf("Available: %v, yet sandboxes were created", err)
	}

	// Every set handed out is the caller's own: adding to one (the handle's included) changes
	// nothing the provider reports next. (Only additions: a shared set must not lose a
	// capability the other cases rely on.)
	wantOwnCopy(c, "Provider.Capabilities", c.P().Capabilities)
	if cr, ok := b.Native.(provider.CapabilityReporter); ok {
		wantOwnCopy(c, "Instance.Capabilities", cr.Capabilities)
	}
	before := c.P().Capabilities().String()
	b.Capabilities[written] = true
	if got := c.P().Capabilities().String(); got != before {
		c.Errorf("writing into Sandbox.Capabilities changed the provider's: [%s], want [%s]", got, before)
	}
}

// written is a capability no provider declares, added to sets to see where it shows up.
const written = provider.Capability("sandboxtest-written")

// wantOwnCopy adds to a set from get and checks that the next one from get is as before.
func wantOwnCopy(c *C, what string, get func() provider.Capabilities) {
	first := get()
	want := first.String()
	first[written] = true
	if got := get().String(); got != want {
		c.Errorf("%s: adding to the returned set changed the next one: [%s], want [%s]", what, got, want)
	}
}

func errorCases() []testCase {
	return []testCase{
		{"SandboxErrorType", errType},
		{"IsAndAs", errIsAs},
		{"NilProvider", errNilProvider},
	}
}

func errType(c *C) {
	b := c.Box()
	var errs []error
	_, err := b.Files.Read(c.Ctx, "missing")
	errs = append(errs, err)
	_, err = b.Process(c.Ctx, "missing")
	errs = append(errs, err)
	_, err = b.Run(c.Ctx, "true", sandbox.RunOptions{Timeout: -1})
	errs = append(errs, err)
	_, err = sandbox.Connect(c.Ctx, c.P(), "missing-"+c.caseID, sandbox.ConnectOptions{})
	errs = append(errs, err)
	_, err = b.Files.Search(c.Ctx, "", sandbox.SearchOptions{})
	errs = append(errs, err)
	for i, err := range errs {
		if err == nil {
			c.Errorf("error %d is nil", i)
			continue
		}
		var se *sandbox.Error
		if !errors.As(err, &se) {
			c.Errorf("error %d %q is %T, not *sandbox.Error", i, err, err)
			continue
		}
		if !se.Code.Valid() {
			c.Errorf("error %d has code %q", i, se.Code)
		}
		if !strings.Contains(err.Error(), string(se.Code)) {
			c.Errorf("error text %q does not name its code %s", err, se.Code)
		}
		Eq(c, "CodeOf", sandbox.CodeOf(err), se.Code)
	}
}

func errIsAs(c *C) {
	b := c.Box()
	_, err := b.Files.Read(c.Ctx, "missing")
	if !errors.Is(err, sandbox.CodeNotFound) {
		c.Errorf("errors.Is(%v, CodeNotFound) is false", err)
	}
	if errors.Is(err, sandbox.CodeInvalidArgument) {
		c.Errorf("errors.Is(%v, CodeInvalidArgument) is true", err)
	}
	wrapped := fmt.Errorf("context: %w", err)
	if !errors.Is(wrapped, sandbox.CodeNotFound) {
		c.Errorf("errors.Is through a wrap is false")
	}
	var se *sandbox.Error
	if !errors.As(wrapped, &se) || se.Code != sandbox.CodeNotFound {
		c.Errorf("errors.As through a wrap: %v", se)
	}
}

func errNilProvider(c *C) {
	_, err := sandbox.Create(c.Ctx, nil, sandbox.CreateOptions{})
	c.WantCode("Create with a nil provider", err, sandbox.CodeInvalidArgument)
	_, err = sandbox.List(c.Ctx, nil, sandbox.ListOptions{})
	c.WantCode("List with a nil provider", err, sandbox.CodeInvalidArgument)
}
