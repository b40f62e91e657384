package sandbox

import (
	"context"
	"maps"
	"sync"
	"time"

	"github.com/tupper-dev/tupper/provider"
)

// MaxFork is the most children one Fork makes.
const MaxFork = 64

// ForkOptions configure Fork. The zero value makes one child.
type ForkOptions struct {
	// N is how many children to make; 0 is 1, more than MaxFork is invalid_argument.
	N int
	// Labels are each child's labels (the parent's are not copied).
	Labels map[string]string
	// Timeout is each child's hard lifetime; 0: none.
	Timeout time.Duration
	// Network is each child's network where the fork boots children afresh (a filesystem
	// fork); zero: the parent's when the provider can say (its policy too, where the
	// provider keeps it: SnapshotInfo.Policy), else none. A full fork's children
	// keep the parent's network mode, and asking for none when the parent had all is
	// invalid_argument.
	Network Network
}

func (o ForkOptions) validate() error {
	if o.N < 0 || o.N > MaxFork {
		return errorf(CodeInvalidArgument, "fork", "n must be between 1 and %d, got %d", MaxFork, o.N)
	}
	if o.Timeout < 0 {
		return errorf(CodeInvalidArgument, "fork", "timeout must not be negative, got %v", o.Timeout)
	}
	return nil
}

// ForkKind is how a sandbox forks: SnapshotFull (memory and processes: the children
// continue where the parent was), SnapshotFilesystem (files only: the children boot afresh
// on the parent's files), or "" (it cannot fork).
func (b *Sandbox) ForkKind() provider.SnapshotKind {
	switch {
	case b.Capabilities.Has(provider.CapSnapshotFull):
		return SnapshotFull
	case b.Capabilities.Has(provider.CapSnapshot): // a Snapshotter its provider does not refuse
		return SnapshotFilesystem
	}
	return ""
}

// Fork makes opts.N new sandboxes from this running one, which keeps running. The children
// are independent: a write in one is seen by no other, nor by the parent, except on a volume
// the parent mounts, which the children mount too (shared storage, docs/volumes.md). Memory
// and running processes are carried where the sandbox has "snapshot-full" (ForkKind), files
// only where it is only a provider.Snapshotter; where it is none, Fork is CodeUnsupported.
// On a failure, the children already made are destroyed. The provider's provider.Forker
// does it where there is one; else a snapshot, opts.N creates from it, and the snapshot's
// deletion.
func (b *Sandbox) Fork(ctx context.Context, opts ForkOptions) ([]*Sandbox, error) {
	const op = "fork"
	if err := opts.validate(); err != nil {
		return nil, err
	}
	n := max(opts.N, 1)
	labels := maps.Clone(opts.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[SDKLabel] = "true"
	if f, ok := b.inst.(provider.Forker); ok {
		insts, err := f.Fork(ctx, provider.ForkRequest{N: n, Labels: labels, Timeout: opts.Timeout})
		if err != nil {
			return nil, wrapProvider(err, op)
		}
		out := make([]*Sandbox, 0, len(insts))
		for _, inst := range insts {
			info, err := inst.Info(ctx)
			if err != nil {
				for _, in := range insts {
					destroyQuietly(b.prov, in)
					in.Close()
				}
				return nil, wrapProvider(err, op)
			}
			out = append(out, b.child(inst, info))
		}
		return out, nil
	}
	kind := b.ForkKind()
	if kind == "" {
		return nil, errorf(CodeUnsupported, op, "provider %s cannot fork (no snapshots)", b.Provider)
	}
	info, err := b.Info(ctx)
	if err != nil {
		return nil, err
	}
	// The snapshot only carries the parent to its children (transient: the provider may
	// keep it cheaply); it expires by itself should this process die before deleting it.
	snap, err := snapshot(ctx, b, SnapshotOptions{Kind: kind, ExpiresIn: time.Hour}, true)
	if err != nil {
		return nil, err
	}
	defer func() {
		if d, ok := b.prov.(provider.SnapshotDeleter); ok {
			_ = d.DeleteSnapshot(context.WithoutCancel(ctx), snap)
		}
	}()
	network := opts.Network
	if network.Mode == "" && len(network.Allow) == 0 && len(network.Deny) == 0 && !network.Learn {
		network.Mode = provider.NetworkNone
		if si, err := InspectSnapshot(ctx, b.prov, snap); err == nil && si.Policy != nil {
			network = *si.Policy // the parent's policy, lists and all
		} else if err == nil && si.Network != "" {
			network.Mode = si.Network
		}
	}
	co := CreateOptions{Labels: opts.Labels, Timeout: opts.Timeout, Network: network, From: snap, Runtime: info.Runtime}
	if kind == SnapshotFull {
		co.Runtime = "" // the snapshot's
	}
	out := make([]*Sandbox, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			out[i], errs[i] = Create(ctx, b.prov, co)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			for _, c := range out {
				if c != nil {
					_ = c.Destroy(context.WithoutCancel(ctx))
				}
			}
			return nil, wrapProvider(err, op)
		}
	}
	for _, c := range out {
		c.previewURL = b.previewURL
		c.secPending = true // the parent's secrets, read back from the children
	}
	return out, nil
}

// child is a handle to a sandbox a provider forked from b.
func (b *Sandbox) child(inst provider.Instance, info provider.Info) *Sandbox {
	c := newHandle(b.prov, inst, info, true)
	c.previewURL = b.previewURL
	c.secPending = true
	return c
}
