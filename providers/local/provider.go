//go:build linux

package local

import (
	"strings"
	"sync"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/provider/agentinst"
	"github.com/tupper-dev/tupper/providers/local/internal/hostnet"
	"github.com/tupper-dev/tupper/template"
)

// Provider runs sandboxes on this machine with an OCI runtime. See the package doc.
type Provider struct {
	idmapNS  *usernsCache // user namespaces for idmapped layers (idmap.go)
	cfg      Config
	lay      layout
	runtimes map[string]ociRuntime // the runtimes found
	net      *hostnet.Network      // nil: network "all" is unavailable
	netErr   error
	userns   bool
	// runscDate is the runsc release date (YYYYMMDD), 0 when unknown.
	runscDate int
	caps      provider.Capabilities
	unavail   error // why Available fails, or nil
	// unusable says why a runtime that was found cannot make sandboxes on this host.
	unusable map[string]error
	// runtimeWhy says why cfg.Runtime is the default runtime.
	runtimeWhy string

	// probeOnce guards the fields above from runtimes on: they are filled on first need,
	// so a process that only connects to a sandbox (tupper exec) does not probe the host.
	probeOnce sync.Once

	previews agentinst.Previews // the forwarders of PreviewURL

	pool *pool // nil: Config.Pool is 0

	bootRunsc runscIdentity // the runsc of boot images' keys (bootimage.go)

	agent agentState // the agent binary, found on first need (agent.go)

	storeMu sync.Mutex
	store   *template.Store // the template store, opened on first need (templateStore)

	staleBuildDirs sync.Once // BuildDir's removal of what dead processes left
}

// templateStore is the template store under Home, opened (its directories made) once.
func (p *Provider) templateStore() (*template.Store, error) {
	p.storeMu.Lock()
	defer p.storeMu.Unlock()
	if p.store == nil {
		st, err := template.Open(p.cfg.Home)
		if err != nil {
			return nil, err
		}
		p.store = st
	}
	return p.store, nil
}

var (
	_ provider.Provider     = (*Provider)(nil)
	_ provider.KeyedCreator = (*Provider)(nil)
	_ provider.Prototyper   = (*Provider)(nil)
	_ provider.Refuser      = (*Provider)(nil)
	_ provider.PoolReporter = (*Provider)(nil)
)

func init() {
	provider.Register(provider.Registration{
		Name:    "local",
		Factory: func() (provider.Provider, error) { return New(Config{}) },
		Open: func(cfg any) (provider.Provider, error) {
			c, err := provider.ConfigOf[Config]("local", cfg)
			if err != nil {
				return nil, err
			}
			p, err := New(c)
			if err != nil {
				return nil, err // not a nil *Provider in a non-nil interface
			}
			return p, nil
		},
		Install:  installRuntimes,
		Implicit: true,
	})
}

// New returns a provider. It fails only on a bad configuration; a host that cannot run
// sandboxes gives a provider whose Available says why. The host is probed on first need
// (Available, Capabilities, Create, a teardown), so a process that only connects to an
// existing sandbox does not pay for it.
func New(cfg Config) (*Provider, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	p := &Provider{
		cfg:      cfg,
		lay:      layout{home: cfg.Home},
		runtimes: map[string]ociRuntime{},
		unusable: map[string]error{},
		idmapNS:  newUsernsCache(),
	}
	if len(p.lay.socket(strings.Repeat("a", idLen))) > 100 {
		return nil, provider.Errorf(provider.CodeInvalidArgument, "local: home %q is too long for a unix socket path below it", cfg.Home)
	}
	if cfg.Pool > 0 {
		p.startPool(cfg.Pool)
	}
	return p, nil
}

// Name is "local".
func (p *Provider) Name() string { return "local" }

// Home is the state root in use.
func (p *Provider) Home() string { return p.cfg.Home }

// Close closes the preview listeners this provider opened, destroys its pool of unused
// sandboxes (Config.Pool) and closes the user namespaces it kept for idmapped layers. The
// sandboxes it handed out live on. It is idempotent.
func (p *Provider) Close() error {
	poolErr := p.closePool()
	p.idmapNS.close()
	p.previews.Close()
	return poolErr
}

func errNotFound(id string) error {
	return provider.Errorf(provider.CodeNotFound, "sandbox %s not found", id)
}
