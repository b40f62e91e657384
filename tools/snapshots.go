package tools

import (
	"context"
	"fmt"
	"maps"
	"strings"

	"github.com/tupper-dev/tupper/sandbox"
)

// Tools that save a sandbox and reach its ports.

func snapshotTools() []Tool {
	return []Tool{
		define(Tool{
			Name:        "snapshot",
			Description: "Save the sandbox's files as a snapshot and return its id; create_sandbox with from_snapshot starts a new sandbox from it. Not every sandbox provider can snapshot.",
		}, snapshot),
		define(Tool{
			Name: "fork",
			Description: "Copy a running sandbox into n new ones and return their ids (pass one as sandbox_id), to try " +
				"several approaches from the same state. The original keeps running; each copy is independent. " +
				"Where the provider can, copies continue its running processes and memory; otherwise they get its files " +
				"and start with no processes (the result says which). They live until destroy_sandbox.",
		}, fork),
		define(Tool{
			Name:        "expose_port",
			Description: "Return a URL at which a server listening on a TCP port inside the sandbox can be reached, e.g. one started with start_process.",
			ReadOnly:    true,
		}, exposePort),
	}
}

func snapshot(ctx context.Context, s *Session, a inSandbox) (Result, error) {
	b, err := s.Sandbox(ctx, a.SandboxID)
	if err != nil {
		return Result{}, err
	}
	var id string
	if s.opts.Snapshot != nil {
		id, err = s.opts.Snapshot(ctx, b)
	} else {
		id, err = b.Snapshot(ctx, sandbox.SnapshotOptions{})
	}
	if err != nil {
		return Result{}, err
	}
	return Result{
		Text: fmt.Sprintf("snapshot %s saved; create_sandbox with from_snapshot %q starts a sandbox from it", id, id),
		Data: map[string]any{"snapshot_id": id},
	}, nil
}

type forkArgs struct {
	N int `json:"n,omitempty" jsonschema:"How many copies to make; 1 when omitted." minimum:"1" maximum:"8"`
	inSandbox
}

func fork(ctx context.Context, s *Session, a forkArgs) (Result, error) {
	b, err := s.Sandbox(ctx, a.SandboxID)
	if err != nil {
		return Result{}, err
	}
	labels := maps.Clone(s.opts.Create.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	maps.Copy(labels, s.opts.Labels)
	kids, err := s.fork(ctx, b, sandbox.ForkOptions{N: max(a.N, 1), Labels: labels, Network: s.opts.Create.Network})
	if err != nil {
		return Result{}, err
	}
	ids := make([]string, 0, len(kids))
	for _, k := range kids {
		ids = append(ids, k.ID)
	}
	what := "its files, running processes and memory"
	if b.ForkKind() != sandbox.SnapshotFull {
		what = "its files (no running processes)"
	}
	return Result{
		Text: fmt.Sprintf("forked %s into %s, each with %s", b.ID, strings.Join(ids, ", "), what),
		Data: map[string]any{"sandbox_ids": ids, "kind": string(b.ForkKind())},
	}, nil
}

type exposePortArgs struct {
	Port int `json:"port" jsonschema:"The TCP port the server listens on inside the sandbox." minimum:"1" maximum:"65535"`
	inSandbox
}

func exposePort(ctx context.Context, s *Session, a exposePortArgs) (Result, error) {
	b, err := s.Sandbox(ctx, a.SandboxID)
	if err != nil {
		return Result{}, err
	}
	u, err := s.previewURL(ctx, b, a.Port)
	if err != nil {
		return Result{}, err
	}
	return Result{Text: fmt.Sprintf("port %d is reachable at %s", a.Port, u), Data: map[string]any{"port": a.Port, "url": u}}, nil
}

// previewURL asks SessionOptions.PreviewURL, else the sandbox.
func (s *Session) previewURL(ctx context.Context, b *sandbox.Sandbox, port int) (string, error) {
	if s.opts.PreviewURL != nil {
		return s.opts.PreviewURL(ctx, b.ID, port)
	}
	return b.PreviewURL(ctx, port)
}
