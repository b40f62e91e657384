package docker

import (
	"context"
	"crypto/rand"
	"errors"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/provider/agentinst"
)

// Config configures the Docker provider. The zero value is the default.
type Config struct {
	// Host is the engine's address, e.g. unix:///var/run/docker.sock or tcp://host:2376.
	// "" means the usual environment: DOCKER_HOST (with DOCKER_TLS_VERIFY and
	// DOCKER_CERT_PATH), else the platform's default socket.
	Host string
	// Template is the image of a sandbox created without one. "" means "host" on Linux when
	// the engine is on this machine (see HostTemplate), else DefaultImage.
	Template string
	// Runtime is the OCI runtime the engine runs containers with, one it knows (e.g.
	// "runsc" when gVisor is installed in Docker); "" is the engine's default.
	Runtime string
	// Network is the Docker network of sandboxes with network "all"; "" means "tupper",
	// made on first need (a bridge without inter-container traffic).
	Network string
	// AgentPath is the Linux tupper binary run as every container's init. "" means
	// $TUPPER_AGENT, else the running program when it is tupper for Linux.
	AgentPath string
	// CopyAgent copies the agent into each container instead of bind-mounting it read-only.
	// It is needed when the engine cannot see the host's files (a remote engine); it is the
	// default unless the engine is on this Linux machine.
	CopyAgent *bool
	// ReadyTimeout bounds how long Create waits for the agent to answer; 0 means 30 s.
	ReadyTimeout time.Duration
	// PidsLimit bounds the processes and threads of a container; 0 means 1024.
	PidsLimit int64
}

// DefaultNetwork is the Docker network of sandboxes when Config.Network is "".
const DefaultNetwork = "tupper"

// DefaultImage is the default template where the host template is not available.
const DefaultImage = "debian:bookworm-slim"

// HostTemplate names the template made of the host's /usr (Linux, local engine only).
const HostTemplate = "host"

// Label and name conventions: every resource the provider makes carries labelSandbox (or
// labelSnapshot, labelNetwork) so nothing is confused with the user's own.
const (
	labelPrefix   = "dev.tupper."
	labelSandbox  = labelPrefix + "sandbox"  // the sandbox id
	labelKey      = labelPrefix + "key"      // CreateSpec.Key
	labelTemplate = labelPrefix + "template" // CreateSpec.Template as asked
	labelRuntime  = labelPrefix + "runtime"
	labelDeadline = labelPrefix + "deadline" // unix seconds, at creation; 0 or absent: none
	labelToken    = labelPrefix + "token"    // the agent's access token
	labelUsers    = labelPrefix + "labels"   // the user's labels, a JSON object (always set, so an image's never shows)
	labelSnapshot = labelPrefix + "snapshot" // on snapshot images: the snapshot id
	labelExpires  = labelPrefix + "expires"  // on snapshot images: unix milliseconds; absent: never
	labelNetwork  = labelPrefix + "network"  // on the provider's networks
	labelHostTmpl = labelPrefix + "host-template"
	labelCaps     = labelPrefix + "caps" // the sandbox's capabilities, comma-separated
	labelNet      = labelPrefix + "net"  // the sandbox's network mode: all or none
	namePrefix    = "tupper-"
	snapshotRepo  = "tupper-snapshot"
	hostImageRepo = "tupper-host"
)

// Provider makes sandboxes as containers of one Docker Engine. Create it with New. Every
// method may be called concurrently.
type Provider struct {
	cfg  Config
	cli  *client.Client
	self bool // the engine is on this machine (a unix socket on Linux)

	netMu sync.Mutex // serializes making the network

	hostMu  sync.Mutex
	hostImg string // the host template's image, once made

	agent agentState

	archMu sync.Mutex
	arch   string // the engine's architecture, once asked (Info costs tens of ms)

	mu       sync.Mutex
	previews agentinst.Previews
	paused   map[string]bool   // sandboxes paused through this provider
	configs  map[string][]byte // the agent configs of the sandboxes it made, for PauseCold
	boot     map[string]int    // starts after a PauseCold, by sandbox (see Instance.agentAddr)
	closed   bool
}

var (
	_ provider.Provider        = (*Provider)(nil)
	_ provider.Prototyper      = (*Provider)(nil)
	_ provider.SnapshotDeleter = (*Provider)(nil)
)

func init() {
	provider.Register(provider.Registration{
		Name:    "docker",
		Factory: func() (provider.Provider, error) { return New(Config{}) },
		Install: "Docker Engine or Docker Desktop, running (Debian: apt-get install docker.io)",
		// The platform default on macOS and Windows; on Linux, where the local provider is,
		// only when asked for by name, never as a silent fallback.
		Implicit: runtime.GOOS != "linux",
	})
}

// New returns a provider for cfg. It fails only on a bad configuration; an engine that does
// not answer gives a provider whose Available says why.
func New(cfg Config) (*Provider, error) {
	if cfg.ReadyTimeout < 0 || cfg.PidsLimit < 0 {
		return nil, provider.Errorf(provider.CodeInvalidArgument, "docker: negative limit")
	}
	if cfg.ReadyTimeout == 0 {
		cfg.ReadyTimeout = 30 * time.Second
	}
	if cfg.PidsLimit == 0 {
		cfg.PidsLimit = 1024
	}
	if cfg.Network == "" {
		cfg.Network = DefaultNetwork
	}
	opts := []client.Opt{client.FromEnv, client.WithAPIVersionNegotiation()}
	if cfg.Host != "" {
		opts = append(opts, client.WithHost(cfg.Host))
	}
	cli, err := client.New(opts...)
	if err != nil {
		return nil, provider.Errorf(provider.CodeInvalidArgument, "docker: %v", err)
	}
	p := &Provider{cfg: cfg, cli: cli, paused: map[string]bool{}, configs: map[string][]byte{}, boot: map[string]int{}}
	p.self = runtime.GOOS == "linux" && strings.HasPrefix(cli.DaemonHost(), "unix://")
	if p.cfg.CopyAgent == nil {
		c := !p.self
		p.cfg.CopyAgent = &c
	}
	if p.cfg.Template == "" {
		p.cfg.Template = DefaultImage
		if p.self {
			p.cfg.Template = HostTemplate
		}
	}
	return p, nil
}

// Name is "docker".
func (p *Provider) Name() string { return "docker" }

// Close closes the engine client and the preview listeners; sandboxes live on.
func (p *Provider) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	p.previews.Close()
	return p.cli.Close()
}

// Capabilities are Docker's: sizes (CPU and memory limits), network all, lifetime and idle
// deadlines, previews through the agent's tunnel, persistence, and network none (Docker's
// none network: the agent then listens on a unix socket in the container, reached through
// the engine's exec of a relay). Not declared: an allow list (Docker has no egress policy),
// bounded disk (only some storage drivers can) and, on templates other than host, shell, git
// and users, which depend on the image (see Instance.Capabilities). Its sandboxes' pause
// (docker pause), pause without memory (docker stop, and a start that boots the agent
// again: see PauseCold), filesystem snapshots (docker commit) and terminals are listed from
// their interfaces (Prototype); it has no exact keys (no atomic get-or-create).
func (p *Provider) Capabilities() provider.Capabilities {
	caps := provider.NewCapabilities(
		provider.CapSize,
		provider.CapNetworkAll, provider.CapNetworkNone, provider.CapTimeout, provider.CapIdleTimeout,
		provider.CapPreview, provider.CapPersistent,
	)
	if p.cfg.Template == HostTemplate {
		caps[provider.CapShell] = true
		caps[provider.CapUsers] = true
		if _, err := exec.LookPath("git"); err == nil {
			caps[provider.CapGit] = true
		}
	}
	return caps
}

// Prototype is an *Instance, for provider.CapabilitiesOf.
func (p *Provider) Prototype() provider.Instance { return (*Instance)(nil) }

// Available pings the engine and checks that it runs Linux containers and that an agent
// binary is at hand.
func (p *Provider) Available(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := p.cli.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
		return provider.Missingf("docker: the engine at %s does not answer: %v", p.cli.DaemonHost(), provider.StripCredentials(err.Error()))
	}
	info, err := p.cli.Info(ctx, client.InfoOptions{})
	if err != nil {
		return p.err(err, "docker: info")
	}
	if info.Info.OSType != "" && info.Info.OSType != "linux" {
		return provider.Errorf(provider.CodeUnavailable, "docker: the engine runs %s containers; Tupper needs Linux containers (switch Docker Desktop to Linux containers)", info.Info.OSType)
	}
	if _, err := p.agentBinary(info.Info.Architecture); err != nil {
		return err
	}
	return nil
}

// err maps an engine error to the contract's codes.
func (p *Provider) err(err error, op string) error {
	if err == nil {
		return nil
	}
	var pe *provider.Error
	if errors.As(err, &pe) {
		return err
	}
	code := provider.CodeProvider
	switch {
	case cerrdefs.IsNotFound(err):
		code = provider.CodeNotFound
	case cerrdefs.IsConflict(err), cerrdefs.IsAlreadyExists(err):
		code = provider.CodeConflict
	case cerrdefs.IsInvalidArgument(err):
		code = provider.CodeInvalidArgument
	case cerrdefs.IsUnauthorized(err):
		code = provider.CodeUnauthorized
	case cerrdefs.IsPermissionDenied(err):
		code = provider.CodeForbidden
	case cerrdefs.IsUnavailable(err), client.IsErrConnectionFailed(err):
		code = provider.CodeUnavailable
	case errors.Is(err, context.DeadlineExceeded):
		code = provider.CodeTimeout
	case errors.Is(err, context.Canceled):
		code = provider.CodeAborted
	}
	return &provider.Error{Code: code, Op: op, Message: provider.StripCredentials(err.Error()), Err: err}
}

// newID returns a random sandbox id: 20 lowercase letters and digits, as E2B clients
// require.
func newID() string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, 20)
	rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b)
}

// validID reports whether id has the shape of a sandbox or snapshot id.
func validID(id string) bool {
	if len(id) != 20 {
		return false
	}
	for _, c := range []byte(id) {
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9') {
			return false
		}
	}
	return true
}

// newToken returns a random access token for a sandbox's agent.
func newToken() string { return rand.Text() }

// errNotFound is the contract's error for an unknown sandbox.
func errNotFound(id string) error {
	return provider.Errorf(provider.CodeNotFound, "sandbox %s not found", id)
}
