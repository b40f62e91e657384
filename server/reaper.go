package server

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/store"
)

// Run does the server's background work until ctx ends: webhook deliveries from the outbox
// (including those a server that died left unfinished), and, while it leads its store
// (Config.Claim), the reaper (sandboxes past their deadline, expired snapshots) and the
// egress loop (refusals of network policies as events).
func (s *Server) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); s.deliverLoop(ctx) }()
	go func() { defer wg.Done(); s.lead(ctx) }()
	wg.Wait()
	return nil
}

// lead runs the work done once per store, however many servers share it, while this server
// leads the store: the reaper, the deadlines and the egress events. Without a Claim it always
// leads.
func (s *Server) lead(ctx context.Context) {
	for {
		on, changed := true, (<-chan struct{})(nil)
		if s.cfg.Claim != nil {
			on, changed = s.cfg.Claim.Leading()
		}
		if on {
			s.log.Debug("leading the store: reaping, deadlines and egress events run here")
			lctx, cancel := context.WithCancel(ctx)
			var wg sync.WaitGroup
			wg.Add(3)
			go func() { defer wg.Done(); s.reapLoop(lctx) }()
			go func() { defer wg.Done(); s.deadlineLoop(lctx) }()
			go func() { defer wg.Done(); s.egressLoop(lctx) }()
			select {
			case <-ctx.Done():
			case <-changed:
			}
			cancel()
			wg.Wait()
			if ctx.Err() != nil {
				return
			}
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
	}
}

func (s *Server) reapLoop(ctx context.Context) {
	t := time.NewTicker(s.cfg.ReapInterval)
	defer t.Stop()
	for {
		if err := s.Reconcile(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("reconciling sandboxes", "err", err)
		}
		if err := s.reapSnapshots(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("deleting expired snapshots", "err", err)
		}
		if err := s.st.DropSnapshotReservations(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("dropping the snapshot reservations of servers that died", "err", err)
		}
		if s.cfg.AuditRetention > 0 {
			if _, err := s.st.PruneAudit(ctx, time.Now().Add(-s.cfg.AuditRetention)); err != nil && ctx.Err() == nil {
				s.log.Warn("deleting audit entries past their retention", "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// deadlineLoop acts at the moment they pass on the deadlines the server enforces itself:
// it pauses a running sandbox created with onTimeout pause (or pause-cold), and destroys one
// whose provider has no deadline of its own (no "timeout" capability). It sleeps until the
// earliest of them, or until the store records a sandbox or moves a deadline. A failure
// waits for Reconcile, every ReapInterval, which is also the backstop for all of it. On a
// store other servers share, whose records and deadlines this one is not told of, it looks
// again at least every sharedDeadlinePoll.
func (s *Server) deadlineLoop(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	var poll <-chan time.Time
	if s.st.Shared() {
		t := time.NewTicker(sharedDeadlinePoll)
		defer t.Stop()
		poll = t.C
	}
	for {
		changed := s.st.DeadlineChanged()
		next, err := s.reapDeadlines(ctx)
		if err != nil && ctx.Err() == nil {
			s.log.Warn("acting on deadlines", "err", err)
		}
		var fire <-chan time.Time
		if !next.IsZero() {
			timer.Reset(time.Until(next))
			fire = timer.C
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-fire:
		case <-poll:
		}
		timer.Stop()
	}
}

// sharedDeadlinePoll is how often the deadline loop looks at a shared store's deadlines.
const sharedDeadlinePoll = 500 * time.Millisecond

// reapDeadlines pauses or destroys the sandboxes whose server-enforced deadline has passed
// (deadlineLoop) and returns the earliest deadline still to come (zero: none).
func (s *Server) reapDeadlines(ctx context.Context) (next time.Time, err error) {
	recs, err := s.st.Sandboxes(ctx)
	if err != nil {
		return time.Time{}, err
	}
	providerTimes := s.prov.Capabilities().Has(provider.CapTimeout)
	now := time.Now()
	for _, rec := range recs {
		pauses := store.PausesAtTimeout(rec.OnTimeout)
		if rec.Deadline.IsZero() || (!pauses && providerTimes) || (pauses && rec.State != provider.StateRunning) {
			continue
		}
		if rec.Deadline.After(now) {
			if next.IsZero() || rec.Deadline.Before(next) {
				next = rec.Deadline
			}
			continue
		}
		if pauses {
			s.pauseAtDeadline(ctx, rec.ID, rec.Deadline)
		} else {
			s.destroyAtDeadline(ctx, rec.ID, rec.Deadline)
		}
	}
	return next, nil
}

// pauseAtDeadline pauses a sandbox that pauses at its timeout, its deadline passed. Both the
// deadline loop and Reconcile call it, one at a time; a sandbox paused already is no error.
func (s *Server) pauseAtDeadline(ctx context.Context, id string, deadline time.Time) {
	s.deadlineMu.Lock()
	defer s.deadlineMu.Unlock()
	if err := s.lc.PauseAtTimeout(ctx, id, deadline); err != nil && !errors.Is(err, provider.CodeConflict) && !errors.Is(err, provider.CodeNotFound) {
		s.log.Warn("pausing a sandbox at its deadline", "sandbox", id, "err", err)
	}
}

// destroyAtDeadline destroys a sandbox past its deadline and records sandbox.timeout. Both
// the deadline loop and Reconcile call it, one at a time.
func (s *Server) destroyAtDeadline(ctx context.Context, id string, deadline time.Time) {
	s.deadlineMu.Lock()
	defer s.deadlineMu.Unlock()
	done := s.lc.DestroyingNow(id)
	defer done()
	err := s.prov.Destroy(ctx, id)
	if err != nil && !errors.Is(err, provider.CodeNotFound) {
		s.log.Warn("destroying a sandbox past its deadline", "sandbox", id, "err", err)
		return
	}
	s.lc.Gone(ctx, id, EventTimedOut, store.End{Reason: store.EndTimeout}, map[string]any{"deadline": deadline.UTC()})
}

// deadlineGrace is how long past its deadline the server leaves a sandbox to its provider
// before destroying it itself.
const deadlineGrace = 5 * time.Second

// Reconcile compares the server's records with the provider: a sandbox the provider no longer
// has, two reconciles in a row, is recorded as expired, and one past its deadline is destroyed
// (the host side enforces deadlines too, whatever happens inside the sandbox), or paused when
// it was created with onTimeout pause (without its memory with onTimeout pause-cold).
//
// Why two: a sandbox that a request (REST, E2B, MCP) is destroying can be read from the store
// before its destroy and be missing from the provider's list after it, before the request has
// recorded it as destroyed; expiring it at once would record "expired" for a sandbox the user
// destroyed. By the next reconcile the request has recorded it, and a sandbox that really
// stopped is recorded one reap interval later.
func (s *Server) Reconcile(ctx context.Context) error {
	recs, err := s.st.Sandboxes(ctx)
	if err != nil {
		return err
	}
	if len(recs) == 0 {
		return nil
	}
	infos, err := s.prov.List(ctx, provider.ListFilter{})
	if err != nil {
		return err
	}
	live := make(map[string]provider.Info, len(infos))
	for _, in := range infos {
		live[in.ID] = in
	}
	now := time.Now()
	s.missingMu.Lock()
	missedBefore := s.missing
	s.missing = map[string]bool{}
	s.missingMu.Unlock()
	for _, rec := range recs {
		in, ok := live[rec.ID]
		if !ok {
			// Listed by the store before the provider was asked: gone, or being destroyed.
			if s.lc.Destroying(rec.ID) {
				continue // the request destroying it records it
			}
			if missedBefore[rec.ID] {
				s.lc.Expired(ctx, rec.ID)
			} else {
				s.missingMu.Lock()
				s.missing[rec.ID] = true
				s.missingMu.Unlock()
			}
			continue
		}
		deadline := in.Deadline
		if deadline.IsZero() {
			deadline = rec.Deadline
		}
		if store.PausesAtTimeout(rec.OnTimeout) {
			// The provider has no deadline of its own for it: the server pauses it at its
			// deadline (and a paused one has none).
			if in.State == provider.StateRunning && !rec.Deadline.IsZero() && now.After(rec.Deadline) {
				s.pauseAtDeadline(ctx, rec.ID, rec.Deadline)
			}
			continue
		}
		if !deadline.IsZero() && now.After(deadline.Add(deadlineGrace)) {
			s.destroyAtDeadline(ctx, rec.ID, deadline)
		}
	}
	return nil
}
