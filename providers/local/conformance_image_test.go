package local

import (
	"context"
	"testing"
	"time"

	"github.com/tupper-dev/tupper/internal/testenv"
	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/sandboxtest"
	"github.com/tupper-dev/tupper/template"
)

// imageProvider is the provider with every create that names no template (and no snapshot)
// made from the template name: the suite's sandboxes on an image template.
type imageProvider struct {
	*Provider
	name string
	caps provider.Capabilities
}

func (p imageProvider) spec(s provider.CreateSpec) provider.CreateSpec {
	if s.Template == "" && s.From == "" {
		s.Template = p.name
	}
	return s
}

func (p imageProvider) Capabilities() provider.Capabilities { return p.caps.Clone() }

func (p imageProvider) Create(ctx context.Context, s provider.CreateSpec) (provider.Instance, error) {
	return p.Provider.Create(ctx, p.spec(s))
}

func (p imageProvider) GetOrCreate(ctx context.Context, s provider.CreateSpec) (provider.Instance, bool, error) {
	return p.Provider.GetOrCreate(ctx, p.spec(s))
}

// TestConformanceImage runs the shared suite once on sandboxes of the built-in debian
// template, an image template (its own layers under the sandbox's writable layer, nothing
// of the host's /usr), under the default runtime, with the capabilities a sandbox of it has
// (no git: debian's minimal base lacks it). Making the template takes debootstrap and this
// machine's Debian mirror, minutes on a loaded machine; -short skips it on a developer's
// machine, never under CI=true.
func TestConformanceImage(t *testing.T) {
	if testing.Short() && !testenv.InCI() {
		t.Skip("-short: making the debian template takes minutes")
	}
	testenv.RequireBinary(t, "debootstrap")
	if _, err := template.HostDistro("/"); err != nil {
		testenv.Skip(t, err.Error())
	}
	p := newTestProvider(t, "")
	st, err := template.Open(p.cfg.Home)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	start := time.Now()
	if _, err := st.EnsureDebian(ctx, template.DebianOptions{}); err != nil {
		t.Fatalf("making the debian template: %v", err)
	}
	t.Logf("debian template made in %v", time.Since(start).Round(time.Second))
	tp, err := p.resolveTemplate(ctx, template.Debian)
	if err != nil {
		t.Fatal(err)
	}
	rt, _ := p.DefaultRuntime()
	caps := provider.NewCapabilities(p.capsFor(rt, tp)...)
	sandboxtest.Run(t, func(testing.TB) provider.Provider {
		return imageProvider{Provider: p, name: template.Debian, caps: caps}
	})
}
