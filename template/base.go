package template

import (
	"context"
	"path/filepath"

	"github.com/tupper-dev/tupper/internal/flock"
	"github.com/tupper-dev/tupper/provider"
)

// Base is the built-in template "base", made on first use (EnsureBase) by a build on
// Debian: what E2B's base image offers a program, so that code written for E2B's default
// template runs unchanged. Python 3 (also as python, with pip and venv), Node.js and npm,
// git, curl, and a user "user" (uid 1000, home /home/user) who may sudo without a password.
const Base = "base"

// BaseDockerfile is the build of Base.
const BaseDockerfile = `FROM debian
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends \
      python3 python3-pip python3-venv python-is-python3 nodejs npm git curl ca-certificates \
      sudo procps less unzip >/dev/null \
    && apt-get clean && rm -rf /var/lib/apt/lists/*
RUN useradd --create-home --shell /bin/bash --uid 1000 user \
    && echo 'user ALL=(ALL:ALL) NOPASSWD: ALL' > /etc/sudoers.d/user && chmod 0440 /etc/sudoers.d/user
`

// BaseOptions configure EnsureBase.
type BaseOptions struct {
	Runner Runner // the build's sandboxes (required)
	// Network of the build's RUN steps ("" is all): they fetch packages from the machine's
	// own apt mirror.
	Network provider.NetworkMode
	// Progress receives the build's events (nil: none).
	Progress func(BuildEvent)
}

// EnsureBase returns the template Base, building it first when the store lacks it (and
// the debian template it starts from: a few minutes, once). Concurrent callers, in this
// process or another, wait for one build.
func (s *Store) EnsureBase(ctx context.Context, opts BaseOptions) (*Template, error) {
	if t, err := s.Get(Base); err == nil {
		return t, nil
	}
	if opts.Runner == nil {
		return nil, provider.Errorf(provider.CodeInvalidArgument, "template %s: a build runner is required", Base)
	}
	lk, err := flock.Acquire(ctx, filepath.Join(s.root, "base.lock"))
	if err != nil {
		return nil, err
	}
	defer lk.Unlock()
	if t, err := s.Get(Base); err == nil {
		return t, nil // made meanwhile
	}
	// Its FROM debian is made by the build's resolver (Ensure) when the store lacks it; it
	// pulls nothing.
	return s.Build(ctx, BuildOptions{
		Name: Base, DockerfileText: BaseDockerfile, Runner: opts.Runner, Network: opts.Network,
		Progress: opts.Progress,
	})
}
