package server

import (
	"encoding/json"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/tupper-dev/tupper/server/api"
)

// TestOpenAPIMatchesRoutes walks the route table (the ServeMux patterns) and the checked-in
// OpenAPI document and fails on any difference, either way.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	var doc struct {
		OpenAPI string                                `json:"openapi"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(OpenAPI, &doc); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.1") {
		t.Errorf("openapi = %q, want 3.1.x", doc.OpenAPI)
	}
	s := &Server{}
	wildcard := regexp.MustCompile(`\{([a-z]+)\.\.\.\}`)
	want := map[string]bool{} // "get /v1/…"
	for _, rt := range s.table() {
		p := wildcard.ReplaceAllString(rt.Path, "{$1}")
		methods := []string{rt.Method}
		if rt.Method == "" {
			methods = anyMethods
		}
		for _, m := range methods {
			k := strings.ToLower(m) + " " + p
			if want[k] {
				t.Errorf("route %s registered twice", k)
			}
			want[k] = true
		}
	}
	got := map[string]bool{}
	for p, ops := range doc.Paths {
		for m, raw := range ops {
			if !slices.Contains([]string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}, m) {
				continue
			}
			got[m+" "+p] = true
			var op struct {
				OperationID string          `json:"operationId"`
				Responses   json.RawMessage `json:"responses"`
			}
			if err := json.Unmarshal(raw, &op); err != nil || op.OperationID == "" || len(op.Responses) == 0 {
				t.Errorf("%s %s: operation lacks an operationId or responses", m, p)
			}
		}
	}
	for k := range want {
		if !got[k] {
			t.Errorf("route %s is not in openapi.json", k)
		}
	}
	for k := range got {
		if !want[k] {
			t.Errorf("openapi.json documents %s, which is not a route", k)
		}
	}
}

// TestOpenAPIMatchesWireTypes checks that each type of server/api has exactly the fields of
// its schema in openapi.json, the document @tupper/sdk's types are generated from: the Go
// ends and the TypeScript one read the same shapes.
func TestOpenAPIMatchesWireTypes(t *testing.T) {
	var doc struct {
		Components struct {
			Schemas map[string]struct {
				Properties map[string]json.RawMessage `json:"properties"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(OpenAPI, &doc); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	for schema, v := range map[string]any{
		"CreateSandbox": api.CreateRequest{}, "PauseRequest": api.PauseRequest{}, "Sandbox": api.Sandbox{},
		"SandboxList": api.SandboxList{}, "SnapshotInfo": api.Snapshot{}, "Template": api.Template{},
		"Webhook": api.Webhook{}, "Fork": api.ForkRequest{}, "SnapshotRequest": api.SnapshotRequest{},
		"Snapshot": api.SnapshotTaken{}, "Timeout": api.TimeoutRequest{}, "Busy": api.Busy{},
		"ExecHeader": api.ExecHeader{}, "ExecFrame": api.ExecFrame{}, "TerminalControl": api.TerminalControl{},
		"Error": api.Error{}, "Info": api.Info{}, "FileInfo": api.FileInfo{}, "Path": api.PathRequest{},
		"Remove": api.RemoveRequest{}, "Rename": api.RenameRequest{}, "Search": api.SearchRequest{},
		"Match": api.Match{}, "Matches": api.Matches{}, "Mark": api.MarkRequest{}, "Changes": api.Changes{},
		"Volume": api.Volume{}, "CreateVolume": api.VolumeRequest{},
		"Run": api.RunRequest{}, "RunResult": api.RunResult{}, "Ready": api.Ready{},
		"StartProcess": api.StartProcess{}, "Process": api.Process{}, "LogPage": api.LogPage{},
		"Stop": api.StopProcess{}, "Wait": api.WaitProcess{}, "Expose": api.ExposeRequest{}, "Port": api.Port{},
		"WriteFile": api.WriteFile{}, "Edit": api.EditRequest{}, "Presign": api.PresignRequest{},
		"KeepAlive": api.KeepAliveRequest{}, "EgressLearned": api.EgressLearned{}, "CreateWebhook": api.WebhookRequest{},
		"FileList": api.FileList{}, "FileContent": api.FileContent{}, "Exists": api.Exists{}, "Marked": api.Marked{},
		"ProcessList": api.ProcessList{}, "WaitResult": api.WaitResult{}, "PortList": api.PortList{}, "Git": api.GitRequest{},
		"Health": api.Health{}, "Readiness": api.Readiness{}, "Deadline": api.Deadline{}, "VolumeList": api.VolumeList{},
		"BuildRequest": api.BuildRequest{}, "Build": api.Build{}, "BuildFailure": api.BuildFailure{},
		"BuildLogEntry": api.BuildLogEntry{}, "BuildLogPage": api.BuildLogPage{}, "TemplateList": api.TemplateList{},
		"SnapshotList": api.SnapshotList{}, "WebhookList": api.WebhookList{}, "SandboxEnd": api.End{},
		"AuditEntry": api.AuditEntry{}, "AuditList": api.AuditList{},
		"UsageReport": api.UsageReport{}, "UsageGroup": api.UsageGroup{}, "MetricsSeries": api.MetricsSeries{}, "MetricsSample": api.MetricsSample{},
		"CodeRequest": api.CodeRequest{}, "CodeResult": api.CodeResult{}, "CodeError": api.CodeError{}, "Execution": api.Execution{},
		"CodeContext": api.CodeContext{}, "CodeContextRequest": api.CodeContextRequest{}, "CodeContextList": api.CodeContextList{},
	} {
		s, ok := doc.Components.Schemas[schema]
		if !ok {
			t.Errorf("openapi.json has no schema %s (for %T)", schema, v)
			continue
		}
		want := slices.Sorted(maps.Keys(s.Properties))
		var got []string
		typ := reflect.TypeOf(v)
		for i := range typ.NumField() {
			if name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ","); name != "" && name != "-" {
				got = append(got, name)
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("%T has the fields %v, schema %s %v", v, got, schema, want)
		}
	}
}
