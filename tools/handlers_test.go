package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/tupper-dev/tupper/providers/memory"
	"github.com/tupper-dev/tupper/sandbox"
)

// call runs a tool and fails t on a protocol error.
func call(t *testing.T, s *Session, name string, args any) Result {
	t.Helper()
	raw, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Call(context.Background(), s, name, raw)
	if err != nil {
		t.Fatalf("%s %s: %v", name, raw, err)
	}
	return res
}

func want(t *testing.T, res Result, isError bool, contains ...string) {
	t.Helper()
	if res.IsError != isError {
		t.Errorf("isError %v, want %v: %s", res.IsError, isError, res.Text)
	}
	for _, c := range contains {
		if !strings.Contains(res.Text, c) {
			t.Errorf("result does not contain %q:\n%s", c, res.Text)
		}
	}
}

func newTestSession(t *testing.T, opts SessionOptions) (*Session, *memory.Provider) {
	prov := memory.New()
	s := NewSession(prov, opts)
	t.Cleanup(func() { s.Close(context.Background()) })
	return s, prov
}

func sandboxes(t *testing.T, prov *memory.Provider) int {
	infos, err := sandbox.List(context.Background(), prov, sandbox.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return len(infos)
}

func TestDefaultSandboxLifecycle(t *testing.T) {
	s, prov := newTestSession(t, SessionOptions{})
	if n := sandboxes(t, prov); n != 0 {
		t.Fatalf("%d sandboxes before any call", n)
	}
	// Concurrent first calls share one default sandbox.
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := Call(context.Background(), s, "write_file", json.RawMessage(fmt.Sprintf(`{"path":"f%d","content":"x"}`, i)))
			if err != nil || res.IsError {
				t.Errorf("write_file: %v %s", err, res.Text)
			}
		}()
	}
	wg.Wait()
	if n := sandboxes(t, prov); n != 1 {
		t.Fatalf("%d sandboxes after concurrent first calls, want 1", n)
	}
	want(t, call(t, s, "list_sandboxes", map[string]any{}), false, "(default)")
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := sandboxes(t, prov); n != 0 {
		t.Fatalf("%d sandboxes after Close, want 0", n)
	}
	want(t, call(t, s, "run_command", map[string]any{"command": "true"}), true, "session has ended")
	if err := s.Close(context.Background()); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestRunCommand(t *testing.T) {
	s, _ := newTestSession(t, SessionOptions{})
	want(t, call(t, s, "run_command", map[string]any{"command": "echo out; echo err >&2"}), false, "exit code: 0", "stdout:\nout\n", "stderr:\nerr\n")
	want(t, call(t, s, "run_command", map[string]any{"command": "exit 2"}), true, "exit code: 2", "(no output)")
	want(t, call(t, s, "run_command", map[string]any{"command": "pwd", "cwd": "sub"}), true) // no such directory
	call(t, s, "run_command", map[string]any{"command": "mkdir -p sub"})
	want(t, call(t, s, "run_command", map[string]any{"command": "pwd", "cwd": "sub"}), false, "/workspace/sub")

	// Long output keeps its head and tail, bounded.
	var big strings.Builder
	for i := range 5000 {
		fmt.Fprintf(&big, "line %05d\n", i)
	}
	call(t, s, "write_file", map[string]any{"path": "big.txt", "content": big.String()})
	res := call(t, s, "run_command", map[string]any{"command": "cat big.txt"})
	want(t, res, false, "line 00000", "line 04999", "bytes omitted", "shortened")
	if len(res.Text) > MaxStreamBytes+1024 {
		t.Errorf("result of %d bytes, want at most about %d", len(res.Text), MaxStreamBytes)
	}
	if d := res.Data.(map[string]any); d["truncated"] != true || d["exit_code"] != 0 {
		t.Errorf("data %v", d)
	}
}

func TestFiles(t *testing.T) {
	s, _ := newTestSession(t, SessionOptions{})
	want(t, call(t, s, "write_file", map[string]any{"path": "src/a.go", "content": "package a\n\nfunc A() int { return 1 }\nfunc B() int { return 1 }\n"}), false, "wrote")
	res := call(t, s, "read_file", map[string]any{"path": "/workspace/src/a.go"})
	want(t, res, false, "func A")
	if res.Data.(map[string]any)["content"] != "package a\n\nfunc A() int { return 1 }\nfunc B() int { return 1 }\n" {
		t.Errorf("read_file content %q", res.Data)
	}
	want(t, call(t, s, "read_file", map[string]any{"path": "src/a.go", "start_line": 3, "end_line": 3}), false, "func A", "lines 3-3 of 4")
	want(t, call(t, s, "read_file", map[string]any{"path": "src/a.go", "start_line": 9}), true, "only 4 lines")
	want(t, call(t, s, "read_file", map[string]any{"path": "missing.go"}), true, "not_found")

	want(t, call(t, s, "edit_file", map[string]any{"path": "src/a.go", "find": "return 1", "replace": "return 2"}), true, "edit_not_unique", "more surrounding")
	want(t, call(t, s, "edit_file", map[string]any{"path": "src/a.go", "find": "nothing like it", "replace": ""}), true, "edit_not_found")
	want(t, call(t, s, "edit_file", map[string]any{"path": "src/a.go", "find": "func B() int { return 1 }", "replace": "func B() int { return 2 }"}), false, "edited")
	want(t, call(t, s, "read_file", map[string]any{"path": "src/a.go"}), false, "func B() int { return 2 }")

	want(t, call(t, s, "list_files", map[string]any{"path": "src"}), false, "/workspace/src/a.go")
	want(t, call(t, s, "list_files", map[string]any{"recursive": true, "glob": "*.go"}), false, "a.go")
	want(t, call(t, s, "search_files", map[string]any{"query": "return 2"}), false, "/workspace/src/a.go:4: func B")
	want(t, call(t, s, "search_files", map[string]any{"query": "absent"}), false, "no matches")

	res = call(t, s, "file_changes", map[string]any{})
	want(t, res, false, "added /workspace/src/a.go")

	call(t, s, "write_file", map[string]any{"path": "bin.dat", "content": "a\x00b"})
	want(t, call(t, s, "read_file", map[string]any{"path": "bin.dat"}), true, "binary")
}

func TestSandboxesAndScope(t *testing.T) {
	s, prov := newTestSession(t, SessionOptions{Labels: map[string]string{"account": "a"}})
	res := call(t, s, "create_sandbox", map[string]any{"env": map[string]string{"GREETING": "hi"}})
	want(t, res, false, "created sandbox")
	id := res.Data.(map[string]any)["sandbox_id"].(string)
	want(t, call(t, s, "run_command", map[string]any{"command": "echo $GREETING", "sandbox_id": id}), false, "hi")
	want(t, call(t, s, "list_sandboxes", map[string]any{}), false, id)

	// A sandbox outside the session's labels is invisible.
	other, err := sandbox.Create(context.Background(), prov, sandbox.CreateOptions{Labels: map[string]string{"account": "b"}})
	if err != nil {
		t.Fatal(err)
	}
	want(t, call(t, s, "run_command", map[string]any{"command": "true", "sandbox_id": other.ID}), true, "not_found")
	if strings.Contains(call(t, s, "list_sandboxes", map[string]any{}).Text, other.ID) {
		t.Error("list_sandboxes shows a sandbox outside the session's scope")
	}
	want(t, call(t, s, "destroy_sandbox", map[string]any{"sandbox_id": other.ID}), true, "not_found")

	want(t, call(t, s, "destroy_sandbox", map[string]any{"sandbox_id": id}), false, "destroyed")
	want(t, call(t, s, "run_command", map[string]any{"command": "true", "sandbox_id": id}), true, "not_found")
	// Sandboxes made with create_sandbox outlive the session; the default does not.
	call(t, s, "run_command", map[string]any{"command": "true"})
	kept := call(t, s, "create_sandbox", map[string]any{}).Data.(map[string]any)["sandbox_id"].(string)
	s.Close(context.Background())
	infos, _ := sandbox.List(context.Background(), prov, sandbox.ListOptions{Labels: map[string]string{"account": "a"}})
	if len(infos) != 1 || infos[0].ID != kept {
		t.Errorf("after Close: %+v, want only %s", infos, kept)
	}
}

func TestNetworkNoneBinds(t *testing.T) {
	s, _ := newTestSession(t, SessionOptions{Create: sandbox.CreateOptions{Network: sandbox.NetworkNone}})
	want(t, call(t, s, "create_sandbox", map[string]any{"network": "all"}), true, "cannot ask for more")
	want(t, call(t, s, "create_sandbox", map[string]any{"network": "none"}), false, "created")
	want(t, call(t, s, "create_sandbox", map[string]any{"allow": []string{"pypi.org"}}), true, "need a network")
}

// A session's policy binds create_sandbox as network none does; a session with network all
// lets it narrow (the memory provider then says it cannot enforce a policy), and bad entries
// are refused before any provider is asked.
func TestNetworkPolicyBinds(t *testing.T) {
	s, _ := newTestSession(t, SessionOptions{Create: sandbox.CreateOptions{Network: sandbox.NetworkAllowList("pypi.org")}})
	want(t, call(t, s, "create_sandbox", map[string]any{"network": "all"}), true, "cannot ask for more")
	want(t, call(t, s, "create_sandbox", map[string]any{"allow": []string{"example.com"}}), true, "cannot replace")
	open, _ := newTestSession(t, SessionOptions{})
	want(t, call(t, open, "create_sandbox", map[string]any{"allow": []string{"*"}}), true, "invalid_argument")
	want(t, call(t, open, "create_sandbox", map[string]any{"allow": []string{"pypi.org"}}), true, "cannot enforce")
}

func TestCreateSandboxTemplate(t *testing.T) {
	s, _ := newTestSession(t, SessionOptions{})
	// The template is passed to the provider, which names what it lacks.
	want(t, call(t, s, "create_sandbox", map[string]any{"template": "no-such-template"}), true, `template "no-such-template" not found`)
	want(t, call(t, s, "create_sandbox", map[string]any{"template": "default"}), false, "created")
}

func TestCreateSandboxVolumes(t *testing.T) {
	s, _ := newTestSession(t, SessionOptions{})
	// A malformed mount is the model's to fix; a provider without volumes says so (the
	// mounting itself is tested on the local provider and through the server).
	want(t, call(t, s, "create_sandbox", map[string]any{"volumes": []string{"data"}}), true, "want NAME:/path")
	want(t, call(t, s, "create_sandbox", map[string]any{"volumes": []string{"data:/proc/x"}}), true, "under /proc")
	want(t, call(t, s, "create_sandbox", map[string]any{"volumes": []string{"data:/data:ro"}}), true, "has no volumes")
}

func TestSnapshotAndPorts(t *testing.T) {
	s, _ := newTestSession(t, SessionOptions{})
	call(t, s, "write_file", map[string]any{"path": "kept.txt", "content": "from the snapshot"})
	res := call(t, s, "snapshot", map[string]any{})
	want(t, res, false, "snapshot")
	snap := res.Data.(map[string]any)["snapshot_id"].(string)
	res = call(t, s, "create_sandbox", map[string]any{"from_snapshot": snap})
	want(t, res, false, "created")
	id := res.Data.(map[string]any)["sandbox_id"].(string)
	want(t, call(t, s, "read_file", map[string]any{"path": "kept.txt", "sandbox_id": id}), false, "from the snapshot")

	// The memory provider has no preview: a readable error.
	want(t, call(t, s, "expose_port", map[string]any{"port": 8080}), true, "Error")
	// A server's own routing wins.
	s2, _ := newTestSession(t, SessionOptions{PreviewURL: func(_ context.Context, id string, port int) (string, error) {
		return fmt.Sprintf("https://%d-%s.example.test/", port, id), nil
	}})
	want(t, call(t, s2, "expose_port", map[string]any{"port": 8080}), false, "https://8080-")
}

func TestArgumentErrorsFromHandlers(t *testing.T) {
	s, _ := newTestSession(t, SessionOptions{})
	for name, args := range map[string]string{
		"read_file":     `{"path":"a","start_line":5,"end_line":2}`,
		"start_process": `{"command":"x","ready_port":80,"ready_log":"up"}`,
	} {
		_, err := Call(context.Background(), s, name, json.RawMessage(args))
		if _, ok := err.(*ArgumentError); !ok {
			t.Errorf("%s %s: %v, want an ArgumentError", name, args, err)
		}
	}
}

func TestProcesses(t *testing.T) {
	s, _ := newTestSession(t, SessionOptions{})
	res := call(t, s, "start_process", map[string]any{"command": "echo started; echo oops >&2; sleep 30", "name": "srv", "ready_log": "started"})
	want(t, res, false, `started process "srv"`, "ready")
	res = call(t, s, "process_logs", map[string]any{"name": "srv"})
	want(t, res, false, `process "srv": running`, "started", "oops", "cursor: ")
	cursor := res.Data.(map[string]any)["cursor"].(string)
	want(t, call(t, s, "process_logs", map[string]any{"name": "srv", "cursor": cursor}), false, "(no new output)")
	want(t, call(t, s, "stop_process", map[string]any{"name": "srv"}), false, "stopped")
	want(t, call(t, s, "process_logs", map[string]any{"name": "srv", "cursor": cursor}), false, "exited with code")
	want(t, call(t, s, "process_logs", map[string]any{"name": "nope"}), true, "not_found")
	want(t, call(t, s, "start_process", map[string]any{"command": "exit 4", "ready_log": "never"}), true, "process_exited")
}

// TestBoundSession: a session bound to an existing sandbox uses it as the default, reaches
// and lists no other, refuses to create, destroy, pause or resume, and leaves it running at
// Close.
func TestBoundSession(t *testing.T) {
	prov := memory.New()
	ctx := context.Background()
	mine, err := sandbox.Create(ctx, prov, sandbox.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer mine.Destroy(ctx)
	other, err := sandbox.Create(ctx, prov, sandbox.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Destroy(ctx)
	if err := other.Files.Write(ctx, "secret.txt", []byte("other's"), sandbox.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	s := NewSession(prov, SessionOptions{Bound: mine.ID})

	want(t, call(t, s, "write_file", map[string]any{"path": "note.txt", "content": "bound"}), false)
	if got, err := mine.Files.Read(ctx, "note.txt"); err != nil || string(got) != "bound" {
		t.Fatalf("the default sandbox is not the bound one: %q %v", got, err)
	}
	want(t, call(t, s, "read_file", map[string]any{"path": "secret.txt", "sandbox_id": other.ID}), true, "no sandbox "+other.ID)
	want(t, call(t, s, "read_file", map[string]any{"path": "note.txt", "sandbox_id": mine.ID}), false, "bound")
	res := call(t, s, "list_sandboxes", map[string]any{})
	want(t, res, false, mine.ID, "(default)")
	if strings.Contains(res.Text, other.ID) {
		t.Errorf("list_sandboxes shows another sandbox:\n%s", res.Text)
	}
	want(t, call(t, s, "create_sandbox", map[string]any{}), true, "bound to sandbox")
	want(t, call(t, s, "fork", map[string]any{}), true, "bound to sandbox")
	want(t, call(t, s, "destroy_sandbox", map[string]any{"sandbox_id": mine.ID}), true, "bound to sandbox")
	want(t, call(t, s, "pause_sandbox", map[string]any{"keep_memory": false}), true, "bound to sandbox")
	want(t, call(t, s, "resume_sandbox", map[string]any{}), true, "bound to sandbox")
	if n := sandboxes(t, prov); n != 2 {
		t.Fatalf("%d sandboxes, want the 2 made by the test", n)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := sandbox.Connect(ctx, prov, mine.ID, sandbox.ConnectOptions{}); err != nil {
		t.Fatalf("the bound sandbox did not survive Close: %v", err)
	}
}

// fork copies the default sandbox's files into independent sandboxes in the session's scope
// (the memory provider forks through a filesystem snapshot).
func TestFork(t *testing.T) {
	var created []string
	s, _ := newTestSession(t, SessionOptions{
		Labels:  map[string]string{"scope": "a"},
		Created: func(ctx context.Context, b *sandbox.Sandbox) error { created = append(created, b.ID); return nil },
	})
	call(t, s, "write_file", map[string]any{"path": "f.txt", "content": "parent"})
	res := call(t, s, "fork", map[string]any{"n": 2})
	want(t, res, false, "forked", "files (no running processes)")
	ids := res.Data.(map[string]any)["sandbox_ids"].([]string)
	if len(ids) != 2 || ids[0] == ids[1] {
		t.Fatalf("children: %v", ids)
	}
	if !slices.Contains(created, ids[0]) || !slices.Contains(created, ids[1]) {
		t.Errorf("Created was told of %v, not of both children %v", created, ids)
	}
	want(t, call(t, s, "write_file", map[string]any{"path": "f.txt", "content": "child0", "sandbox_id": ids[0]}), false)
	want(t, call(t, s, "read_file", map[string]any{"path": "f.txt", "sandbox_id": ids[1]}), false, "parent")
	want(t, call(t, s, "read_file", map[string]any{"path": "f.txt"}), false, "parent")
	// In the session's scope: listed, and destroyable.
	want(t, call(t, s, "list_sandboxes", map[string]any{}), false, ids[0], ids[1])
	want(t, call(t, s, "destroy_sandbox", map[string]any{"sandbox_id": ids[0]}), false, "destroyed")
}
