package tools

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// golden compares got, indented, with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name string, got json.RawMessage) {
	t.Helper()
	var buf bytes.Buffer
	if err := json.Indent(&buf, got, "", "  "); err != nil {
		t.Fatalf("%s: output is not JSON: %v", name, err)
	}
	buf.WriteByte('\n')
	file := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("%v (run go test ./tools -run %s -update to create it)", err, t.Name())
	}
	if !bytes.Equal(buf.Bytes(), want) {
		t.Errorf("%s differs from the golden file; if the change is intended, run go test ./tools -run %s -update\n got: %s", file, t.Name(), buf.String())
	}
}

func TestGoldenDefinitions(t *testing.T) { golden(t, "definitions.golden", Definitions()) }
func TestGoldenOpenAI(t *testing.T)      { golden(t, "openai.golden", OpenAI()) }
func TestGoldenAnthropic(t *testing.T)   { golden(t, "anthropic.golden", Anthropic()) }

// The names are a public contract (issue 6): exactly these, in this order.
func TestNames(t *testing.T) {
	want := []string{
		"create_sandbox", "list_sandboxes", "destroy_sandbox", "pause_sandbox", "resume_sandbox", "run_command", "start_process",
		"process_logs", "stop_process", "read_file", "write_file", "edit_file", "list_files",
		"search_files", "file_changes", "git_clone", "git_status", "git_diff", "git_commit",
		"snapshot", "fork", "expose_port", "run_code",
	}
	var got []string
	for _, tool := range All() {
		got = append(got, tool.Name)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("tool names\n got %v\nwant %v", got, want)
	}
}

// Every schema is a closed object whose required properties exist, and every property is
// described for the model.
func TestSchemasAreTight(t *testing.T) {
	for _, tool := range All() {
		s := tool.InputSchema
		if s.Type != "object" || s.Values != nil {
			t.Errorf("%s: input schema must be a closed object", tool.Name)
		}
		if tool.Description == "" || tool.Handler == nil {
			t.Errorf("%s: no description or handler", tool.Name)
		}
		for _, r := range s.Required {
			if s.Properties[r] == nil {
				t.Errorf("%s: required %q is not a property", tool.Name, r)
			}
		}
		for name, p := range s.Properties {
			if p.Description == "" {
				t.Errorf("%s.%s: no description", tool.Name, name)
			}
			if p.Type == "integer" && (p.Minimum == nil || p.Maximum == nil) {
				t.Errorf("%s.%s: integer without bounds", tool.Name, name)
			}
		}
		var m map[string]any
		if err := json.Unmarshal(mustMarshal(s), &m); err != nil {
			t.Fatal(err)
		}
		if m["additionalProperties"] != false {
			t.Errorf("%s: additionalProperties is %v, want false", tool.Name, m["additionalProperties"])
		}
	}
}

func TestValidate(t *testing.T) {
	run, _ := Lookup("run_command")
	create, _ := Lookup("create_sandbox")
	for _, tc := range []struct {
		tool    Tool
		args    string
		wantErr string // substring; "" means valid
		want    string // normalized arguments when valid
	}{
		{run, `{"command":"ls"}`, "", `{"command":"ls"}`},
		{run, `{"command":"ls","cwd":null,"timeout_ms":null}`, "", `{"command":"ls"}`},
		{run, `{"command":"ls","timeout_ms":1000}`, "", `{"command":"ls","timeout_ms":1000}`},
		{run, `{}`, `"command" is required`, ""},
		{run, ``, `"command" is required`, ""},
		{run, `{"command":null}`, `"command" must be a string`, ""},
		{run, `{"command":""}`, `"command" must not be empty`, ""},
		{run, `{"command":"ls","extra":1}`, `unknown property "extra"`, ""},
		{run, `{"command":"ls","timeout_ms":0}`, `"timeout_ms" must be at least 1`, ""},
		{run, `{"command":"ls","timeout_ms":1.5}`, `"timeout_ms" must be an integer`, ""},
		{run, `{"command":"ls","timeout_ms":"5"}`, `"timeout_ms" must be an integer`, ""},
		{run, `{"command":"ls","timeout_ms":600001}`, `at most 600000`, ""},
		{run, `[1]`, "must be a JSON object", ""},
		{run, `{"command":"ls"} {}`, "trailing data", ""},
		{run, `{"command":`, "not valid JSON", ""},
		{create, `{"network":"some"}`, `"network" must be one of all, none`, ""},
		{create, `{"env":{"A":"1"}}`, "", `{"env":{"A":"1"}}`},
		{create, `{"env":{"A":1}}`, `"env.A" must be a string`, ""},
	} {
		got, err := tc.tool.InputSchema.Validate(tc.tool.Name, json.RawMessage(tc.args))
		if tc.wantErr != "" {
			var ae *ArgumentError
			if !errors.As(err, &ae) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s %s: error %v, want an ArgumentError containing %q", tc.tool.Name, tc.args, err, tc.wantErr)
			}
			continue
		}
		if err != nil || string(got) != tc.want {
			t.Errorf("%s %s: got %s, %v; want %s", tc.tool.Name, tc.args, got, err, tc.want)
		}
	}
	proc, _ := Lookup("process_logs")
	if _, err := proc.InputSchema.Validate("process_logs", json.RawMessage(`{"name":"a b"}`)); err == nil || !strings.Contains(err.Error(), "must match") {
		t.Errorf("process name with a space: %v, want a pattern error", err)
	}
}

func TestCallUnknownTool(t *testing.T) {
	_, err := Call(t.Context(), NewSession(nil, SessionOptions{}), "no_such_tool", nil)
	if !errors.Is(err, ErrUnknownTool) {
		t.Fatalf("got %v, want ErrUnknownTool", err)
	}
}

func TestClip(t *testing.T) {
	if got, cut := clip("short", 100); got != "short" || cut {
		t.Fatalf("clip of a short string: %q %v", got, cut)
	}
	long := strings.Repeat("héllo wörld\n", 5000)
	got, cut := clip(long, MaxStreamBytes)
	if !cut || !utf8.ValidString(got) {
		t.Fatalf("clip: cut=%v valid=%v", cut, utf8.ValidString(got))
	}
	if len(got) > MaxStreamBytes+200 {
		t.Fatalf("clip kept %d bytes, want about %d", len(got), MaxStreamBytes)
	}
	if !strings.HasPrefix(got, "héllo wörld\n") || !strings.HasSuffix(got, "héllo wörld\n") {
		t.Fatalf("clip must keep whole lines at both ends: %q … %q", got[:20], got[len(got)-20:])
	}
	if !strings.Contains(got, "bytes omitted") {
		t.Fatal("clip must say what it left out")
	}
	// No newline anywhere: still valid UTF-8 at both cuts.
	got, _ = clip(strings.Repeat("€", 20000), 1000)
	if !utf8.ValidString(got) {
		t.Fatal("clip split a rune")
	}
}
