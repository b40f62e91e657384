package e2b

import (
	"net/http"

	"github.com/tupper-dev/tupper/server/internal/audit"
)

// auditActions are the control plane's routes that change something, by E2B's pattern, and
// the action each is recorded as in the audit log (the native API's names for the same
// things). controlMux's wrapper records them; TestAuditCoversControlPlane checks that every
// route other than a GET is here or in notAudited.
var auditActions = map[string]string{
	"POST /sandboxes":                                  "sandbox.create",
	"POST /v2/sandboxes":                               "sandbox.create",
	"DELETE /sandboxes/{sandboxID}":                    "sandbox.destroy",
	"POST /sandboxes/{sandboxID}/connect":              "sandbox.connect",
	"POST /v2/sandboxes/{sandboxID}/connect":           "sandbox.connect",
	"POST /sandboxes/{sandboxID}/timeout":              "sandbox.timeout",
	"PUT /sandboxes/{sandboxID}/network":               "sandbox.network",
	"POST /sandboxes/{sandboxID}/refreshes":            "sandbox.keep_alive",
	"POST /sandboxes/{sandboxID}/pause":                "sandbox.pause",
	"POST /sandboxes/{sandboxID}/resume":               "sandbox.resume",
	"POST /sandboxes/{sandboxID}/snapshots":            "sandbox.snapshot",
	"POST /sandboxes/{sandboxID}/fork":                 "sandbox.fork",
	"DELETE /templates/{templateID}":                   "template.delete",
	"POST /v3/templates":                               "template.build",
	"POST /v2/templates":                               "template.build",
	"POST /v2/templates/{templateID}/builds/{buildID}": "template.build_start",
	"POST /templates/tags":                             "template.tag",
	"DELETE /templates/tags":                           "template.untag",
	"POST /volumes":                                    "volume.create",
	"DELETE /volumes/{volumeID}":                       "volume.delete",
	"POST /volumecontent/{volumeID}/dir":               "volume.mkdir",
	"PUT /volumecontent/{volumeID}/file":               "volume.write",
	"PATCH /volumecontent/{volumeID}/path":             "volume.chmod",
	"DELETE /volumecontent/{volumeID}/path":            "volume.delete_path",
	"POST /secrets":                                    "secret.create",
	"POST /secrets/{secretID}":                         "secret.update",
	"DELETE /secrets/{secretID}":                       "secret.delete",
}

// notAudited are the control plane's routes other than GETs that are not recorded, and why.
var notAudited = map[string]string{
	"PUT /templates/{templateID}/files/{hash}": "a build's upload, by a URL the recorded build request signed",
}

// envdActions are the data plane's calls that change something (envd's REST and Connect
// paths, all POSTs), recorded as the control plane's are, by serveEnvd.
var envdActions = map[string]string{
	"/process.Process/Start":         "sandbox.exec",
	"/process.Process/SendSignal":    "process.signal",
	"/files":                         "file.write",
	"/filesystem.Filesystem/Remove":  "file.delete",
	"/filesystem.Filesystem/MakeDir": "file.mkdir",
	"/filesystem.Filesystem/Move":    "file.rename",
}

// envdAction is the action a data-plane request is recorded as, or "".
func envdAction(r *http.Request) string {
	if r.Method != http.MethodPost {
		return ""
	}
	return envdActions[r.URL.Path]
}

// recordKey records fn's call of pattern, when it is an audited one, as keyID's.
func (s *Server) recordKey(pattern, keyID string, w http.ResponseWriter, r *http.Request, fn http.HandlerFunc) {
	action := auditActions[pattern]
	if action == "" {
		fn(w, r)
		return
	}
	s.cfg.Audit.Wrap(w, r, "e2b", action, &audit.Caller{KeyID: keyID, Via: "key"}, fn)
}
