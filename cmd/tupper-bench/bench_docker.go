package main

import (
	"context"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/providers/docker"
	"github.com/tupper-dev/tupper/sandbox"
)

// dockerSection (tupper bench --provider docker): the Docker provider's create and exec
// beside plain docker run and docker exec on the same engine. The exec comparison runs
// docker exec into the very container of the sandbox the SDK execs in, so the two differ
// only in the path: the agent on its published port against the engine's exec.
func (b *bencher) dockerSection(ctx context.Context, image string) error {
	prov, err := provider.Resolve(ctx, provider.ResolveOptions{Name: "docker"})
	if err != nil {
		return err
	}
	defer sandbox.Reap(context.WithoutCancel(ctx), prov, sandbox.ReapOptions{Labels: benchLabels})
	sandbox.Reap(ctx, prov, sandbox.ReapOptions{Labels: benchLabels})
	opts := sandbox.CreateOptions{Labels: benchLabels, Runtime: b.o.runtime}
	dockerOK := image != ""

	// 1. Create → first command done.
	fs := []func() error{func() error { return createRunTrue(ctx, prov, opts) }}
	if dockerOK {
		// On the sandboxes' own network with a port published on loopback, as each sandbox
		// has: a container on no network starts faster, which would flatter docker run.
		fs = append(fs, func() error {
			return runQuiet(ctx, "docker", "run", "--rm", "--network", docker.DefaultNetwork, "-p", "127.0.0.1::5000", image, "/bin/true")
		})
	}
	s, err := measureEach(b.o.n, fs...)
	if err != nil {
		return err
	}
	row := b.add("create → first command", "tupper SDK, docker provider (incl. destroy)", s[0])
	if dockerOK {
		b.add("create → first command", "docker run --rm --network "+docker.DefaultNetwork+" -p 127.0.0.1::5000 true (whole process)", s[1])
		row.versus(s[1], "docker run --rm")
	}

	// 2. Exec round trip of true.
	box, err := sandbox.Create(ctx, prov, opts)
	if err != nil {
		return err
	}
	defer box.Destroy(context.WithoutCancel(ctx))
	fs = []func() error{
		func() error { return runTrue(ctx, box) },
		func() error { return runQuiet(ctx, "docker", "exec", "tupper-"+box.ID, "/usr/bin/true") },
	}
	if err := fs[1](); err != nil {
		b.note("skipping docker exec: %v", err)
		fs = fs[:1]
	}
	s, err = measureEach(b.o.execN, fs...)
	if err != nil {
		return err
	}
	row = b.add("exec true", "tupper SDK, docker provider (the agent's port)", s[0])
	if len(s) > 1 {
		b.add("exec true", "docker exec true into the same container (whole process)", s[1])
		row.versus(s[1], "docker exec")
	}
	return b.flush("Docker provider against docker run and docker exec (same engine)")
}
