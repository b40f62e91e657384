//go:build linux

package local

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/tupper-dev/tupper/provider"
)

// The warm pool (Config.Pool). A provider with a pool keeps that many sandboxes of its
// default shape started and ready, from New until Close: its default runtime, the host
// template, the default size, network "none". Create hands one out when the spec asks for
// exactly that shape and everything else it asks can be applied to a running sandbox:
// labels and key (the record), Timeout and IdleTimeout (the record and the agent's
// /tupper/deadline). Env, Secrets, From, another runtime, template or size, and network
// "all" bypass the pool and create as usual. Network "all" is not pooled: each such
// sandbox holds a host-wide address lease and a veth pair, and its resolv.conf is the
// host's at creation.
//
// A pooled sandbox's record says Pooled with the owning process (pid and /proc starttime):
// it is never listed, found by key or connected to, and reap does not count it. Close
// destroys the pool; a pool whose process died is removed by the next List, Reap or Create
// of any provider on the same Home, like any dead sandbox. A single goroutine refills the
// pool, one sandbox at a time, backing off while creates fail.

// pool is a provider's warm pool.
type pool struct {
	want   int
	kick   chan struct{} // wakes the filler after a hand-out
	cancel context.CancelFunc
	done   chan struct{} // closed when the filler has returned

	mu           sync.Mutex
	ready        []string // ids of pooled sandboxes, oldest first
	closed       bool
	hits, misses uint64 // PoolStats
}

// refillDelay is how long the pool waits after a hand-out before it starts a replacement.
const refillDelay = 100 * time.Millisecond

// poolSpec is the spec pooled sandboxes are created with.
var poolSpec = provider.CreateSpec{Network: provider.Network{Mode: provider.NetworkNone}}

// startPool starts filling a pool of n sandboxes in the background.
func (p *Provider) startPool(n int) {
	ctx, cancel := context.WithCancel(context.Background())
	pl := &pool{want: n, kick: make(chan struct{}, 1), cancel: cancel, done: make(chan struct{})}
	p.pool = pl
	go p.fillPool(ctx, pl)
}

// fillPool keeps pl full until ctx is cancelled.
func (p *Provider) fillPool(ctx context.Context, pl *pool) {
	defer close(pl.done)
	backoff := time.Second
	for {
		pl.mu.Lock()
		short := pl.want - len(pl.ready)
		pl.mu.Unlock()
		if short <= 0 {
			select {
			case <-ctx.Done():
				return
			case <-pl.kick:
				// Let the caller's first commands run before a refill competes with them
				// for the CPU.
				select {
				case <-ctx.Done():
					return
				case <-time.After(refillDelay):
				}
				continue
			}
		}
		if p.probed(); p.unavail != nil {
			return
		}
		inst, err := p.create(ctx, poolSpec, true)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, time.Minute)
			continue
		}
		backoff = time.Second
		inst.Close()
		pl.mu.Lock()
		pl.ready = append(pl.ready, inst.(*Instance).ID())
		pl.mu.Unlock()
	}
}

// poolable reports whether a pooled sandbox can serve spec.
func (p *Provider) poolable(spec provider.CreateSpec) bool {
	if spec.From != "" || len(spec.Env) > 0 || len(spec.Secrets) > 0 || len(spec.BoundSecrets) > 0 || len(spec.Volumes) > 0 {
		return false
	}
	if spec.Runtime != "" && spec.Runtime != p.cfg.Runtime {
		return false
	}
	if spec.Template != "" && spec.Template != TemplateHost {
		return false
	}
	if spec.Network.Mode != provider.NetworkNone || len(spec.Network.Allow) > 0 {
		return false
	}
	if spec.Timeout < 0 || spec.IdleTimeout < 0 {
		return false
	}
	size, err := p.size(spec.Size)
	d := p.cfg.DefaultSize
	return err == nil && size.CPU == d.CPU && size.MemoryMB == d.MemoryMB && size.DiskGB == d.DiskGB
}

// fromPool hands out a pooled sandbox for spec, or returns nil when there is none that fits
// (then Create makes one). Pooled sandboxes that died on the way are destroyed.
func (p *Provider) fromPool(ctx context.Context, spec provider.CreateSpec) *Instance {
	pl := p.pool
	if pl == nil || !p.poolable(spec) {
		return nil
	}
	for ctx.Err() == nil {
		pl.mu.Lock()
		if len(pl.ready) == 0 {
			pl.misses++
			pl.mu.Unlock()
			return nil
		}
		id := pl.ready[0]
		pl.ready = pl.ready[1:]
		pl.mu.Unlock()
		select {
		case pl.kick <- struct{}{}:
		default:
		}
		if inst, err := p.handOut(ctx, id, spec); err == nil {
			inst.pooled = true
			pl.mu.Lock()
			pl.hits++
			pl.mu.Unlock()
			return inst
		}
	}
	return nil
}

// PoolStats reports the warm pool (provider.PoolReporter); ok is false without one.
func (p *Provider) PoolStats() (provider.PoolStats, bool) {
	pl := p.pool
	if pl == nil {
		return provider.PoolStats{}, false
	}
	pl.mu.Lock()
	defer pl.mu.Unlock()
	return provider.PoolStats{Target: pl.want, Ready: len(pl.ready), Hits: pl.hits, Misses: pl.misses}, true
}

// handOut turns pooled sandbox id into the caller's: the agent learns the deadline and idle
// timeout, then the record gets the labels, key and a fresh CreatedAt. A pooled sandbox that
// is gone or does not answer is destroyed and an error returned.
func (p *Provider) handOut(ctx context.Context, id string, spec provider.CreateSpec) (*Instance, error) {
	if _, err := p.lay.readRecord(id); err != nil {
		return nil, err // reaped (it died)
	}
	// Not the caller's ctx: a cancelled create must not lose track of the sandbox. Others
	// hold the lock briefly (reap, Destroy).
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	lk, err := p.lockSandbox(lctx, id)
	cancel()
	if err != nil {
		return nil, err
	}
	defer lk.Unlock()
	rec, err := p.lay.readRecord(id)
	if err != nil {
		return nil, err
	}
	if !rec.Pooled || rec.Status != statusReady || !alive(rec) {
		if rec.Pooled {
			p.teardown(ctx, rec)
		}
		return nil, errNotFound(id)
	}
	now := time.Now()
	var deadline time.Time
	if spec.Timeout > 0 {
		deadline = now.Add(spec.Timeout).UTC().Truncate(time.Millisecond)
	}
	// The instance's own client, so that the caller's first command reuses the connection.
	inst := p.instance(rec)
	if err := inst.Client().SetLimits(ctx, agentDeadline(deadline), spec.IdleTimeout); err != nil {
		inst.Close()
		if ctx.Err() == nil || !p.putBack(id) {
			p.teardown(ctx, rec)
		}
		return nil, err
	}
	rec.Pooled, rec.PoolOwner, rec.PoolOwnerStart = false, 0, 0
	rec.Key, rec.Labels, rec.Deadline, rec.IdleTimeout = spec.Key, spec.Labels, deadline, spec.IdleTimeout
	rec.CreatedAt = now.UTC().Truncate(time.Millisecond)
	if err := errors.Join(p.lay.writeRecord(rec), p.indexKey(rec)); err != nil {
		inst.Close()
		p.teardown(ctx, rec)
		return nil, err
	}
	return inst, nil
}

// putBack returns an untouched pooled sandbox to the pool (a hand-out cancelled by its
// caller). It reports false when the pool is closed.
func (p *Provider) putBack(id string) bool {
	pl := p.pool
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if !pl.closed {
		pl.ready = append(pl.ready, id)
	}
	return !pl.closed
}

// closePool stops the filler and destroys the pooled sandboxes. It is idempotent.
func (p *Provider) closePool() error {
	pl := p.pool
	if pl == nil {
		return nil
	}
	pl.cancel()
	<-pl.done
	pl.mu.Lock()
	ids := pl.ready
	pl.ready, pl.closed = nil, true
	pl.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var errs []error
	for _, id := range ids {
		if _, err := p.lay.readRecord(id); err != nil {
			continue // gone already (reaped); do not recreate its lock file
		}
		lk, err := p.lockSandbox(ctx, id)
		if err != nil {
			continue // gone already
		}
		if rec, err := p.lay.readRecord(id); err == nil && rec.Pooled {
			errs = append(errs, p.teardown(ctx, rec))
		}
		lk.Unlock()
	}
	return errors.Join(errs...)
}

// poolOwnerAlive reports whether the process whose pool a pooled sandbox is still runs.
func poolOwnerAlive(r *record) bool {
	return r.PoolOwner > 0 && procStart(r.PoolOwner) == r.PoolOwnerStart
}
