package server

import (
	"context"
	"errors"
	"time"

	"github.com/tupper-dev/tupper/provider"
)

// Denials become events. The egress loop reads, every EgressInterval, the egress record
// (sandbox.Egress: the local provider's per-sandbox proxy log) of each sandbox the server
// has, from where it last stopped, and emits sandbox.egress_denied for each refusal it has
// not reported yet: at most egressEventsPerMinute per sandbox, the others counted in the
// next event's "suppressed". The record keeps each refusal at most once a second per
// destination, so a program retrying in a loop costs one line a second. A sandbox whose
// provider records nothing (no policy, or no provider.EgressReporter) is asked once; a paused
// one is not asked, and asking never resumes a sandbox created with AutoResume. The
// cursors live in memory: after a restart, refusals from before the server started are not
// reported again.

// egressEventsPerMinute bounds the sandbox.egress_denied events of one sandbox.
const egressEventsPerMinute = 30

type egressWatch struct {
	cursor      string
	none        bool // records nothing
	window      time.Time
	sent        int
	suppressed  int
	lastProblem string
}

func (s *Server) egressLoop(ctx context.Context) {
	started := time.Now()
	watches := map[string]*egressWatch{}
	t := time.NewTicker(s.cfg.EgressInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		recs, err := s.st.Sandboxes(ctx)
		if err != nil {
			continue
		}
		seen := make(map[string]bool, len(recs))
		for _, rec := range recs {
			seen[rec.ID] = true
			w := watches[rec.ID]
			if w == nil {
				w = &egressWatch{}
				watches[rec.ID] = w
			}
			// A paused sandbox sends nothing; what it sent before it paused was read at
			// the tick before.
			if !w.none && rec.State != provider.StatePaused {
				s.pollEgress(ctx, rec.ID, w, started)
			}
		}
		for id := range watches {
			if !seen[id] {
				delete(watches, id)
			}
		}
	}
}

// pollEgress emits the refusals recorded for sandbox id since w's cursor.
func (s *Server) pollEgress(ctx context.Context, id string, w *egressWatch, started time.Time) {
	// Peek, not Handle: reading the record is not a use that resumes an auto-resume sandbox.
	b, err := s.lc.Peek(ctx, id)
	if err != nil {
		return
	}
	entries, next, err := b.EgressSince(ctx, w.cursor, 1000)
	w.cursor = next
	if errors.Is(err, provider.CodeUnsupported) {
		w.none = true
		return
	}
	if err != nil && err.Error() != w.lastProblem {
		w.lastProblem = err.Error()
		s.log.Warn("reading a sandbox's egress record", "sandbox", id, "err", err)
	}
	now := time.Now()
	for _, e := range entries {
		if e.Time.Before(started) {
			continue
		}
		s.cfg.Metrics.CountEgress(egressKind(e.Kind), e.Allowed)
		if e.Allowed {
			continue
		}
		if now.Sub(w.window) >= time.Minute {
			w.window, w.sent = now, 0
		}
		if w.sent >= egressEventsPerMinute {
			w.suppressed++
			continue
		}
		w.sent++
		dest := e.Name
		if dest == "" {
			dest = e.Dest
		}
		data := map[string]any{"destination": dest, "kind": e.Kind, "time": e.Time.UTC(), "reason": e.Reason}
		if e.Name != "" {
			data["name"] = e.Name
		}
		if e.Dest != "" {
			data["address"] = e.Dest
		}
		if e.Type != "" {
			data["queryType"] = e.Type
		}
		if w.suppressed > 0 {
			data["suppressed"] = w.suppressed
			w.suppressed = 0
		}
		s.emit(ctx, EventEgressDenied, id, data)
	}
}

// egressKind is an egress record's kind as a metrics label: "dns", "connect", or "other".
func egressKind(k string) string {
	if k == "dns" || k == "connect" {
		return k
	}
	return "other"
}
