// Package sandbox is Tupper's Go SDK: disposable Linux machines for AI agents to run code in,
// with one API over many isolation backends.
//
// Create a sandbox on a provider, run commands in it, move files, start background
// processes, use git, and destroy it:
//
//	prov, _ := provider.Resolve(ctx, provider.ResolveOptions{}) // local on Linux
//	box, err := sandbox.Create(ctx, prov, sandbox.CreateOptions{Network: sandbox.NetworkNone})
//	if err != nil { … }
//	defer box.Destroy(context.Background())
//	res, err := box.Run(ctx, "echo hi", sandbox.RunOptions{})
//	fmt.Print(res.Stdout) // hi
//
// The core in this package owns every behaviour that must be the same on every provider:
// timeouts, output caps, streaming, shell quoting (Sh), background processes with readiness
// and log cursors, Files.Edit, search, change tracking, git helpers, secret redaction, the
// error format, keys and locators, and fail-closed option checks. Providers (package provider)
// implement only a few primitives.
//
// # Results and errors
//
// A command that exits non-zero, times out or is cancelled is a RunResult with OK false, not an
// error. Methods return an error only when the sandbox, the provider or the request fails, and
// that error is always a *Error with a Code (see errors.go).
//
// # State
//
// Nothing important lives in the caller's memory: keys and labels live in the provider,
// background process records and logs inside the sandbox under /var/lib/sandbox-sdk/, log cursors
// are strings the caller stores, and change checkpoints live inside the sandbox. Any process
// with access to the provider can find a sandbox by key, list its processes and keep reading
// logs from a stored cursor.
//
// # Concurrency
//
// A *Sandbox and its Files, Git and *Process handles may be used from many goroutines at once.
package sandbox

import (
	"context"
	"errors"
	"maps"
	"net"
	"net/url"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/tupper-dev/tupper/provider"
)

// sdkDir is where the SDK keeps its state inside a sandbox. Not under /tmp: commands clear
// /tmp (rm -rf /tmp, a tmp cleaner) or replace it, and the SDK's state (secret names,
// background processes, change checkpoints) must survive that.
const sdkDir = "/var/lib/sandbox-sdk"

// secretsFile holds the names of the secrets set at creation, one per line.
const secretsFile = sdkDir + "/secrets"

// Sandbox is a handle to one sandbox. Destroy ends the sandbox; Close only drops the handle.
type Sandbox struct {
	ID       string            // the provider's id
	Key      string            // the get-or-create key, if any
	Provider string            // the provider's name
	Created  bool              // false when Create found an existing sandbox by key
	Labels   map[string]string // including SDKLabel

	// Workdir is where a command given no Cwd runs, and what relative paths (of commands,
	// files, processes and git) resolve against: the template's working directory when it
	// names one (provider.Info.Workdir), else DefaultCwd.
	Workdir string

	// Capabilities is what the sandbox can do (provider.CapabilitiesOfInstance): what its
	// provider declares, and "pause", "pause-cold", "snapshot", "terminal"… where it
	// implements the optional interface behind each and its provider does not refuse it.
	// Pause, Snapshot and Terminal themselves ask the interface.
	Capabilities provider.Capabilities

	// Native is the provider's own handle, for what the SDK does not cover.
	Native provider.Instance

	Files *Files // file operations
	Git   *Git   // git helpers

	prov provider.Provider
	inst provider.Instance

	red *redactor

	previewURL PreviewURLFunc // from the options; nil: the provider's

	secMu      sync.Mutex
	secPending bool // secrets still to be read back from the sandbox

	closeOnce sync.Once
}

// Info describes a sandbox, in List and from (*Sandbox).Info.
type Info struct {
	ID        string
	Key       string
	Labels    map[string]string
	State     provider.State // running, paused or stopped
	CreatedAt time.Time
	Template  string    // the template it was made from; "" when the provider does not say
	Runtime   string    // the isolation runtime, where the provider has several; "" otherwise
	Deadline  time.Time // the hard lifetime deadline; zero: none, or the provider cannot say
	Workdir   string    // the template's working directory; "" when it names none (see Sandbox.Workdir)
	// Restarts are the times the provider found the sandbox stopped by one of its limits
	// and booted it again on its files (every process ended), with why, oldest first.
	Restarts []provider.Restart
	// Pooled is true on the handle Create returned when the provider's warm pool served it.
	Pooled bool
}

// InfoOf is the SDK's Info of a provider's description of a sandbox (provider.Provider.List,
// provider.Instance.Info).
func InfoOf(in provider.Info) Info {
	return Info{
		ID: in.ID, Key: in.Key, Labels: in.Labels, State: in.State, CreatedAt: in.CreatedAt,
		Template: in.Template, Runtime: in.Runtime, Deadline: in.Deadline, Workdir: in.Workdir,
		Restarts: in.Restarts, Pooled: in.Pooled,
	}
}

// workdirOf is the sandbox's working directory: the template's, else DefaultCwd.
func workdirOf(info provider.Info) string {
	if info.Workdir == "" || !path.IsAbs(info.Workdir) {
		return DefaultCwd
	}
	return path.Clean(info.Workdir)
}

func newHandle(p provider.Provider, inst provider.Instance, info provider.Info, created bool) *Sandbox {
	caps := provider.CapabilitiesOfInstance(p, inst)
	b := &Sandbox{
		ID:           info.ID,
		Key:          info.Key,
		Provider:     p.Name(),
		Created:      created,
		Labels:       maps.Clone(info.Labels),
		Workdir:      workdirOf(info),
		Capabilities: caps,
		Native:       inst,
		prov:         p,
		inst:         inst,
		red:          newRedactor(),
	}
	if b.Labels == nil {
		b.Labels = map[string]string{}
	}
	b.Files = &Files{b: b}
	b.Git = &Git{b: b}
	return b
}

// Create makes a sandbox on p, or with opts.Key finds the one made earlier with that key.
//
// Options the provider cannot enforce fail with CodeUnsupported before anything is created.
// When ctx is cancelled and the provider still delivers a sandbox, Create destroys it and
// returns CodeAborted.
func Create(ctx context.Context, p provider.Provider, opts CreateOptions) (*Sandbox, error) {
	const op = "create"
	if p == nil {
		return nil, errorf(CodeInvalidArgument, op, "provider is nil")
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if err := failClosed(p, opts); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, errorf(CodeAborted, op, "%v", err)
	}
	labels := maps.Clone(opts.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[SDKLabel] = "true"
	spec := provider.CreateSpec{
		Key:         opts.Key,
		Labels:      labels,
		Env:         maps.Clone(opts.Env),
		Secrets:     maps.Clone(opts.Secrets),
		Size:        opts.Size.Resolved(),
		Network:     opts.Network,
		Ports:       append([]int(nil), opts.Ports...),
		IdleTimeout: opts.IdleTimeout,
		Timeout:     opts.Timeout,
		From:        opts.From,
		Template:    opts.Template,
		Runtime:     opts.Runtime,
		Volumes:     append([]provider.VolumeMount(nil), opts.Volumes...),
	}
	spec.Network = spec.Network.Normalized()
	spec.BoundSecrets = maps.Clone(opts.BoundSecrets)

	inst, created, err := getOrCreate(ctx, p, opts, spec)
	if err != nil {
		return nil, wrapProvider(err, op)
	}
	if ctx.Err() != nil {
		// The sandbox arrived after the caller gave up: destroy what we made.
		if created {
			destroyQuietly(p, inst)
		}
		inst.Close()
		return nil, errorf(CodeAborted, op, "cancelled while creating: %v", ctx.Err())
	}
	info, err := inst.Info(ctx)
	if err != nil {
		if created {
			destroyQuietly(p, inst)
		}
		inst.Close()
		return nil, wrapProvider(err, op)
	}
	b := newHandle(p, inst, info, created)
	b.previewURL = opts.PreviewURL
	b.red.add(opts.Secrets)
	b.red.add(boundValues(opts.BoundSecrets))
	if created {
		if err := b.initialize(ctx, opts); err != nil {
			destroyQuietly(p, inst)
			inst.Close()
			return nil, err
		}
	} else {
		// An existing sandbox keeps the secrets it was made with, whatever this create named:
		// recover them before any output is shown, as Connect does.
		b.secPending = true
	}
	return b, nil
}

// boundValues are the values of bound secrets, to redact: the sandbox never holds them, but
// a server that echoes a request could send one back.
func boundValues(bound map[string]BoundSecret) map[string]string {
	m := make(map[string]string, len(bound))
	for k, s := range bound {
		m[k] = s.Value
	}
	return m
}

// initialize does the SDK's own setup of a new sandbox: the secret names file and the
// change-tracking checkpoint.
func (b *Sandbox) initialize(ctx context.Context, opts CreateOptions) error {
	if len(opts.Secrets) > 0 {
		names := make([]string, 0, len(opts.Secrets))
		for k := range opts.Secrets {
			names = append(names, k)
		}
		if err := b.inst.WriteFile(ctx, secretsFile, strings.NewReader(strings.Join(names, "\n")+"\n"), ptr(uint32(0o600))); err != nil {
			return wrapProvider(err, "create")
		}
	}
	if opts.TrackChanges {
		if _, err := b.Files.Mark(ctx, "start"); err != nil {
			return err
		}
	}
	return nil
}

func failClosed(p provider.Provider, opts CreateOptions) error {
	const op = "create"
	caps := provider.CapabilitiesOf(p)
	need := func(c provider.Capability, what string) error {
		if !caps.Has(c) {
			return errorf(CodeUnsupported, op, "provider %s cannot enforce %s", p.Name(), what)
		}
		return nil
	}
	if !opts.Size.IsZero() {
		if err := need(provider.CapSize, "a machine size"); err != nil {
			return err
		}
	}
	if opts.Network.Proxy != nil {
		if err := need(provider.CapEgressProxy, "an egress proxy (allowed TCP tunnelled through SOCKS5)"); err != nil {
			return err
		}
	}
	switch opts.Network.Normalized().Mode {
	case provider.NetworkNone:
		if err := need(provider.CapNetworkNone, `network "none"`); err != nil {
			return err
		}
	case provider.NetworkAllow:
		if err := need(provider.CapNetworkPolicy, "a network allow list"); err != nil {
			return err
		}
	}

	if opts.Timeout > 0 {
		if err := need(provider.CapTimeout, "a lifetime timeout"); err != nil {
			return err
		}
	}
	if opts.IdleTimeout > 0 {
		if err := need(provider.CapIdleTimeout, "an idle timeout"); err != nil {
			return err
		}
	}
	if opts.From != "" {
		if err := need(provider.CapSnapshot, "starting from a snapshot"); err != nil {
			return err
		}
	}
	if len(opts.BoundSecrets) > 0 {
		if err := need(provider.CapBoundSecrets, "bound secrets (an egress proxy that keeps them outside the sandbox)"); err != nil {
			return err
		}
	}
	if len(opts.Volumes) > 0 {
		if _, err := volumer(p, op); err != nil {
			return err
		}
	}
	if opts.KeyMode == KeyExact {
		_, locks := opts.Locator.(LocatorLocker)
		if !locks && !caps.Has(provider.CapExactKey) {
			return errorf(CodeUnsupported, op, "provider %s has no exact get-or-create; pass a Locator with WithLock", p.Name())
		}
	}
	return nil
}

func getOrCreate(ctx context.Context, p provider.Provider, opts CreateOptions, spec provider.CreateSpec) (provider.Instance, bool, error) {
	if opts.Key == "" {
		inst, err := p.Create(ctx, spec)
		return inst, err == nil, err
	}
	if opts.Locator != nil {
		var (
			inst    provider.Instance
			created bool
		)
		find := func(ctx context.Context) error {
			var err error
			inst, created, err = viaLocator(ctx, p, opts.Locator, spec)
			return err
		}
		if opts.KeyMode == KeyExact {
			if l, ok := opts.Locator.(LocatorLocker); ok {
				err := l.WithLock(ctx, opts.Key, find)
				return inst, created, err
			}
			// No lock in the locator: the provider's atomic get-or-create decides (failClosed
			// checked it exists), and the locator learns the id.
			return keyedViaLocator(ctx, p, opts.Locator, spec)
		}
		err := find(ctx)
		return inst, created, err
	}
	if opts.KeyMode == KeyExact {
		return p.(provider.KeyedCreator).GetOrCreate(ctx, spec)
	}
	inst, err := p.FindByKey(ctx, opts.Key)
	if err == nil {
		return inst, false, nil
	}
	if !errors.Is(err, provider.CodeNotFound) {
		return nil, false, err
	}
	inst, err = p.Create(ctx, spec)
	return inst, err == nil, err
}

func viaLocator(ctx context.Context, p provider.Provider, l Locator, spec provider.CreateSpec) (provider.Instance, bool, error) {
	id, err := l.Get(ctx, spec.Key)
	if err != nil {
		return nil, false, provider.Wrap(err, provider.CodeProvider, "locator get")
	}
	if id != "" {
		inst, err := p.Connect(ctx, id)
		if err == nil {
			return inst, false, nil
		}
		if !errors.Is(err, provider.CodeNotFound) {
			return nil, false, err
		}
		if d, ok := l.(LocatorDeleter); ok {
			if err := d.Delete(ctx, spec.Key); err != nil {
				return nil, false, provider.Wrap(err, provider.CodeProvider, "locator delete")
			}
		}
	}
	inst, err := p.Create(ctx, spec)
	if err != nil {
		return nil, false, err
	}
	info, err := inst.Info(ctx)
	if err == nil {
		err = l.Set(ctx, spec.Key, info.ID)
	}
	if err != nil {
		destroyQuietly(p, inst)
		inst.Close()
		return nil, false, provider.Wrap(err, provider.CodeProvider, "locator set")
	}
	return inst, true, nil
}

func keyedViaLocator(ctx context.Context, p provider.Provider, l Locator, spec provider.CreateSpec) (provider.Instance, bool, error) {
	inst, created, err := p.(provider.KeyedCreator).GetOrCreate(ctx, spec)
	if err != nil {
		return nil, false, err
	}
	info, err := inst.Info(ctx)
	if err == nil {
		err = l.Set(ctx, spec.Key, info.ID)
	}
	if err != nil {
		if created {
			destroyQuietly(p, inst)
		}
		inst.Close()
		return nil, false, provider.Wrap(err, provider.CodeProvider, "locator set")
	}
	return inst, created, nil
}

func destroyQuietly(p provider.Provider, inst provider.Instance) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if info, err := inst.Info(ctx); err == nil {
		_ = p.Destroy(ctx, info.ID)
	}
}

// Connect attaches to the sandbox id on p. It runs no command in the sandbox, so a handle
// that only cleans up works even when the sandbox cannot run commands. CodeNotFound when
// there is no such sandbox.
func Connect(ctx context.Context, p provider.Provider, id string, opts ConnectOptions) (*Sandbox, error) {
	const op = "connect"
	if p == nil {
		return nil, errorf(CodeInvalidArgument, op, "provider is nil")
	}
	if id == "" {
		return nil, errorf(CodeInvalidArgument, op, "sandbox id is empty")
	}
	inst, err := p.Connect(ctx, id)
	if err != nil {
		return nil, wrapProvider(err, op)
	}
	info, err := inst.Info(ctx)
	if err != nil {
		inst.Close()
		return nil, wrapProvider(err, op)
	}
	b := newHandle(p, inst, info, false)
	b.previewURL = opts.PreviewURL
	b.red.add(opts.Secrets)
	b.secPending = !opts.SkipRecoverSecrets
	return b, nil
}

// List returns the sandboxes this SDK created on p whose labels include opts.Labels.
func List(ctx context.Context, p provider.Provider, opts ListOptions) ([]Info, error) {
	if p == nil {
		return nil, errorf(CodeInvalidArgument, "list", "provider is nil")
	}
	filter := provider.ListFilter{Labels: maps.Clone(opts.Labels)}
	if filter.Labels == nil {
		filter.Labels = map[string]string{}
	}
	filter.Labels[SDKLabel] = "true"
	infos, err := p.List(ctx, filter)
	if err != nil {
		return nil, wrapProvider(err, "list")
	}
	out := make([]Info, 0, len(infos))
	for _, in := range infos {
		if !filter.Matches(in.Labels) {
			continue
		}
		out = append(out, InfoOf(in))
	}
	return out, nil
}

// Reap destroys the SDK's sandboxes on p that match opts and returns how many it destroyed.
func Reap(ctx context.Context, p provider.Provider, opts ReapOptions) (int, error) {
	infos, err := List(ctx, p, ListOptions{Labels: opts.Labels})
	if err != nil {
		return 0, err
	}
	n := 0
	now := time.Now()
	var errs []error
	for _, in := range infos {
		if opts.OlderThan > 0 && now.Sub(in.CreatedAt) < opts.OlderThan {
			continue
		}
		if opts.IdleOnly && in.State == provider.StateRunning {
			busy, err := busy(ctx, p, in.ID)
			if err != nil && errors.Is(err, provider.CodeNotFound) {
				continue // gone meanwhile
			}
			if busy || err != nil {
				continue // unreadable counts as busy
			}
		}
		if err := p.Destroy(ctx, in.ID); err != nil {
			if errors.Is(err, provider.CodeNotFound) {
				continue
			}
			errs = append(errs, err)
			continue
		}
		n++
	}
	if len(errs) > 0 {
		return n, wrapProvider(errors.Join(errs...), "reap")
	}
	return n, nil
}

// Destroy ends the sandbox and removes everything it left. Destroying a sandbox that is
// already gone is not an error.
func (b *Sandbox) Destroy(ctx context.Context) error {
	err := b.prov.Destroy(ctx, b.ID)
	b.Close()
	if err != nil && !errors.Is(err, provider.CodeNotFound) {
		return wrapProvider(err, "destroy")
	}
	return nil
}

// Close releases the handle's client resources; the sandbox keeps running. Idempotent.
func (b *Sandbox) Close() error {
	var err error
	b.closeOnce.Do(func() { err = b.inst.Close() })
	return err
}

// Info returns the sandbox's current identity, state, template and deadline.
func (b *Sandbox) Info(ctx context.Context) (Info, error) {
	in, err := b.inst.Info(ctx)
	if err != nil {
		return Info{}, wrapProvider(err, "info")
	}
	return InfoOf(in), nil
}

// Pause pauses every process in the sandbox, memory kept: frozen in place, or saved to disk
// and released where the sandbox has the "pause-frees-memory" capability; Resume continues
// where it was. CodeUnsupported where the sandbox is no provider.Pauser or refuses.
func (b *Sandbox) Pause(ctx context.Context) error {
	return b.PauseWith(ctx, PauseOptions{})
}

// PauseOptions configure PauseWith.
type PauseOptions struct {
	// DropMemory ends every process and releases its memory, keeping the sandbox's files,
	// id, labels, deadline, network and ports; Resume boots the sandbox again on those files,
	// with no process from before: the cold pause (E2B's pause with keepMemory false). It
	// needs a provider.ColdPauser.
	DropMemory bool
}

// PauseWith pauses the sandbox as opts say. CodeUnsupported, before anything changes, where
// the sandbox is no provider.Pauser, with DropMemory where it is no provider.ColdPauser, and
// where it refuses.
func (b *Sandbox) PauseWith(ctx context.Context, opts PauseOptions) error {
	p, ok := b.inst.(provider.Pauser)
	if !ok {
		return errorf(CodeUnsupported, "pause", "provider %s cannot pause", b.Provider)
	}
	if !opts.DropMemory {
		return wrapProvider(p.Pause(ctx), "pause")
	}
	c, ok := b.inst.(provider.ColdPauser)
	if !ok {
		return errorf(CodeUnsupported, "pause", "sandbox %s cannot pause without its memory: it needs the %q capability", b.ID, provider.CapPauseCold)
	}
	return wrapProvider(c.PauseCold(ctx), "pause")
}

// Resume continues a paused sandbox. CodeUnsupported where it is no provider.Pauser.
func (b *Sandbox) Resume(ctx context.Context) error {
	p, ok := b.inst.(provider.Pauser)
	if !ok {
		return errorf(CodeUnsupported, "resume", "provider %s cannot pause", b.Provider)
	}
	return wrapProvider(p.Resume(ctx), "resume")
}

// Snapshot captures the sandbox; pass the id as CreateOptions.From. CodeUnsupported where the
// sandbox is no provider.Snapshotter or refuses, and for a full snapshot (opts.Kind) where it
// takes none (it lists "snapshot-full" where it does).
func (b *Sandbox) Snapshot(ctx context.Context, opts SnapshotOptions) (string, error) {
	if err := opts.validate(); err != nil {
		return "", err
	}
	return snapshot(ctx, b, opts, false)
}

// snapshot takes a snapshot through the provider's KindSnapshotter, or its Snapshotter for a
// plain filesystem snapshot without a name.
func snapshot(ctx context.Context, b *Sandbox, opts SnapshotOptions, transient bool) (string, error) {
	const op = "snapshot"
	s, ok := b.inst.(provider.Snapshotter)
	if !ok {
		return "", errorf(CodeUnsupported, op, "provider %s cannot snapshot", b.Provider)
	}
	if ks, ok := b.inst.(provider.KindSnapshotter); ok {
		id, err := ks.SnapshotKind(ctx, provider.SnapshotRequest{Kind: opts.Kind, Name: opts.Name, Expires: opts.ExpiresIn, Transient: transient})
		return id, wrapProvider(err, op)
	}
	if opts.Kind == SnapshotFull || opts.Name != "" {
		return "", errorf(CodeUnsupported, op, "provider %s takes only unnamed filesystem snapshots", b.Provider)
	}
	id, err := s.Snapshot(ctx, opts.ExpiresIn)
	return id, wrapProvider(err, op)
}

// SnapshotInfo describes a snapshot.
type SnapshotInfo = provider.SnapshotInfo

// Snapshots lists the snapshots on p. CodeUnsupported when p cannot list them
// (provider.SnapshotLister).
func Snapshots(ctx context.Context, p provider.Provider) ([]SnapshotInfo, error) {
	l, ok := p.(provider.SnapshotLister)
	if !ok {
		return nil, errorf(CodeUnsupported, "snapshots", "provider %s cannot list snapshots", p.Name())
	}
	out, err := l.Snapshots(ctx)
	return out, wrapProvider(err, "snapshots")
}

// InspectSnapshot describes snapshot id on p: CodeNotFound when there is none (or it
// expired), CodeUnsupported when p cannot say (provider.SnapshotLister).
func InspectSnapshot(ctx context.Context, p provider.Provider, id string) (SnapshotInfo, error) {
	l, ok := p.(provider.SnapshotLister)
	if !ok {
		return SnapshotInfo{}, errorf(CodeUnsupported, "snapshot", "provider %s cannot inspect snapshots", p.Name())
	}
	info, err := l.SnapshotInfo(ctx, id)
	return info, wrapProvider(err, "snapshot")
}

// DeleteSnapshot deletes snapshot id on p now: CodeNotFound when there is none,
// CodeUnsupported when p cannot delete snapshots (provider.SnapshotDeleter).
func DeleteSnapshot(ctx context.Context, p provider.Provider, id string) error {
	d, ok := p.(provider.SnapshotDeleter)
	if !ok {
		return errorf(CodeUnsupported, "delete_snapshot", "provider %s cannot delete snapshots", p.Name())
	}
	return wrapProvider(d.DeleteSnapshot(ctx, id), "delete_snapshot")
}

// Terminal opens an interactive login shell on a PTY. CodeUnsupported where the sandbox is
// no provider.Terminaler. TerminalCommand runs a given command instead.
func (b *Sandbox) Terminal(ctx context.Context, cols, rows int) (provider.Terminal, error) {
	return b.TerminalCommand(ctx, TerminalOptions{Cols: cols, Rows: rows})
}

// redactTerminal returns term with secrets replaced in what it prints.
func (b *Sandbox) redactTerminal(term provider.Terminal) provider.Terminal {
	if b.red.longest() == 0 {
		return term
	}
	// Secrets are redacted from what the terminal prints, as from command output.
	rt := &redactedTerminal{Terminal: term, sr: b.red.stream()}
	if w, ok := term.(provider.TerminalWaiter); ok {
		return &redactedWaitTerminal{rt, w}
	}
	return rt
}

// redactedTerminal replaces secrets in a terminal's output. A secret split across reads is
// held back until it is known not to be one.
type redactedTerminal struct {
	provider.Terminal
	sr  *streamRedactor
	out []byte // redacted bytes not yet returned
	buf []byte
	err error // the underlying Read's final error, returned once out is drained
}

func (t *redactedTerminal) Read(p []byte) (int, error) {
	for len(t.out) == 0 {
		if t.err != nil {
			return 0, t.err
		}
		if t.buf == nil {
			t.buf = make([]byte, 32<<10)
		}
		n, err := t.Terminal.Read(t.buf)
		t.out = append(t.out, t.sr.write(t.buf[:n])...)
		if err != nil {
			t.out = append(t.out, t.sr.flush()...)
			t.err = err
		}
	}
	n := copy(p, t.out)
	t.out = t.out[n:]
	return n, nil
}

type redactedWaitTerminal struct {
	*redactedTerminal
	w provider.TerminalWaiter
}

func (t *redactedWaitTerminal) Wait(ctx context.Context) (provider.ExecResult, error) {
	return t.w.Wait(ctx)
}

// SetTimeout moves the sandbox's hard lifetime deadline to d from now (keep-alive).
// CodeUnsupported where the sandbox is no provider.TimeoutSetter.
func (b *Sandbox) SetTimeout(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return errorf(CodeInvalidArgument, "set_timeout", "timeout must be positive, got %v", d)
	}
	t, ok := b.inst.(provider.TimeoutSetter)
	if !ok {
		return errorf(CodeUnsupported, "set_timeout", "provider %s cannot change the lifetime", b.Provider)
	}
	return wrapProvider(t.SetTimeout(ctx, d), "set_timeout")
}

// Network returns the sandbox's network policy now (after any SetNetwork), its egress
// proxy without the password. Providers without provider.NetworkReporter answer
// CodeUnsupported.
func (b *Sandbox) Network(ctx context.Context) (Network, error) {
	r, ok := b.inst.(provider.NetworkReporter)
	if !ok {
		return Network{}, errorf(CodeUnsupported, "network", "provider %s does not report a sandbox's network", b.Provider)
	}
	n, err := r.Network(ctx)
	n.Proxy = n.Proxy.Redacted()
	return n, wrapProvider(err, "network")
}

// SetNetwork replaces the sandbox's network policy while it runs: "all", "none" (nothing
// leaves) or allow and deny lists (see Network). Connections the new policy refuses are cut
// before it returns. Providers without provider.NetworkSetter answer CodeUnsupported, and
// so may a provider for a sandbox it cannot change (local: one created with network none).
func (b *Sandbox) SetNetwork(ctx context.Context, n Network) error {
	const op = "set_network"
	if err := validateNetwork(op, n); err != nil {
		return err
	}
	if n.Proxy != nil && !b.Capabilities.Has(provider.CapEgressProxy) {
		return errorf(CodeUnsupported, op, "provider %s has no egress proxy (allowed TCP tunnelled through SOCKS5)", b.Provider)
	}
	s, ok := b.inst.(provider.NetworkSetter)
	if !ok {
		return errorf(CodeUnsupported, op, "provider %s cannot change a running sandbox's network", b.Provider)
	}
	return wrapProvider(s.SetNetwork(ctx, n.Normalized()), op)
}

// PreviewURL returns a URL on which port inside the sandbox is reachable from here: the
// options' PreviewURL when set, else the provider's.
func (b *Sandbox) PreviewURL(ctx context.Context, port int) (string, error) {
	if port < 1 || port > 65535 {
		return "", errorf(CodeInvalidArgument, "preview", "port %d is out of range", port)
	}
	if b.previewURL != nil {
		u, err := b.previewURL(ctx, b.ID, port)
		return u, wrapProvider(err, "preview")
	}
	u, err := b.inst.PreviewURL(ctx, port)
	return u, wrapProvider(err, "preview")
}

// DialPort connects to port inside the sandbox (its 127.0.0.1:port) from here: through the
// provider's provider.PortDialer, which needs no listener on this host, else to the host and
// port of the provider's PreviewURL when that is a plain http://HOST:PORT/ URL.
// CodeUnsupported otherwise.
func (b *Sandbox) DialPort(ctx context.Context, port int) (net.Conn, error) {
	const op = "dial_port"
	if port < 1 || port > 65535 {
		return nil, errorf(CodeInvalidArgument, op, "port %d is out of range", port)
	}
	if d, ok := b.inst.(provider.PortDialer); ok {
		c, err := d.DialPort(ctx, port)
		return c, wrapProvider(err, op)
	}
	raw, err := b.inst.PreviewURL(ctx, port)
	if err != nil {
		return nil, wrapProvider(err, op)
	}
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "http" || u.Host == "" || strings.Trim(u.Path, "/") != "" || u.Port() == "" {
		return nil, errorf(CodeUnsupported, op, "provider %s reaches ports only through URLs (%s is not http://HOST:PORT/)", b.Provider, raw)
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", u.Host)
	if err != nil {
		return nil, errorf(CodeUnavailable, op, "nothing answers on port %d: %v", port, err)
	}
	return c, nil
}

// PortTarget is where a proxy on this host forwards requests for port: "" when DialPort
// reaches it through the provider's tunnel (provider.PortDialer, no listener on this host),
// else the provider's own preview URL (never the options' PreviewURL), for providers that
// reach ports only through URLs.
func (b *Sandbox) PortTarget(ctx context.Context, port int) (string, error) {
	if port < 1 || port > 65535 {
		return "", errorf(CodeInvalidArgument, "preview", "port %d is out of range", port)
	}
	if _, ok := b.inst.(provider.PortDialer); ok {
		return "", nil
	}
	u, err := b.inst.PreviewURL(ctx, port)
	return u, wrapProvider(err, "preview")
}

// AddSecrets adds values to redact from everything this handle returns.
func (b *Sandbox) AddSecrets(secrets map[string]string) { b.red.add(secrets) }

// ensureSecrets reads back the secrets set at creation (RecoverSecrets), once. A failure is
// CodeProvider and the next call tries again.
func (b *Sandbox) ensureSecrets(ctx context.Context) error {
	b.secMu.Lock()
	defer b.secMu.Unlock()
	if !b.secPending {
		return nil
	}
	vals, err := b.recoverSecrets(ctx)
	if err != nil {
		return err
	}
	b.red.add(vals)
	b.secPending = false
	return nil
}

// recoverSecretsScript prints, for each valid name in the secret names file, the name and
// its value in the sandbox's environment, each ended by a NUL. It exits 3 when the state
// directory or the file is a symbolic link (never followed: sandbox code may have replaced
// them) and prints nothing when there is no file. Names are checked before they are
// expanded.
const recoverSecretsScript = `f=` + secretsFile + `
for p in /var /var/lib ` + sdkDir + ` "$f"; do [ -L "$p" ] && { echo "$p is a symbolic link" >&2; exit 3; }; done
[ -f "$f" ] || exit 0
while IFS= read -r n || [ -n "$n" ]; do
	case $n in ''|[0-9]*|*[!A-Za-z0-9_]*) continue ;; esac
	eval "v=\${$n-}"
	printf '%s\0%s\0' "$n" "$v"
done < "$f"`

func (b *Sandbox) recoverSecrets(ctx context.Context) (map[string]string, error) {
	const op = "recover_secrets"
	var out, errOut limitedBuffer
	out.limit, errOut.limit = 1<<20, 4<<10
	res, err := b.inst.Exec(ctx, provider.ExecRequest{Command: recoverSecretsScript, Cwd: "/", Stdout: &out, Stderr: &errOut})
	if err != nil {
		return nil, errorf(CodeProvider, op, "reading secrets: %v", err)
	}
	if res.ExitCode != 0 {
		return nil, errorf(CodeProvider, op, "reading secrets exited %d: %s", res.ExitCode, strings.TrimSpace(errOut.String()))
	}
	parts := strings.Split(out.String(), "\x00")
	vals := map[string]string{}
	for i := 0; i+1 < len(parts); i += 2 {
		if shellName.MatchString(parts[i]) && parts[i+1] != "" {
			vals[parts[i]] = parts[i+1]
		}
	}
	return vals, nil
}

// wrapProvider gives err an op and the provider code unless it already has a code, and
// redacts nothing (provider errors are stripped of credentials when printed).
func wrapProvider(err error, op string) error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		if e.Op == "" {
			c := *e
			c.Op = op
			return &c
		}
		return err
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return &Error{Code: CodeTimeout, Op: op, Message: err.Error(), Err: err}
	}
	if errors.Is(err, context.Canceled) {
		return &Error{Code: CodeAborted, Op: op, Message: err.Error(), Err: err}
	}
	return &Error{Code: CodeProvider, Op: op, Message: err.Error(), Err: err}
}

func ptr[T any](v T) *T { return &v }
