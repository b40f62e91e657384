package server

import (
	"testing"
)

// TestAuditCoversRoutes checks the audit's tables against the route table: every route
// other than a GET is recorded or says why not, and neither table names a route that is
// not in it.
func TestAuditCoversRoutes(t *testing.T) {
	s := &Server{}
	routes := map[string]bool{}
	for _, rt := range s.table() {
		k := rt.Path
		if rt.Method != "" {
			k = rt.Method + " " + rt.Path
		}
		routes[k] = true
		_, recorded := auditActions[k]
		_, exempt := notAudited[k]
		if recorded && exempt {
			t.Errorf("%s is both audited and not", k)
		}
		if rt.Method != "GET" && rt.Scope != scopePublic && !recorded && !exempt {
			t.Errorf("%s changes something, yet is neither in auditActions nor in notAudited", k)
		}
	}
	for _, m := range []map[string]string{auditActions, notAudited} {
		for k := range m {
			if !routes[k] {
				t.Errorf("%s is not a route", k)
			}
		}
	}
}
