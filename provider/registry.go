package provider

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
)

// Factory builds a provider from its default configuration (environment variables and the
// like). It is called by Resolve, not at registration.
type Factory func() (Provider, error)

// ConfigFactory builds a provider from a configuration of the provider's own type (for
// providers/local, a local.Config), as a database/sql driver opens a data source name. It
// is called by Open.
type ConfigFactory func(cfg any) (Provider, error)

// Registration is one registered provider.
type Registration struct {
	Name    string
	Factory Factory
	// Open, when set, builds the provider from a configuration the caller gives (Open);
	// without it the provider takes none but its Factory's.
	Open ConfigFactory
	// Install says what to install or set up when something the provider needs is missing,
	// e.g. "apt-get install runc". Resolve adds it to an unavailable error that wraps
	// ErrMissing (and does not say it already), never to one with another cause: a
	// provider that is installed but cannot run here says why in its own words.
	Install string
	// Implicit lets Resolve pick the provider when the caller names none. Leave it false for
	// a provider that isolates less than a real sandbox (memory isolates nothing) or that
	// acts on another machine and needs configuration to mean anything (remote, e2b): those
	// are used only by name.
	Implicit bool
}

// ErrMissing marks an unavailable error whose cause is that something Registration.Install
// provides is absent: a program not installed, a setting not made. Wrap it as the cause,
// e.g. with Missingf.
var ErrMissing = errors.New("missing")

// Missingf returns a CodeUnavailable error with a formatted message whose cause is
// ErrMissing; the message is all that is printed.
func Missingf(format string, args ...any) *Error {
	return &Error{Code: CodeUnavailable, Message: fmt.Sprintf(format, args...), Err: ErrMissing}
}

var (
	regMu    sync.RWMutex
	registry = map[string]Registration{}
)

// Register makes a provider available by name. Providers call it from init, so importing a
// provider's package is all it takes. Register panics if the name is empty, the factory is
// nil, or the name is already registered, in the manner of database/sql.Register.
func Register(r Registration) {
	regMu.Lock()
	defer regMu.Unlock()
	if r.Name == "" {
		panic("provider: Register with an empty name")
	}
	if r.Factory == nil {
		panic("provider: Register of " + r.Name + " with a nil factory")
	}
	if _, dup := registry[r.Name]; dup {
		panic("provider: Register called twice for " + r.Name)
	}
	registry[r.Name] = r
}

// Lookup returns the registration of name.
func Lookup(name string) (Registration, bool) {
	regMu.RLock()
	defer regMu.RUnlock()
	r, ok := registry[name]
	return r, ok
}

// List returns the registered names, sorted.
func List() []string {
	regMu.RLock()
	defer regMu.RUnlock()
	names := make([]string, 0, len(registry))
	for n := range registry {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Open builds the provider registered as name from cfg, a configuration of that provider's
// own type (for "local", a local.Config), in the manner of database/sql's Open: it checks
// the configuration and builds the provider without asking whether it is available, so
// its Available (or its first call) says what is missing. A nil cfg is the provider's
// default configuration (its Factory). CodeUnavailable when name is not registered;
// CodeInvalidArgument when the provider takes no configuration or cfg is not its type;
// otherwise the provider's own error for a bad configuration.
func Open(name string, cfg any) (Provider, error) {
	r, ok := Lookup(name)
	if !ok {
		return nil, notRegistered(name)
	}
	return open(r, cfg)
}

func open(r Registration, cfg any) (Provider, error) {
	if cfg == nil {
		return r.Factory()
	}
	if r.Open == nil {
		return nil, Errorf(CodeInvalidArgument, "provider %s takes no configuration (given a %T)", r.Name, cfg)
	}
	return r.Open(cfg)
}

func notRegistered(name string) error {
	return Errorf(CodeUnavailable, "provider %q is not registered (registered: %s); import its package", name, strings.Join(List(), ", "))
}

// ConfigOf returns cfg as a provider's configuration type C, for its ConfigFactory: C or a
// *C (nil: the zero C), else a CodeInvalidArgument error naming the provider.
func ConfigOf[C any](name string, cfg any) (C, error) {
	switch c := cfg.(type) {
	case C:
		return c, nil
	case *C:
		if c != nil {
			return *c, nil
		}
		var zero C
		return zero, nil
	}
	var zero C
	return zero, Errorf(CodeInvalidArgument, "provider %s is configured with a %T, not a %T", name, zero, cfg)
}

// PlatformDefault is the default provider for an operating system: local on Linux, docker
// (providers/docker, a Docker Engine such as Docker Desktop's) on macOS and Windows, none
// elsewhere ("").
func PlatformDefault(goos string) string {
	switch goos {
	case "linux":
		return "local"
	case "darwin", "windows":
		return "docker"
	}
	return ""
}

// ResolveOptions tunes Resolve.
type ResolveOptions struct {
	// Name picks a provider explicitly. Empty means: the platform default, else another
	// available provider whose registration is Implicit (see Resolve).
	Name string
	// Skip lists providers not to pick implicitly even though their registrations are
	// Implicit. A named provider is used whatever Skip says.
	Skip []string
	// Existing says the caller works only with sandboxes that already exist (connect, list,
	// destroy): the named provider, or the registered platform default, is returned without
	// asking whether it can create sandboxes, which for some providers means probing the
	// host. Its methods then say what is missing. tupper exec resolves this way.
	Existing bool
	// Config, when not nil, configures the provider Name names, which it needs (see Open):
	// that provider, built from Config, or an error.
	Config any
}

// Resolve picks a provider in this order:
//
//  1. an explicit name: that provider, or an error if it is not registered or unavailable;
//  2. the platform default (PlatformDefault), when registered, Implicit and available;
//  3. any other registered provider whose registration is Implicit and that reports itself
//     available, in name order, except those in Skip;
//  4. otherwise a CodeUnavailable error that says what to install.
//
// The platform default comes before the others so that importing another provider's package
// never changes which provider a program that names none gets.
//
// Resolve never falls back to a provider less isolated than the one asked for: an explicit
// name that is unavailable is an error, not a reason to pick another.
func Resolve(ctx context.Context, opts ResolveOptions) (Provider, error) {
	if opts.Config != nil && opts.Name == "" {
		return nil, Errorf(CodeInvalidArgument, "a provider's configuration (a %T) needs the provider's name", opts.Config)
	}
	if opts.Existing {
		name := opts.Name
		if name == "" {
			name = PlatformDefault(runtime.GOOS)
		}
		if r, ok := Lookup(name); ok {
			p, err := open(r, opts.Config)
			if err != nil {
				return nil, withInstall(Wrap(err, CodeUnavailable, "provider "+r.Name), r)
			}
			return p, nil
		}
		opts.Existing = false // not registered: resolve as usual, for its error or a fallback
	}
	if opts.Name != "" {
		r, ok := Lookup(opts.Name)
		if !ok {
			return nil, notRegistered(opts.Name)
		}
		return build(ctx, r, opts.Config)
	}
	var reasons []string
	def := PlatformDefault(runtime.GOOS)
	r, ok := Lookup(def)
	switch {
	case def == "":
		reasons = append(reasons, fmt.Sprintf("%s has no platform default provider yet", runtime.GOOS))
	case !ok:
		reasons = append(reasons, fmt.Sprintf("the platform default %q is not registered (import github.com/tupper-dev/tupper/providers/%s)", def, def))
	case r.Implicit && !slices.Contains(opts.Skip, def):
		p, err := build(ctx, r, nil)
		if err == nil {
			return p, nil
		}
		reasons = append(reasons, reason(err))
	}
	for _, name := range List() {
		r, _ := Lookup(name)
		if name == def || !r.Implicit || slices.Contains(opts.Skip, name) {
			continue
		}
		p, err := build(ctx, r, nil)
		if err == nil {
			return p, nil
		}
		reasons = append(reasons, reason(err))
	}
	return nil, Errorf(CodeUnavailable, "no sandbox provider is available: %s", strings.Join(reasons, "; "))
}

func build(ctx context.Context, r Registration, cfg any) (Provider, error) {
	p, err := open(r, cfg)
	if err != nil {
		return nil, withInstall(Wrap(err, CodeUnavailable, "provider "+r.Name), r)
	}
	if err := p.Available(ctx); err != nil {
		return nil, withInstall(Wrap(err, CodeUnavailable, "provider "+r.Name), r)
	}
	return p, nil
}

// reason is why a provider cannot be built: err's message, after its op (which names the
// provider when the provider's own error did not).
func reason(err error) string {
	var e *Error
	if errors.As(err, &e) && e.Op != "" {
		return e.Op + ": " + MessageOf(err)
	}
	return MessageOf(err)
}

// withInstall adds r.Install to err when err says something r.Install provides is missing.
func withInstall(err error, r Registration) error {
	if r.Install == "" || !errors.Is(err, ErrMissing) || strings.Contains(err.Error(), r.Install) {
		return err
	}
	return &Error{Code: CodeOf(err), Message: fmt.Sprintf("%s (install: %s)", reason(err), r.Install), Err: err}
}
