package tools

import (
	"context"
	"maps"
	"sync"
	"time"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/sandbox"
)

// SessionOptions configures NewSession. The zero value is a session with default sandboxes
// and no scoping.
type SessionOptions struct {
	// Create is the template of every sandbox the session creates: its default sandbox and
	// those of create_sandbox (whose arguments override Network and add to Env). Labels are
	// added to; TrackChanges is set on the default sandbox.
	Create sandbox.CreateOptions

	// Labels scope the session: every sandbox it creates carries them, list_sandboxes shows
	// only sandboxes that carry all of them, and a sandbox_id naming one that does not is
	// "not found". A server scopes each API key this way.
	Labels map[string]string

	// PreviewURL, when set, gives the URL of a port in a sandbox for expose_port and
	// start_process (a server answers with its own preview routing). Nil: the provider's.
	PreviewURL func(ctx context.Context, sandboxID string, port int) (string, error)

	// Created, when set, is told of each sandbox the session makes, before any tool uses
	// it; an error destroys the sandbox and fails the tool call. A server records the
	// sandbox here, as its own API does.
	Created func(ctx context.Context, b *sandbox.Sandbox) error
	// Destroy, when set, destroys the sandboxes the session ends (destroy_sandbox, the
	// default sandbox at Close, one made after Close); a server records the end and emits
	// its event, as its own API does. Nil: Sandbox.Destroy.
	Destroy func(ctx context.Context, b *sandbox.Sandbox) error
	// Snapshot, when set, takes the snapshot tool's snapshots (a server counts them against
	// its quotas and gives them its expiry, as its own API does). Nil: Sandbox.Snapshot.
	Snapshot func(ctx context.Context, b *sandbox.Sandbox) (string, error)
	// Pause and Resume, when set, pause and resume sandboxes for pause_sandbox and
	// resume_sandbox (a server records the change and emits its events, as its own API
	// does). Nil: Sandbox.PauseWith and Sandbox.Resume.
	Pause  func(ctx context.Context, b *sandbox.Sandbox, opts sandbox.PauseOptions) error
	Resume func(ctx context.Context, b *sandbox.Sandbox) error
	// Ran, when set, is told how long each run_command took, from the call to its result
	// (a server's metrics). Nil: nobody is told.
	Ran func(d time.Duration)

	// Called, when set, is told of each call of a tool that is not ReadOnly, once it has
	// run: the tool's name, the sandbox it acted in or made ("" when none), and its failure
	// (nil when it succeeded; an error Result's failure too). It is never given the
	// arguments or the result. A server records the call in its audit log.
	Called func(ctx context.Context, tool, sandboxID string, err error)

	// Bound, when set, binds the session to that existing sandbox: it is the default, it is
	// the only sandbox the session lists or reaches (another sandbox_id is not found), and the
	// session neither creates sandboxes (create_sandbox is refused) nor destroys, pauses or
	// resumes it (those tools are refused, Close leaves it running). A server gives a sandbox's own
	// MCP endpoint such a session.
	Bound string
}

// Session is the state tools share in one conversation with a model: a provider, and a
// default sandbox that tools use when the model gives no sandbox_id. The default sandbox is
// created on first use, with change tracking so file_changes works, and destroyed by Close.
// Sandboxes made with create_sandbox outlive the session until destroy_sandbox or their
// provider's deadline.
//
// A Session may be used from many goroutines at once.
type Session struct {
	prov provider.Provider
	opts SessionOptions

	mu        sync.Mutex
	closed    bool
	closeDone chan struct{} // closed when Close has finished
	closeErr  error
	creating  chan struct{} // closed when a pending default creation ends
	defaultID string
	handles   map[string]*sandbox.Sandbox // connected or created sandboxes by id
	untracked map[string]error            // sandboxes whose change checkpoint failed, and why
}

// NewSession returns a session that makes and finds sandboxes on p.
func NewSession(p provider.Provider, opts SessionOptions) *Session {
	opts.Labels = maps.Clone(opts.Labels)
	return &Session{prov: p, opts: opts, handles: map[string]*sandbox.Sandbox{}, untracked: map[string]error{}}
}

// Provider returns the session's provider.
func (s *Session) Provider() provider.Provider { return s.prov }

// DefaultID returns the id of the default sandbox, or "" when none has been created yet.
func (s *Session) DefaultID() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.defaultID
}

var errClosed = &sandbox.Error{Code: sandbox.CodeUnavailable, Op: "session", Message: "the tool session has ended"}

// Sandbox returns the sandbox id, or with id "" the default sandbox, creating it on first
// use. A sandbox outside the session's Labels is CodeNotFound.
func (s *Session) Sandbox(ctx context.Context, id string) (*sandbox.Sandbox, error) {
	if id == "" {
		return s.defaultSandbox(ctx)
	}
	if s.opts.Bound != "" && id != s.opts.Bound {
		return nil, &sandbox.Error{Code: sandbox.CodeNotFound, Op: "connect", Message: "no sandbox " + id + " (this session reaches sandbox " + s.opts.Bound + " only)"}
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, errClosed
	}
	if b := s.handles[id]; b != nil {
		s.mu.Unlock()
		return b, nil
	}
	s.mu.Unlock()

	b, err := sandbox.Connect(ctx, s.prov, id, sandbox.ConnectOptions{})
	if err != nil {
		return nil, err
	}
	if !s.inScope(b.Labels) {
		b.Close()
		return nil, &sandbox.Error{Code: sandbox.CodeNotFound, Op: "connect", Message: "no sandbox " + id}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		b.Close()
		return nil, errClosed
	}
	if prev := s.handles[id]; prev != nil {
		b.Close()
		return prev, nil
	}
	s.handles[id] = b
	return b, nil
}

func (s *Session) inScope(labels map[string]string) bool {
	return provider.ListFilter{Labels: s.opts.Labels}.Matches(labels)
}

func (s *Session) defaultSandbox(ctx context.Context) (*sandbox.Sandbox, error) {
	for {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return nil, errClosed
		}
		if s.defaultID != "" {
			b := s.handles[s.defaultID]
			s.mu.Unlock()
			return b, nil
		}
		if wait := s.creating; wait != nil {
			// Another call is creating it: wait for that one rather than make a second.
			s.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return nil, &sandbox.Error{Code: sandbox.CodeAborted, Op: "create", Message: ctx.Err().Error()}
			}
		}
		done := make(chan struct{})
		s.creating = done
		s.mu.Unlock()

		var b *sandbox.Sandbox
		var err error
		if s.opts.Bound != "" {
			b, err = sandbox.Connect(ctx, s.prov, s.opts.Bound, sandbox.ConnectOptions{})
		} else {
			b, err = s.create(ctx, s.opts.Create, true)
		}

		s.mu.Lock()
		s.creating = nil
		close(done)
		if err != nil {
			s.mu.Unlock()
			return nil, err
		}
		if s.closed {
			s.mu.Unlock()
			if s.opts.Bound != "" {
				b.Close()
			} else {
				s.destroyQuietly(b)
			}
			return nil, errClosed
		}
		s.defaultID = b.ID
		s.handles[b.ID] = b
		s.mu.Unlock()
		return b, nil
	}
}

// create makes a sandbox from opts with the session's labels. With track it then records
// the "start" change checkpoint; a sandbox whose checkpoint fails is still returned, and
// file_changes later reports why it cannot answer.
func (s *Session) create(ctx context.Context, opts sandbox.CreateOptions, track bool) (*sandbox.Sandbox, error) {
	opts.Labels = maps.Clone(opts.Labels)
	if opts.Labels == nil {
		opts.Labels = map[string]string{}
	}
	maps.Copy(opts.Labels, s.opts.Labels)
	opts.TrackChanges = false
	b, err := sandbox.Create(ctx, s.prov, opts)
	if err != nil {
		return nil, err
	}
	if s.opts.Created != nil {
		if err := s.opts.Created(ctx, b); err != nil {
			destroyUnrecorded(b)
			return nil, err
		}
	}
	if !track {
		return b, nil
	}
	if _, err := b.Files.Mark(ctx, "start"); err != nil {
		s.mu.Lock()
		s.untracked[b.ID] = err
		s.mu.Unlock()
	}
	return b, nil
}

// trackErr returns why the sandbox id has no change checkpoint, or nil.
func (s *Session) trackErr(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.untracked[id]
}

// createExtra makes a sandbox for create_sandbox and keeps its handle.
func (s *Session) createExtra(ctx context.Context, opts sandbox.CreateOptions) (*sandbox.Sandbox, error) {
	if s.opts.Bound != "" {
		return nil, s.boundErr("create")
	}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return nil, errClosed
	}
	b, err := s.create(ctx, opts, true)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		s.destroyQuietly(b)
		return nil, errClosed
	}
	s.handles[b.ID] = b
	return b, nil
}

// fork forks b (Sandbox.Fork), tells SessionOptions.Created of each child and keeps their
// handles; on a failure every child is destroyed.
func (s *Session) fork(ctx context.Context, b *sandbox.Sandbox, opts sandbox.ForkOptions) ([]*sandbox.Sandbox, error) {
	if s.opts.Bound != "" {
		return nil, s.boundErr("fork")
	}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return nil, errClosed
	}
	kids, err := b.Fork(ctx, opts)
	if err != nil {
		return nil, err
	}
	for _, k := range kids {
		if s.opts.Created != nil {
			if err := s.opts.Created(ctx, k); err != nil {
				for _, k := range kids {
					destroyUnrecorded(k)
				}
				return nil, err
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		for _, k := range kids {
			s.destroyQuietly(k)
		}
		return nil, errClosed
	}
	for _, k := range kids {
		s.handles[k.ID] = k
	}
	return kids, nil
}

// destroySandbox destroys id (which must be in scope) and forgets it; destroying the default
// sandbox means the next tool call without sandbox_id creates a fresh one.
func (s *Session) destroySandbox(ctx context.Context, id string) error {
	if s.opts.Bound != "" {
		return s.boundErr("destroy")
	}
	b, err := s.Sandbox(ctx, id)
	if err != nil {
		return err
	}
	err = s.destroyBox(ctx, b)
	s.mu.Lock()
	delete(s.handles, id)
	if s.defaultID == id {
		s.defaultID = ""
	}
	s.mu.Unlock()
	return err
}

// Closed reports whether Close has been called.
func (s *Session) Closed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// Close destroys the default sandbox, if one was created, and releases every handle. It is
// idempotent and safe to call concurrently: a call while another is closing waits for it
// (or for ctx) and returns its result. Tool calls after Close fail with CodeUnavailable.
func (s *Session) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.closeDone != nil {
		done := s.closeDone
		s.mu.Unlock()
		select {
		case <-done:
			s.mu.Lock()
			defer s.mu.Unlock()
			return s.closeErr
		case <-ctx.Done():
			return &sandbox.Error{Code: sandbox.CodeAborted, Op: "session.close", Message: ctx.Err().Error()}
		}
	}
	s.closed = true
	s.closeDone = make(chan struct{})
	handles := s.handles
	def := s.defaultID
	s.handles = map[string]*sandbox.Sandbox{}
	s.defaultID = ""
	s.mu.Unlock()

	var err error
	for id, b := range handles {
		if id == def && s.opts.Bound == "" {
			err = s.destroyBox(ctx, b)
			continue
		}
		b.Close()
	}
	s.mu.Lock()
	s.closeErr = err
	close(s.closeDone)
	s.mu.Unlock()
	return err
}

// boundErr is the refusal of op (create, destroy) by a session bound to one sandbox.
// pause pauses b as opts say: SessionOptions.Pause, else the sandbox itself.
func (s *Session) pause(ctx context.Context, b *sandbox.Sandbox, opts sandbox.PauseOptions) error {
	if s.opts.Bound != "" {
		return s.boundErr("pause")
	}
	if s.opts.Pause != nil {
		return s.opts.Pause(ctx, b, opts)
	}
	return b.PauseWith(ctx, opts)
}

// resume resumes b: SessionOptions.Resume, else the sandbox itself.
func (s *Session) resume(ctx context.Context, b *sandbox.Sandbox) error {
	if s.opts.Bound != "" {
		return s.boundErr("resume")
	}
	if s.opts.Resume != nil {
		return s.opts.Resume(ctx, b)
	}
	return b.Resume(ctx)
}

func (s *Session) boundErr(op string) error {
	return &sandbox.Error{Code: sandbox.CodeForbidden, Op: op, Message: "this session is bound to sandbox " + s.opts.Bound + ": it neither creates, destroys, pauses nor resumes sandboxes"}
}

// destroyBox destroys b through the Destroy hook, if any, else Sandbox.Destroy.
func (s *Session) destroyBox(ctx context.Context, b *sandbox.Sandbox) error {
	if s.opts.Destroy != nil {
		return s.opts.Destroy(ctx, b)
	}
	return b.Destroy(ctx)
}

// destroyUnrecorded removes a sandbox the Created hook refused (or made beside one it
// refused), which nothing recorded: Sandbox.Destroy, with its own deadline.
func destroyUnrecorded(b *sandbox.Sandbox) { quietly(b.Destroy) }

// destroyQuietly removes a sandbox nobody will use, with its own deadline.
func (s *Session) destroyQuietly(b *sandbox.Sandbox) {
	quietly(func(ctx context.Context) error { return s.destroyBox(ctx, b) })
}

// quietly runs destroy with a deadline of its own, its error dropped.
func quietly(destroy func(ctx context.Context) error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = destroy(ctx)
}
