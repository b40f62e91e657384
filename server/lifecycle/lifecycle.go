// Package lifecycle is the one lifecycle of the sandboxes a server manages, whichever API
// asks for it: the native REST API, E2B's API and MCP sessions all create, find, destroy,
// pause, resume, snapshot and time out sandboxes through a *Service, so the same request
// behaves the same in every dialect. The handlers of each API only decode a request, call
// the Service and encode its answer.
//
// A Service keeps the server's record of each sandbox in a store.Store (the provider keeps
// the sandbox itself), its sandbox tokens, the server's handles to live sandboxes, and emits
// one event per transition through Config.Emit. Each operation that changes a sandbox
// records the change and emits its event; a create that fails after the provider made the
// sandbox destroys it again.
//
// # Concurrency
//
// A *Service may be used from many goroutines at once.
package lifecycle

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"maps"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/tupper-dev/tupper/internal/metrics"
	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/sandbox"
	"github.com/tupper-dev/tupper/server/internal/audit"
	"github.com/tupper-dev/tupper/store"
)

// Event types. Every lifecycle transition a server sees or makes is one of these.
const (
	EventCreated         = "sandbox.created"
	EventDestroyed       = "sandbox.destroyed"
	EventExpired         = "sandbox.expired" // the provider no longer has it (deadline, idle, crash)
	EventTimedOut        = "sandbox.timeout" // the server destroyed it at its deadline
	EventPaused          = "sandbox.paused"
	EventResumed         = "sandbox.resumed"
	EventSnapshotCreated = "sandbox.snapshot_created"
	EventSnapshotDeleted = "sandbox.snapshot_deleted"
	EventForked          = "sandbox.forked"
	EventTimeoutSet      = "sandbox.timeout_set"
)

// Config configures a Service. Provider and Store are required.
type Config struct {
	Provider provider.Provider
	Store    *store.Store
	// Logger receives the service's own messages; nil discards.
	Logger *slog.Logger
	// Emit records an event of type typ about a sandbox (the server stores it and delivers
	// it to webhooks). Nil: events are not recorded.
	Emit func(ctx context.Context, typ, sandboxID string, data any)
	// Stored, when set, makes the service store the sandbox.created event itself, in the
	// transaction of the sandbox's record (a sandbox is never acknowledged without its
	// event), and then tell it here instead of through Emit; the server wakes its webhook
	// dispatcher. Nil: every event goes through Emit.
	Stored func(ctx context.Context, ev store.Event)
	// PreviewURL is the preview URL function of every handle the Service opens; nil: the
	// provider's.
	PreviewURL sandbox.PreviewURLFunc

	// Snapshots expire after SnapshotExpiry unless a request asks for less, which is also the
	// most a request may ask (0 or negative: no bound). At most SnapshotsPerSandbox unexpired
	// snapshots per sandbox and SnapshotsPerKey per API key (0 or negative: no bound); past a
	// bound a snapshot fails with resource_exhausted.
	SnapshotExpiry                       time.Duration
	SnapshotsPerSandbox, SnapshotsPerKey int
	// VolumesTotalMB bounds the sizes of the provider's volumes together (0 or negative: no
	// bound): a volume's file grows up to its size as it is written, so this is the most
	// host disk the server's volumes can take. Past it a create fails with
	// resource_exhausted.
	VolumesTotalMB int
	// Node names the machine the sandboxes run on in the usage ledger; "": the host name.
	Node string
	// Sampled, when set, receives every reading of a sandbox's counters the Service takes
	// (SampleAllUsage, and the last before a destroy): the server keeps them as the
	// sandbox's time series.
	Sampled func(id string, u provider.Usage)
	// Metrics receives the latencies of creates, snapshots and forks; nil: none.
	Metrics *metrics.Metrics
}

// Service is the lifecycle of a server's sandboxes. Create it with New.
type Service struct {
	cfg  Config
	prov provider.Provider
	st   *store.Store
	log  *slog.Logger

	hmu     sync.Mutex
	handles map[string]*sandbox.Sandbox

	klmu     sync.Mutex
	keyLocks map[string]*keyLock

	dmu        sync.Mutex
	destroying map[string]int

	vmu sync.Mutex // one volume create at a time, so the bound holds
}

type keyLock struct {
	mu   sync.Mutex
	refs int
}

// New builds a Service.
func New(cfg Config) (*Service, error) {
	if cfg.Provider == nil || cfg.Store == nil {
		return nil, provider.Errorf(provider.CodeInvalidArgument, "lifecycle: Provider and Store are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Node == "" {
		cfg.Node, _ = os.Hostname()
	}
	return &Service{
		cfg: cfg, prov: cfg.Provider, st: cfg.Store, log: cfg.Logger,
		handles: map[string]*sandbox.Sandbox{}, keyLocks: map[string]*keyLock{}, destroying: map[string]int{},
	}, nil
}

// Provider is the provider the Service manages sandboxes on.
func (s *Service) Provider() provider.Provider { return s.prov }

// Metrics is Config.Metrics, for the APIs over the Service to measure their own work
// (nil: none).
func (s *Service) Metrics() *metrics.Metrics { return s.cfg.Metrics }

// Close drops the Service's handles to sandboxes (the sandboxes live on). Idempotent.
func (s *Service) Close() error {
	s.hmu.Lock()
	defer s.hmu.Unlock()
	for id, b := range s.handles {
		b.Close()
		delete(s.handles, id)
	}
	return nil
}

// NotFound is the error of an operation on a sandbox the server does not have (any more).
func NotFound(id string) error {
	return provider.Errorf(provider.CodeNotFound, "sandbox %q not found", id)
}

// ErrExpired is wrapped by the CodeNotFound error of Destroy when the server had a record of
// the sandbox but the provider no longer had it: Destroy then recorded it as expired.
var ErrExpired = errors.New("the sandbox had already ended")

// CreateOptions configure Create. The zero value of each field is its default; the struct
// grows with the features every API wires once here (templates, forks, egress rules).
type CreateOptions struct {
	// Sandbox are the SDK's options. With a Key, the server's store is the authority for
	// the key (an exact get-or-create, serialized by the Service). A Timeout the provider
	// cannot enforce (no "timeout" capability) or does not report is recorded as the
	// sandbox's deadline, which the server's reaper enforces.
	Sandbox sandbox.CreateOptions
	// KeyID is the API key the sandbox belongs to ("": none).
	KeyID string
	// Labels are the labels recorded and reported for the sandbox, exactly as the client gave
	// them (plus any the API adds); nil: none.
	Labels map[string]string
	// Token issues a sandbox token (Created.Token): a credential for this one sandbox.
	Token bool
	// TemplateMayBeSnapshot lets Sandbox.Template name a snapshot when it names no template of
	// the provider (E2B's templateID), where the provider has snapshots.
	TemplateMayBeSnapshot bool
	// Prepare runs on a new sandbox (not one a get-or-create found) before it is recorded: it
	// may refuse it (an id the client cannot use) or finish it (put files in it); a new sandbox
	// it fails is destroyed.
	Prepare func(ctx context.Context, b *sandbox.Sandbox) error
	// Event is added to the data of the sandbox.created event.
	Event map[string]any
	// OnTimeout is what happens at the sandbox's deadline: store.OnTimeoutKill ("": the
	// same) destroys it, store.OnTimeoutPause pauses it (the server's reaper does, so the
	// provider is given no deadline of its own), store.OnTimeoutPauseCold pauses it without
	// its memory (its files kept, its processes ended; a resume boots it again). A paused
	// sandbox has no deadline; resuming it gives it its timeout again. Pause needs the
	// provider's "pause" capability, a cold pause its "pause-cold".
	OnTimeout string
	// AutoResume resumes the paused sandbox when it is used: its API, its agent (E2B's data
	// plane) or a preview port. Only with OnTimeout pause: a sandbox paused without its
	// memory is resumed only when asked (Resume), as its processes are gone.
	AutoResume bool
}

// validLifecycle checks OnTimeout and AutoResume against each other and the provider.
func (s *Service) validLifecycle(onTimeout string, autoResume bool) error {
	switch onTimeout {
	case "", store.OnTimeoutKill:
		if autoResume {
			return provider.Errorf(provider.CodeInvalidArgument, "autoResume needs onTimeout pause")
		}
	case store.OnTimeoutPause:
		if !provider.CapabilitiesOf(s.prov).Has(provider.CapPause) {
			return provider.Errorf(provider.CodeUnsupported, "provider %s cannot pause sandboxes: onTimeout must be kill", s.prov.Name())
		}
	case store.OnTimeoutPauseCold:
		if autoResume {
			return provider.Errorf(provider.CodeInvalidArgument, "autoResume cannot go with a pause that drops memory: such a sandbox boots again when resumed, so it is resumed only when asked (connect or resume)")
		}
		if !provider.CapabilitiesOf(s.prov).Has(provider.CapPauseCold) {
			return provider.Errorf(provider.CodeUnsupported, "provider %s cannot pause sandboxes without their memory (it lacks the %q capability): keep the memory, or let the sandbox be killed at its timeout", s.prov.Name(), provider.CapPauseCold)
		}
	default:
		return provider.Errorf(provider.CodeInvalidArgument, "onTimeout %q: want kill, pause or pause-cold", onTimeout)
	}
	return nil
}

// Box is a live sandbox: the server's handle to it, its record and the provider's view.
type Box struct {
	Sandbox *sandbox.Sandbox // the Service's handle: do not Close it
	Record  store.Sandbox
	Info    sandbox.Info
}

// Deadline is the sandbox's deadline: the provider's, else the server's record (zero: none).
func (b Box) Deadline() time.Time {
	if !b.Info.Deadline.IsZero() {
		return b.Info.Deadline
	}
	return b.Record.Deadline
}

// Created is the outcome of Create.
type Created struct {
	Box
	Created bool   // false when a get-or-create by key found an existing sandbox
	Token   string // the new sandbox token, when CreateOptions.Token
}

// Create makes (or, by key, finds) a sandbox, records it, issues its token and emits
// sandbox.created for a new one; a failure after the provider made it destroys it again.
func (s *Service) Create(ctx context.Context, opts CreateOptions) (*Created, error) {
	start := time.Now()
	so := opts.Sandbox
	if so.Key != "" {
		so.KeyMode = sandbox.KeyExact
		so.Locator = keyLocator{s: s, keyID: opts.KeyID}
	}
	if so.PreviewURL == nil {
		so.PreviewURL = s.cfg.PreviewURL
	}
	if err := s.validLifecycle(opts.OnTimeout, opts.AutoResume); err != nil {
		return nil, err
	}
	timeout := so.Timeout
	if !s.prov.Capabilities().Has(provider.CapTimeout) || store.PausesAtTimeout(opts.OnTimeout) {
		so.Timeout = 0 // the server's reaper enforces it (and pauses rather than destroys)
	}
	b, fromSnapshot, err := s.create(ctx, so, opts.TemplateMayBeSnapshot)
	if err != nil {
		return nil, err
	}
	keep := false
	defer func() {
		if !keep {
			if b.Created {
				_ = b.Destroy(context.WithoutCancel(ctx))
			} else {
				b.Close()
			}
		}
	}()
	if b.Created && opts.Prepare != nil {
		if err := opts.Prepare(ctx, b); err != nil {
			return nil, err
		}
	}
	info, err := b.Info(ctx)
	if err != nil {
		return nil, err
	}
	out := &Created{Created: b.Created}
	var hash []byte
	if opts.Token {
		out.Token = store.NewToken()
		hash = store.Hash(out.Token)
	}
	wctx := context.WithoutCancel(ctx)
	var rec store.Sandbox
	if b.Created {
		deadline := info.Deadline
		if deadline.IsZero() && timeout > 0 {
			deadline = time.Now().Add(timeout)
		}
		labels := maps.Clone(opts.Labels)
		if labels == nil {
			labels = map[string]string{}
		}
		rec = store.Sandbox{
			ID: b.ID, Provider: s.prov.Name(), APIKeyID: opts.KeyID, Key: so.Key, Labels: labels,
			CreatedAt: info.CreatedAt, Deadline: deadline, State: info.State,
			OnTimeout: opts.OnTimeout, AutoResume: opts.AutoResume, Timeout: timeout,
		}
		data := map[string]any{"key": rec.Key, "labels": rec.Labels, "template": info.Template}
		maps.Copy(data, opts.Event)
		if err = s.putCreated(wctx, rec, hash, data); err == nil {
			s.startUsage(wctx, info)
		}
	} else if rec, err = s.st.Sandbox(ctx, b.ID); err == nil && hash != nil {
		err = s.st.AddToken(wctx, b.ID, hash)
	}
	if err != nil {
		return nil, err
	}
	keep = true
	// Whichever API asked, its audit entry names the sandbox (or the one a key found again).
	audit.SetTarget(ctx, b.ID)
	out.Box = Box{Sandbox: s.remember(b), Record: rec, Info: info}
	if b.Created {
		s.observeCreate(info, fromSnapshot, time.Since(start))
	}
	return out, nil
}

// observeCreate records a new sandbox's create latency. A snapshot's id is never a label:
// a sandbox made from one is counted under the template "snapshot".
func (s *Service) observeCreate(info sandbox.Info, fromSnapshot bool, d time.Duration) {
	template := info.Template
	if fromSnapshot {
		template = "snapshot"
	}
	s.cfg.Metrics.ObserveCreate(cmp.Or(info.Runtime, s.prov.Name()), template, info.Pooled, d)
}

// create makes the sandbox; with maybeSnapshot a Template that is not a template of the
// provider may be a snapshot id (where the provider has snapshots). fromSnapshot tells
// whether the sandbox was made from a snapshot.
func (s *Service) create(ctx context.Context, opts sandbox.CreateOptions, maybeSnapshot bool) (b *sandbox.Sandbox, fromSnapshot bool, err error) {
	b, err = sandbox.Create(ctx, s.prov, opts)
	if err == nil || !maybeSnapshot || opts.Template == "" || !provider.CapabilitiesOf(s.prov).Has(provider.CapSnapshot) {
		return b, opts.From != "", err
	}
	if c := provider.CodeOf(err); c != provider.CodeInvalidArgument && c != provider.CodeNotFound {
		return nil, false, err
	}
	opts.From, opts.Template = opts.Template, ""
	if b2, err2 := sandbox.Create(ctx, s.prov, opts); err2 == nil {
		return b2, true, nil
	}
	return nil, false, err
}

// RecordOptions configure Record.
type RecordOptions struct {
	KeyID  string            // the API key the sandbox belongs to ("": none)
	Labels map[string]string // the labels recorded for it
	Event  map[string]any    // added to the data of the sandbox.created event
}

// Record records a sandbox made outside Create (an MCP session's), with a token that is never
// shown, and emits sandbox.created.
func (s *Service) Record(ctx context.Context, b *sandbox.Sandbox, opts RecordOptions) error {
	ctx = context.WithoutCancel(ctx)
	info, err := b.Info(ctx)
	if err != nil {
		return err
	}
	rec := store.Sandbox{
		ID: b.ID, Provider: s.prov.Name(), APIKeyID: opts.KeyID, Labels: maps.Clone(opts.Labels),
		CreatedAt: info.CreatedAt, Deadline: info.Deadline, State: info.State,
	}
	data := map[string]any{"labels": rec.Labels}
	maps.Copy(data, opts.Event)
	if err := s.putCreated(ctx, rec, store.Hash(store.NewToken()), data); err != nil {
		return err
	}
	s.startUsage(ctx, info)
	return nil
}

// putCreated records a new sandbox with its token hash and its sandbox.created event: in one
// transaction when the server stores events itself (Config.Stored), else the record, then the
// event through Emit.
func (s *Service) putCreated(ctx context.Context, rec store.Sandbox, hash []byte, data map[string]any) error {
	if s.cfg.Stored == nil {
		if err := s.st.PutSandbox(ctx, rec, hash); err != nil {
			return err
		}
		s.emit(ctx, EventCreated, rec.ID, data)
		return nil
	}
	ev, err := s.st.PutSandboxEvent(ctx, rec, hash, store.NewEvent{Type: EventCreated, Data: data})
	if err != nil {
		return err
	}
	s.cfg.Stored(ctx, ev)
	return nil
}

// Handle returns the server's handle to a live sandbox it has a record of. A sandbox the
// store does not know, or one the provider no longer has, is CodeNotFound (and the latter is
// recorded as expired). Do not Close the handle.
//
// A paused sandbox created with AutoResume is resumed first (Wake).
func (s *Service) Handle(ctx context.Context, id string) (*sandbox.Sandbox, error) {
	rec, err := s.record(ctx, id)
	if err != nil {
		return nil, err
	}
	if err := s.wake(ctx, rec); err != nil {
		return nil, err
	}
	return s.handle(ctx, id)
}

// Peek returns the server's handle to a sandbox it has a record of, as Handle does, but
// never resumes it: for the server's own background readers (the egress loop), which are
// not a use of the sandbox. Commands on a paused sandbox's handle fail.
func (s *Service) Peek(ctx context.Context, id string) (*sandbox.Sandbox, error) {
	if _, err := s.record(ctx, id); err != nil {
		return nil, err
	}
	return s.handle(ctx, id)
}

// Wake resumes a paused sandbox that was created with AutoResume, as a use of it does (its
// API through Handle, its agent through the E2B data plane, a preview port); it reports
// whether the sandbox is running now. A sandbox without AutoResume stays as it is, and so
// does one whose pause dropped its memory (store.Sandbox.MemoryDropped): booting it again
// is for an explicit Resume.
func (s *Service) Wake(ctx context.Context, id string) (running bool, err error) {
	rec, err := s.record(ctx, id)
	if err != nil {
		return false, err
	}
	if err := s.wake(ctx, rec); err != nil {
		return false, err
	}
	if !wakes(rec) {
		return rec.State != provider.StatePaused, nil
	}
	return true, nil
}

// wakes reports whether a use of the sandbox resumes it.
func wakes(rec store.Sandbox) bool {
	return rec.AutoResume && rec.State == provider.StatePaused && !rec.MemoryDropped
}

func (s *Service) wake(ctx context.Context, rec store.Sandbox) error {
	if !wakes(rec) {
		return nil
	}
	// One resume per sandbox at a time; the others find it running.
	unlock := s.lockKey("\x00wake " + rec.ID)
	defer unlock()
	err := s.Resume(ctx, rec.ID)
	if errors.Is(err, provider.CodeConflict) {
		return nil // resumed meanwhile
	}
	return err
}

func (s *Service) handle(ctx context.Context, id string) (*sandbox.Sandbox, error) {
	s.hmu.Lock()
	b := s.handles[id]
	s.hmu.Unlock()
	if b != nil {
		return b, nil
	}
	b, err := sandbox.Connect(ctx, s.prov, id, sandbox.ConnectOptions{PreviewURL: s.cfg.PreviewURL})
	if errors.Is(err, provider.CodeNotFound) {
		s.Expired(ctx, id)
		return nil, NotFound(id)
	}
	if err != nil {
		return nil, err
	}
	return s.remember(b), nil
}

// record is the store's record of id, or NotFound.
func (s *Service) record(ctx context.Context, id string) (store.Sandbox, error) {
	rec, err := s.st.Sandbox(ctx, id)
	if errors.Is(err, provider.CodeNotFound) {
		err = NotFound(id)
	}
	return rec, err
}

// Get returns a live sandbox with its record and the provider's current view of it.
func (s *Service) Get(ctx context.Context, id string) (Box, error) {
	rec, err := s.record(ctx, id)
	if err != nil {
		return Box{}, err
	}
	b, err := s.handle(ctx, id)
	if err != nil {
		return Box{}, err
	}
	info, err := b.Info(ctx)
	if errors.Is(err, provider.CodeNotFound) {
		s.Expired(ctx, id)
		return Box{}, NotFound(id)
	}
	if err != nil {
		return Box{}, err
	}
	return Box{Sandbox: b, Record: rec, Info: info}, nil
}

// CheckGone records a sandbox the provider no longer has as expired, after an operation on it
// said not found (which may also mean a missing file).
func (s *Service) CheckGone(ctx context.Context, id string) {
	inst, err := s.prov.Connect(ctx, id)
	if errors.Is(err, provider.CodeNotFound) {
		s.Expired(ctx, id)
		return
	}
	if err == nil {
		inst.Close()
	}
}

// Destroy destroys a sandbox the server has a record of and records it destroyed by the API
// key keyID. When the provider no longer had it, Destroy records it expired and returns a
// CodeNotFound error wrapping ErrExpired.
func (s *Service) Destroy(ctx context.Context, id, keyID string) error {
	if _, err := s.record(ctx, id); err != nil {
		return err
	}
	defer s.DestroyingNow(id)()
	last := s.usageOf(ctx, id) // the counters go with the sandbox
	err := s.prov.Destroy(ctx, id)
	if errors.Is(err, provider.CodeNotFound) {
		s.Expired(ctx, id)
		return provider.Errorf(provider.CodeNotFound, "sandbox %q not found: %w", id, ErrExpired)
	}
	if err != nil {
		return err
	}
	s.gone(ctx, id, EventDestroyed, store.End{Reason: store.EndDestroyed, By: keyID}, nil, last)
	return nil
}

// Gone records that a sandbox no longer exists and why (end), drops the handle to it and
// emits typ once, the first time it is recorded, with data and the reason: "reason", and
// "by" and "message" when set (docs/webhooks.md).
func (s *Service) Gone(ctx context.Context, id, typ string, end store.End, data map[string]any) {
	s.gone(ctx, id, typ, end, data, nil)
}

// gone is Gone with the sandbox's last usage sample, read before it was destroyed (nil:
// none), which closes its line of the usage ledger.
func (s *Service) gone(ctx context.Context, id, typ string, end store.End, data map[string]any, last *store.UsageSample) {
	s.forget(id)
	ctx = context.WithoutCancel(ctx)
	live, err := s.st.MarkDestroyed(ctx, id, end)
	if err != nil {
		s.log.Error("recording a destroyed sandbox", "sandbox", id, "err", err)
		return
	}
	if live {
		s.emit(ctx, typ, id, EndData(end, data))
	}
	if err := s.st.EndUsage(ctx, id, last); err != nil {
		s.log.Warn("closing a sandbox's line of the usage ledger", "sandbox", id, "err", err)
	}
}

// EndData is the data of an event that ends a sandbox: data with end's fields added.
func EndData(end store.End, data map[string]any) map[string]any {
	out := make(map[string]any, len(data)+3)
	maps.Copy(out, data)
	out["reason"] = end.Reason
	if end.By != "" {
		out["by"] = end.By
	}
	if end.Message != "" {
		out["message"] = end.Message
	}
	return out
}

// Expired records a sandbox the provider no longer has as gone (sandbox.expired), with the
// reason the provider gives (provider.EndReporter), else timeout when its deadline has
// passed, else error.
func (s *Service) Expired(ctx context.Context, id string) {
	s.Gone(ctx, id, EventExpired, s.whyGone(ctx, id), nil)
}

// whyGone is why sandbox id, which the provider no longer has, ended.
func (s *Service) whyGone(ctx context.Context, id string) store.End {
	if r, ok := s.prov.(provider.EndReporter); ok {
		if e, ok := r.EndOf(ctx, id); ok {
			return store.End{Reason: e.Reason, Message: e.Message}
		}
	}
	if rec, err := s.st.Sandbox(ctx, id); err == nil && !rec.Deadline.IsZero() && !time.Now().Before(rec.Deadline) {
		return store.End{Reason: store.EndTimeout}
	}
	return store.End{Reason: store.EndError, Message: "the provider no longer has the sandbox: it stopped by itself"}
}

// DestroyingNow marks id as being destroyed by a request until done is called, so that a
// reconcile meanwhile (Destroying) does not count it missing (and record it expired) while
// the provider has removed it and the request has not yet recorded it destroyed.
func (s *Service) DestroyingNow(id string) (done func()) {
	s.dmu.Lock()
	s.destroying[id]++
	s.dmu.Unlock()
	return func() {
		s.dmu.Lock()
		if s.destroying[id]--; s.destroying[id] <= 0 {
			delete(s.destroying, id)
		}
		s.dmu.Unlock()
	}
}

// Destroying reports whether a request is destroying id now (DestroyingNow).
func (s *Service) Destroying(id string) bool {
	s.dmu.Lock()
	defer s.dmu.Unlock()
	return s.destroying[id] > 0
}

// SetTimeout moves a sandbox's deadline to d from now, records it and emits
// sandbox.timeout_set; it returns the new deadline. On a provider without the "timeout"
// capability the deadline is the server's own, which its reaper enforces.
func (s *Service) SetTimeout(ctx context.Context, id string, d time.Duration) (time.Time, error) {
	if d <= 0 {
		return time.Time{}, provider.Errorf(provider.CodeInvalidArgument, "the timeout must be positive, got %v", d)
	}
	rec, err := s.record(ctx, id)
	if err != nil {
		return time.Time{}, err
	}
	b, err := s.Handle(ctx, id)
	if err != nil {
		return time.Time{}, err
	}
	deadline := time.Now().Add(d)
	if s.prov.Capabilities().Has(provider.CapTimeout) && !store.PausesAtTimeout(rec.OnTimeout) {
		if err := b.SetTimeout(ctx, d); err != nil {
			return time.Time{}, err
		}
		if info, err := b.Info(ctx); err == nil && !info.Deadline.IsZero() {
			deadline = info.Deadline
		}
	}
	if err := s.st.SetDeadline(ctx, id, deadline); err != nil {
		return time.Time{}, err
	}
	s.emit(ctx, EventTimeoutSet, id, map[string]any{"deadline": deadline.UTC()})
	return deadline, nil
}

// ExtendTimeout moves a sandbox's deadline to d from now when that is later than its
// current one (as SetTimeout), and reports whether it moved it. A sandbox without a deadline
// keeps none.
func (s *Service) ExtendTimeout(ctx context.Context, id string, d time.Duration) (bool, error) {
	box, err := s.Get(ctx, id)
	if err != nil {
		return false, err
	}
	cur := box.Deadline()
	if cur.IsZero() || !time.Now().Add(d).After(cur) {
		return false, nil
	}
	_, err = s.SetTimeout(ctx, id, d)
	return err == nil, err
}

// Pause pauses a running sandbox, records it paused and emits sandbox.paused. By default
// it keeps the sandbox's memory: it freezes it (where the provider has
// "pause-frees-memory", saves it to disk and releases its memory), and Resume continues
// where it was. With opts.DropMemory it ends its processes and keeps only its files
// (CodeUnsupported, before anything changes, without the "pause-cold" capability), and
// Resume boots it again. A paused sandbox is CodeConflict. A sandbox that pauses at its
// timeout has no deadline while paused.
//
// The event's data say which: memoryKept (its processes continue on resume), memoryFreed
// (its memory was released).
func (s *Service) Pause(ctx context.Context, id string, opts sandbox.PauseOptions) error {
	return s.pause(ctx, id, opts, map[string]any{})
}

// PauseAtTimeout pauses a sandbox created with OnTimeout pause or pause-cold that reached
// its deadline, as its OnTimeout says (the server's reaper calls it); sandbox.paused says so.
//
// A pause-cold that this sandbox refuses with CodeUnsupported, although its provider
// declares "pause-cold" (a Docker sandbox made by another tupper process, whose agent config
// this one does not hold), pauses it keeping its memory instead: the sandbox stops running at
// its deadline either way, and sandbox.paused says memoryKept with coldRefused set to the
// refusal. Past its deadline, running on would be the one outcome its owner did not ask for.
func (s *Service) PauseAtTimeout(ctx context.Context, id string, deadline time.Time) error {
	rec, err := s.record(ctx, id)
	if err != nil {
		return err
	}
	opts := sandbox.PauseOptions{DropMemory: rec.OnTimeout == store.OnTimeoutPauseCold}
	data := map[string]any{"reason": "timeout", "deadline": deadline.UTC()}
	err = s.pause(ctx, id, opts, data)
	if opts.DropMemory && errors.Is(err, provider.CodeUnsupported) && provider.CapabilitiesOf(s.prov).Has(provider.CapPause) {
		data["coldRefused"] = err.Error()
		return s.pause(ctx, id, sandbox.PauseOptions{}, data)
	}
	return err
}

func (s *Service) pause(ctx context.Context, id string, opts sandbox.PauseOptions, data map[string]any) error {
	box, err := s.Get(ctx, id)
	if err != nil {
		return err
	}
	caps := box.Sandbox.Capabilities
	if opts.DropMemory && !caps.Has(provider.CapPauseCold) {
		hint := ""
		if caps.Has(provider.CapPause) {
			hint = ": pause it keeping its memory"
		}
		return provider.Errorf(provider.CodeUnsupported, "provider %s cannot pause a sandbox without its memory (it lacks the %q capability)%s", s.prov.Name(), provider.CapPauseCold, hint)
	}
	if box.Info.State == provider.StatePaused {
		return provider.Errorf(provider.CodeConflict, "sandbox %q is already paused", id)
	}
	if err := box.Sandbox.PauseWith(ctx, opts); err != nil {
		return err
	}
	wctx := context.WithoutCancel(ctx)
	_ = s.st.SetPaused(wctx, id, opts.DropMemory)
	if store.PausesAtTimeout(box.Record.OnTimeout) {
		_ = s.st.SetDeadline(wctx, id, time.Time{})
	}
	data["memoryKept"] = !opts.DropMemory
	data["memoryFreed"] = opts.DropMemory || caps.Has(provider.CapPauseFreesMemory)
	s.emit(ctx, EventPaused, id, data)
	return nil
}

// Resume thaws a paused sandbox, records it running and emits sandbox.resumed; one paused
// without its memory boots again on its files, with none of its processes from before
// (sandbox.resumed's coldBoot says so). A sandbox that is not paused is CodeConflict.
func (s *Service) Resume(ctx context.Context, id string) error {
	box, err := s.Get(ctx, id)
	if err != nil {
		return err
	}
	if box.Info.State != provider.StatePaused {
		return provider.Errorf(provider.CodeConflict, "sandbox %q is already running", id)
	}
	if err := box.Sandbox.Resume(ctx); err != nil {
		return err
	}
	wctx := context.WithoutCancel(ctx)
	_ = s.st.SetState(wctx, id, provider.StateRunning)
	if r := box.Record; store.PausesAtTimeout(r.OnTimeout) && r.Timeout > 0 {
		// Its lifetime starts again.
		_ = s.st.SetDeadline(wctx, id, time.Now().Add(r.Timeout))
	}
	var data map[string]any
	if box.Record.MemoryDropped {
		data = map[string]any{"coldBoot": true}
	}
	s.emit(ctx, EventResumed, id, data)
	return nil
}

// SnapshotOptions configure Snapshot.
type SnapshotOptions struct {
	KeyID string // the API key the snapshot counts against
	// ExpiresIn is how long the snapshot lives; 0: Config.SnapshotExpiry, which is also the
	// most it may be.
	ExpiresIn time.Duration
	Kind      provider.SnapshotKind // "": filesystem
	// Fullest takes the fullest kind the sandbox can (as Fork does: full where it has
	// "snapshot-full", else filesystem), in place of Kind.
	Fullest bool
	Name    string
}

// Snapshot snapshots a sandbox within the quotas (Config.SnapshotsPerSandbox,
// SnapshotsPerKey), expiring as Config.SnapshotExpiry bounds, records it (so the server's
// reaper deletes it when it expires) and emits sandbox.snapshot_created. It returns the
// snapshot's id.
func (s *Service) Snapshot(ctx context.Context, id string, opts SnapshotOptions) (string, error) {
	b, err := s.Handle(ctx, id)
	if err != nil {
		return "", err
	}
	expires := opts.ExpiresIn
	if limit := s.cfg.SnapshotExpiry; limit > 0 {
		if expires > limit {
			return "", provider.Errorf(provider.CodeInvalidArgument, "the expiry is more than the server's longest snapshot expiry, %v", limit)
		}
		expires = cmp.Or(expires, limit)
	}
	var exp time.Time
	if expires > 0 {
		exp = time.Now().Add(expires)
	}
	reserved, err := s.st.ReserveSnapshot(ctx, store.Snapshot{SandboxID: id, APIKeyID: opts.KeyID, ExpiresAt: exp},
		store.SnapshotQuota{PerSandbox: s.cfg.SnapshotsPerSandbox, PerKey: s.cfg.SnapshotsPerKey})
	if err != nil {
		return "", err
	}
	if opts.Fullest {
		opts.Kind = b.ForkKind()
	}
	start := time.Now()
	snap, err := b.Snapshot(ctx, sandbox.SnapshotOptions{ExpiresIn: expires, Kind: opts.Kind, Name: opts.Name})
	s.cfg.Metrics.ObserveSnapshot(string(cmp.Or(opts.Kind, provider.SnapshotFilesystem)), time.Since(start), err)
	if err != nil {
		_ = s.st.DeleteSnapshot(context.WithoutCancel(ctx), reserved)
		return "", err
	}
	if err := s.st.SetSnapshotID(context.WithoutCancel(ctx), reserved, snap); err != nil {
		s.log.Warn("recording a snapshot", "sandbox", id, "snapshot", snap, "err", err)
	}
	kind := opts.Kind
	if kind == "" {
		kind = provider.SnapshotFilesystem
	}
	s.emit(ctx, EventSnapshotCreated, id, map[string]string{"snapshotId": snap, "kind": string(kind)})
	return snap, nil
}

// Snapshots lists the provider's snapshots, oldest first (CodeUnsupported when it cannot).
func (s *Service) Snapshots(ctx context.Context) ([]sandbox.SnapshotInfo, error) {
	return sandbox.Snapshots(ctx, s.prov)
}

// DeleteSnapshot deletes a snapshot from the provider and the store, and emits
// sandbox.snapshot_deleted (about the sandbox it was taken from). CodeNotFound when the
// provider has no such snapshot; CodeUnsupported when it cannot delete snapshots.
func (s *Service) DeleteSnapshot(ctx context.Context, snap string) error {
	source := ""
	if info, err := sandbox.InspectSnapshot(ctx, s.prov, snap); err == nil {
		source = info.Source
	}
	if err := sandbox.DeleteSnapshot(ctx, s.prov, snap); err != nil {
		return err
	}
	if err := s.st.DeleteSnapshot(context.WithoutCancel(ctx), snap); err != nil {
		s.log.Warn("forgetting a deleted snapshot", "snapshot", snap, "err", err)
	}
	s.emit(ctx, EventSnapshotDeleted, source, map[string]string{"snapshotId": snap})
	return nil
}

// ForkOptions configure Fork.
type ForkOptions struct {
	Sandbox sandbox.ForkOptions // N, labels, timeout and network of the children
	KeyID   string              // the API key the children belong to
	// Labels are the labels recorded and reported for each child, as the client gave them.
	Labels map[string]string
	Token  bool // issue each child a sandbox token
}

// Fork makes children of a live sandbox (sandbox.Fork: memory and processes where the
// sandbox has "snapshot-full", files elsewhere), records each as Create does (with a token
// when asked) and emits sandbox.created for each, with "forkOf", and sandbox.forked for the
// parent. The parent keeps running.
func (s *Service) Fork(ctx context.Context, id string, opts ForkOptions) ([]*Created, error) {
	b, err := s.Handle(ctx, id)
	if err != nil {
		return nil, err
	}
	so := opts.Sandbox
	timeout := so.Timeout
	if !s.prov.Capabilities().Has(provider.CapTimeout) {
		so.Timeout = 0 // the server's reaper enforces it
	}
	start := time.Now()
	kids, err := b.Fork(ctx, so)
	s.cfg.Metrics.ObserveFork(string(b.ForkKind()), time.Since(start), err)
	if err != nil {
		return nil, err
	}
	wctx := context.WithoutCancel(ctx)
	out := make([]*Created, 0, len(kids))
	fail := func(err error) ([]*Created, error) {
		for _, k := range kids {
			_ = k.Destroy(wctx)
			s.forget(k.ID)
			_, _ = s.st.MarkDestroyed(wctx, k.ID, store.End{Reason: store.EndError, Message: "the fork failed: " + err.Error()})
		}
		return nil, err
	}
	ids := make([]string, 0, len(kids))
	for _, k := range kids {
		info, err := k.Info(ctx)
		if err != nil {
			return fail(err)
		}
		c := &Created{Created: true}
		var hash []byte
		if opts.Token {
			c.Token = store.NewToken()
			hash = store.Hash(c.Token)
		}
		deadline := info.Deadline
		if deadline.IsZero() && timeout > 0 {
			deadline = time.Now().Add(timeout)
		}
		labels := maps.Clone(opts.Labels)
		if labels == nil {
			labels = map[string]string{}
		}
		rec := store.Sandbox{
			ID: k.ID, Provider: s.prov.Name(), APIKeyID: opts.KeyID, Labels: labels,
			CreatedAt: info.CreatedAt, Deadline: deadline, State: info.State,
		}
		if err := s.st.PutSandbox(wctx, rec, hash); err != nil {
			return fail(err)
		}
		c.Box = Box{Sandbox: s.remember(k), Record: rec, Info: info}
		out = append(out, c)
		ids = append(ids, k.ID)
	}
	for _, c := range out {
		s.emit(ctx, EventCreated, c.Record.ID, map[string]any{"labels": c.Record.Labels, "template": c.Info.Template, "forkOf": id})
	}
	s.emit(ctx, EventForked, id, map[string]any{"children": ids, "kind": string(b.ForkKind())})
	return out, nil
}

// ListOptions filter List. The zero value lists every live sandbox.
type ListOptions struct {
	Labels map[string]string // every pair must match the recorded labels
	Key    string            // the get-or-create key, when set
}

// Listed is one sandbox of List: its record and the provider's view.
type Listed struct {
	Record store.Sandbox
	Info   sandbox.Info
}

// List returns the live sandboxes (recorded by the server and still in the provider) that
// match opts, oldest first.
func (s *Service) List(ctx context.Context, opts ListOptions) ([]Listed, error) {
	// The store first: a record is written only after the provider made the sandbox, so a
	// sandbox in both lists is live and one made meanwhile is simply not listed yet.
	recs, err := s.st.Sandboxes(ctx)
	if err != nil {
		return nil, err
	}
	infos, err := s.prov.List(ctx, provider.ListFilter{})
	if err != nil {
		return nil, err
	}
	live := make(map[string]provider.Info, len(infos))
	for _, in := range infos {
		live[in.ID] = in
	}
	filter := provider.ListFilter{Labels: opts.Labels}
	out := []Listed{}
	for _, rec := range recs {
		in, ok := live[rec.ID]
		if !ok || !filter.Matches(rec.Labels) || (opts.Key != "" && rec.Key != opts.Key) {
			continue
		}
		out = append(out, Listed{Record: rec, Info: sandbox.InfoOf(in)})
	}
	slices.SortStableFunc(out, func(a, b Listed) int { return a.Info.CreatedAt.Compare(b.Info.CreatedAt) })
	return out, nil
}

func (s *Service) emit(ctx context.Context, typ, id string, data any) {
	if s.cfg.Emit != nil {
		s.cfg.Emit(context.WithoutCancel(ctx), typ, id, data)
	}
}

// remember keeps b as the handle to its sandbox, unless another request stored one first:
// it returns the handle kept.
func (s *Service) remember(b *sandbox.Sandbox) *sandbox.Sandbox {
	s.hmu.Lock()
	defer s.hmu.Unlock()
	if old := s.handles[b.ID]; old != nil && old != b {
		if !b.Created {
			b.Close()
			return old
		}
		old.Close()
	}
	s.handles[b.ID] = b
	return b
}

func (s *Service) forget(id string) {
	s.hmu.Lock()
	b := s.handles[id]
	delete(s.handles, id)
	s.hmu.Unlock()
	if b != nil {
		b.Close()
	}
}

// keyLocator makes the server's store the authority for get-or-create keys and serializes
// them (within this server, and on a shared store with every other server by a store lock),
// so a key maps to exactly one sandbox on any provider.
type keyLocator struct {
	s     *Service
	keyID string
}

func (l keyLocator) Get(ctx context.Context, key string) (string, error) {
	sb, err := l.s.st.SandboxByKey(ctx, key)
	if errors.Is(err, provider.CodeNotFound) {
		return "", nil
	}
	return sb.ID, err
}

func (l keyLocator) Set(ctx context.Context, key, id string) error {
	return l.s.st.PutSandbox(ctx, store.Sandbox{ID: id, Provider: l.s.prov.Name(), APIKeyID: l.keyID, Key: key, CreatedAt: time.Now()}, nil)
}

func (l keyLocator) Delete(ctx context.Context, key string) error {
	sb, err := l.s.st.SandboxByKey(ctx, key)
	if err != nil {
		return nil
	}
	l.s.Expired(ctx, sb.ID)
	return nil
}

func (l keyLocator) WithLock(ctx context.Context, key string, fn func(context.Context) error) error {
	unlock := l.s.lockKey(key)
	defer unlock()
	if l.s.st.Shared() {
		// Other servers on the store make sandboxes by key too.
		release, err := l.s.st.Lock(ctx, "key "+key)
		if err != nil {
			return err
		}
		defer release()
	}
	return fn(ctx)
}

// lockKey serializes get-or-create by key within this Service.
func (s *Service) lockKey(key string) func() {
	s.klmu.Lock()
	l := s.keyLocks[key]
	if l == nil {
		l = &keyLock{}
		s.keyLocks[key] = l
	}
	l.refs++
	s.klmu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		s.klmu.Lock()
		l.refs--
		if l.refs == 0 {
			delete(s.keyLocks, key)
		}
		s.klmu.Unlock()
	}
}
