package provider

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
)

// stub is a provider that only answers Name and Available: enough for the registry.
type stub struct {
	name  string
	avail error
}

func (s stub) Name() string                    { return s.name }
func (s stub) Capabilities() Capabilities      { return NewCapabilities() }
func (s stub) Available(context.Context) error { return s.avail }
func (s stub) Create(context.Context, CreateSpec) (Instance, error) {
	return nil, errors.ErrUnsupported
}
func (s stub) FindByKey(context.Context, string) (Instance, error)     { return nil, errors.ErrUnsupported }
func (s stub) Connect(context.Context, string) (Instance, error)       { return nil, errors.ErrUnsupported }
func (s stub) List(context.Context, ListFilter) ([]Info, error)        { return nil, nil }
func (s stub) Destroy(context.Context, string) error                   { return nil }
func (s stub) ReadFile(context.Context, string) (io.ReadCloser, error) { return nil, nil }

func reg(name string, avail error) {
	Register(Registration{Name: name, Factory: func() (Provider, error) { return stub{name, avail}, nil }, Install: "apt-get install " + name, Implicit: true})
}

func mustPanic(t *testing.T, what string, f func()) {
	t.Helper()
	defer func() {
		if recover() == nil {
			t.Errorf("%s did not panic", what)
		}
	}()
	f()
}

func TestRegister(t *testing.T) {
	reg("test-reg-a", nil)
	mustPanic(t, "duplicate", func() { reg("test-reg-a", nil) })
	mustPanic(t, "empty name", func() { Register(Registration{Factory: func() (Provider, error) { return nil, nil }}) })
	mustPanic(t, "nil factory", func() { Register(Registration{Name: "test-reg-nil"}) })
	if _, ok := Lookup("test-reg-a"); !ok {
		t.Fatal("Lookup does not find a registered provider")
	}
	if _, ok := Lookup("test-reg-nil"); ok {
		t.Fatal("a refused registration was kept")
	}
	names := List()
	for i := 1; i < len(names); i++ {
		if names[i-1] >= names[i] {
			t.Fatalf("List is not sorted: %v", names)
		}
	}
}

func TestResolve(t *testing.T) {
	ctx := context.Background()
	reg("test-res-ok", nil)
	reg("test-res-down", Errorf(CodeUnavailable, "down here"))

	p, err := Resolve(ctx, ResolveOptions{Name: "test-res-ok"})
	if err != nil || p.Name() != "test-res-ok" {
		t.Fatalf("explicit name: %v %v", p, err)
	}
	// An explicit provider that is unavailable is an error, never a fallback to another. Its
	// install hint is added only when what it lacks is what the hint installs.
	_, err = Resolve(ctx, ResolveOptions{Name: "test-res-down"})
	if !errors.Is(err, CodeUnavailable) || !strings.Contains(err.Error(), "down here") || strings.Contains(err.Error(), "install") {
		t.Fatalf("explicit unavailable, installed: %v", err)
	}
	reg("test-res-uninstalled", Missingf("test-res-uninstalled not found"))
	_, err = Resolve(ctx, ResolveOptions{Name: "test-res-uninstalled"})
	if !errors.Is(err, CodeUnavailable) || !errors.Is(err, ErrMissing) ||
		err.Error() != "unavailable: test-res-uninstalled not found (install: apt-get install test-res-uninstalled)" {
		t.Fatalf("explicit unavailable, not installed: %v", err)
	}
	// A message that already says the hint does not get it twice.
	reg("test-res-said", Missingf("not found: apt-get install test-res-said"))
	if _, err = Resolve(ctx, ResolveOptions{Name: "test-res-said"}); strings.Count(err.Error(), "apt-get install") != 1 {
		t.Fatalf("hint twice: %v", err)
	}
	if _, err := Resolve(ctx, ResolveOptions{Name: "test-res-missing"}); !errors.Is(err, CodeUnavailable) || !strings.Contains(err.Error(), "not registered") {
		t.Fatalf("unregistered: %v", err)
	}
	// No name: the platform default is not registered in this package's tests, so an
	// available registered provider is picked, never one in Skip and never one whose
	// registration is not Implicit (test-res-named comes before test-res-ok in name order).
	Register(Registration{Name: "test-res-named", Factory: func() (Provider, error) { return stub{"test-res-named", nil}, nil }})
	p, err = Resolve(ctx, ResolveOptions{Skip: []string{"test-reg-a"}})
	if err != nil || p.Name() != "test-res-ok" {
		t.Fatalf("implicit: %v %v", p, err)
	}
	if p, err := Resolve(ctx, ResolveOptions{Name: "test-res-named"}); err != nil || p.Name() != "test-res-named" {
		t.Fatalf("a provider that is not Implicit, by name: %v %v", p, err)
	}
	_, err = Resolve(ctx, ResolveOptions{Skip: []string{"test-reg-a", "test-res-ok"}})
	if !errors.Is(err, CodeUnavailable) || !strings.Contains(err.Error(), "down here") || strings.Count(err.Error(), "unavailable:") != 1 {
		t.Fatalf("nothing available: %v", err)
	}
}

func TestPlatformDefault(t *testing.T) {
	for goos, want := range map[string]string{"linux": "local", "darwin": "docker", "windows": "docker", "plan9": ""} {
		if got := PlatformDefault(goos); got != want {
			t.Errorf("PlatformDefault(%q) = %q, want %q", goos, got, want)
		}
	}
}

func TestCapabilities(t *testing.T) {
	c := NewCapabilities(CapShell, CapGit)
	if !c.Has(CapGit) || c.Has(CapPause) || c.String() != "git,shell" {
		t.Fatalf("capabilities: %v", c)
	}
}

func TestStripCredentials(t *testing.T) {
	for in, leak := range map[string]string{
		"https://user:pa55word@example.com/repo.git": "pa55word",
		"Authorization: Bearer abcdefgh12345678":     "abcdefgh12345678",
		"key ak_0123456789abcdef0123 rejected":       "ak_0123456789abcdef0123",
		"token ghp_0123456789abcdefghij":             "ghp_0123456789abcdefghij",
	} {
		if out := StripCredentials(in); strings.Contains(out, leak) {
			t.Errorf("StripCredentials(%q) = %q", in, out)
		}
	}
	if out := StripCredentials("plain message"); out != "plain message" {
		t.Errorf("changed a plain message: %q", out)
	}
}

// Existing returns the named provider without asking whether it could create sandboxes, and
// falls back to the usual resolution (and its errors) when the name or default is unknown.
func TestResolveExisting(t *testing.T) {
	ctx := context.Background()
	reg("test-ex-down", Errorf(CodeUnavailable, "cannot create here"))
	p, err := Resolve(ctx, ResolveOptions{Name: "test-ex-down", Existing: true})
	if err != nil || p.Name() != "test-ex-down" {
		t.Fatalf("existing, named: %v %v", p, err)
	}
	if _, err := Resolve(ctx, ResolveOptions{Name: "test-ex-down"}); !errors.Is(err, CodeUnavailable) {
		t.Fatalf("without Existing the same provider must be unavailable: %v", err)
	}
	if _, err := Resolve(ctx, ResolveOptions{Name: "test-ex-missing", Existing: true}); !errors.Is(err, CodeUnavailable) || !strings.Contains(err.Error(), "not registered") {
		t.Fatalf("existing, unregistered: %v", err)
	}
	Register(Registration{Name: "test-ex-broken", Factory: func() (Provider, error) { return nil, errors.New("bad config") }})
	if _, err := Resolve(ctx, ResolveOptions{Name: "test-ex-broken", Existing: true}); !errors.Is(err, CodeUnavailable) || !strings.Contains(err.Error(), "bad config") {
		t.Fatalf("existing, factory fails: %v", err)
	}
}

// TestOpen: a provider opens with its own configuration type (or a pointer to it), with its
// Factory's for nil, and refuses another type or a configuration it does not take, without
// asking whether it is available.
func TestOpen(t *testing.T) {
	type cfg struct{ Home string }
	Register(Registration{
		Name:    "open-configured",
		Factory: func() (Provider, error) { return stub{"default", errors.New("not here")}, nil },
		Open: func(c any) (Provider, error) {
			conf, err := ConfigOf[cfg]("open-configured", c)
			if err != nil {
				return nil, err
			}
			return stub{conf.Home, errors.New("not here")}, nil
		},
	})
	reg("open-plain", nil)
	for _, c := range []any{cfg{Home: "/h"}, &cfg{Home: "/h"}} {
		if p, err := Open("open-configured", c); err != nil || p.Name() != "/h" {
			t.Errorf("Open(%T) = %v, %v; want the configured provider", c, p, err)
		}
	}
	if p, err := Open("open-configured", nil); err != nil || p.Name() != "default" {
		t.Errorf("Open(nil) = %v, %v; want the Factory's", p, err)
	}
	if _, err := Open("open-configured", "a string"); !errors.Is(err, CodeInvalidArgument) || !strings.Contains(err.Error(), "string") {
		t.Errorf("Open with another type: %v", err)
	}
	if _, err := Open("open-plain", cfg{}); !errors.Is(err, CodeInvalidArgument) {
		t.Errorf("Open of a provider that takes no configuration: %v", err)
	}
	if _, err := Open("open-nosuch", nil); !errors.Is(err, CodeUnavailable) || !strings.Contains(err.Error(), "not registered") {
		t.Errorf("Open of an unregistered name: %v", err)
	}
}

// TestResolveConfig: Resolve builds a named provider from its configuration, and asks it
// whether it is available unless Existing; a configuration without a name is refused.
func TestResolveConfig(t *testing.T) {
	type cfg struct{ Avail error }
	Register(Registration{
		Name:    "resolve-configured",
		Factory: func() (Provider, error) { return stub{"default", nil}, nil },
		Open: func(c any) (Provider, error) {
			conf, err := ConfigOf[cfg]("resolve-configured", c)
			return stub{"configured", conf.Avail}, err
		},
	})
	ctx := context.Background()
	if p, err := Resolve(ctx, ResolveOptions{Name: "resolve-configured", Config: cfg{}}); err != nil || p.Name() != "configured" {
		t.Errorf("Resolve with a configuration = %v, %v", p, err)
	}
	down := cfg{Avail: Missingf("nothing here")}
	if _, err := Resolve(ctx, ResolveOptions{Name: "resolve-configured", Config: down}); !errors.Is(err, CodeUnavailable) {
		t.Errorf("Resolve of an unavailable configured provider: %v", err)
	}
	if p, err := Resolve(ctx, ResolveOptions{Name: "resolve-configured", Config: down, Existing: true}); err != nil || p.Name() != "configured" {
		t.Errorf("Resolve Existing of a configured provider = %v, %v", p, err)
	}
	if _, err := Resolve(ctx, ResolveOptions{Config: cfg{}}); !errors.Is(err, CodeInvalidArgument) {
		t.Errorf("Resolve of a configuration without a name: %v", err)
	}
}
