package server

import "net/http"

// table is every route the server serves. The OpenAPI document (openapi.json) must describe
// exactly these; TestOpenAPIMatchesRoutes checks it. A route with an empty Method takes every
// method.
func (s *Server) table() []route {
	return []route{
		{"GET", "/v1/health", scopePublic, s.health},
		{"GET", "/v1/openapi.json", scopePublic, s.openapi},

		{"POST", "/mcp", scopeAccount, s.serveMCP},
		{"GET", "/mcp", scopeAccount, s.serveMCP},
		{"DELETE", "/mcp", scopeAccount, s.serveMCP},
		{"GET", "/v1/info", scopeAny, s.info},

		{"POST", "/v1/sandboxes", scopeAccount, s.createSandbox},
		{"GET", "/v1/sandboxes", scopeAccount, s.listSandboxes},
		{"GET", "/v1/sandboxes/{id}", scopeSandbox, s.getSandbox},
		{"DELETE", "/v1/sandboxes/{id}", scopeSandbox, s.deleteSandbox},
		{"POST", "/v1/sandboxes/{id}/pause", scopeSandbox, s.pause},
		{"POST", "/v1/sandboxes/{id}/resume", scopeSandbox, s.resume},
		{"POST", "/v1/sandboxes/{id}/snapshot", scopeSandbox, s.snapshot},
		{"POST", "/v1/sandboxes/{id}/timeout", scopeSandbox, s.setTimeout},
		{"POST", "/v1/sandboxes/{id}/keep-alive", scopeSandbox, s.keepAlive},
		{"GET", "/v1/sandboxes/{id}/busy", scopeSandbox, s.busy},
		{"GET", "/v1/sandboxes/{id}/events", scopeSandbox, s.sandboxEvents},

		{"POST", "/v1/sandboxes/{id}/run", scopeSandbox, s.run},
		{"POST", "/v1/sandboxes/{id}/exec", scopeSandbox, s.exec},
		{"GET", "/v1/sandboxes/{id}/terminal", scopeSandbox, s.terminal},

		{"POST", "/v1/sandboxes/{id}/processes", scopeSandbox, s.startProcess},
		{"GET", "/v1/sandboxes/{id}/processes", scopeSandbox, s.listProcesses},
		{"GET", "/v1/sandboxes/{id}/processes/{name}", scopeSandbox, s.getProcess},
		{"GET", "/v1/sandboxes/{id}/processes/{name}/logs", scopeSandbox, s.processLogs},
		{"GET", "/v1/sandboxes/{id}/processes/{name}/lines", scopeSandbox, s.processLines},
		{"POST", "/v1/sandboxes/{id}/processes/{name}/stop", scopeSandbox, s.stopProcess},
		{"POST", "/v1/sandboxes/{id}/processes/{name}/restart", scopeSandbox, s.restartProcess},
		{"POST", "/v1/sandboxes/{id}/processes/{name}/wait", scopeSandbox, s.waitProcess},

		{"GET", "/v1/sandboxes/{id}/files/content", scopeSandbox, s.download},
		{"PUT", "/v1/sandboxes/{id}/files/content", scopeSandbox, s.upload},
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
		{"GET", "/v1/sandboxes/{id}/files/watch", scopeSandbox, s.watch},
		{"POST", "/v1/sandboxes/{id}/files/presign", scopeSandbox, s.presign},

		{"POST", "/v1/sandboxes/{id}/git/clone", scopeSandbox, s.gitClone},
		{"POST", "/v1/sandboxes/{id}/git/status", scopeSandbox, s.gitStatus},
		{"POST", "/v1/sandboxes/{id}/git/diff", scopeSandbox, s.gitDiff},
		{"POST", "/v1/sandboxes/{id}/git/commit", scopeSandbox, s.gitCommit},
		{"POST", "/v1/sandboxes/{id}/git/push", scopeSandbox, s.gitPush},
		{"POST", "/v1/sandboxes/{id}/git/checkout", scopeSandbox, s.gitCheckout},

		{"GET", "/v1/sandboxes/{id}/ports", scopeSandbox, s.listPorts},
		{"POST", "/v1/sandboxes/{id}/ports/{port}/expose", scopeSandbox, s.exposePort},
		{"DELETE", "/v1/sandboxes/{id}/ports/{port}", scopeSandbox, s.unexposePort},
		{"", "/v1/sandboxes/{id}/proxy/{port}/{path...}", scopePreview, s.proxyPath},
		{"", "/v1/preview/{sig}/{path...}", scopePublic, s.proxySigned},

		{"GET", "/v1/signed/files", scopePublic, s.signedDownload},
		{"PUT", "/v1/signed/files", scopePublic, s.signedUpload},

		{"GET", "/v1/events", scopeAccount, s.listEvents},
		{"POST", "/v1/webhooks", scopeAccount, s.createWebhook},
		{"GET", "/v1/webhooks", scopeAccount, s.listWebhooks},
		{"DELETE", "/v1/webhooks/{webhook}", scopeAccount, s.deleteWebhook},
	}
}

// anyMethods are the methods the OpenAPI document lists for a route that takes every method.
var anyMethods = []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodHead, http.MethodOptions}
