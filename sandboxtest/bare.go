package sandboxtest

import (
	"context"
	"io"
	"maps"
	"time"

	"github.com/tupper-dev/tupper/provider"
)

// Bare returns p with every optional interface that package sandbox can do without hidden,
// so that the core's fallback runs instead of the provider's fast path: provider.KeyedCreator
// on the provider, and provider.FileSystem, provider.Searcher, provider.ChangeTracker,
// provider.ActivityReporter, provider.RangeReader, provider.PortDialer and
// provider.CommandTerminaler (the core then opens only a login shell) on its instances.
// Interfaces without a
// fallback (provider.Pauser, provider.ColdPauser, provider.Snapshotter, provider.Terminaler,
// provider.TimeoutSetter, provider.CapabilityReporter, provider.Volumer) stay reachable, and answer
// CodeUnsupported where p's instance lacks them, which is what the core answers then too;
// Bare(p) refuses (provider.Refuser) what p does not list, so provider.CapabilitiesOf lists
// for it what it lists for p, less "exact-key" (no provider.KeyedCreator).
//
// Running the suite over Bare(p) proves the fallbacks work on p's sandboxes (testing/fstest
// checks a file system's optional methods against its plain ones the same way):
//
//	sandboxtest.Run(t, func(t testing.TB) provider.Provider { return sandboxtest.Bare(newProvider(t)) })
//
// Run itself also compares each fast path p has with its fallback on one sandbox (the
// Fallback group).
func Bare(p provider.Provider) provider.Provider { return bareProvider{p} }

type bareProvider struct{ p provider.Provider }

func (b bareProvider) Name() string { return b.p.Name() }

func (b bareProvider) Capabilities() provider.Capabilities { return b.p.Capabilities() }

// Prototype is a bareInstance: every optional interface without a fallback.
func (b bareProvider) Prototype() provider.Instance { return bareInstance{} }

// Refuse refuses the optional interfaces p does not list, which bareInstance has all the
// same.
func (b bareProvider) Refuse(c provider.Capability) error {
	if err := provider.Refusal(b.p, c); err != nil {
		return err
	}
	if provider.NamesInterface(c) && !provider.CapabilitiesOf(b.p).Has(c) {
		return provider.Errorf(provider.CodeUnsupported, "provider %s lacks %q", b.p.Name(), c)
	}
	return nil
}

func (b bareProvider) Available(ctx context.Context) error { return b.p.Available(ctx) }

func (b bareProvider) Create(ctx context.Context, spec provider.CreateSpec) (provider.Instance, error) {
	return b.inst(b.p.Create(ctx, spec))
}

func (b bareProvider) FindByKey(ctx context.Context, key string) (provider.Instance, error) {
	return b.inst(b.p.FindByKey(ctx, key))
}

func (b bareProvider) Connect(ctx context.Context, id string) (provider.Instance, error) {
	return b.inst(b.p.Connect(ctx, id))
}

func (b bareProvider) List(ctx context.Context, f provider.ListFilter) ([]provider.Info, error) {
	return b.p.List(ctx, f)
}

func (b bareProvider) Destroy(ctx context.Context, id string) error { return b.p.Destroy(ctx, id) }

func (b bareProvider) inst(in provider.Instance, err error) (provider.Instance, error) {
	if err != nil {
		return nil, err
	}
	return bareInstance{in: in, caps: b.Capabilities()}, nil
}

// bareInstance has the required methods and the optional interfaces without a fallback.
type bareInstance struct {
	in   provider.Instance
	caps provider.Capabilities // the provider's, for an instance that reports none
}

var (
	_ provider.Pauser             = bareInstance{}
	_ provider.ColdPauser         = bareInstance{}
	_ provider.Snapshotter        = bareInstance{}
	_ provider.Terminaler         = bareInstance{}
	_ provider.TimeoutSetter      = bareInstance{}
	_ provider.CapabilityReporter = bareInstance{}
)

func (b bareInstance) Info(ctx context.Context) (provider.Info, error) { return b.in.Info(ctx) }

func (b bareInstance) Exec(ctx context.Context, req provider.ExecRequest) (provider.ExecResult, error) {
	return b.in.Exec(ctx, req)
}

func (b bareInstance) ReadFile(ctx context.Context, path string) (io.ReadCloser, error) {
	return b.in.ReadFile(ctx, path)
}

func (b bareInstance) WriteFile(ctx context.Context, path string, r io.Reader, mode *uint32) error {
	return b.in.WriteFile(ctx, path, r, mode)
}

func (b bareInstance) PreviewURL(ctx context.Context, port int) (string, error) {
	return b.in.PreviewURL(ctx, port)
}

func (b bareInstance) Close() error { return b.in.Close() }

func (b bareInstance) Capabilities() provider.Capabilities {
	if cr, ok := b.in.(provider.CapabilityReporter); ok {
		return cr.Capabilities()
	}
	return maps.Clone(b.caps)
}

func unsupported(what string) error {
	return provider.Errorf(provider.CodeUnsupported, "this provider's sandboxes cannot %s", what)
}

func (b bareInstance) Pause(ctx context.Context) error {
	if p, ok := b.in.(provider.Pauser); ok {
		return p.Pause(ctx)
	}
	return unsupported("pause")
}

func (b bareInstance) Resume(ctx context.Context) error {
	if p, ok := b.in.(provider.Pauser); ok {
		return p.Resume(ctx)
	}
	return unsupported("resume")
}

func (b bareInstance) PauseCold(ctx context.Context) error {
	if p, ok := b.in.(provider.ColdPauser); ok {
		return p.PauseCold(ctx)
	}
	return unsupported("pause without memory")
}

func (b bareInstance) Snapshot(ctx context.Context, expires time.Duration) (string, error) {
	if s, ok := b.in.(provider.Snapshotter); ok {
		return s.Snapshot(ctx, expires)
	}
	return "", unsupported("snapshot")
}

func (b bareInstance) Terminal(ctx context.Context, cols, rows int) (provider.Terminal, error) {
	if t, ok := b.in.(provider.Terminaler); ok {
		return t.Terminal(ctx, cols, rows)
	}
	return nil, unsupported("open a terminal")
}

func (b bareInstance) SetTimeout(ctx context.Context, d time.Duration) error {
	if t, ok := b.in.(provider.TimeoutSetter); ok {
		return t.SetTimeout(ctx, d)
	}
	return unsupported("change their timeout")
}

// Volumes have no fallback: Bare keeps them reachable (provider.Volumer), unsupported where p
// lacks them.
var _ provider.Volumer = bareProvider{}

func (b bareProvider) volumer() (provider.Volumer, error) {
	v, ok := b.p.(provider.Volumer)
	if !ok {
		return nil, provider.Errorf(provider.CodeUnsupported, "provider %s has no volumes", b.p.Name())
	}
	return v, nil
}

func (b bareProvider) CreateVolume(ctx context.Context, req provider.VolumeRequest) (provider.VolumeInfo, error) {
	v, err := b.volumer()
	if err != nil {
		return provider.VolumeInfo{}, err
	}
	return v.CreateVolume(ctx, req)
}

func (b bareProvider) Volumes(ctx context.Context) ([]provider.VolumeInfo, error) {
	v, err := b.volumer()
	if err != nil {
		return nil, err
	}
	return v.Volumes(ctx)
}

func (b bareProvider) VolumeInfo(ctx context.Context, name string) (provider.VolumeInfo, error) {
	v, err := b.volumer()
	if err != nil {
		return provider.VolumeInfo{}, err
	}
	return v.VolumeInfo(ctx, name)
}

func (b bareProvider) DeleteVolume(ctx context.Context, name string) error {
	v, err := b.volumer()
	if err != nil {
		return err
	}
	return v.DeleteVolume(ctx, name)
}
