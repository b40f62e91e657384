package tools

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/tupper-dev/tupper/sandbox"
)

// The Created hook sees every sandbox the session makes and can refuse it (the sandbox is
// then destroyed and the call fails); Destroy destroys for destroy_sandbox and for the
// default sandbox's end at Close.
func TestSessionHooks(t *testing.T) {
	var mu sync.Mutex
	var created, destroyed []string
	refuse := false
	s, prov := newTestSession(t, SessionOptions{
		Created: func(ctx context.Context, b *sandbox.Sandbox) error {
			mu.Lock()
			defer mu.Unlock()
			if refuse {
				return errors.New("the store is full")
			}
			created = append(created, b.ID)
			return nil
		},
		Destroy: func(ctx context.Context, b *sandbox.Sandbox) error {
			mu.Lock()
			destroyed = append(destroyed, b.ID)
			mu.Unlock()
			return b.Destroy(ctx)
		},
	})
	want(t, call(t, s, "run_command", map[string]any{"command": "true"}), false)
	var extra struct {
		ID string `json:"sandbox_id"`
	}
	res := call(t, s, "create_sandbox", map[string]any{})
	want(t, res, false)
	raw, _ := json.Marshal(res.Data)
	if err := json.Unmarshal(raw, &extra); err != nil || extra.ID == "" {
		t.Fatalf("create_sandbox data %s: %v", raw, err)
	}
	if len(created) != 2 || !slices.Contains(created, extra.ID) {
		t.Fatalf("created hook saw %v, want the default and %s", created, extra.ID)
	}
	want(t, call(t, s, "destroy_sandbox", map[string]any{"sandbox_id": extra.ID}), false)
	if !slices.Equal(destroyed, []string{extra.ID}) {
		t.Fatalf("destroyed hook saw %v, want [%s]", destroyed, extra.ID)
	}

	refuse = true
	want(t, call(t, s, "create_sandbox", map[string]any{}), true, "the store is full")
	if n := sandboxes(t, prov); n != 1 {
		t.Fatalf("%d sandboxes after a refused create, want only the default", n)
	}

	def := created[0]
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(destroyed, []string{extra.ID, def}) {
		t.Fatalf("destroyed hook saw %v after Close, want [%s %s]", destroyed, extra.ID, def)
	}
}

// pause_sandbox and resume_sandbox go through the Pause and Resume hooks (a server's
// lifecycle): keep_memory false asks for a pause that drops the memory, its absence or true
// for one that keeps it; without hooks, a provider that cannot pause is a result the model
// reads, naming what is missing.
func TestPauseHooks(t *testing.T) {
	var got []string
	s, _ := newTestSession(t, SessionOptions{
		Pause: func(ctx context.Context, b *sandbox.Sandbox, opts sandbox.PauseOptions) error {
			got = append(got, map[bool]string{true: "pause-cold", false: "pause"}[opts.DropMemory])
			return nil
		},
		Resume: func(ctx context.Context, b *sandbox.Sandbox) error {
			got = append(got, "resume")
			return nil
		},
	})
	want(t, call(t, s, "pause_sandbox", map[string]any{}), false, "with its memory")
	want(t, call(t, s, "pause_sandbox", map[string]any{"keep_memory": true}), false, "with its memory")
	want(t, call(t, s, "pause_sandbox", map[string]any{"keep_memory": false}), false, "keeping only its files")
	want(t, call(t, s, "resume_sandbox", map[string]any{}), false, "resumed sandbox")
	if !slices.Equal(got, []string{"pause", "pause", "pause-cold", "resume"}) {
		t.Fatalf("hooks saw %v", got)
	}

	plain, _ := newTestSession(t, SessionOptions{})
	want(t, call(t, plain, "pause_sandbox", map[string]any{"keep_memory": false}), true, "cannot pause")
}

// The Called hook is told of every call of a tool that changes something, with the sandbox it
// acted in or made and its failure, and of no read-only tool's.
func TestCalledHook(t *testing.T) {
	type called struct {
		tool, sandbox string
		code          sandbox.Code
	}
	var mu sync.Mutex
	var got []called
	s, _ := newTestSession(t, SessionOptions{
		Called: func(_ context.Context, tool, sandboxID string, err error) {
			mu.Lock()
			defer mu.Unlock()
			c := called{tool: tool, sandbox: sandboxID}
			if err != nil {
				c.code = sandbox.CodeOf(err)
			}
			got = append(got, c)
		},
	})
	want(t, call(t, s, "run_command", map[string]any{"command": "exit 3"}), true)
	def := s.DefaultID()
	want(t, call(t, s, "read_file", map[string]any{"path": "/etc/hostname"}), false)
	want(t, call(t, s, "write_file", map[string]any{"path": "/tmp/x", "content": "y"}), false)
	res := call(t, s, "create_sandbox", map[string]any{})
	extra, _ := res.Data.(map[string]any)["sandbox_id"].(string)
	want(t, call(t, s, "destroy_sandbox", map[string]any{"sandbox_id": "no-such"}), true)
	wantCalls := []called{
		{"run_command", def, ""}, // a command that ran and failed is a call that succeeded
		{"write_file", def, ""},
		{"create_sandbox", extra, ""},
		{"destroy_sandbox", "no-such", sandbox.CodeNotFound},
	}
	if def == "" || extra == "" || !slices.Equal(got, wantCalls) {
		t.Errorf("Called saw %+v, want %+v", got, wantCalls)
	}
}
