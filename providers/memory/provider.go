// Package memory is a pure-Go, in-process sandbox provider for tests and demos.
//
// Each sandbox is an in-memory POSIX-like file system (directories, regular files, symbolic
// and hard links, modes, modification times; rooted at "/" with /workspace, /tmp, /home/user,
// /root and /etc) and a shell: commands are parsed and interpreted by mvdan.cc/sh, and the
// utilities the SDK and the conformance suite need (ls, cat, grep, find, sort, …) are
// implemented in Go over that file system (package internal/coreutils; the shell keeps sh,
// env and printenv, which start its commands). No host process is started and no host file
// is read or written, so the provider builds and works the same on Linux, macOS and Windows.
//
// It isolates nothing: code in a sandbox runs inside the calling process and shares its
// memory and CPU, so it is registered as "memory" but never picked implicitly (see
// provider.Resolve). It has no network at all, which is why it declares CapNetworkNone; a
// request for NetworkAll is accepted too, as a sandbox with less network than asked for is
// never a security problem.
//
// Sandboxes live as long as the Provider value that made them (or until destroyed, or until
// their lifetime or idle deadline passes). The registry's factory returns one process-wide
// Provider, so every Resolve("memory") in a process sees the same sandboxes.
//
// Declared capabilities: network-none, timeout, idle-timeout, exact-key and snapshot. It
// implements provider.FileSystem, Searcher, ChangeTracker, ActivityReporter, KeyedCreator,
// TimeoutSetter and Snapshotter natively. PreviewURL fails with CodeUnsupported.
//
// # Commands
//
// Besides the shell's builtins (cd, echo, printf, test, read, set, export, eval, source,
// trap, wait, command, type, …) the utilities are: sh (also bash), env, printenv, sleep, kill,
// which, uname, hostname, seq, cat, ls, mkdir, rm, rmdir, mv, touch, chmod, stat, ln, find,
// head, wc, grep, sort and tr, with the flags scripts commonly use. The set is frozen: it is
// what the SDK's shell fallbacks (package sandbox) and the conformance suite (sandboxtest)
// run, and the provider is for tests and demos, not a shell to grow. Anything else exits 127
// with "sh: NAME: command not found". A script file in the memory file system runs when it is
// executable and is a shell script (no #! line, or one naming sh or bash).
//
// Every command is a job in the sandbox's process table with a pid that is also its group
// id; kill reaches jobs (a negative pid names the same job), and any signal that ends a
// process stops the whole job at once. Background jobs a script starts with & end with it.
// $$ is the job's pid; process substitution is not supported.
package memory

import (
	"context"
	"crypto/rand"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tupper-dev/tupper/provider"
)

// Name is the registry name of this provider.
const Name = "memory"

var (
	defaultOnce sync.Once
	defaultProv *Provider
)

func init() {
	provider.Register(provider.Registration{
		Name: Name,
		Factory: func() (provider.Provider, error) {
			defaultOnce.Do(func() { defaultProv = New() })
			return defaultProv, nil
		},
	})
}

// Compile-time checks of the contract.
var (
	_ provider.Provider     = (*Provider)(nil)
	_ provider.Prototyper   = (*Provider)(nil)
	_ provider.KeyedCreator = (*Provider)(nil)

	_ provider.Instance         = (*Instance)(nil)
	_ provider.FileSystem       = (*Instance)(nil)
	_ provider.Searcher         = (*Instance)(nil)
	_ provider.ChangeTracker    = (*Instance)(nil)
	_ provider.ActivityReporter = (*Instance)(nil)
	_ provider.TimeoutSetter    = (*Instance)(nil)
	_ provider.Snapshotter      = (*Instance)(nil)
)

// Provider makes in-memory sandboxes. Its methods may be called concurrently.
type Provider struct {
	mu        sync.Mutex
	sandboxes map[string]*sandbox
	keys      map[string]*sandbox
	snapshots map[string]*snapshot
}

type snapshot struct {
	fs      *memFS
	expires time.Time // zero: never
}

// New returns a provider with no sandboxes.
func New() *Provider {
	return &Provider{
		sandboxes: map[string]*sandbox{},
		keys:      map[string]*sandbox{},
		snapshots: map[string]*snapshot{},
	}
}

// Name returns "memory".
func (p *Provider) Name() string { return Name }

// Capabilities returns what the provider enforces: no network, lifetime and idle deadlines.
// Its atomic keys (KeyedCreator) and file-system snapshots (Snapshotter) are listed from
// its interfaces (provider.CapabilitiesOf).
func (p *Provider) Capabilities() provider.Capabilities {
	return provider.NewCapabilities(
		provider.CapNetworkNone,
		provider.CapTimeout,
		provider.CapIdleTimeout,
	)
}

// Prototype is an *Instance, for provider.CapabilitiesOf.
func (p *Provider) Prototype() provider.Instance { return (*Instance)(nil) }

// Available always returns nil: the provider needs nothing from the host.
func (p *Provider) Available(ctx context.Context) error { return nil }

// Create makes a sandbox.
func (p *Provider) Create(ctx context.Context, spec provider.CreateSpec) (provider.Instance, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	sb, err := p.createLocked(ctx, spec)
	if err != nil {
		return nil, err
	}
	return &Instance{sb: sb}, nil
}

// GetOrCreate returns the live sandbox created with spec.Key, or creates one; the check and
// the creation happen under one lock.
func (p *Provider) GetOrCreate(ctx context.Context, spec provider.CreateSpec) (provider.Instance, bool, error) {
	if spec.Key == "" {
		return nil, false, provider.Errorf(provider.CodeInvalidArgument, "get-or-create needs a key")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if sb := p.keys[spec.Key]; sb != nil {
		return &Instance{sb: sb}, false, nil
	}
	sb, err := p.createLocked(ctx, spec)
	if err != nil {
		return nil, false, err
	}
	return &Instance{sb: sb}, true, nil
}

func (p *Provider) createLocked(ctx context.Context, spec provider.CreateSpec) (*sandbox, error) {
	if err := ctx.Err(); err != nil {
		return nil, provider.Wrap(err, provider.CodeAborted, "create")
	}
	if len(spec.BoundSecrets) > 0 {
		return nil, provider.Errorf(provider.CodeUnsupported, "memory: bound secrets need an egress proxy outside the sandbox, which an in-memory sandbox has not")
	}
	switch spec.Network.Mode {
	case "", provider.NetworkAll, provider.NetworkNone:
	default:
		return nil, provider.Errorf(provider.CodeUnsupported, "the memory provider cannot enforce network mode %q", spec.Network.Mode)
	}
	if spec.Template != "" && spec.Template != "default" {
		return nil, provider.Errorf(provider.CodeNotFound, "template %q not found: the memory provider has only the default template", spec.Template)
	}
	if spec.Runtime != "" && spec.Runtime != Name {
		return nil, provider.Errorf(provider.CodeUnsupported, "runtime %q is not available in the memory provider", spec.Runtime)
	}
	if spec.Timeout < 0 || spec.IdleTimeout < 0 {
		return nil, provider.Errorf(provider.CodeInvalidArgument, "negative timeout")
	}
	var mfs *memFS
	if spec.From != "" {
		snap := p.snapshotLocked(spec.From)
		if snap == nil {
			return nil, provider.Errorf(provider.CodeNotFound, "snapshot %q not found", spec.From)
		}
		mfs = snap.fs.Clone()
	} else {
		mfs = newMemFS()
	}
	id := p.newIDLocked()
	sb := newSandbox(p, id, spec, mfs)
	p.sandboxes[id] = sb
	if spec.Key != "" {
		p.keys[spec.Key] = sb
	}
	sb.startTimers()
	return sb, nil
}

func (p *Provider) snapshotLocked(id string) *snapshot {
	s := p.snapshots[id]
	if s == nil {
		return nil
	}
	if !s.expires.IsZero() && !time.Now().Before(s.expires) {
		delete(p.snapshots, id)
		return nil
	}
	return s
}

const idAlphabet = "abcdefghijklmnopqrstuvwxyz0123456789"

// newID returns 20 random characters of [a-z0-9].
func newID() string {
	var b [20]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	for i := range b {
		b[i] = idAlphabet[int(b[i])%len(idAlphabet)]
	}
	return string(b[:])
}

func (p *Provider) newIDLocked() string {
	for {
		id := newID()
		if p.sandboxes[id] == nil && p.snapshots[id] == nil {
			return id
		}
	}
}

// FindByKey returns the live sandbox created with key.
func (p *Provider) FindByKey(ctx context.Context, key string) (provider.Instance, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if sb := p.keys[key]; sb != nil && key != "" {
		return &Instance{sb: sb}, nil
	}
	return nil, provider.Errorf(provider.CodeNotFound, "no sandbox with key %q", key)
}

// Connect returns a handle to the sandbox id.
func (p *Provider) Connect(ctx context.Context, id string) (provider.Instance, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if sb := p.sandboxes[id]; sb != nil {
		return &Instance{sb: sb}, nil
	}
	return nil, notFound(id)
}

func notFound(id string) error {
	return provider.Errorf(provider.CodeNotFound, "sandbox %q not found", id)
}

// List returns the live sandboxes whose labels match filter, oldest first.
func (p *Provider) List(ctx context.Context, filter provider.ListFilter) ([]provider.Info, error) {
	p.mu.Lock()
	sbs := slices.Collect(maps.Values(p.sandboxes))
	p.mu.Unlock()
	var out []provider.Info
	for _, sb := range sbs {
		if filter.Matches(sb.labels) {
			out = append(out, sb.info())
		}
	}
	slices.SortFunc(out, func(a, b provider.Info) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out, nil
}

// Destroy stops the sandbox id: its commands are cancelled and its files dropped.
func (p *Provider) Destroy(ctx context.Context, id string) error {
	p.mu.Lock()
	sb := p.sandboxes[id]
	if sb != nil {
		p.removeLocked(sb)
	}
	p.mu.Unlock()
	if sb == nil {
		return notFound(id)
	}
	sb.stop()
	return nil
}

func (p *Provider) removeLocked(sb *sandbox) {
	delete(p.sandboxes, sb.id)
	if sb.key != "" && p.keys[sb.key] == sb {
		delete(p.keys, sb.key)
	}
}

// expire destroys sb when a deadline passes.
func (p *Provider) expire(sb *sandbox) {
	p.mu.Lock()
	live := p.sandboxes[sb.id] == sb
	if live {
		p.removeLocked(sb)
	}
	p.mu.Unlock()
	if live {
		sb.stop()
	}
}

func (p *Provider) addSnapshot(fs *memFS, expires time.Duration) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	id := p.newIDLocked()
	s := &snapshot{fs: fs}
	if expires > 0 {
		s.expires = time.Now().Add(expires)
	}
	p.snapshots[id] = s
	return id
}
