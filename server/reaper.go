package server

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/tupper-dev/tupper/provider"
)

// Run does the server's background work until ctx ends: webhook deliveries from the outbox
// (including those a previous process left unfinished) and the reaper.
func (s *Server) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); s.deliverLoop(ctx) }()
	go func() { defer wg.Done(); s.reapLoop(ctx) }()
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
// has is recorded as expired, and one past its deadline is destroyed (the host side enforces
// deadlines too, whatever happens inside the sandbox).
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
	for _, rec := range recs {
		in, ok := live[rec.ID]
		if !ok {
			// Listed by the store before the provider was asked: truly gone.
			s.gone(ctx, rec.ID, EventExpired, nil)
			continue
		}
		deadline := in.Deadline
		if deadline.IsZero() {
			deadline = rec.Deadline
		}
		if !deadline.IsZero() && now.After(deadline.Add(deadlineGrace)) {
			err := s.prov.Destroy(ctx, rec.ID)
			if err != nil && !errors.Is(err, provider.CodeNotFound) {
				s.log.Warn("destroying a sandbox past its deadline", "sandbox", rec.ID, "err", err)
				continue
			}
			s.gone(ctx, rec.ID, EventTimedOut, map[string]any{"deadline": deadline.UTC()})
		}
	}
	return nil
}
