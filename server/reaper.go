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
// (including those a previous process left unfinished) and the reaper (sandboxes past
// their deadline, expired snapshots) and the egress loop (refusals of network policies as
// events).
func (s *Server) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); s.deliverLoop(ctx) }()
	go func() { defer wg.Done(); s.reapLoop(ctx) }()
	go func() { defer wg.Done(); s.egressLoop(ctx) }()
	wg.Wait()
	return nil
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
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
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
				s.lc.Gone(ctx, rec.ID, EventExpired, nil)
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
				if err := s.lc.PauseAtTimeout(ctx, rec.ID, rec.Deadline); err != nil && !errors.Is(err, provider.CodeConflict) {
					s.log.Warn("pausing a sandbox at its deadline", "sandbox", rec.ID, "err", err)
				}
			}
			continue
		}
		if !deadline.IsZero() && now.After(deadline.Add(deadlineGrace)) {
			err := s.prov.Destroy(ctx, rec.ID)
			if err != nil && !errors.Is(err, provider.CodeNotFound) {
				s.log.Warn("destroying a sandbox past its deadline", "sandbox", rec.ID, "err", err)
				continue
			}
			s.lc.Gone(ctx, rec.ID, EventTimedOut, map[string]any{"deadline": deadline.UTC()})
		}
	}
	return nil
}
