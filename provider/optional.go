package provider

import (
	"context"
	"io"
	"maps"
	"net"
	"slices"
	"strings"
	"time"
)

// Capability is something a provider can enforce or do, by the name tupper doctor, a
// server's GET /v1/info and a sandbox's description list it under.
type Capability string

// Capabilities a provider declares (Provider.Capabilities, CapabilityReporter): what must be
// known before a create, because the core fails closed on an option the provider cannot
// enforce, and what an optional interface's calls do on this sandbox where that differs
// from one sandbox to another.
const (
	CapNetworkPolicy Capability = "network-policy" // NetworkAllow is enforced
	CapSize          Capability = "size"           // CreateSpec.Size is enforced
	CapNetworkNone   Capability = "network-none"   // NetworkNone is enforced
	CapNetworkAll    Capability = "network-all"    // NetworkAll gives real egress
	CapTimeout       Capability = "timeout"        // CreateSpec.Timeout is enforced
	CapIdleTimeout   Capability = "idle-timeout"   // CreateSpec.IdleTimeout is enforced
	CapPreview       Capability = "preview"        // PreviewURL works and ports are reachable
	CapShell         Capability = "shell"          // a full POSIX shell with coreutils, /proc and signals
	CapGit           Capability = "git"            // git is installed in the sandbox
	CapUsers         Capability = "users"          // ExecRequest.User selects a real OS user
	CapPersistent    Capability = "persistent"     // sandboxes outlive the creating process
	CapResourceLimit Capability = "resource-limit" // memory, pids and disk are bounded
	CapBoundSecrets  Capability = "bound-secrets"  // CreateSpec.BoundSecrets never enter the sandbox
	CapEgressProxy   Capability = "egress-proxy"   // Network.Proxy: allowed TCP tunnelled through SOCKS5

	// CapSnapshotFull: KindSnapshotter takes SnapshotFull (memory and processes) on this
	// sandbox (local: runtime runsc with network none). The core forks with a full snapshot
	// where it is declared, else with a filesystem one.
	CapSnapshotFull Capability = "snapshot-full"
	// CapPauseFreesMemory: this sandbox's Pause is a saved pause, not a frozen one: it
	// saves the memory and processes to disk and releases the memory, and Resume restores
	// them (local: runtime runsc with network none). Without it a paused sandbox's memory
	// stays resident (the freezer). Either way its processes continue after Resume; compare
	// the cold pause (ColdPauser), which ends them.
	CapPauseFreesMemory Capability = "pause-frees-memory"
)

// The names under which CapabilitiesOf lists optional interfaces. A provider never declares
// them: implementing the interface is the declaration, and a provider or sandbox that
// implements one but cannot use it here says so with Refuser.
const (
	CapPause     Capability = "pause"      // Pauser
	CapPauseCold Capability = "pause-cold" // ColdPauser
	CapSnapshot  Capability = "snapshot"   // Snapshotter (and CreateSpec.From)
	CapTerminal  Capability = "terminal"   // Terminaler
	CapVolumes   Capability = "volumes"    // Volumer (and CreateSpec.Volumes)
	CapExactKey  Capability = "exact-key"  // KeyedCreator
)

// listed is every optional interface CapabilitiesOf lists, with its name: on the provider
// (Volumer, KeyedCreator) or on its sandboxes (the rest).
var listed = []struct {
	c          Capability
	onProvider bool
	is         func(any) bool
}{
	{CapPause, false, func(v any) bool { _, ok := v.(Pauser); return ok }},
	{CapPauseCold, false, func(v any) bool { _, ok := v.(ColdPauser); return ok }},
	{CapSnapshot, false, func(v any) bool { _, ok := v.(Snapshotter); return ok }},
	{CapTerminal, false, func(v any) bool { _, ok := v.(Terminaler); return ok }},
	{CapVolumes, true, func(v any) bool { _, ok := v.(Volumer); return ok }},
	{CapExactKey, true, func(v any) bool { _, ok := v.(KeyedCreator); return ok }},
}

// Prototyper is optional on a Provider: Prototype returns a value of the type its Create
// returns (a nil pointer will do: nothing is called on it), so that CapabilitiesOf can list
// the optional interfaces of its sandboxes before there is one. Without it, only the
// provider's own interfaces and declared capabilities are listed.
type Prototyper interface {
	Prototype() Instance
}

// Refuser is optional on a Provider that implements an optional interface, or makes
// sandboxes that do, which it cannot use here: a host without the cgroup freezer, a
// configuration without pause, a server whose provider lacks it. Refuse returns nil when
// the interface listed as c works, else the CodeUnsupported error, saying why, that each
// call of it returns. CapabilitiesOf leaves out what it refuses. An Instance may be a
// Refuser too, answering for itself (from what was recorded at its creation, without
// probing the host); CapabilitiesOfInstance then asks it instead of its provider.
type Refuser interface {
	Refuse(c Capability) error
}

// NamesInterface reports whether c is the name CapabilitiesOf lists an optional interface
// under (CapPause…), which no provider declares.
func NamesInterface(c Capability) bool {
	for _, l := range listed {
		if l.c == c {
			return true
		}
	}
	return false
}

// Declared returns a copy of s without the names of optional interfaces: for a provider
// whose set comes from elsewhere (a probe, a record, a server) to declare.
func (s Capabilities) Declared() Capabilities {
	out := s.Clone()
	maps.DeleteFunc(out, func(c Capability, _ bool) bool { return NamesInterface(c) })
	return out
}

// Refusal is p's Refuse(c), or nil when p is no Refuser.
func Refusal(p Provider, c Capability) error {
	if r, ok := p.(Refuser); ok {
		return r.Refuse(c)
	}
	return nil
}

// CapabilitiesOf is everything p can do, as tupper doctor and GET /v1/info list it:
// the capabilities it declares and the name of each optional interface it or its sandboxes
// (Prototyper) implement, less those it refuses (Refuser). It is the one answer to "can
// this provider do it" before a sandbox exists; a call still checks its interface.
func CapabilitiesOf(p Provider) Capabilities {
	var proto Instance
	if pp, ok := p.(Prototyper); ok {
		proto = pp.Prototype()
	}
	return withListed(p, proto, nil, p.Capabilities().Declared())
}

// CapabilitiesOfInstance is what the sandbox inst of p can do: the capabilities it reports
// (CapabilityReporter; else p's), and the name of each optional interface it or p
// implements, less those it refuses (when it is a Refuser; else those p refuses). The SDK's
// Sandbox.Capabilities.
func CapabilitiesOfInstance(p Provider, inst Instance) Capabilities {
	var caps Capabilities
	if cr, ok := inst.(CapabilityReporter); ok {
		caps = cr.Capabilities()
	} else {
		caps = p.Capabilities()
	}
	var r Refuser
	if ir, ok := inst.(Refuser); ok {
		r = ir
	}
	return withListed(p, inst, r, caps.Declared())
}

// withListed adds to caps (the caller's own, without names of interfaces: a declared one
// would list an interface nobody checked) the names of the interfaces p and inst (nil: none)
// implement, and removes what r refuses (nil: p, when it is a Refuser).
func withListed(p Provider, inst Instance, r Refuser, caps Capabilities) Capabilities {
	if caps == nil {
		caps = Capabilities{}
	}
	for _, l := range listed {
		on := any(inst)
		if l.onProvider {
			on = p
		}
		if on != nil && l.is(on) {
			caps[l.c] = true
		}
	}
	if r == nil {
		r, _ = p.(Refuser)
	}
	if r != nil {
		for c := range caps {
			if r.Refuse(c) != nil {
				delete(caps, c)
			}
		}
	}
	return caps
}

// Capabilities is a set of capabilities.
type Capabilities map[Capability]bool

// NewCapabilities returns a set holding caps.
func NewCapabilities(caps ...Capability) Capabilities {
	s := make(Capabilities, len(caps))
	for _, c := range caps {
		s[c] = true
	}
	return s
}

// Clone returns a copy of the set that shares nothing with it (nil for nil). Providers
// return their own set through it, so callers cannot write into it.
func (s Capabilities) Clone() Capabilities { return maps.Clone(s) }

// Has reports whether c is in the set.
func (s Capabilities) Has(c Capability) bool { return s[c] }

// List returns the set's members, sorted.
func (s Capabilities) List() []Capability {
	out := make([]Capability, 0, len(s))
	for c, ok := range s {
		if ok {
			out = append(out, c)
		}
	}
	slices.Sort(out)
	return out
}

func (s Capabilities) String() string {
	parts := make([]string, 0, len(s))
	for _, c := range s.List() {
		parts = append(parts, string(c))
	}
	return strings.Join(parts, ",")
}

// FileType is the type of a file system entry.
type FileType string

// File types.
const (
	TypeFile    FileType = "file"
	TypeDir     FileType = "dir"
	TypeSymlink FileType = "symlink"
	TypeOther   FileType = "other"
)

// FileInfo describes one file system entry.
type FileInfo struct {
	Path       string // absolute
	Type       FileType
	Size       int64
	Mode       uint32 // permission bits
	ModifiedAt time.Time
	Target     string // symlink target, for TypeSymlink
}

// FileSystem is the optional native file API of an instance. Without it, the core runs
// commands in the sandbox (find, stat, rm, mkdir, mv) and needs CapShell.
type FileSystem interface {
	// Stat describes path without following a final symlink. Missing: CodeNotFound.
	Stat(ctx context.Context, path string) (FileInfo, error)
	// ListDir lists dir; with recursive, everything below it (not following symlinks).
	// Missing: CodeNotFound; not a directory: CodeInvalidArgument.
	ListDir(ctx context.Context, dir string, recursive bool) ([]FileInfo, error)
	// Remove removes path; a non-empty directory needs recursive. Missing: CodeNotFound.
	Remove(ctx context.Context, path string, recursive bool) error
	// MakeDir creates dir and its parents; an existing directory is not an error.
	MakeDir(ctx context.Context, dir string) error
	// Rename moves from to to, replacing a file there.
	Rename(ctx context.Context, from, to string) error
}

// SearchMatch is one line that contains a search query.
type SearchMatch struct {
	Path string // absolute
	Line int    // 1-based
	Text string // the line, without its newline
}

// Searcher is an optional native text search. Without it, the core runs grep in the sandbox.
type Searcher interface {
	// Search finds lines that contain query (a literal string) in regular files below dir
	// whose base name matches glob (all files if glob is ""), skipping binary files and
	// stopping after max matches.
	Search(ctx context.Context, query, dir, glob string, max int) ([]SearchMatch, error)
}

// Changes is what changed in a directory tree since a checkpoint.
type Changes struct {
	Added    []string // absolute paths, sorted
	Modified []string
	Removed  []string
	Patch    string // unified diff
}

// ChangeTracker is an optional native change tracker. Without it, the core keeps checkpoints
// in a hidden git index inside the sandbox (needs CapGit).
type ChangeTracker interface {
	// Mark records a checkpoint of dir's tree under name, replacing one of the same name.
	Mark(ctx context.Context, dir, name string) error
	// Changes compares dir's tree now against checkpoint name; CodeInvalidArgument when there
	// is no such checkpoint.
	Changes(ctx context.Context, dir, name string) (Changes, error)
}

// ActivityReporter is optional. Busy reports whether a command the core started (a run or a
// background process) is still running. Without it, the core looks for processes carrying
// SANDBOX_SDK_RUN=1 with a command (needs CapShell); a sandbox it cannot inspect counts as busy.
type ActivityReporter interface {
	Busy(ctx context.Context) (bool, error)
}

// KeyedCreator is optional (listed as CapExactKey): an atomic get-or-create by
// CreateSpec.Key; the core uses it for exact keys when the caller gives no locator lock.
// Without it, an exact key needs a Locator that can lock (else Create fails
// with CodeUnsupported before anything is made), and a best-effort key is FindByKey, then
// Create.
type KeyedCreator interface {
	GetOrCreate(ctx context.Context, spec CreateSpec) (inst Instance, created bool, err error)
}

// Pauser is optional (listed as CapPause): pause every process of a sandbox, its memory
// kept, and continue them. The pause is frozen (the memory stays resident) or saved (to
// disk, the memory released: CapPauseFreesMemory); either way Resume continues the
// processes. Without it, Pause and Resume fail with CodeUnsupported.
type Pauser interface {
	Pause(ctx context.Context) error
	Resume(ctx context.Context) error
}

// ColdPauser is optional (listed as CapPauseCold): the cold pause, a pause without memory
// (E2B's keepMemory false). PauseCold ends every process of a sandbox and
// releases their memory, keeping its files (the writable layer, volumes' mounts), id,
// labels, token, deadline, network and ports; Info then reports StatePaused. Resume
// (Pauser) boots a sandbox so paused on the same files: a new init and agent, no process
// from before. PauseCold of a sandbox already paused either way returns nil and changes
// nothing. A PauseCold interrupted by a crash leaves the sandbox either running or paused
// so, never lost. A sandbox that cannot (a Docker sandbox made by another process) refuses
// with CodeUnsupported before anything changes. Without it, a pause without memory fails
// with CodeUnsupported before anything changes.
type ColdPauser interface {
	PauseCold(ctx context.Context) error
}

// Snapshotter is optional (listed as CapSnapshot): capture a sandbox so CreateSpec.From can
// start from it. Without it, Snapshot fails with CodeUnsupported and so does a create with
// From, before anything is made.
type Snapshotter interface {
	// Snapshot returns the new snapshot's id. expires 0 keeps it until it is deleted.
	Snapshot(ctx context.Context, expires time.Duration) (string, error)
}

// SnapshotKind is what a snapshot holds.
type SnapshotKind string

// Snapshot kinds.
const (
	// SnapshotFilesystem is the sandbox's files as it changed them; a sandbox started from
	// it boots afresh (Snapshotter).
	SnapshotFilesystem SnapshotKind = "filesystem"
	// SnapshotFull is its memory, processes and files: a sandbox started from it continues
	// where the snapshot was taken, its processes running (CapSnapshotFull).
	SnapshotFull SnapshotKind = "full"
)

// SnapshotRequest is what KindSnapshotter.SnapshotKind takes.
type SnapshotRequest struct {
	Kind    SnapshotKind  // "" is SnapshotFilesystem
	Name    string        // a label for people; not unique, may be empty
	Expires time.Duration // 0: kept until deleted
	// Transient says the snapshot only carries the sandbox to creates made right after
	// it, by the same caller, who then deletes it (the core's fork). A provider may then
	// skip what only a kept snapshot needs (the local one: storage by content, syncing its
	// files, listing it); a create From it and SnapshotInfo work as for any snapshot.
	Transient bool
}

// SnapshotInfo describes a snapshot.
type SnapshotInfo struct {
	ID        string
	Name      string
	Kind      SnapshotKind
	Template  string // the template of the sandbox it was taken from, which From starts
	Runtime   string // that sandbox's runtime; a full snapshot restores only on it
	Network   NetworkMode
	Source    string // that sandbox's id
	CreatedAt time.Time
	ExpiresAt time.Time // zero: kept until deleted
	Size      int64     // bytes on the host's disk
	// Policy is that sandbox's network when it was taken, where the provider keeps it (a
	// sandbox with an egress policy: its lists, Learn for an open one, NetworkNone for one
	// that allowed nothing); nil: Network says all that is known. Fork gives it to the
	// children.
	Policy *Network
	// Volumes are the volumes that sandbox mounted, which a sandbox From it mounts again by
	// name unless its create names its own (never their files: volumes are shared storage).
	Volumes []VolumeMount
}

// KindSnapshotter is optional beside Snapshotter: a snapshot of a given kind, with a name.
// Without it, Snapshot is the only kind there is (SnapshotFilesystem) and a request for
// SnapshotFull, or for a name, fails with CodeUnsupported. A SnapshotFull request on a
// sandbox without CapSnapshotFull is refused with CodeUnsupported before anything is
// written.
type KindSnapshotter interface {
	SnapshotKind(ctx context.Context, req SnapshotRequest) (string, error)
}

// SnapshotLister is optional on a Provider whose sandboxes are Snapshotters: list and inspect its snapshots
// (expired ones are neither listed nor found). An unknown id is CodeNotFound. Without it,
// snapshots cannot be listed or inspected (CodeUnsupported); they can still be used by id.
type SnapshotLister interface {
	Snapshots(ctx context.Context) ([]SnapshotInfo, error)
	SnapshotInfo(ctx context.Context, id string) (SnapshotInfo, error)
}

// Forker is optional on an Instance: n new sandboxes from this running one, which keeps
// running, each independent of it and of the others. The core calls it with the options it
// validated. Without it, the core forks through a snapshot: a full one where the sandbox has
// CapSnapshotFull (the children continue its processes), else a filesystem one (the children
// boot afresh on its files), then n creates From it, then it deletes the snapshot
// (SnapshotDeleter; else it expires); a sandbox that is no Snapshotter either cannot fork
// (CodeUnsupported, before anything is made).
type Forker interface {
	Fork(ctx context.Context, req ForkRequest) ([]Instance, error)
}

// ForkRequest is what Forker.Fork takes.
type ForkRequest struct {
	N       int               // how many children, at least 1
	Labels  map[string]string // each child's labels
	Timeout time.Duration     // each child's hard lifetime; 0: none
}

// SnapshotDeleter is optional on a Provider whose sandboxes are Snapshotters: delete a snapshot now (a server
// deletes those it made once they expire). Deleting one that does not exist is CodeNotFound.
// Without it, a snapshot made with an expiry is left to the provider to remove after it.
type SnapshotDeleter interface {
	DeleteSnapshot(ctx context.Context, id string) error
}

// TemplateInfo describes one of a provider's templates: what CreateSpec.Template names.
type TemplateInfo struct {
	Name    string
	Tags    []string // other names for it
	Builtin bool     // the provider's own; cannot be deleted
	Source  string   // where it came from (an image, a Dockerfile, "built in: …")
	Layers  int
	Size    int64 // bytes of its layers' files; 0 when unknown or built in
	Created time.Time
	Build   string // the id of the build that made it; "" when none did (an import, one not made yet)
}

// Templater is optional on a Provider: list, look up and delete its templates (a server's
// /v1/templates). Template finds one by name or tag, cheaply enough for a create's path
// (no sizes of other templates); an unknown name is CodeNotFound. A built-in template not
// made yet is listed and found with Layers 0. Deleting one a sandbox or snapshot uses is
// CodeConflict unless force; a built-in one the provider cannot make again is
// CodeInvalidArgument. Without it, a server lists no templates, answers 404 for each and
// refuses deletes with CodeUnsupported; CreateSpec.Template still names whatever the
// provider knows.
type Templater interface {
	Templates(ctx context.Context) ([]TemplateInfo, error)
	Template(ctx context.Context, name string) (TemplateInfo, error)
	DeleteTemplate(ctx context.Context, name string, force bool) error
}

// Terminal is an interactive PTY.
type Terminal interface {
	Write(p []byte) (int, error)
	Read(p []byte) (int, error)
	Resize(ctx context.Context, cols, rows int) error
	Close() error
}

// CapabilityReporter is optional: an Instance whose capabilities are its own rather than
// its provider's (a local sandbox on gVisor, say, where the provider's default runtime is
// runc) reports them, in a set the caller owns, as Provider.Capabilities does. The SDK uses
// them for that sandbox; without it, the provider's.
type CapabilityReporter interface {
	Capabilities() Capabilities
}

// TerminalWaiter is optional on a Terminal: Wait blocks until the terminal's process ends
// (or ctx does) and says how it ended. Without it, the end of the terminal's output is all a
// caller learns: `tupper exec -t` exits 0 and the server's terminal WebSocket closes without
// an exit message.
type TerminalWaiter interface {
	Wait(ctx context.Context) (ExecResult, error)
}

// Terminaler is optional (listed as CapTerminal): an interactive login shell on a PTY of
// cols×rows in the default directory. Without it, Terminal fails with CodeUnsupported;
// there is no fallback.
type Terminaler interface {
	Terminal(ctx context.Context, cols, rows int) (Terminal, error)
}

// CommandTerminaler is optional beside Terminaler: run argv
// (empty: a login shell) in cwd (empty: the default directory) on a PTY of cols×rows, like
// `docker exec -it`. Without it, only the login shell of Terminaler is available: a terminal
// with a command or a directory fails with CodeUnsupported.
type CommandTerminaler interface {
	TerminalCommand(ctx context.Context, argv []string, cwd string, cols, rows int) (Terminal, error)
}

// TimeoutSetter is optional: move the hard lifetime deadline, counted from now. Without it,
// SetTimeout fails with CodeUnsupported. (A create with a Timeout needs CapTimeout, which a
// provider declares when it enforces the deadline.)
type TimeoutSetter interface {
	SetTimeout(ctx context.Context, d time.Duration) error
}

// NetworkSetter is optional: replace a running sandbox's network policy (Network as at
// create; NetworkNone then means nothing leaves). Connections the new policy refuses are
// cut before it returns. Without it, SetNetwork fails with CodeUnsupported.
type NetworkSetter interface {
	SetNetwork(ctx context.Context, n Network) error
}

// NetworkReporter is optional: the network policy a sandbox has now (after any
// SetNetwork), its proxy's password removed (EgressProxy.Redacted). Without it, a
// sandbox's network is not reported.
type NetworkReporter interface {
	Network(ctx context.Context) (Network, error)
}

// PoolReporter is optional, on a Provider that keeps a warm pool of started sandboxes:
// the pool's state now. Without it (or with ok false) the provider has no pool, and a
// server reports none.
type PoolReporter interface {
	PoolStats() (s PoolStats, ok bool)
}

// PoolStats is a warm pool's state. Hits and Misses count since the provider was made: a
// hit is a create the pool served, a miss one it could have served but found empty.
type PoolStats struct {
	Target, Ready int
	Hits, Misses  uint64
}

// EgressReporter is optional: what a sandbox with a network policy (NetworkAllow) asked for
// and reached, and what its policy refused, oldest first, from a cursor ("" is the start).
// Names in entries come from the sandbox: bounded and stripped of anything but the
// characters of a host name, but otherwise untrusted. Without it (or for a sandbox without
// a policy, CodeUnsupported), nothing is reported: denials are seen only as the failures
// of the commands that met them.
type EgressReporter interface {
	Egress(ctx context.Context, after string) (EgressLog, error)
}

// EgressLog is a page of a sandbox's egress record.
type EgressLog struct {
	Entries []EgressEntry `json:"entries"`
	Cursor  string        `json:"cursor"`         // pass as after for the entries that follow
	More    bool          `json:"more,omitempty"` // more entries follow Cursor now
}

// EgressEntry is one destination a sandbox asked for or reached. The same allowed entry is
// recorded once; the same refusal at most once a second.
type EgressEntry struct {
	Time    time.Time `json:"time"`
	Kind    string    `json:"kind"`           // "dns" (a name asked) or "connect" (a connection)
	Name    string    `json:"name,omitempty"` // the name asked, or the TLS SNI / HTTP Host of a connection
	Via     string    `json:"via,omitempty"`  // connect without a name: the allowed name whose answer held the address
	Type    string    `json:"type,omitempty"` // dns: the query type (A, AAAA, …)
	Dest    string    `json:"dest,omitempty"` // connect: address and port
	Allowed bool      `json:"allowed"`
	Reason  string    `json:"reason,omitempty"` // why it was refused (or failed)
}

// RangeReader is optional: read part of a file. Without it, the core reads the whole file
// and skips to offset (used for log cursors and ranged downloads).
type RangeReader interface {
	// ReadFileRange returns up to length bytes from offset (length < 0: to the end). An
	// offset past the end gives an empty reader.
	ReadFileRange(ctx context.Context, path string, offset, length int64) (io.ReadCloser, error)
}

// EnvdDialer is optional: a raw connection to the sandbox's agent, which speaks E2B's envd
// protocol (Connect RPC process and filesystem services, /files, /health) over HTTP. The
// server passes E2B data-plane traffic through it unchanged. Without it, the E2B data plane
// is unavailable for that provider.
type EnvdDialer interface {
	DialEnvd(ctx context.Context) (net.Conn, error)
}

// PortDialer is optional: a connection to a TCP port inside the sandbox (127.0.0.1:port
// there) made without a listener on the host, so nothing else on the host can reach the
// port. The server proxies previews through it. Without it, the core dials the host and port
// of PreviewURL when that is a plain http://HOST:PORT/ URL, and fails with CodeUnsupported
// otherwise.
type PortDialer interface {
	DialPort(ctx context.Context, port int) (net.Conn, error)
}

// Metrics is one sample of a sandbox's resource use. Values the sandbox cannot show are 0.
type Metrics struct {
	At         time.Time // when it was measured
	CPUCount   int       // the CPUs the sandbox may use (its quota, rounded up), at least 1
	CPUUsedPct float64   // CPU use over the sample, 0–100, of CPUCount
	MemUsed    int64     // bytes
	MemTotal   int64     // bytes: the sandbox's memory limit, else the machine's memory
	MemCache   int64     // bytes of page cache
	DiskUsed   int64     // bytes used on the root file system
	DiskTotal  int64     // bytes of the root file system
}

// MetricsReporter is optional: one sample of the sandbox's resource use, measured now.
// Without it, the core samples the sandbox's cgroup, /proc and root file system with a shell
// script run in the sandbox (needs CapShell; else CodeUnsupported).
type MetricsReporter interface {
	Metrics(ctx context.Context) (Metrics, error)
}

// EndReporter is a provider that remembers for a while why sandboxes it no longer has ended
// by themselves (their deadline or idle timeout, the OOM killer, a crash), so that the
// server records the reason rather than a bare "expired".
type EndReporter interface {
	// EndOf returns why sandbox id ended, or false when the provider does not know (it
	// never had it, it was destroyed through Destroy, or it ended too long ago).
	EndOf(ctx context.Context, id string) (End, bool)
}

// End is why a sandbox ended by itself. Reason is one of the server's end reasons (timeout,
// idle, oom_killed, error); Message says more.
type End struct {
	Reason  string `json:"reason"`
	Message string `json:"message,omitempty"`
}

// Usage is what a sandbox has consumed since it started, as its provider counts it: the
// figures of the usage ledger. CPU and network are cumulative counters; the peaks are the
// highest seen so far. Values the provider cannot count are 0.
type Usage struct {
	At       time.Time // when it was measured
	CPUUsec  int64     // CPU time used, in microseconds (the cgroup's usage)
	MemPeak  int64     // bytes: the most memory it has held at once
	DiskUsed int64     // bytes used now on its writable layer
	NetRx    int64     // bytes it received over its network
	NetTx    int64     // bytes it sent

	// Now and its limits, for the server's time series of a sandbox's metrics.
	MemUsed   int64   // bytes it holds now
	MemLimit  int64   // bytes it may hold (0: not known)
	DiskTotal int64   // bytes of its writable layer
	CPUs      float64 // the CPUs it may use (0: not known)
}

// UsageReporter is optional: a Provider that counts sandbox id's use from outside it (the
// host's cgroups and network interfaces), without entering it, so that the server can sample
// every sandbox often at little cost. CodeNotFound when it no longer has the sandbox.
type UsageReporter interface {
	UsageOf(ctx context.Context, id string) (Usage, error)
}
