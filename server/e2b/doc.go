// Package e2b serves E2B's API from a tupper server, so that E2B's unmodified SDKs (and the
// frameworks built on them) run their sandboxes on Tupper by setting three environment
// variables: E2B_API_URL and E2B_SANDBOX_URL to the server's URL, E2B_API_KEY to a Tupper
// API key (`tupper keys create --e2b` makes one of the form E2B's SDKs validate).
//
// The wire protocol is E2B's: E2B's openapi.yml for the control plane, envd's Connect services
// for the data plane. docs/e2b.md says what is served and what is not.
//
// # Control plane
//
// POST /sandboxes (v1) and POST /v2/sandboxes create a sandbox through package sandbox, so it
// is an ordinary sandbox of the server: it has a store record, a token, lifecycle events, and
// it is listed by the native API under /v1. templateID "base" is the provider's default
// template; metadata become labels (E2B's API shows exactly those: the server's own labels,
// sandbox-sdk=true and keys under "tupper.e2b/", stay internal); envVars the environment of
// every command; timeout (seconds: 15 by default on v1, 300 on v2) the hard lifetime, which
// the provider enforces (or, for a provider that cannot, the server's reaper);
// network.allowPublicTraffic false a traffic access token, true ports open to anyone
// (PublicTraffic); network.maskRequestHost the Host its ports see (MaskedHost). Also served:
// connect (v1 and v2: 200 when running, 201 when resumed from pause), list (GET /sandboxes:
// running ones; GET /v2/sandboxes: metadata, state, template and startedAfter (at or after)
// filters, order, limit and X-Next-Token paging; both newest first by default), get, kill,
// timeout, pause and resume (where the provider lists "pause"; 409 when already in that
// state), metrics (one sample measured in the sandbox when asked), logs (v1 and v2: the
// lifecycle events the server recorded about the sandbox, as E2B's log entries), snapshot
// creation (where the provider lists "snapshot") and the template alias "base". Each of
// them goes through the server's lifecycle.Service (Config.Lifecycle), the same one as the
// native API's. E2B's template builds (its Template SDK: POST /v3/templates and
// /v2/templates, file uploads by hash to signed URLs of this server, POST
// /v2/templates/{id}/builds/{buildID}, build status and logs, tags) go through the server's
// builds.Service (Config.Builds), as the native API's builds do: the steps become a
// Dockerfile for template.Store.Build (templates.go). E2B's secrets (/secrets) are the
// store's secrets of the request's API key, values never returned; a create's network.rules
// (headers set per host, naming ${e2b.secrets.NAME}) become bound secrets that set those
// headers at the egress proxy, outside the sandbox (secrets.go). Every other operation of
// E2B's API — network updates, fork, volumes, listing and deleting templates, teams,
// MCP, auto-pause, listing and deleting snapshots — answers 501 with E2B's error body {"code": status,
// "message": text}, naming E2B's path pattern; other paths under E2B's API answer 404 (405
// for another method) with the same body.
//
// Control-plane calls authenticate with an API key of the server in X-API-Key (or
// Authorization: Bearer).
//
// # Data plane
//
// Requests carrying E2b-Sandbox-Id (or a Host of the form 49983-{id}.{Config.Domain}) are
// passed to that sandbox's agent, which speaks envd's protocol (package agent), through the
// provider's optional provider.EnvdDialer: a reverse proxy over HTTP/1.1 that flushes every
// write at once, so streamed command output is not held back. The proxy checks what envd
// would, since the agent inside runs without a token: X-Access-Token must be the sandbox's
// envd access token (returned by create and connect; it is also a sandbox token of the
// native API), except for GET /health and for /files with a valid signed URL (E2B's v1
// scheme, verified here with the sandbox's token). A signed /files URL without
// E2b-Sandbox-Id (a browser, curl) is routed by its signature. Unknown sandboxes answer 502
// {"sandboxId", "message": "The sandbox was not found", "code": 502}, as E2B's proxy does,
// on envd's port and on their other ports alike (SandboxGone);
// paused ones "The sandbox is paused", at once, from the store's record (a connection kept
// to a frozen agent would never answer). A signed URL that has expired is refused with
// envd's message.
//
// E2B's SDKs expect commands to run as "user" in /home/user. A request without
// "Authorization: Basic …" is therefore sent as user "user", and a process started without
// a cwd starts in the user's home.
//
// The access token of a sandbox is derived from its id with a key kept in the store
// (HMAC-SHA256), so the server can check signatures without storing any token: the store
// holds only its hash, like every other credential.
//
// The reported envdVersion is EnvdVersion, the newest envd version whose features the agent
// implements (up to 0.6.4: file metadata, watch entries, network-mount watches).
//
// # Concurrency
//
// A *Server serves many requests at once.
package e2b
