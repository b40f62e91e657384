package tools

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/sandbox"
)

// Tools that make, list and destroy sandboxes.

func sandboxTools() []Tool {
	return []Tool{
		define(Tool{
			Name: "create_sandbox",
			Description: "Create a new, empty Linux sandbox and return its id. Most work needs no call to this: " +
				"every tool uses this session's default sandbox when sandbox_id is omitted. Create another " +
				"sandbox to work on something in isolation or in parallel; pass its id as sandbox_id. It lives " +
				"until destroy_sandbox.",
		}, createSandbox),
		define(Tool{
			Name:        "list_sandboxes",
			Description: "List the sandboxes this session can use: id, state, creation time, and which one is the default.",
			ReadOnly:    true,
		}, listSandboxes),
		define(Tool{
			Name: "destroy_sandbox",
			Description: "Destroy a sandbox and everything in it, including running processes. Destroying the " +
				"default sandbox makes the next call without sandbox_id start a fresh one.",
			Destructive: true,
		}, destroySandbox),
		define(Tool{
			Name: "pause_sandbox",
			Description: "Pause a sandbox until resume_sandbox: it uses no CPU meanwhile, and other tools fail on it. " +
				"By default its memory is kept: its running processes continue on resume. With keep_memory false " +
				"only its files are kept: its processes end, its memory is released, and resume starts it again " +
				"from its files (not every sandbox provider can).",
			Destructive: true, // keep_memory false ends the sandbox's processes
		}, pauseSandbox),
		define(Tool{
			Name: "resume_sandbox",
			Description: "Resume a sandbox paused with pause_sandbox (or at its timeout). One paused with keep_memory " +
				"false starts again from its files, with no process from before.",
		}, resumeSandbox),
	}
}

type createSandboxArgs struct {
	Network      string            `json:"network,omitempty" jsonschema:"Network access: all (the default) or none (loopback only)." enum:"all,none"`
	Allow        []string          `json:"allow,omitempty" jsonschema:"Restrict the sandbox's outbound network to these destinations: domain names, wildcards like *.github.com, IP addresses or CIDRs. Everything else is denied."`
	Deny         []string          `json:"deny,omitempty" jsonschema:"Deny outbound network to these destinations (same forms as allow; deny wins)."`
	Env          map[string]string `json:"env,omitempty" jsonschema:"Environment variables set for every command in the sandbox."`
	FromSnapshot string            `json:"from_snapshot,omitempty" jsonschema:"Start from a snapshot id returned by the snapshot tool, instead of an empty sandbox."`
	Template     string            `json:"template,omitempty" jsonschema:"The template (root file system) to start from, e.g. debian or one built or imported on the server; the default when omitted."`
	Volumes      []string          `json:"volumes,omitempty" jsonschema:"Named persistent volumes to mount, each NAME:/path or NAME:/path:ro (read-only), e.g. data:/data. A volume is made beforehand (tupper volume create, or the API); its files outlive the sandbox and are shared with every sandbox that mounts it."`
}

func createSandbox(ctx context.Context, s *Session, a createSandboxArgs) (Result, error) {
	opts := s.opts.Create
	session := opts.Network.Normalized().Mode
	switch a.Network {
	case "all":
		if session == provider.NetworkNone {
			return Result{Text: "this session's sandboxes have no network (network none), and create_sandbox cannot ask for more", IsError: true}, nil
		}
		if session == provider.NetworkAllow {
			return Result{Text: "this session's sandboxes have a network policy, and create_sandbox cannot ask for more", IsError: true}, nil
		}
		opts.Network = sandbox.NetworkAll
	case "none":
		opts.Network = sandbox.NetworkNone
	}
	if len(a.Allow) > 0 || len(a.Deny) > 0 {
		// A policy narrows network all; it never replaces a narrower choice of the session's.
		switch {
		case opts.Network.Normalized().Mode == provider.NetworkNone:
			return Result{Text: "allow and deny need a network, and this sandbox has none", IsError: true}, nil
		case session == provider.NetworkAllow:
			return Result{Text: "this session's sandboxes already have a network policy, which create_sandbox cannot replace", IsError: true}, nil
		}
		opts.Network = sandbox.Network{Mode: provider.NetworkAllow, Allow: a.Allow, Deny: a.Deny}
	}
	if len(a.Env) > 0 {
		env := map[string]string{}
		for k, v := range opts.Env {
			env[k] = v
		}
		for k, v := range a.Env {
			env[k] = v
		}
		opts.Env = env
	}
	if a.FromSnapshot != "" {
		opts.From = a.FromSnapshot
	}
	if a.Template != "" {
		opts.Template = a.Template
	}
	for _, v := range a.Volumes {
		m, err := provider.ParseVolumeMount(v)
		if err != nil {
			return Result{Text: err.Error(), IsError: true}, nil
		}
		opts.Volumes = append(opts.Volumes, m)
	}
	b, err := s.createExtra(ctx, opts)
	if err != nil {
		return Result{}, err
	}
	return Result{
		Text: fmt.Sprintf("created sandbox %s; pass sandbox_id %q to use it", b.ID, b.ID),
		Data: map[string]any{"sandbox_id": b.ID},
	}, nil
}

type listSandboxesArgs struct{}

func listSandboxes(ctx context.Context, s *Session, _ listSandboxesArgs) (Result, error) {
	infos, err := sandbox.List(ctx, s.prov, sandbox.ListOptions{Labels: s.opts.Labels})
	if err != nil {
		return Result{}, err
	}
	if s.opts.Bound != "" {
		infos = slices.DeleteFunc(infos, func(in sandbox.Info) bool { return in.ID != s.opts.Bound })
	}
	def := s.DefaultID()
	var b strings.Builder
	items := []map[string]any{}
	for i, in := range infos {
		if i == MaxListEntries {
			fmt.Fprintf(&b, "[… %d more not shown]\n", len(infos)-i)
			break
		}
		mark := ""
		if in.ID == def {
			mark = " (default)"
		}
		fmt.Fprintf(&b, "%s %s created %s%s\n", in.ID, in.State, in.CreatedAt.UTC().Format(time.RFC3339), mark)
		items = append(items, map[string]any{"sandbox_id": in.ID, "state": string(in.State), "created_at": in.CreatedAt.UTC().Format(time.RFC3339), "default": in.ID == def})
	}
	if len(infos) == 0 {
		b.WriteString("no sandboxes yet; tools create the default sandbox on first use\n")
	}
	return Result{Text: b.String(), Data: map[string]any{"sandboxes": items}}, nil
}

type destroySandboxArgs struct {
	ID string `json:"sandbox_id" jsonschema:"Id of the sandbox to destroy." minLength:"1"`
}

func destroySandbox(ctx context.Context, s *Session, a destroySandboxArgs) (Result, error) {
	if err := s.destroySandbox(ctx, a.ID); err != nil {
		return Result{}, err
	}
	return Result{Text: "destroyed sandbox " + a.ID, Data: map[string]any{"sandbox_id": a.ID}}, nil
}

type pauseSandboxArgs struct {
	KeepMemory *bool `json:"keep_memory,omitempty" jsonschema:"Keep the sandbox's memory and running processes, which continue on resume. False keeps only its files: its processes end and resume starts it again. Default: true."`
	inSandbox
}

func pauseSandbox(ctx context.Context, s *Session, a pauseSandboxArgs) (Result, error) {
	b, err := s.Sandbox(ctx, a.SandboxID)
	if err != nil {
		return Result{}, err
	}
	keep := a.KeepMemory == nil || *a.KeepMemory
	if err := s.pause(ctx, b, sandbox.PauseOptions{DropMemory: !keep}); err != nil {
		return Result{}, err
	}
	text := "paused sandbox " + b.ID + " with its memory: its processes continue after resume_sandbox"
	if !keep {
		text = "paused sandbox " + b.ID + " keeping only its files: its processes ended, and resume_sandbox starts it again"
	}
	return Result{Text: text, Data: map[string]any{"sandbox_id": b.ID, "memory_kept": keep}}, nil
}

func resumeSandbox(ctx context.Context, s *Session, a inSandbox) (Result, error) {
	b, err := s.Sandbox(ctx, a.SandboxID)
	if err != nil {
		return Result{}, err
	}
	if err := s.resume(ctx, b); err != nil {
		return Result{}, err
	}
	return Result{Text: "resumed sandbox " + b.ID, Data: map[string]any{"sandbox_id": b.ID}}, nil
}
