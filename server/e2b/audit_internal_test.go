package e2b

import (
	"slices"
	"testing"
)

// TestAuditCoversControlPlane checks the audit's tables against the control plane's routes:
// every served route other than a GET is recorded or says why not, and neither table names
// a route that is not served.
func TestAuditCoversControlPlane(t *testing.T) {
	m := (&Server{}).controlMux()
	served := map[string]bool{}
	for _, r := range m.routes {
		if slices.ContainsFunc(notServed, func(op struct{ pattern, why string }) bool { return op.pattern == r.pattern }) {
			continue // answers 501: changes nothing
		}
		served[r.pattern] = true
		_, recorded := auditActions[r.pattern]
		_, exempt := notAudited[r.pattern]
		if recorded == exempt && r.method != "GET" {
			t.Errorf("%s: recorded %v, in notAudited %v; want exactly one", r.pattern, recorded, exempt)
		}
	}
	for _, tbl := range []map[string]string{auditActions, notAudited} {
		for k := range tbl {
			if !served[k] {
				t.Errorf("%s is not a served route", k)
			}
		}
	}
}
