// Package builds runs a server's template builds: each asynchronously through the SDK's
// sandbox.BuildTemplate (the provider's provider.TemplateBuilder), with a status, a
// log that clients read from an offset or follow, and an event per state change. It is
// shared by the native API (/v1/templates) and E2B's template API, so a build behaves the
// same in both.
//
// # States
//
//	waiting  reserved, its steps not given yet (E2B's two-request builds)
//	queued   given, waiting for a build slot (Config.Concurrent at once)
//	building running its steps
//	ready    the template is made (its record written at once, never half)
//	error    failed, cancelled or interrupted: no template record was written
//
// Templates are the server's, shared by every API key, as the native API's are. A build,
// its status and its log belong to the key that started it: another key is told it does
// not exist. Builds live in the server's memory: after a restart a build's id is unknown,
// and a build that was running is gone (its template was never written); the layers its
// finished steps made stay in the store's layer cache until pruned.
//
// # Concurrency
//
// A *Service serves many requests at once.
package builds

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/sandbox"
	"github.com/tupper-dev/tupper/server/api"
	"github.com/tupper-dev/tupper/server/internal/audit"
	"github.com/tupper-dev/tupper/store"
	"github.com/tupper-dev/tupper/template"
)

// State is the state of a build.
type State = api.BuildState

// The states of a build.
const (
	Waiting  = api.BuildWaiting
	Queued   = api.BuildQueued
	Building = api.BuildBuilding
	Ready    = api.BuildReady
	Failed   = api.BuildFailed
)

// Event types: one per state change of a build.
const (
	EventQueued   = "template.build_queued"
	EventStarted  = "template.build_started"
	EventReady    = "template.build_ready"
	EventFailed   = "template.build_failed"
	maxLogBytes   = 4 << 20
	waitingExpiry = time.Hour
)

// EventTypes are the event types of builds.
var EventTypes = []string{EventQueued, EventStarted, EventReady, EventFailed}

// Config configures a Service. Provider is required.
type Config struct {
	Provider provider.Provider
	// Emit records an event (the server stores it and delivers it to webhooks); nil: none.
	Emit func(ctx context.Context, typ, sandboxID string, data any)
	// Logger receives the service's own messages; nil discards.
	Logger *slog.Logger
	// Concurrent is how many builds run at once; 0 is 1. Others wait, queued.
	Concurrent int
	// Keep is how many finished builds are remembered; 0 is 200. The oldest are forgotten.
	Keep int
}

// Service runs builds. Create it with New; Close cancels the running ones.
type Service struct {
	cfg Config
	log *slog.Logger
	sem chan struct{}

	base   context.Context // of every build; cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	builds   map[string]*Build
	finished []string // ids of finished builds, oldest first
}

// New builds a Service.
func New(cfg Config) (*Service, error) {
	if cfg.Provider == nil {
		return nil, provider.Errorf(provider.CodeInvalidArgument, "builds: Provider is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Concurrent <= 0 {
		cfg.Concurrent = 1
	}
	if cfg.Keep <= 0 {
		cfg.Keep = 200
	}
	s := &Service{cfg: cfg, log: cfg.Logger, sem: make(chan struct{}, cfg.Concurrent), builds: map[string]*Build{}}
	s.base, s.cancel = context.WithCancel(context.Background())
	return s, nil
}

// Close cancels the running and queued builds and waits for them to end. Idempotent.
func (s *Service) Close() error {
	s.cancel()
	s.wg.Wait()
	return nil
}

// Supported is nil when the provider builds templates, else CodeUnsupported: for a request
// to be refused before it is read.
func (s *Service) Supported() error { return sandbox.CanBuildTemplates(s.cfg.Provider) }

// ScratchDir makes a directory for a build's context or uploads on the provider's side
// (sandbox.TemplateBuildDir). The caller removes it.
func (s *Service) ScratchDir() (string, error) { return sandbox.TemplateBuildDir(s.cfg.Provider) }

// LogEntry, Failure and Status are the native API's (server/api): the service's own view of
// a build is what goes on the wire.
type (
	LogEntry = api.BuildLogEntry // one entry of a build's log
	Failure  = api.BuildFailure  // why a build failed
	Status   = api.Build         // a build's state at one moment
)

// Build is one build.
type Build struct {
	ID    string
	KeyID string
	Name  string
	Tags  []string

	mu       sync.Mutex
	state    State
	created  time.Time
	started  time.Time
	finished time.Time
	fail     *Failure
	tpl      *sandbox.BuiltTemplate // when ready
	log      []LogEntry
	logBytes int
	changed  chan struct{} // closed and replaced on every change
	cancel   context.CancelFunc
}

// Status returns the build's status.
func (b *Build) Status() Status {
	b.mu.Lock()
	defer b.mu.Unlock()
	st := Status{ID: b.ID, Template: b.Name, Tags: b.Tags, State: b.state, Created: b.created, Error: b.fail, Logs: len(b.log)}
	if !b.started.IsZero() {
		t := b.started
		st.Started = &t
	}
	if !b.finished.IsZero() {
		t := b.finished
		st.Finished = &t
	}
	if b.tpl != nil {
		st.Layers = b.tpl.LayerIDs
	}
	return st
}

// Logs returns the log entries from offset on, the build's state, and a channel closed at
// the next change (an entry or a state).
func (b *Build) Logs(offset int) ([]LogEntry, State, <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []LogEntry
	if offset < 0 {
		offset = 0
	}
	if offset < len(b.log) {
		out = append(out, b.log[offset:]...)
	}
	return out, b.state, b.changed
}

func (b *Build) changedLocked() {
	close(b.changed)
	b.changed = make(chan struct{})
}

func (b *Build) add(e LogEntry) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if e.Time.IsZero() {
		e.Time = time.Now().UTC()
	}
	if b.logBytes+len(e.Text) > maxLogBytes {
		if b.logBytes <= maxLogBytes {
			b.log = append(b.log, LogEntry{Time: e.Time, Kind: "info", Text: fmt.Sprintf("the log is cut at %d bytes; later output is not kept", maxLogBytes)})
			b.logBytes = maxLogBytes + 1
			b.changedLocked()
		}
		if e.Kind == "output" {
			return
		}
	}
	b.logBytes += len(e.Text)
	b.log = append(b.log, e)
	b.changedLocked()
}

// Write adds p to the log as the service's own output (PullBase's lines).
func (b *Build) Write(p []byte) (int, error) {
	b.add(LogEntry{Kind: "info", Text: string(p)})
	return len(p), nil
}

func (b *Build) progress(ev provider.BuildEvent) {
	e := LogEntry{Step: ev.Step, Steps: ev.Steps, Line: ev.Line, Kind: ev.Kind, Layer: ev.Layer}
	switch ev.Kind {
	case "step":
		e.Text = fmt.Sprintf("Step %d/%d : %s", ev.Step, ev.Steps, ev.Instruction)
	case "cached":
		e.Text = "Using cache"
	case "done":
		e.Text = "Done"
	default:
		e.Text = ev.Output
	}
	b.add(e)
}

// Reserve records a build of the template name, waiting for its steps (Start); it replaces
// a build of the same key and name still waiting. A name another build of the server is
// making is CodeConflict; a built-in template's name (the
// provider says which) CodeInvalidArgument.
func (s *Service) Reserve(ctx context.Context, keyID, name string, tags []string) (*Build, error) {
	if err := s.Supported(); err != nil {
		return nil, err
	}
	if err := template.ValidName(name); err != nil {
		return nil, err
	}
	// Whichever API asked, its audit entry names the template.
	audit.SetTarget(ctx, name)
	for _, t := range tags {
		if t == "" || len(t) > 256 || strings.ContainsAny(t, " \t\n/") {
			return nil, provider.Errorf(provider.CodeInvalidArgument, "tag %q: up to 256 characters, no spaces or slashes", t)
		}
	}
	t, err := sandbox.InspectTemplate(ctx, s.cfg.Provider, name)
	if err != nil && provider.CodeOf(err) != provider.CodeNotFound {
		return nil, err
	}
	if err == nil && t.Builtin && t.Name == name {
		return nil, provider.Errorf(provider.CodeInvalidArgument, "template %q is built in: build under another name", name)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now().UTC()
	for id, b := range s.builds {
		b.mu.Lock()
		st, created := b.state, b.created
		b.mu.Unlock()
		if st == Waiting && (now.Sub(created) > waitingExpiry || b.Name == name && b.KeyID == keyID) {
			// Never started, or superseded by the same key's new request (a client that
			// died between reserving and starting): forgotten.
			delete(s.builds, id)
			continue
		}
		if b.Name == name && !st.Done() {
			return nil, provider.Errorf(provider.CodeConflict, "template %q is being built (build %s)", name, b.ID)
		}
	}
	b := &Build{ID: "bld_" + store.RandomString(10), KeyID: keyID, Name: name, Tags: tags, state: Waiting, created: now, changed: make(chan struct{})}
	s.builds[b.ID] = b
	return b, nil
}

// Get returns the build id of the key keyID; CodeNotFound for another key's.
func (s *Service) Get(keyID, id string) (*Build, error) {
	s.mu.Lock()
	b := s.builds[id]
	s.mu.Unlock()
	if b == nil || b.KeyID != keyID {
		return nil, provider.Errorf(provider.CodeNotFound, "build %q not found", id)
	}
	return b, nil
}

// Start runs the waiting build b of req (Name, Tags, ID, Progress and Log are the service's),
// at once or when a slot frees. cleanup, if not nil, runs when the build ends
// (it removes the build's context). Start on a build that is not waiting is CodeConflict,
// and cleanup runs at once.
func (s *Service) Start(b *Build, req sandbox.BuildRequest, cleanup func()) error {
	if cleanup == nil {
		cleanup = func() {}
	}
	if err := s.Supported(); err != nil {
		cleanup()
		return err
	}
	ctx, cancel := context.WithCancel(s.base)
	b.mu.Lock()
	if b.state != Waiting {
		b.mu.Unlock()
		cancel()
		cleanup()
		return provider.Errorf(provider.CodeConflict, "build %s was already started", b.ID)
	}
	b.state, b.cancel = Queued, cancel
	b.changedLocked()
	b.mu.Unlock()
	req.Name, req.Tags, req.ID = b.Name, b.Tags, b.ID
	req.Progress, req.Log = b.progress, b
	s.emit(EventQueued, b, nil)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer cancel()
		s.run(ctx, b, req, cleanup)
	}()
	return nil
}

// Cancel stops the build id of keyID. A build already finished is CodeConflict.
func (s *Service) Cancel(keyID, id string) error {
	b, err := s.Get(keyID, id)
	if err != nil {
		return err
	}
	b.mu.Lock()
	switch {
	case b.state.Done():
		b.mu.Unlock()
		return provider.Errorf(provider.CodeConflict, "build %s has already ended (%s)", id, b.state)
	case b.state == Waiting:
		b.fail = &Failure{Code: provider.CodeAborted, Message: "cancelled"}
		b.state, b.finished = Failed, time.Now().UTC()
		b.changedLocked()
		b.mu.Unlock()
		s.mu.Lock()
		s.forget(b.ID)
		s.mu.Unlock()
		return nil
	}
	b.cancel()
	b.mu.Unlock()
	return nil
}

// run runs the build, then cleanup, then records its end: a client that sees the end sees
// the context gone.
func (s *Service) run(ctx context.Context, b *Build, req sandbox.BuildRequest, cleanup func()) {
	select {
	case s.sem <- struct{}{}:
		defer func() { <-s.sem }()
	case <-ctx.Done():
		cleanup()
		s.finish(b, sandbox.BuiltTemplate{}, provider.Errorf(provider.CodeAborted, "cancelled before it started"))
		return
	}
	b.mu.Lock()
	b.state, b.started = Building, time.Now().UTC()
	b.changedLocked()
	b.mu.Unlock()
	s.emit(EventStarted, b, nil)
	t, err := sandbox.BuildTemplate(ctx, s.cfg.Provider, req)
	if err != nil && ctx.Err() != nil {
		err = provider.Errorf(provider.CodeAborted, "cancelled: %v", err)
	}
	cleanup()
	s.finish(b, t, err)
}

func (s *Service) finish(b *Build, t sandbox.BuiltTemplate, err error) {
	b.mu.Lock()
	b.finished = time.Now().UTC()
	if err != nil {
		f := &Failure{Code: provider.CodeOf(err), Message: provider.StripCredentials(message(err))}
		var be *provider.BuildError
		if errors.As(err, &be) {
			f.Line, f.Instruction, f.ExitCode, f.Output = be.Line, be.Instruction, be.ExitCode, be.Output
		}
		b.state, b.fail = Failed, f
	} else {
		b.state, b.tpl = Ready, &t
	}
	b.changedLocked()
	b.mu.Unlock()
	if err != nil {
		b.add(LogEntry{Kind: "error", Text: b.fail.Message})
		s.emit(EventFailed, b, b.fail)
	} else {
		b.add(LogEntry{Kind: "info", Text: fmt.Sprintf("built template %s (%d layers)", t.Name, len(t.LayerIDs))})
		s.emit(EventReady, b, nil)
	}
	s.mu.Lock()
	s.forget(b.ID)
	s.mu.Unlock()
}

// forget records id as finished and drops the oldest finished builds past Keep. s.mu is
// held.
func (s *Service) forget(id string) {
	s.finished = append(s.finished, id)
	for len(s.finished) > s.cfg.Keep {
		delete(s.builds, s.finished[0])
		s.finished = s.finished[1:]
	}
}

func (s *Service) emit(typ string, b *Build, fail *Failure) {
	if s.cfg.Emit == nil {
		return
	}
	data := map[string]any{"buildId": b.ID, "template": b.Name}
	if fail != nil {
		data["error"] = fail
	}
	s.cfg.Emit(context.Background(), typ, "", data)
}

// message is an error's text without the "op: code: " prefixes of provider.Error.
func message(err error) string {
	var pe *provider.Error
	if errors.As(err, &pe) && pe.Message != "" {
		return pe.Message
	}
	return err.Error()
}
