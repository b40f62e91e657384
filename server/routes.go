package server

import (
	"net/http"

	"github.com/tupper-dev/tupper/internal/httpdeadline"
)

// table is every route the server serves. The OpenAPI document (openapi.json) must describe
// exactly these; TestOpenAPIMatchesRoutes checks it. A route with an empty Method takes every
// method.
func (s *Server) table() []route {
	return []route{
		{"GET", "/v1/health", scopePublic, s.health},
		{"GET", "/v1/openapi.json", scopePublic, s.openapi},
		// Kubernetes' probes, and the metrics behind a key (operations.md; metrics.go).
		{"GET", "/healthz", scopePublic, s.healthz},
		{"GET", "/readyz", scopePublic, s.readyz},
		{"GET", "/metrics", scopeAccount, s.metricsRoute},

		{"POST", "/mcp", scopeAccount, long(s.serveMCP)},
		{"GET", "/mcp", scopeAccount, long(s.serveMCP)},
		{"DELETE", "/mcp", scopeAccount, long(s.serveMCP)},
		{"GET", "/v1/info", scopeAny, s.info},

		{"POST", "/v1/sandboxes", scopeAccount, long(s.createSandbox)},
		{"GET", "/v1/sandboxes", scopeAccount, s.listSandboxes},
		{"GET", "/v1/sandboxes/{id}", scopeSandbox, s.getSandbox},
		{"DELETE", "/v1/sandboxes/{id}", scopeSandbox, s.deleteSandbox},
		{"POST", "/v1/sandboxes/{id}/pause", scopeSandbox, s.pause},
		{"POST", "/v1/sandboxes/{id}/resume", scopeSandbox, s.resume},
		// An API key only: a snapshot is a lasting copy of the sandbox's disk on the host,
		// counted against the key's quota (Config.SnapshotsPerKey).
		{"POST", "/v1/sandboxes/{id}/snapshot", scopeAccount, long(s.snapshot)},
		// An API key only: each child is a new sandbox of the key's.
		{"POST", "/v1/sandboxes/{id}/fork", scopeAccount, long(s.fork)},
		{"GET", "/v1/snapshots", scopeAccount, s.listSnapshots},
		{"GET", "/v1/snapshots/{snapshot}", scopeAccount, s.getSnapshot},
		{"DELETE", "/v1/snapshots/{snapshot}", scopeAccount, s.deleteSnapshot},
		// Volumes are the server's, shared by its keys as templates are; an API key only.
		{"POST", "/v1/volumes", scopeAccount, long(s.createVolume)},
		{"GET", "/v1/volumes", scopeAccount, s.listVolumes},
		{"GET", "/v1/volumes/{name}", scopeAccount, s.getVolume},
		{"DELETE", "/v1/volumes/{name}", scopeAccount, s.deleteVolume},
		{"POST", "/v1/sandboxes/{id}/timeout", scopeSandbox, s.setTimeout},
		{"POST", "/v1/sandboxes/{id}/keep-alive", scopeSandbox, s.keepAlive},
		// An API key only: a sandbox's own token must not widen its own egress.
		{"GET", "/v1/sandboxes/{id}/network", scopeSandbox, s.getNetwork},
		{"PUT", "/v1/sandboxes/{id}/network", scopeAccount, s.setNetwork},
		{"GET", "/v1/sandboxes/{id}/egress", scopeSandbox, s.egressLog},
		{"GET", "/v1/sandboxes/{id}/egress/learned", scopeSandbox, s.egressLearned},
		{"GET", "/v1/sandboxes/{id}/busy", scopeSandbox, s.busy},
		{"GET", "/v1/sandboxes/{id}/events", scopeSandbox, s.sandboxEvents},
		{"GET", "/v1/sandboxes/{id}/metrics", scopeSandbox, s.getMetrics},

		// Templates are the server's, shared by every key (an API key only).
		{"GET", "/v1/templates", scopeAccount, s.listTemplates},
		{"GET", "/v1/templates/{name}", scopeAccount, s.getTemplate},
		{"DELETE", "/v1/templates/{name}", scopeAccount, s.deleteTemplate},
		// Builds: the context uploaded, the build run in the background; a build is its key's.
		{"POST", "/v1/templates", scopeAccount, long(s.buildTemplate)},
		{"GET", "/v1/templates/builds/{build}", scopeAccount, s.getBuild},
		{"DELETE", "/v1/templates/builds/{build}", scopeAccount, s.cancelBuild},
		{"GET", "/v1/templates/builds/{build}/logs", scopeAccount, long(s.buildLogs)},

		{"POST", "/v1/sandboxes/{id}/run", scopeSandbox, long(s.run)},
		{"POST", "/v1/sandboxes/{id}/exec", scopeSandbox, long(s.exec)},
		{"GET", "/v1/sandboxes/{id}/terminal", scopeSandbox, long(s.terminal)},
		{"POST", "/v1/sandboxes/{id}/code", scopeSandbox, long(s.runCode)},
		{"GET", "/v1/sandboxes/{id}/code/contexts", scopeSandbox, s.codeContexts},
		{"POST", "/v1/sandboxes/{id}/code/contexts", scopeSandbox, long(s.createCodeContext)},
		{"POST", "/v1/sandboxes/{id}/code/contexts/{context}/restart", scopeSandbox, long(s.restartCodeContext)},
		{"DELETE", "/v1/sandboxes/{id}/code/contexts/{context}", scopeSandbox, s.removeCodeContext},

		{"POST", "/v1/sandboxes/{id}/processes", scopeSandbox, long(s.startProcess)},
		{"GET", "/v1/sandboxes/{id}/processes", scopeSandbox, s.listProcesses},
		{"GET", "/v1/sandboxes/{id}/processes/{name}", scopeSandbox, s.getProcess},
		{"GET", "/v1/sandboxes/{id}/processes/{name}/logs", scopeSandbox, s.processLogs},
		{"GET", "/v1/sandboxes/{id}/processes/{name}/lines", scopeSandbox, long(s.processLines)},
		{"POST", "/v1/sandboxes/{id}/processes/{name}/stop", scopeSandbox, s.stopProcess},
		{"POST", "/v1/sandboxes/{id}/processes/{name}/restart", scopeSandbox, long(s.restartProcess)},
		{"POST", "/v1/sandboxes/{id}/processes/{name}/wait", scopeSandbox, long(s.waitProcess)},

		{"GET", "/v1/sandboxes/{id}/files/content", scopeSandbox, long(s.download)},
		{"PUT", "/v1/sandboxes/{id}/files/content", scopeSandbox, long(s.upload)},
		{"POST", "/v1/sandboxes/{id}/files/read", scopeSandbox, s.readFile},
		{"POST", "/v1/sandboxes/{id}/files/write", scopeSandbox, s.writeFile},
		{"POST", "/v1/sandboxes/{id}/files/edit", scopeSandbox, s.editFile},
		{"GET", "/v1/sandboxes/{id}/files/list", scopeSandbox, s.listFiles},
		{"GET", "/v1/sandboxes/{id}/files/stat", scopeSandbox, s.statFile},
		{"GET", "/v1/sandboxes/{id}/files/exists", scopeSandbox, s.existsFile},
		{"POST", "/v1/sandboxes/{id}/files/remove", scopeSandbox, s.removeFile},
		{"POST", "/v1/sandboxes/{id}/files/mkdir", scopeSandbox, s.makeDir},
		{"POST", "/v1/sandboxes/{id}/files/rename", scopeSandbox, s.renameFile},
		{"POST", "/v1/sandboxes/{id}/files/search", scopeSandbox, s.searchFiles},
		{"POST", "/v1/sandboxes/{id}/files/mark", scopeSandbox, s.markFiles},
		{"GET", "/v1/sandboxes/{id}/files/changes", scopeSandbox, s.changes},
		{"GET", "/v1/sandboxes/{id}/files/watch", scopeSandbox, long(s.watch)},
		{"POST", "/v1/sandboxes/{id}/files/presign", scopeSandbox, s.presign},

		{"POST", "/v1/sandboxes/{id}/git/clone", scopeSandbox, long(s.gitClone)},
		{"POST", "/v1/sandboxes/{id}/git/status", scopeSandbox, s.gitStatus},
		{"POST", "/v1/sandboxes/{id}/git/diff", scopeSandbox, s.gitDiff},
		{"POST", "/v1/sandboxes/{id}/git/commit", scopeSandbox, s.gitCommit},
		{"POST", "/v1/sandboxes/{id}/git/push", scopeSandbox, long(s.gitPush)},
		{"POST", "/v1/sandboxes/{id}/git/checkout", scopeSandbox, s.gitCheckout},

		{"GET", "/v1/sandboxes/{id}/ports", scopeSandbox, s.listPorts},
		{"POST", "/v1/sandboxes/{id}/ports/{port}/expose", scopeSandbox, s.exposePort},
		{"DELETE", "/v1/sandboxes/{id}/ports/{port}", scopeSandbox, s.unexposePort},
		{"", "/v1/sandboxes/{id}/proxy/{port}/{path...}", scopePreview, long(s.proxyPath)},
		{"", "/v1/preview/{sig}/{path...}", scopePublic, s.proxySigned},

		{"GET", "/v1/signed/files", scopePublic, s.signedDownload},
		{"PUT", "/v1/signed/files", scopePublic, s.signedUpload},

		{"GET", "/v1/events", scopeAccount, s.listEvents},
		{"POST", "/v1/webhooks", scopeAccount, s.createWebhook},
		{"GET", "/v1/webhooks", scopeAccount, s.listWebhooks},
		{"DELETE", "/v1/webhooks/{webhook}", scopeAccount, s.deleteWebhook},

		// The audit log (audit.go): any API key reads it; nothing writes it but the server.
		{"GET", "/v1/audit", scopeAccount, s.listAudit},
		// The usage ledger (usage.go): any API key reads the sums.
		{"GET", "/v1/usage", scopeAccount, s.getUsage},
	}
}

// long lifts the write timeout (Config.WriteTimeout) of a route whose answer lasts as long as
// the caller asks: a stream, a command, a process's readiness or exit, a file, a preview, a
// terminal, MCP's event stream, a copy of a sandbox. It runs after authentication; routes a
// signed URL opens lift it themselves once the signature is checked.
func long(h func(w http.ResponseWriter, r *http.Request, c *caller)) func(w http.ResponseWriter, r *http.Request, c *caller) {
	return func(w http.ResponseWriter, r *http.Request, c *caller) {
		httpdeadline.Lift(w)
		h(w, r, c)
	}
}

// anyMethods are the methods the OpenAPI document lists for a route that takes every method.
var anyMethods = []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodHead, http.MethodOptions}
