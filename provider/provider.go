// Package provider is the contract between Tupper's core (package sandbox) and the isolation
// backends that run sandboxes.
//
// # Vocabulary
//
// A Provider makes and finds sandboxes; an Instance is one sandbox. The core (package sandbox)
// owns every behaviour users see — timeouts, output caps, streaming, shell quoting, background
// processes, file editing, search, change tracking, git, redaction, errors — and turns each
// call into a few primitives that an adapter implements:
//
//   - on a Provider: Create, FindByKey, Connect, List, Destroy, Capabilities, Available;
//   - on an Instance: Exec (one shell command, streamed, with stdin, env, cwd and a deadline,
//     or detached), ReadFile, WriteFile, PreviewURL.
//
// Everything else is an optional interface the core discovers with a type assertion, in the
// manner of database/sql/driver, and each one's doc says what happens when it is absent.
// Implementing an interface is its capability: nothing else declares it.
//
// # Optional interfaces
//
// On a Provider:
//
//   - KeyedCreator: an atomic get-or-create by key (listed as "exact-key"). Without it, an
//     exact key needs a locking Locator; a best-effort key is FindByKey, then Create.
//   - Volumer: named volumes, and CreateSpec.Volumes ("volumes"). Without it, volume calls
//     and a create with volumes are CodeUnsupported.
//   - VolumeOpener: a volume's files from the host. Without it, a volume's file API is
//     CodeUnsupported; its files are reached from a sandbox that mounts it.
//   - SnapshotLister: list and inspect snapshots. Without it, CodeUnsupported; snapshots
//     still work by id.
//   - SnapshotDeleter: delete a snapshot now. Without it, a snapshot with an expiry is left
//     to the provider to remove after it.
//   - Templater: list, look up and delete templates. Without it, a server lists none and
//     refuses deletes; CreateSpec.Template still names what the provider knows.
//   - TemplateBuilder: build a template from a Dockerfile into its own store (beside
//     Templater). Without it, builds and their context directories are CodeUnsupported.
//   - Prototyper: the type of its sandboxes, for CapabilitiesOf. Without it, only the
//     provider's own interfaces are listed.
//   - UsageReporter: a sandbox's cumulative CPU, memory peak, disk and network counted from
//     outside it, for the server's usage ledger. Without it, the ledger has the sandbox's
//     key, labels, template and times, and 0 for the figures.
//   - Refuser: the optional interfaces it (or its sandboxes) has but cannot use here, and
//     why. Without it, every interface it has is listed, and works.
//
// On an Instance:
//
//   - FileSystem: native stat, listing, remove, mkdir and rename. Without it, the core runs
//     find, stat, rm, mkdir and mv (needs CapShell).
//   - RangeReader: read part of a file. Without it, the core reads the whole file and skips.
//   - Searcher: native text search. Without it, the core runs grep.
//   - ChangeTracker: checkpoints of a tree and what changed since. Without it, the core
//     keeps a hidden git index in the sandbox (needs CapGit).
//   - ActivityReporter: whether a command the core started still runs. Without it, the core
//     looks for its marked processes (needs CapShell), else counts the sandbox busy.
//   - MetricsReporter: a sample of resource use. Without it, the core samples the cgroup,
//     /proc and the root file system with a script (needs CapShell).
//   - Pauser: pause with the memory kept, and resume ("pause"). Without it, Pause and
//     Resume are CodeUnsupported.
//   - ColdPauser: the cold pause, which ends every process and keeps the files
//     ("pause-cold"). Without it, a pause without memory is CodeUnsupported.
//   - Snapshotter: a filesystem snapshot that CreateSpec.From starts ("snapshot"). Without
//     it, Snapshot and a create From are CodeUnsupported, and so is Fork without a Forker.
//   - KindSnapshotter: a snapshot of a kind (full: memory and processes) with a name.
//     Without it, only unnamed filesystem snapshots (Snapshotter).
//   - Forker: n children in one call. Without it, the core forks through a snapshot, n
//     creates From it and its deletion.
//   - Terminaler: a login shell on a PTY ("terminal"). Without it, Terminal is
//     CodeUnsupported.
//   - CommandTerminaler: a command on a PTY, in a directory. Without it, only the login
//     shell.
//   - TimeoutSetter: move the lifetime deadline. Without it, SetTimeout is CodeUnsupported.
//   - NetworkSetter: replace the network policy of a running sandbox. Without it,
//     SetNetwork is CodeUnsupported.
//   - NetworkReporter: the network policy now. Without it, none is reported.
//   - EgressReporter: what the sandbox reached and what its policy refused. Without it,
//     nothing is reported.
//   - PortDialer: a connection to a port inside, with no listener on the host. Without it,
//     the core dials PreviewURL's host and port.
//   - EnvdDialer: a raw connection to the agent's E2B envd protocol. Without it, the E2B
//     data plane is unavailable.
//   - CapabilityReporter: capabilities of its own (its runtime, its template). Without it,
//     the provider's.
//   - Refuser: as on a Provider, for this sandbox (from its record, say, without probing
//     the host). Without it, its provider's refusals.
//
// On a Terminal: TerminalWaiter, how its process ended. Without it, the end of its output
// is all a caller learns.
//
// # Capabilities
//
// A provider declares a Capabilities set, probed on the real host when the provider is built:
// what must be known before a create, because the core fails closed with it (an option the
// provider cannot enforce — a network mode, a size, a timeout, users, bound secrets — fails
// with CodeUnsupported before anything is created), and what differs between its sandboxes
// (CapSnapshotFull, CapPauseFreesMemory; CapabilityReporter). It never declares an optional
// interface: CapabilitiesOf lists those it and its sandboxes implement under their names
// ("pause", "snapshot", …) less those it refuses (Refuser), and that listing is what tupper
// doctor and a server's GET /v1/info show. A provider that implements an interface but
// cannot use it here (a host without the cgroup freezer) refuses each call with
// CodeUnsupported, saying why, and Refuse returns the same error, so the listing and the
// calls agree. The conformance suite (package sandboxtest) tests every listed capability, so
// a listing is a promise.
//
// # Pauses
//
// A pause keeps the memory (Pauser) or does not (ColdPauser). A pause that keeps it is
// frozen (the cgroup freezer: the memory stays resident) or saved (written to disk and
// released: CapPauseFreesMemory); either way Resume continues the processes. The cold pause
// ends them and keeps the files; Resume boots the sandbox again. On the wire the cold pause
// is "pause-cold", E2B's keepMemory false, and onTimeout "pause-cold"; in the SDK,
// PauseOptions.DropMemory.
//
// # Errors
//
// Every method returns errors as *Error with one of the fixed codes (wrap native errors with
// Wrap or Errorf). A sandbox that does not exist is CodeNotFound. Messages never hold
// credentials: pass them through StripCredentials.
//
// # Concurrency
//
// Every method of a Provider and an Instance may be called concurrently from many goroutines.
// No method stores its ctx.
package provider

import (
	"context"
	"io"
	"time"
)

// Provider makes, finds and destroys sandboxes of one backend.
type Provider interface {
	// Name is the registry name, e.g. "local" or "memory".
	Name() string

	// Capabilities is what the provider can enforce or do, probed when it was constructed.
	// Each call returns a set the caller owns (Capabilities.Clone of the provider's own):
	// writing into it changes nothing the provider reports next.
	Capabilities() Capabilities

	// Available returns nil when the provider can create sandboxes here, or a CodeUnavailable
	// error whose message says what to install or configure.
	Available(ctx context.Context) error

	// Create makes a new sandbox. The core has validated spec and checked it against
	// Capabilities. When ctx is done before the sandbox is ready, Create undoes what it did.
	// Create does not look at spec.Key beyond storing it; get-or-create is the core's job
	// (see FindByKey and KeyedCreator).
	Create(ctx context.Context, spec CreateSpec) (Instance, error)

	// FindByKey returns the live sandbox created with key, or CodeNotFound.
	FindByKey(ctx context.Context, key string) (Instance, error)

	// Connect returns a handle to the sandbox with this id, or CodeNotFound. It runs no
	// command in the sandbox.
	Connect(ctx context.Context, id string) (Instance, error)

	// List returns the sandboxes whose labels include every pair of filter.Labels.
	List(ctx context.Context, filter ListFilter) ([]Info, error)

	// Destroy stops the sandbox and removes everything it left. Destroying a sandbox that is
	// already gone returns CodeNotFound.
	Destroy(ctx context.Context, id string) error
}

// Instance is one sandbox. Close releases client-side resources only; the sandbox lives on
// until it is destroyed or its deadline passes.
type Instance interface {
	// Info returns the sandbox's identity as recorded by the provider. It need not run a command.
	Info(ctx context.Context) (Info, error)

	// Exec runs req.Command with /bin/sh -c in a fresh shell.
	//
	// Unless req.Detach is set, Exec streams the command's output to req.Stdout and req.Stderr
	// (either may be nil: discard), feeds req.Stdin (nil: stdin is closed at once), and returns
	// when the command has exited and its output has been written. The environment is the
	// sandbox's (CreateSpec.Env and Secrets) overlaid with req.Env. req.Cwd is absolute.
	//
	// When ctx is done first, the provider kills the command's whole process group and
	// returns an error that wraps ctx.Err(); the core turns that into a timed-out or aborted
	// result. A command that exits non-zero is a result, not an error.
	//
	// With req.Detach, the command starts in its own session and process group with stdin,
	// stdout and stderr on /dev/null, Exec returns as soon as it has started, and
	// ExecResult.PID is its process id (also its process group id), which `kill -SIG -PID`
	// inside the sandbox reaches. A detached command lives until it exits or the sandbox ends,
	// whatever happens to ctx or to the calling process.
	Exec(ctx context.Context, req ExecRequest) (ExecResult, error)

	// ReadFile opens the file at the absolute path for reading. Missing: CodeNotFound; a
	// directory: CodeInvalidArgument.
	ReadFile(ctx context.Context, path string) (io.ReadCloser, error)

	// WriteFile writes r to the absolute path, creating parent directories and replacing any
	// file there. Mode, when not nil, sets the file's permission bits (0 to 0o7777).
	WriteFile(ctx context.Context, path string, r io.Reader, mode *uint32) error

	// PreviewURL returns a URL on which the host reaches port inside the sandbox.
	// CodeUnsupported when the provider has no preview.
	PreviewURL(ctx context.Context, port int) (string, error)

	// Close releases client resources. It is idempotent.
	Close() error
}

// ExecRequest is one command for Instance.Exec.
type ExecRequest struct {
	Command string            // a shell script, run with /bin/sh -c
	Cwd     string            // absolute working directory
	Env     map[string]string // added to the sandbox's environment
	User    string            // the user to run as; "" is the sandbox's default (root)
	Stdin   io.Reader         // nil: closed
	Stdout  io.Writer         // nil: discarded
	Stderr  io.Writer         // nil: discarded
	Detach  bool              // start in the background and return at once
}

// ExecResult is how a command ended, or for a detached command how it started.
type ExecResult struct {
	ExitCode int    // the exit status; 128+n when killed by signal n
	Signal   string // the signal that killed it, e.g. "SIGKILL", or ""
	PID      int    // the process (and process group) id, set for detached commands
	// OOMKilled is set when the kernel's OOM killer ended the command (the sandbox reached
	// its memory limit): ExitCode is then 137 and Signal SIGKILL, as for any SIGKILL.
	OOMKilled bool
}

// CreateSpec is everything a provider needs to make a sandbox. Zero values are defaults.
type CreateSpec struct {
	Key         string            // get-or-create key, stored so FindByKey finds it
	Labels      map[string]string // stored and returned by List and Info
	Env         map[string]string // the environment of every command
	Secrets     map[string]string // set as environment variables too; the core redacts them
	Size        Size              // zero: the provider's default (still bounded)
	Network     Network           // zero: NetworkAll
	Ports       []int             // ports to preview; providers that route all ports ignore it
	IdleTimeout time.Duration     // stop after this long without activity; 0: never
	Timeout     time.Duration     // hard lifetime; 0: none
	From        string            // a snapshot id to start from (Snapshotter)
	Template    string            // provider-specific template name; "" is the default
	Runtime     string            // provider-specific runtime, e.g. "runc" or "runsc"
	Volumes     []VolumeMount     // named volumes to mount (Volumer); none with From: the snapshot's, where the provider records them

	// BoundSecrets never enter the sandbox: it sees a placeholder in the variable of each
	// name, which the provider's egress proxy replaces with the value in HTTP requests to
	// the secret's hosts only (CapBoundSecrets; see BoundSecret).
	BoundSecrets map[string]BoundSecret
}

// BoundSecret is a secret bound to destinations: Value is written, outside the sandbox, in
// place of a placeholder the sandbox holds, into the headers (and query) of HTTP and HTTPS
// requests to Hosts, exact names or wildcards as in an allow list (*.example.com). See
// package egress and docs/network.md.
//
// With Header set there is no placeholder and the sandbox's variable is not set: the proxy
// sets that HTTP header to Value in every HTTPS request to Hosts (never in plain HTTP), replacing any the sandbox sent
// (how E2B's network rules inject headers). They are not merged across hosts: a request
// gets the headers of the secrets whose host matches it most specifically (an exact name,
// else the longest wildcard) only; where two of those set one header, the later in name
// order wins.
type BoundSecret struct {
	Value  string   `json:"value"`
	Hosts  []string `json:"hosts"`
	Header string   `json:"header,omitempty"`
}

// Size is a machine size: a named preset or custom figures.
type Size struct {
	Name     string  // "small", "medium", "large", or "" for custom/default
	CPU      float64 // cores
	MemoryMB int
	DiskGB   int
}

// IsZero reports whether no size was asked for.
func (s Size) IsZero() bool { return s == Size{} }

// The named sizes.
var Sizes = map[string]Size{
	"small":  {Name: "small", CPU: 1, MemoryMB: 1024, DiskGB: 5},
	"medium": {Name: "medium", CPU: 2, MemoryMB: 4096, DiskGB: 10},
	"large":  {Name: "large", CPU: 4, MemoryMB: 8192, DiskGB: 20},
}

// Resolved returns s with a named preset's figures filled in.
func (s Size) Resolved() Size {
	if p, ok := Sizes[s.Name]; ok {
		return p
	}
	return s
}

// NetworkMode is how much network a sandbox has.
type NetworkMode string

// Network modes.
const (
	NetworkAll   NetworkMode = "all"   // egress to the internet (providers/local: public addresses only)
	NetworkNone  NetworkMode = "none"  // loopback only
	NetworkAllow NetworkMode = "allow" // egress by policy: Network.Allow minus Network.Deny
)

// Network is a sandbox's network policy.
//
// With NetworkAllow, Allow and Deny list destinations: exact domain names (pypi.org),
// wildcards (*.github.com, the names below github.com), IP addresses and CIDR prefixes (see
// package egress). Deny wins; a non-empty Allow denies whatever it does not name; an empty
// Allow allows whatever Deny does not name. Mode "" with a list means NetworkAllow.
//
// Learn is learn mode: a policy (NetworkAllow) even with no lists, so that everything the
// sandbox reaches passes through the provider's egress checks and is recorded
// (EgressReporter), for an allow list made from what a run needed. With no lists it refuses
// nothing network all would allow.
//
// Proxy, when set, is a SOCKS5 proxy every TCP connection the policy allows is tunnelled
// through, outside the sandbox (CapEgressProxy; see EgressProxy). It makes a policy too:
// with no lists, everything network all would allow, through the proxy.
type Network struct {
	Mode  NetworkMode  // "" means NetworkAll, or NetworkAllow when a list is given, Learn or Proxy
	Allow []string     // destinations allowed, with NetworkAllow
	Deny  []string     // destinations denied, with NetworkAllow
	Learn bool         // a policy even with empty lists: everything reached is recorded
	Proxy *EgressProxy // tunnel allowed TCP through this SOCKS5 proxy, with NetworkAllow
}

// Normalized returns n with its mode filled in: NetworkAllow when "" and a list is given
// (or Learn, or Proxy), NetworkAll when "" and none is.
func (n Network) Normalized() Network {
	if n.Mode == "" {
		n.Mode = NetworkAll
		if len(n.Allow) > 0 || len(n.Deny) > 0 || n.Learn || n.Proxy != nil {
			n.Mode = NetworkAllow
		}
	}
	return n
}

// State is a sandbox's lifecycle state.
type State string

// States.
const (
	StateRunning State = "running"
	StatePaused  State = "paused"
	StateStopped State = "stopped"
)

// Info identifies a sandbox.
type Info struct {
	ID        string
	Key       string
	Labels    map[string]string
	State     State
	CreatedAt time.Time
	Template  string
	Runtime   string
	Deadline  time.Time // the hard lifetime deadline; zero: none
	// Workdir is the template's working directory (an image's WorkingDir, a Dockerfile's
	// WORKDIR, E2B's setWorkdir): where a command given no cwd runs. "" when the template
	// names none; the SDK then uses its default, /workspace.
	Workdir string
	// Restarts are the times the provider found the sandbox stopped by one of its limits
	// and booted it again on its files, with why, oldest first (the local provider's gVisor
	// sandboxes after a fork bomb or a memory hog: docs/security.md, finding 7); empty for a
	// provider that never does.
	Restarts []Restart
	// Pooled is true on the handle Create returned when the provider's warm pool served
	// the create (PoolReporter); false everywhere else.
	Pooled bool
}

// Restart is one time a provider found a sandbox stopped and booted it again.
type Restart struct {
	At     time.Time `json:"at"`
	Reason string    `json:"reason"`
}

// ListFilter selects sandboxes for List.
type ListFilter struct {
	Labels map[string]string // every pair must match
}

// Matches reports whether labels include every pair of f.Labels.
func (f ListFilter) Matches(labels map[string]string) bool {
	for k, v := range f.Labels {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}
