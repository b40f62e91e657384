package server

import (
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"
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
