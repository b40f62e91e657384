package sandbox

import (
	"context"
	"errors"
	"io"
	"math"
	"regexp"
	"strings"
	"time"

	"github.com/tupper-dev/tupper/egress"
	"github.com/tupper-dev/tupper/provider"
)

// SDKLabel is the label the SDK adds to every sandbox it creates; List and Reap see only
// sandboxes that carry it.
const SDKLabel = "sandbox-sdk"

// Defaults used where an option is left zero (docs/commands.md lists those of Run).
const (
	DefaultCwd            = "/workspace" // the Workdir of sandboxes whose template names none
	DefaultRunTimeout     = 120 * time.Second
	DefaultMaxOutputBytes = 1 << 20
	DefaultLogPageBytes   = 16 << 10
	MaxLogPageBytes       = 1 << 20
	DefaultReadyTimeout   = 60 * time.Second
	DefaultStopGrace      = 5 * time.Second
	DefaultWatchInterval  = 500 * time.Millisecond
	DefaultSearchMatches  = 1000
)

// KeyMode says how strictly Create's get-or-create by key must hold under concurrency.
type KeyMode string

// Key modes.
const (
	// KeyBestEffort finds a sandbox by key, then creates one if none exists. Two concurrent
	// creators may both create.
	KeyBestEffort KeyMode = "best-effort"
	// KeyExact guarantees one sandbox per key. It needs a provider with an atomic
	// get-or-create (provider.KeyedCreator, listed as "exact-key") or a Locator with
	// WithLock; otherwise Create fails with unsupported.
	KeyExact KeyMode = "exact"
)

// Locator is your own key → sandbox id store, for providers that cannot find sandboxes by key
// or to share keys across providers. Get returns "" and no error for an unknown key.
type Locator interface {
	Get(ctx context.Context, key string) (id string, err error)
	Set(ctx context.Context, key, id string) error
}

// LocatorDeleter is an optional Locator method: remove a key whose sandbox is gone.
type LocatorDeleter interface {
	Delete(ctx context.Context, key string) error
}

// LocatorLocker is an optional Locator method: run action under a lock on key (for example a
// distributed lock). It makes KeyExact possible on any provider.
type LocatorLocker interface {
	WithLock(ctx context.Context, key string, action func(ctx context.Context) error) error
}

// Size is a machine size: one of SizeSmall, SizeMedium, SizeLarge, or custom figures.
type Size = provider.Size

// Named sizes.
var (
	SizeSmall  = Size{Name: "small"}
	SizeMedium = Size{Name: "medium"}
	SizeLarge  = Size{Name: "large"}
)

// Network is a sandbox's network policy.
type Network = provider.Network

// EgressProxy is a SOCKS5 proxy a policy's allowed TCP goes through (Network.Proxy).
type EgressProxy = provider.EgressProxy

// Network policies. The zero Network is NetworkAll.
var (
	NetworkAll  = Network{Mode: provider.NetworkAll}
	NetworkNone = Network{Mode: provider.NetworkNone}
)

// NetworkAllowList allows egress only to hosts: domain names, wildcards (*.github.com),
// addresses and CIDR prefixes. Set Deny on the result to take some back.
func NetworkAllowList(hosts ...string) Network {
	return Network{Mode: provider.NetworkAllow, Allow: hosts}
}

// validateNetwork checks a network policy: its mode, and every destination of its lists.
func validateNetwork(op string, n Network) error {
	lists := len(n.Allow) > 0 || len(n.Deny) > 0
	switch n.Mode {
	case "":
	case provider.NetworkAll, provider.NetworkNone:
		if lists {
			return errorf(CodeInvalidArgument, op, "network allow or deny list given with mode %q (use mode allow, or no mode)", n.Mode)
		}
		if n.Learn {
			return errorf(CodeInvalidArgument, op, "network learn given with mode %q (learn is a policy: use mode allow, or no mode)", n.Mode)
		}
		if n.Proxy != nil {
			return errorf(CodeInvalidArgument, op, "network proxy given with mode %q (a proxy is a policy: use mode allow, or no mode)", n.Mode)
		}
	case provider.NetworkAllow:
		if !lists && !n.Learn && n.Proxy == nil {
			return errorf(CodeInvalidArgument, op, "network mode allow with neither an allow nor a deny list (nor learn, nor a proxy)")
		}
	default:
		return errorf(CodeInvalidArgument, op, "network mode %q is not all, none or allow", n.Mode)
	}
	if _, err := egress.Parse(n.Allow, n.Deny); err != nil {
		return errorf(CodeInvalidArgument, op, "%v", err)
	}
	if err := n.Proxy.Validate(); err != nil {
		var e *provider.Error
		errors.As(err, &e)
		return errorf(CodeInvalidArgument, op, "%s", e.Message)
	}
	return nil
}

// CreateOptions configures Create. The zero value creates a default sandbox.
type CreateOptions struct {
	Key     string  // get-or-create key; Sandbox.Created tells which happened
	KeyMode KeyMode // "" is KeyBestEffort
	Locator Locator // your own key store; optional
	Size    Size    // zero: the provider's default; unsupported unless the provider declares "size"
	Network Network // zero: NetworkAll; a mode the provider cannot enforce is unsupported
	Ports   []int   // ports to preview; providers that route every port ignore it
	Labels  map[string]string
	Env     map[string]string // environment for every command
	// Secrets are set as environment variables and redacted from all output, logs and errors.
	// Code in the sandbox can read them.
	Secrets map[string]string
	// BoundSecrets are secrets the sandbox never holds: each name's variable is a
	// placeholder (tupper_secret_ and 32 random hex digits), which the provider's egress
	// proxy, outside the sandbox, replaces with Value in the headers and query of HTTP and
	// HTTPS requests to Hosts (exact names or wildcards, as in an allow list), and in no
	// others. HTTPS to those hosts is terminated by the proxy with a certificate of a CA of
	// the sandbox's own, which the sandbox's trust bundle holds. They need a network: with
	// NetworkAll the sandbox gets the proxy with an open policy (Network.Learn with no
	// lists: nothing refused that all would allow); NetworkNone is invalid. Unsupported
	// without the "bound-secrets" capability. Values are redacted too. A BoundSecret with a
	// Header has no placeholder and sets no variable: the proxy sets that header to Value
	// in every HTTPS request to Hosts. See docs/network.md.
	BoundSecrets map[string]BoundSecret
	// IdleTimeout stops the sandbox after this long idle; unsupported where the provider has
	// no idle timer.
	IdleTimeout time.Duration
	// Timeout is the hard maximum lifetime; unsupported where the provider cannot enforce it.
	Timeout time.Duration
	// From starts from a snapshot id (needs the "snapshot" capability).
	From string
	// TrackChanges records a "start" checkpoint of /workspace at creation, so
	// Files.Changes works without Since.
	TrackChanges bool
	// Template and Runtime are passed to the provider (e.g. local: template "host", runtime
	// "runc" or "runsc").
	Template string
	Runtime  string
	// PreviewURL, when set, is what Sandbox.PreviewURL and Process.URL answer for a port (a
	// server answers with its own preview routing); nil asks the provider, whose PreviewURL
	// may open a listener in this process (local: one on 127.0.0.1 per port).
	PreviewURL PreviewURLFunc
	// Volumes are named volumes (CreateVolume) mounted at their paths; unsupported unless the
	// provider has volumes (the "volumes" capability).
	Volumes []VolumeMount
}

// PreviewURLFunc gives the URL of port in sandbox id.
type PreviewURLFunc func(ctx context.Context, id string, port int) (string, error)

var (
	shellName  = nameRule{first: wordByte(""), rest: wordByte("0123456789")}      // [A-Za-z_][A-Za-z0-9_]*
	labelKey   = nameRule{first: alnum, rest: wordByte("0123456789./-"), max: 63} // [A-Za-z0-9][A-Za-z0-9._/-]{0,62}
	procName   = nameRule{first: wordByte("0123456789-"), rest: wordByte("0123456789-"), max: 128}
	markName   = nameRule{first: alnum, rest: wordByte("0123456789.-"), max: 64} // [A-Za-z0-9][A-Za-z0-9._-]{0,63}
	maxKeySize = 256
)

// Validate checks o without talking to any provider.
func (o CreateOptions) Validate() error {
	const op = "create"
	if len(o.Key) > maxKeySize {
		return errorf(CodeInvalidArgument, op, "key is longer than %d bytes", maxKeySize)
	}
	switch o.KeyMode {
	case "", KeyBestEffort, KeyExact:
	default:
		return errorf(CodeInvalidArgument, op, "key mode %q is not exact or best-effort", o.KeyMode)
	}
	if o.KeyMode == KeyExact && o.Key == "" {
		return errorf(CodeInvalidArgument, op, "key mode exact needs a key")
	}
	if err := validateSize(o.Size); err != nil {
		return err
	}
	if err := validateNetwork(op, o.Network); err != nil {
		return err
	}
	for _, p := range o.Ports {
		if p < 1 || p > 65535 {
			return errorf(CodeInvalidArgument, op, "port %d is out of range", p)
		}
	}
	for k := range o.Labels {
		if !labelKey.MatchString(k) {
			return errorf(CodeInvalidArgument, op, "label key %q is not valid (letters, digits, . _ / -, up to 63)", k)
		}
	}
	if err := validateEnv(op, "env", o.Env); err != nil {
		return err
	}
	for k := range o.Secrets {
		if !shellName.MatchString(k) {
			return errorf(CodeInvalidArgument, op, "secret name %q is not a valid shell variable name", k)
		}
	}
	if err := validateBoundSecrets(op, o); err != nil {
		return err
	}
	if o.IdleTimeout < 0 || o.Timeout < 0 {
		return errorf(CodeInvalidArgument, op, "timeouts must not be negative")
	}
	if err := provider.ValidateVolumeMounts(o.Volumes); err != nil {
		return wrapProvider(err, op)
	}
	return nil
}

// BoundSecret is a secret bound to hosts (CreateOptions.BoundSecrets).
type BoundSecret = provider.BoundSecret

func validateBoundSecrets(op string, o CreateOptions) error {
	if len(o.BoundSecrets) == 0 {
		return nil
	}
	if o.Network.Normalized().Mode == provider.NetworkNone {
		return errorf(CodeInvalidArgument, op, "bound secrets need a network: their proxy is the sandbox's way out, and network none has none")
	}
	for k, s := range o.BoundSecrets {
		if !shellName.MatchString(k) {
			return errorf(CodeInvalidArgument, op, "bound secret name %q is not a valid shell variable name", k)
		}
		if s.Header != "" {
			// No variable: the proxy sets the header.
			if err := egress.CheckHeader(s.Header); err != nil {
				return errorf(CodeInvalidArgument, op, "bound secret %s: %v", k, err)
			}
		} else if _, ok := o.Secrets[k]; ok {
			return errorf(CodeInvalidArgument, op, "%s is both a secret and a bound secret", k)
		} else if _, ok := o.Env[k]; ok {
			return errorf(CodeInvalidArgument, op, "%s is both an environment variable and a bound secret", k)
		}
		if s.Value == "" {
			return errorf(CodeInvalidArgument, op, "bound secret %s has no value", k)
		}
		if strings.ContainsAny(s.Value, "\x00\r\n") {
			return errorf(CodeInvalidArgument, op, "bound secret %s contains a NUL or a line break, which no HTTP header may hold", k)
		}
		if err := egress.CheckSecretHosts(s.Hosts); err != nil {
			return errorf(CodeInvalidArgument, op, "bound secret %s: %v", k, err)
		}
	}
	return nil
}

func validateEnv(op, what string, env map[string]string) error {
	for k, v := range env {
		if !shellName.MatchString(k) {
			return errorf(CodeInvalidArgument, op, "%s name %q is not a valid shell variable name", what, k)
		}
		if containsNUL(v) {
			return errorf(CodeInvalidArgument, op, "%s %s contains a NUL byte", what, k)
		}
	}
	return nil
}

func validateSize(s Size) error {
	const op = "create"
	if s.IsZero() {
		return nil
	}
	if s.Name != "" {
		if _, ok := provider.Sizes[s.Name]; !ok {
			return errorf(CodeInvalidArgument, op, "size %q is not small, medium or large", s.Name)
		}
		if s.CPU != 0 || s.MemoryMB != 0 || s.DiskGB != 0 {
			return errorf(CodeInvalidArgument, op, "size %q given with custom figures", s.Name)
		}
		return nil
	}
	if s.CPU <= 0 || math.IsNaN(s.CPU) || math.IsInf(s.CPU, 0) || s.CPU > 256 {
		return errorf(CodeInvalidArgument, op, "size cpu must be between 0 and 256, got %v", s.CPU)
	}
	if s.MemoryMB < 64 || s.MemoryMB > 1<<20 {
		return errorf(CodeInvalidArgument, op, "size memoryMb must be between 64 and 1048576, got %d", s.MemoryMB)
	}
	if s.DiskGB < 1 || s.DiskGB > 16384 {
		return errorf(CodeInvalidArgument, op, "size diskGb must be between 1 and 16384, got %d", s.DiskGB)
	}
	return nil
}

// ConnectOptions configures Connect.
type ConnectOptions struct {
	// Secrets are more values to redact.
	Secrets map[string]string
	// SkipRecoverSecrets turns off RecoverSecrets, which is on by default: secrets set at
	// creation stay redacted because the SDK reads their names and values back from the
	// sandbox with one command, run lazily before the first run, start, process or files
	// call. If that command fails, the call fails with code provider and the next call tries
	// again. Destroy, Close, Pause, Resume and Snapshot never need it.
	SkipRecoverSecrets bool
	// PreviewURL is as CreateOptions.PreviewURL.
	PreviewURL PreviewURLFunc
}

// ListOptions filters List.
type ListOptions struct {
	Labels map[string]string // every pair must match
}

// ReapOptions selects the sandboxes Reap destroys. The zero value destroys every sandbox the
// SDK created on the provider.
type ReapOptions struct {
	OlderThan time.Duration     // created at least this long ago
	Labels    map[string]string // every pair must match
	// IdleOnly keeps sandboxes with an SDK command in flight or an SDK background process
	// running. A sandbox whose activity cannot be read counts as busy.
	IdleOnly bool
}

// RunOptions configures Run and Stream. The zero value runs in the sandbox's Workdir (the
// template's working directory, else /workspace) with a 120 s timeout, a 1 MiB cap per
// stream and a closed stdin.
type RunOptions struct {
	Cwd            string            // "": the sandbox's Workdir; relative paths resolve against it
	Env            map[string]string // added to the sandbox's environment
	Timeout        time.Duration     // 0: 120 s
	MaxOutputBytes int               // per stream; 0: 1 MiB. Output holds up to twice this.
	Stdin          []byte            // nil: stdin closed
	StdinReader    io.Reader         // streamed stdin; give Stdin or StdinReader
}

func (o RunOptions) validate(op string) error {
	if o.Timeout < 0 {
		return errorf(CodeInvalidArgument, op, "timeout must not be negative")
	}
	if o.MaxOutputBytes < 0 {
		return errorf(CodeInvalidArgument, op, "maxOutputBytes must not be negative")
	}
	if o.Stdin != nil && o.StdinReader != nil {
		return errorf(CodeInvalidArgument, op, "give Stdin or StdinReader, not both")
	}
	if containsNUL(o.Cwd) {
		return errorf(CodeInvalidArgument, op, "cwd contains a NUL byte")
	}
	return validateEnv(op, "env", o.Env)
}

// Ready says when a background process is ready. Use ReadyPort, ReadyHTTP or ReadyLog.
type Ready struct {
	Port int            // a TCP port is listening
	Path string         // with Port and HTTP: an HTTP GET of this path answers below 500
	HTTP bool           // probe over HTTP
	Log  *regexp.Regexp // a line of output matches
}

// ReadyPort is ready when port accepts connections.
func ReadyPort(port int) *Ready { return &Ready{Port: port} }

// ReadyHTTP is ready when GET path on port answers with a status below 500.
func ReadyHTTP(port int, path string) *Ready {
	if path == "" {
		path = "/"
	}
	return &Ready{Port: port, Path: path, HTTP: true}
}

// ReadyLog is ready when a line of stdout or stderr matches re.
func ReadyLog(re *regexp.Regexp) *Ready { return &Ready{Log: re} }

// StartOptions configures Start.
type StartOptions struct {
	// Name is unique per sandbox: letters, digits, - and _, up to 128. The default is a
	// stable name derived from the command, so the same command maps to the same process.
	Name         string
	Cwd          string
	Env          map[string]string
	Ready        *Ready
	ReadyTimeout time.Duration // 0: 60 s
}

func (o StartOptions) validate() error {
	const op = "start"
	if o.Name != "" && !procName.MatchString(o.Name) {
		return errorf(CodeInvalidArgument, op, "process name %q: use letters, digits, - and _, up to 128", o.Name)
	}
	if o.ReadyTimeout < 0 {
		return errorf(CodeInvalidArgument, op, "ready timeout must not be negative")
	}
	if r := o.Ready; r != nil {
		if r.Log == nil && (r.Port < 1 || r.Port > 65535) {
			return errorf(CodeInvalidArgument, op, "ready port %d is out of range", r.Port)
		}
	}
	return validateEnv(op, "env", o.Env)
}

// SnapshotOptions configures Snapshot.
type SnapshotOptions struct {
	// ExpiresIn deletes the snapshot after this long; 0 keeps it until deleted. Negative or
	// fractional milliseconds are invalid_argument.
	ExpiresIn time.Duration
	// Kind is SnapshotFilesystem (""): the files, on every provider with the "snapshot"
	// capability; or SnapshotFull: memory, processes and files, where the sandbox has
	// "snapshot-full" (local: runsc), else unsupported.
	Kind provider.SnapshotKind
	// Name labels the snapshot for people (at most 128 bytes, no NUL); it need not be unique.
	Name string
}

// Snapshot kinds (see SnapshotOptions.Kind).
const (
	SnapshotFilesystem = provider.SnapshotFilesystem
	SnapshotFull       = provider.SnapshotFull
)

func (o SnapshotOptions) validate() error {
	switch o.Kind {
	case "", SnapshotFilesystem, SnapshotFull:
	default:
		return errorf(CodeInvalidArgument, "snapshot", "unknown snapshot kind %q (filesystem or full)", o.Kind)
	}
	if len(o.Name) > 128 || containsNUL(o.Name) {
		return errorf(CodeInvalidArgument, "snapshot", "a snapshot name is at most 128 bytes without NUL")
	}
	if o.ExpiresIn < 0 {
		return errorf(CodeInvalidArgument, "snapshot", "expiry must not be negative, got %v", o.ExpiresIn)
	}
	if o.ExpiresIn%time.Millisecond != 0 {
		return errorf(CodeInvalidArgument, "snapshot", "expiry must be a whole number of milliseconds, got %v", o.ExpiresIn)
	}
	return nil
}

func containsNUL(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == 0 {
			return true
		}
	}
	return false
}

// nameRule checks a name: one byte that first accepts, then bytes that rest accepts, at
// most max bytes in all (0: no limit). These checks are not regular expressions because
// every program linking this package would compile those at start-up, and `tupper exec`
// is meant to start fast.
type nameRule struct {
	first, rest func(byte) bool
	max         int
}

// MatchString reports whether s follows the rule.
func (r nameRule) MatchString(s string) bool {
	if s == "" || r.max > 0 && len(s) > r.max || !r.first(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if !r.rest(s[i]) {
			return false
		}
	}
	return true
}

func alnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// wordByte accepts ASCII letters, '_' and the bytes of extra.
func wordByte(extra string) func(byte) bool {
	return func(c byte) bool {
		return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || c == '_' || strings.IndexByte(extra, c) >= 0
	}
}
