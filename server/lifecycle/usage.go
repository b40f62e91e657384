package lifecycle

import (
	"context"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/sandbox"
	"github.com/tupper-dev/tupper/store"
)

// The usage ledger (store.UsageRecord, docs/operations.md): a line per sandbox, opened at
// its create with its template, runtime and node, raised by the server's sampler
// (SampleUsage, every UsageInterval on the server that leads the store) and by a last
// reading just before a destroy, and closed with the sandbox's end.

// startUsage opens a new sandbox's line of the ledger. A failure is only logged: the
// sampler and the end write the line too.
func (s *Service) startUsage(ctx context.Context, info sandbox.Info) {
	if err := s.st.RecordUsage(ctx, store.UsageSample{SandboxID: info.ID, Template: info.Template, Runtime: info.Runtime, Node: s.cfg.Node}); err != nil {
		s.log.Warn("opening a sandbox's line of the usage ledger", "sandbox", info.ID, "err", err)
	}
}

// usageOf reads sandbox id's counters now, when the provider counts them (nil otherwise, or
// when it failed), and hands the reading to Config.Sampled.
func (s *Service) usageOf(ctx context.Context, id string) *store.UsageSample {
	r, ok := s.prov.(provider.UsageReporter)
	if !ok {
		return nil
	}
	u, err := r.UsageOf(ctx, id)
	if err != nil {
		return nil
	}
	if s.cfg.Sampled != nil {
		s.cfg.Sampled(id, u)
	}
	return &store.UsageSample{SandboxID: id, Node: s.cfg.Node, At: u.At, CPUUsec: u.CPUUsec, MemPeak: u.MemPeak,
		DiskUsed: u.DiskUsed, NetRx: u.NetRx, NetTx: u.NetTx}
}

// SampleUsage reads sandbox id's counters and writes them into the ledger: what a destroy
// made outside Destroy (the server's, at a deadline) calls first, since the counters go
// with the sandbox.
func (s *Service) SampleUsage(ctx context.Context, id string) {
	if u := s.usageOf(ctx, id); u != nil {
		if err := s.st.RecordUsage(context.WithoutCancel(ctx), *u); err != nil {
			s.log.Warn("writing a sandbox's usage", "sandbox", id, "err", err)
		}
	}
}

// SampleAllUsage reads the counters of every live sandbox the store has a record of and
// writes them into the ledger in one transaction. It returns how many it sampled. A
// provider without provider.UsageReporter samples nothing.
func (s *Service) SampleAllUsage(ctx context.Context) (int, error) {
	if _, ok := s.prov.(provider.UsageReporter); !ok {
		return 0, nil
	}
	recs, err := s.st.Sandboxes(ctx)
	if err != nil {
		return 0, err
	}
	samples := make([]store.UsageSample, 0, len(recs))
	for _, rec := range recs {
		if rec.State == provider.StatePaused {
			continue // nothing to count, and its counters may be gone with its processes
		}
		if u := s.usageOf(ctx, rec.ID); u != nil {
			samples = append(samples, *u)
		}
	}
	return len(samples), s.st.RecordUsage(ctx, samples...)
}
