package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/tupper-dev/tupper/providers/local"
	"github.com/tupper-dev/tupper/sandbox"
)

// The fork section: for each runtime, a running parent (network none) whose background
// process holds forkDirtyMiB of memory is forked --fork times into one child and --fork
// times into ten, each time per child, beside a cold create → first command of the same
// runtime in the same run. Under runsc a fork carries memory and processes (a full
// snapshot); elsewhere files only, the children booting afresh. Children are destroyed
// untimed.

// forkDirtyMiB is the memory the parent's background process holds.
const forkDirtyMiB = 16

func (b *bencher) forkSection(ctx context.Context, prov *local.Provider, defaultRT string) error {
	return b.perRuntime(ctx, prov, sectionRuntimes(b.o.forkRuntimes, defaultRT), b.fork,
		fmt.Sprintf("Forks of a running sandbox holding %d MiB (local provider, %d rounds each)", forkDirtyMiB, b.o.fork))
}

func (b *bencher) fork(ctx context.Context, prov *local.Provider, rt string) error {
	opts := sandbox.CreateOptions{Network: sandbox.NetworkNone, Runtime: rt, Labels: benchLabels}
	parent, err := sandbox.Create(ctx, prov, opts)
	if err != nil {
		return fmt.Errorf("fork %s: the parent: %w", rt, err)
	}
	defer parent.Destroy(context.WithoutCancel(ctx))
	// Half the bytes, held twice as many in hex by a shell variable.
	res, err := parent.Run(ctx, `(v=$(head -c `+strconv.Itoa(forkDirtyMiB<<19)+` /dev/urandom | od -An -tx1 | tr -d ' \n'); while :; do sleep 1; done) >/dev/null 2>&1 & sleep 1`, sandbox.RunOptions{})
	if err != nil || !res.OK {
		return fmt.Errorf("fork %s: the parent's process: %+v %v", rt, res, err)
	}
	kind := parent.ForkKind()
	if kind == "" {
		b.note("fork %s: this runtime's sandboxes cannot fork; skipped", rt)
		return nil
	}
	perChild := func(n int) (samples, error) {
		var s samples
		for range b.o.fork {
			start := time.Now()
			kids, err := parent.Fork(ctx, sandbox.ForkOptions{N: n, Labels: benchLabels})
			if err != nil {
				return s, fmt.Errorf("fork %s, %d children: %w", rt, n, err)
			}
			s = append(s, time.Since(start)/time.Duration(n))
			for _, k := range kids {
				k.Destroy(context.WithoutCancel(ctx))
			}
		}
		return s, nil
	}
	one, err := perChild(1)
	if err != nil {
		return err
	}
	ten, err := perChild(10)
	if err != nil {
		return err
	}
	var cold samples
	for range b.o.fork {
		start := time.Now()
		if err := createRunTrue(ctx, prov, opts); err != nil {
			return fmt.Errorf("fork %s: a cold create: %w", rt, err)
		}
		cold = append(cold, time.Since(start))
	}
	what := fmt.Sprintf("%s, %s fork", rt, kind)
	coldStats := cold.stats()
	b.add("fork, one child (per child)", what, one.stats()).versus(coldStats, "a cold create")
	b.add("fork, ten children (per child)", what, ten.stats()).versus(coldStats, "a cold create")
	b.add("create → first command", rt+", cold (no fork)", coldStats)
	return nil
}
