package server

import (
	"net/http"
	"time"

	"github.com/tupper-dev/tupper/server/api"
	"github.com/tupper-dev/tupper/server/internal/audit"
	"github.com/tupper-dev/tupper/store"
)

// DefaultAuditRetention is how long the audit log keeps an entry unless Config says
// otherwise.
const DefaultAuditRetention = 90 * 24 * time.Hour

// auditActions are the native API's routes that change something, by their pattern in the
// route table, and the action each is recorded as (wrap records them: audit.Wrap). Every
// route that is not a GET is here or in notAudited; TestAuditCoversRoutes checks both
// against the table.
var auditActions = map[string]string{
	"POST /v1/sandboxes":                               "sandbox.create",
	"DELETE /v1/sandboxes/{id}":                        "sandbox.destroy",
	"POST /v1/sandboxes/{id}/pause":                    "sandbox.pause",
	"POST /v1/sandboxes/{id}/resume":                   "sandbox.resume",
	"POST /v1/sandboxes/{id}/snapshot":                 "sandbox.snapshot",
	"POST /v1/sandboxes/{id}/fork":                     "sandbox.fork",
	"POST /v1/sandboxes/{id}/timeout":                  "sandbox.timeout",
	"POST /v1/sandboxes/{id}/keep-alive":               "sandbox.keep_alive",
	"PUT /v1/sandboxes/{id}/network":                   "sandbox.network",
	"DELETE /v1/snapshots/{snapshot}":                  "snapshot.delete",
	"POST /v1/volumes":                                 "volume.create",
	"DELETE /v1/volumes/{name}":                        "volume.delete",
	"DELETE /v1/templates/{name}":                      "template.delete",
	"POST /v1/templates":                               "template.build",
	"DELETE /v1/templates/builds/{build}":              "template.build_cancel",
	"POST /v1/sandboxes/{id}/run":                      "sandbox.exec",
	"POST /v1/sandboxes/{id}/exec":                     "sandbox.exec",
	"GET /v1/sandboxes/{id}/terminal":                  "sandbox.terminal",
	"POST /v1/sandboxes/{id}/processes":                "process.start",
	"POST /v1/sandboxes/{id}/processes/{name}/stop":    "process.stop",
	"POST /v1/sandboxes/{id}/processes/{name}/restart": "process.restart",
	"PUT /v1/sandboxes/{id}/files/content":             "file.write",
	"POST /v1/sandboxes/{id}/files/write":              "file.write",
	"POST /v1/sandboxes/{id}/files/edit":               "file.write",
	"POST /v1/sandboxes/{id}/files/remove":             "file.delete",
	"POST /v1/sandboxes/{id}/files/mkdir":              "file.mkdir",
	"POST /v1/sandboxes/{id}/files/rename":             "file.rename",
	"POST /v1/sandboxes/{id}/files/mark":               "file.mark",
	"POST /v1/sandboxes/{id}/files/presign":            "file.presign",
	"PUT /v1/signed/files":                             "file.write",
	"POST /v1/sandboxes/{id}/git/clone":                "git.clone",
	"POST /v1/sandboxes/{id}/git/commit":               "git.commit",
	"POST /v1/sandboxes/{id}/git/push":                 "git.push",
	"POST /v1/sandboxes/{id}/git/checkout":             "git.checkout",
	"POST /v1/sandboxes/{id}/ports/{port}/expose":      "port.expose",
	"DELETE /v1/sandboxes/{id}/ports/{port}":           "port.unexpose",
	"POST /v1/webhooks":                                "webhook.create",
	"DELETE /v1/webhooks/{webhook}":                    "webhook.delete",

	// The code interpreter's (docs/code-interpreter.md).
	"POST /v1/sandboxes/{id}/code":                            "sandbox.run_code",
	"POST /v1/sandboxes/{id}/code/contexts":                   "code.context_create",
	"POST /v1/sandboxes/{id}/code/contexts/{context}/restart": "code.context_restart",
	"DELETE /v1/sandboxes/{id}/code/contexts/{context}":       "code.context_remove",
}

// notAudited are the routes other than GETs that wrap does not record, and why.
var notAudited = map[string]string{
	"POST /mcp":   "MCP's tool calls are recorded one by one (tools.SessionOptions.Called), not the JSON-RPC requests that carry them",
	"DELETE /mcp": "ending an MCP session destroys its default sandbox through the lifecycle, which emits sandbox.destroyed",
	"POST /v1/sandboxes/{id}/processes/{name}/wait": "waits; changes nothing",
	"POST /v1/sandboxes/{id}/files/read":            "reads",
	"POST /v1/sandboxes/{id}/files/search":          "reads",
	"POST /v1/sandboxes/{id}/git/status":            "reads",
	"POST /v1/sandboxes/{id}/git/diff":              "reads",
	"/v1/sandboxes/{id}/proxy/{port}/{path...}":     "traffic to the sandbox's own server, not a call of the API",
	"/v1/preview/{sig}/{path...}":                   "traffic to the sandbox's own server, not a call of the API",
}

// mcpActions are the actions MCP's tools are recorded as, the native API's for the same
// things, so that one filter (action=sandbox.exec) finds them through every API. A tool
// not here that changes something is recorded as "mcp.<tool>".
var mcpActions = map[string]string{
	"create_sandbox":  "sandbox.create",
	"destroy_sandbox": "sandbox.destroy",
	"pause_sandbox":   "sandbox.pause",
	"resume_sandbox":  "sandbox.resume",
	"snapshot":        "sandbox.snapshot",
	"fork":            "sandbox.fork",
	"run_command":     "sandbox.exec",
	"start_process":   "process.start",
	"stop_process":    "process.stop",
	"write_file":      "file.write",
	"edit_file":       "file.write",
	"git_clone":       "git.clone",
	"git_commit":      "git.commit",
	"expose_port":     "port.expose",
	"run_code":        "sandbox.run_code",
}

// auditAction is the action rt is recorded as, or "" when it is not.
func auditAction(rt route) string {
	return auditActions[rt.Method+" "+rt.Path]
}

// auditCaller is who c is, for the audit log; nil for a public route's anonymous caller.
func auditCaller(c *caller) *audit.Caller {
	switch {
	case c == nil:
		return nil
	case c.KeyID != "":
		return &audit.Caller{KeyID: c.KeyID, Via: "key"}
	case c.SandboxID != "":
		return &audit.Caller{SandboxID: c.SandboxID, Via: "token"}
	}
	return nil
}

// listAudit serves GET /v1/audit: the audit log, oldest first, filtered and paged by its
// query (after: the last id of the previous page).
func (s *Server) listAudit(w http.ResponseWriter, r *http.Request, _ *caller) {
	q := r.URL.Query()
	f := store.AuditFilter{KeyID: q.Get("key"), Action: q.Get("action"), Target: q.Get("target")}
	var err error
	if f.From, f.To, err = queryRange(r); err != nil {
		writeError(w, err)
		return
	}
	if f.After, err = queryInt(r, "after", 0); err != nil {
		writeError(w, err)
		return
	}
	limit, err := queryInt(r, "limit", 0)
	if err != nil {
		writeError(w, err)
		return
	}
	if limit < 0 || limit > store.MaxAuditPage {
		writeError(w, badRequest("limit must be between 1 and %d", store.MaxAuditPage))
		return
	}
	f.Limit = int(limit)
	// What this server has answered is in the list: the entries still queued are written first.
	if err := s.audit.Flush(r.Context()); err != nil {
		writeError(w, err)
		return
	}
	entries, err := s.st.Audit(r.Context(), f)
	if err != nil {
		writeError(w, err)
		return
	}
	out := api.AuditList{Entries: make([]api.AuditEntry, 0, len(entries))}
	for _, e := range entries {
		out.Entries = append(out.Entries, api.AuditEntry{ID: e.ID, Time: e.Time, KeyID: e.KeyID, Via: e.Via, Source: e.Source,
			API: e.API, Action: e.Action, Target: e.Target, Result: e.Result, Status: e.Status})
	}
	writeJSON(w, http.StatusOK, out)
}
