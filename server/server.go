// Package server is `tupper serve`: sandboxes over HTTP for any language.
//
// It serves Tupper's native REST API under /v1 (documented by the OpenAPI 3.1 document
// openapi.json, served at /v1/openapi.json) over the sandbox package on one provider, with
// account API keys and per-sandbox tokens, lifecycle events, signed webhooks delivered from a
// durable outbox, preview URLs (by host name and by path) and pre-signed file URLs. Its state
// (keys, sandbox records and tokens, events, webhooks) lives in a store.Store; the sandboxes
// themselves live in the provider, so a server that is killed and restarted finds them again.
//
// # Auth
//
// Every route but /v1/health, /healthz, /readyz, /v1/openapi.json, pre-signed URLs and public preview ports needs
// a credential in "Authorization: Bearer …" (or "X-API-Key: …", for E2B clients): an account
// API key (ak_…), which may do anything, or a sandbox token (sbt_…, returned when the sandbox
// is created), which may only touch that one sandbox. Credentials are compared by their
// SHA-256 hashes in constant time and never logged.
//
// # Concurrency
//
// A *Server serves many requests at once; Handler may be called many times.
package server

import (
	"cmp"
	"context"
	"crypto/subtle"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tupper-dev/tupper/internal/httpdeadline"
	"github.com/tupper-dev/tupper/internal/metrics"
	"github.com/tupper-dev/tupper/mcpserver"
	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/sandbox"
	"github.com/tupper-dev/tupper/server/api"
	"github.com/tupper-dev/tupper/server/builds"
	"github.com/tupper-dev/tupper/server/e2b"
	"github.com/tupper-dev/tupper/server/internal/audit"
	"github.com/tupper-dev/tupper/server/lifecycle"
	"github.com/tupper-dev/tupper/store"
)

// DefaultAddr is where `tupper serve` listens unless told otherwise: loopback only.
const DefaultAddr = "127.0.0.1:7423"

// The defaults of Config's snapshot bounds.
const (
	DefaultSnapshotExpiry      = 7 * 24 * time.Hour
	DefaultSnapshotsPerSandbox = 10
	DefaultSnapshotsPerKey     = 100
	// DefaultVolumesTotalMB bounds the sizes of a server's volumes together: 64 GiB.
	DefaultVolumesTotalMB = 64 << 10
)

// Config configures a Server. Provider and Store are required.
type Config struct {
	Provider provider.Provider
	Store    *store.Store
	// Claim is the server's claim on its store (store.LockServer), with which it shares a
	// PostgreSQL store with other servers: its claims carry the claim's instance, and it runs
	// the work done once per store (the reaper, the deadlines, the egress events) only while
	// it leads. Nil: the server is the store's only one (an embedded server, a test).
	Claim *store.ServerLock
	// Logger receives one line per request and the server's own messages; nil discards.
	Logger *slog.Logger
	// BaseURL is the server's public URL (e.g. https://sandboxes.example.com or
	// http://127.0.0.1:7423), used in preview and pre-signed URLs. Required: a link is never
	// built from a request's Host header, which the client chooses.
	BaseURL string
	// Domain enables host-routed previews: {port}-{id}.{Domain}. "" serves only the path form.
	Domain string
	// MaxUploadBytes bounds one file upload; 0 is 10 GiB.
	MaxUploadBytes int64
	// ReapInterval is how often the server reconciles its records with the provider and
	// destroys sandboxes past their deadline; 0 is 10 s.
	ReapInterval time.Duration
	// UsageInterval is how often the server that leads the store samples every sandbox's
	// counters into the usage ledger (usage.go); 0 is 10 s.
	UsageInterval time.Duration
	// EgressInterval is how often the server reads the egress records of its sandboxes and
	// turns their refusals into sandbox.egress_denied events (egress.go); 0 is 1 s.
	EgressInterval time.Duration
	// AllowPrivateWebhooks lets webhooks post to loopback and private addresses (RFC 1918,
	// carrier-grade NAT, IPv6 ULA), for a server that posts to a service on its own machine
	// or network. Without it a webhook reaches public addresses only; link-local addresses
	// (cloud metadata services) and reserved ranges are refused either way.
	AllowPrivateWebhooks bool
	// WebhookBackoff is the first retry delay of a failed delivery, doubled each time up to an
	// hour; 0 is 1 s. WebhookMaxAttempts (0: 15) attempts are made before giving up.
	WebhookBackoff     time.Duration
	WebhookMaxAttempts int
	// Version is reported to MCP clients; "" is "dev".
	Version string
	// Metrics receives the server's measurements (requests, creates, commands, snapshots,
	// forks, egress, webhooks, store statements) and answers the gauges of this server's
	// sandboxes, pool and webhook outbox at each scrape; one Metrics serves one Server. Nil
	// collects nothing, and GET /metrics answers 404.
	Metrics *metrics.Metrics

	// Snapshots made through the server (an API key is needed: each is a copy of a disk on
	// the host) expire after SnapshotExpiry unless the request asks for less (0:
	// DefaultSnapshotExpiry; negative: they do not expire unless asked), and the reaper
	// deletes them. At most SnapshotsPerSandbox unexpired snapshots per sandbox and
	// SnapshotsPerKey per API key (0: DefaultSnapshotsPerSandbox, DefaultSnapshotsPerKey;
	// negative: no bound); past a bound a snapshot fails with resource_exhausted (429).
	SnapshotExpiry                       time.Duration
	SnapshotsPerSandbox, SnapshotsPerKey int
	// VolumesTotalMB bounds the sizes of the provider's volumes together, the most host disk
	// they can take as they fill (0: DefaultVolumesTotalMB; negative: no bound); a volume
	// past it fails with resource_exhausted (429), through every API.
	VolumesTotalMB int

	// The timeouts of HTTPServer: 0 is 10 s to read a request's headers, 1 min to read the
	// rest of a request that is not authenticated, 5 min to write an answer and 2 min for an
	// idle connection. An authenticated request's body has no read timeout (net/http would
	// cancel its context when the deadline passes); streams and other answers that last as
	// long as the caller asks (commands, processes, files, watches, previews, terminals,
	// E2B's data plane, MCP) have no write timeout.
	ReadHeaderTimeout, ReadTimeout, WriteTimeout, IdleTimeout time.Duration

	// Template builds (POST /v1/templates, E2B's template API), where the provider builds
	// (provider.TemplateBuilder): an upload (a build context, an E2B file) is at most
	// MaxBuildContextBytes as sent (0: 1 GiB) and unpacks to at most four times that and
	// 200,000 files; ConcurrentBuilds run at once (0: 1), the others queue.
	MaxBuildContextBytes int64
	ConcurrentBuilds     int

	// AuditRetention is how long the audit log keeps an entry (0: DefaultAuditRetention;
	// negative: for ever); the reaper deletes older ones.
	AuditRetention time.Duration
}

// Server serves the API. Create it with New, serve Handler, and call Run for the background
// work (webhook deliveries, the reaper) until its ctx ends.
type Server struct {
	cfg    Config
	prov   provider.Provider
	st     *store.Store
	log    *slog.Logger
	signer []byte // key of pre-signed URLs
	series series // the usage sampler's readings, for GET /v1/sandboxes/{id}/metrics (series.go)

	webhooks *http.Client // sends deliveries to permitted targets only

	routes []route
	mux    *http.ServeMux
	e2b    *e2b.Server // E2B's API on the same port

	lc *lifecycle.Service // every API's sandbox lifecycle

	builds *builds.Service // every API's template builds

	// missing are the sandboxes the last Reconcile found recorded but not in the provider.
	missingMu sync.Mutex
	missing   map[string]bool

	// deadlineMu makes the deadline loop and Reconcile act on a deadline one at a time.
	deadlineMu sync.Mutex

	poolWasFull atomic.Bool // readyz saw the warm pool full once

	wake chan struct{} // a new event may have queued deliveries

	mcp *mcpserver.HTTPHandler // /mcp

	// boxMCP are the MCP endpoints of sandboxes made with E2B's mcp option, one handler (and
	// so one set of MCP sessions) per sandbox.
	boxMCPMu sync.Mutex
	boxMCP   map[string]*mcpserver.HTTPHandler

	previews *http.Transport // the preview proxy's, over Sandbox.DialPort

	audit *audit.Recorder // the audit log's writer (audit.go)
}

// New builds a server.
func New(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.Provider == nil || cfg.Store == nil {
		return nil, provider.Errorf(provider.CodeInvalidArgument, "server: Provider and Store are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.MaxUploadBytes <= 0 {
		cfg.MaxUploadBytes = 10 << 30
	}
	if cfg.ReapInterval <= 0 {
		cfg.ReapInterval = 10 * time.Second
	}
	if cfg.UsageInterval <= 0 {
		cfg.UsageInterval = 10 * time.Second
	}
	if cfg.EgressInterval <= 0 {
		cfg.EgressInterval = time.Second
	}
	if cfg.WebhookBackoff <= 0 {
		cfg.WebhookBackoff = time.Second
	}
	if cfg.WebhookMaxAttempts <= 0 {
		cfg.WebhookMaxAttempts = 15
	}
	cfg.SnapshotExpiry = cmp.Or(cfg.SnapshotExpiry, DefaultSnapshotExpiry)
	cfg.SnapshotsPerSandbox = cmp.Or(cfg.SnapshotsPerSandbox, DefaultSnapshotsPerSandbox)
	cfg.SnapshotsPerKey = cmp.Or(cfg.SnapshotsPerKey, DefaultSnapshotsPerKey)
	cfg.VolumesTotalMB = cmp.Or(cfg.VolumesTotalMB, DefaultVolumesTotalMB)
	cfg.AuditRetention = cmp.Or(cfg.AuditRetention, DefaultAuditRetention)
	cfg.BaseURL = strings.TrimSuffix(cfg.BaseURL, "/")
	if u, err := url.Parse(cfg.BaseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, provider.Errorf(provider.CodeInvalidArgument, "server: BaseURL %q is not the server's absolute http or https URL", cfg.BaseURL)
	}
	cfg.ReadHeaderTimeout = cmp.Or(cfg.ReadHeaderTimeout, 10*time.Second)
	cfg.ReadTimeout = cmp.Or(cfg.ReadTimeout, time.Minute)
	cfg.WriteTimeout = cmp.Or(cfg.WriteTimeout, 5*time.Minute)
	cfg.IdleTimeout = cmp.Or(cfg.IdleTimeout, 2*time.Minute)
	if cfg.MaxBuildContextBytes <= 0 {
		cfg.MaxBuildContextBytes = 1 << 30
	}
	if cfg.Claim != nil {
		cfg.Store.SetInstance(cfg.Claim.Instance())
	}
	signer, err := cfg.Store.Setting(ctx, "url-signing-key", 32)
	if err != nil {
		return nil, err
	}
	// Snapshots a server that died was making were not made.
	if err := cfg.Store.DropSnapshotReservations(ctx); err != nil {
		return nil, err
	}
	// Deliveries a server that died had in flight go out again now.
	if n, err := cfg.Store.ReleaseClaims(ctx); err != nil {
		return nil, err
	} else if n > 0 {
		cfg.Logger.Info("resending webhook deliveries left in flight", "count", n)
	}
	cfg.Store.Measure(cfg.Metrics)
	s := &Server{
		cfg: cfg, prov: cfg.Provider, st: cfg.Store, log: cfg.Logger, signer: signer,
		wake: make(chan struct{}, 1), webhooks: webhookClient(cfg.AllowPrivateWebhooks),
	}
	if s.lc, err = lifecycle.New(lifecycle.Config{
		Provider: s.prov, Store: s.st, Logger: s.log, Emit: s.lifecycleEvent, Stored: s.eventStored, PreviewURL: s.previewPath,
		SnapshotExpiry: cfg.SnapshotExpiry, SnapshotsPerSandbox: cfg.SnapshotsPerSandbox, SnapshotsPerKey: cfg.SnapshotsPerKey,
		VolumesTotalMB: cfg.VolumesTotalMB, Sampled: s.series.add, Metrics: cfg.Metrics,
	}); err != nil {
		return nil, err
	}
	if s.builds, err = builds.New(builds.Config{Provider: s.prov, Emit: s.emit, Logger: s.log, Concurrent: cfg.ConcurrentBuilds}); err != nil {
		return nil, err
	}
	s.previews = s.newPreviewTransport()
	s.audit = audit.New(s.st, s.log)
	if s.mcp, err = s.newMCP(); err != nil {
		return nil, err
	}
	cfg.Metrics.Watch(metricsSource{s})
	s.routes = s.table()
	s.mux = http.NewServeMux()
	for _, rt := range s.routes {
		pattern := rt.Path
		if rt.Method != "" {
			pattern = rt.Method + " " + rt.Path
		}
		s.mux.Handle(pattern, s.wrap(rt))
	}
	if s.e2b, err = e2b.New(ctx, e2b.Config{Provider: s.prov, Store: s.st, Logger: s.log, Domain: cfg.Domain, Lifecycle: s.lc,
		Builds: s.builds, BaseURL: cfg.BaseURL, MaxUploadBytes: cfg.MaxBuildContextBytes, Audit: s.audit,
		Series: func(id string, from, to time.Time) []api.MetricsSample { m, _ := s.series.get(id, from, to); return m }}); err != nil {
		return nil, err
	}
	return s, nil
}

// Handler is the server's HTTP handler: the API, the preview proxy and the logging around them.
func (s *Server) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		lw := &logWriter{ResponseWriter: w, status: 200}
		if s.e2b.Match(r) {
			// E2B's control plane (/sandboxes…) and data plane (E2b-Sandbox-Id, 49983-{id} hosts).
			s.e2b.ServeHTTP(lw, r)
			s.logRequest(r, e2bRoute(r), lw.status, start)
			return
		}
		if port, id, ok := s.e2b.SandboxPort(r); ok {
			if port == e2b.MCPPort && s.serveBoxMCP(lw, r, id) {
				s.logRequest(r, "sandbox-mcp", lw.status, start)
				return
			}
			s.serveHostPreview(lw, r, id, port)
			s.logRequest(r, "preview-host", lw.status, start)
			return
		}
		s.mux.ServeHTTP(lw, r)
		pattern := r.Pattern
		if pattern == "" {
			pattern = "unmatched"
		}
		s.logRequest(r, pattern, lw.status, start)
	})
}

// HTTPServer returns an http.Server that serves Handler with the server's timeouts
// (Config.ReadHeaderTimeout and the others). Serve it on a listener; Shutdown ends it.
func (s *Server) HTTPServer() *http.Server {
	return &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: s.cfg.ReadHeaderTimeout,
		ReadTimeout:       s.cfg.ReadTimeout,
		WriteTimeout:      s.cfg.WriteTimeout,
		IdleTimeout:       s.cfg.IdleTimeout,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
}

// logRequest logs one request by its route pattern, never its path or query (which may hold
// a signature) or its headers (which hold credentials).
// It also counts it in the metrics, by the same pattern.
func (s *Server) logRequest(r *http.Request, pattern string, status int, start time.Time) {
	d := time.Since(start)
	s.observeRequest(pattern, status, d)
	s.log.LogAttrs(r.Context(), slog.LevelInfo, "request",
		slog.String("route", pattern), slog.Int("status", status),
		slog.Duration("duration", d), slog.String("remote", r.RemoteAddr))
}

// logWriter records the status; it passes Flush, Hijack and full duplex through Unwrap.
type logWriter struct {
	http.ResponseWriter
	status      int
	wroteHeader bool
}

func (w *logWriter) WriteHeader(code int) {
	if !w.wroteHeader {
		w.status, w.wroteHeader = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.wroteHeader = true
	return w.ResponseWriter.Write(p)
}

func (w *logWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Close ends the MCP sessions (destroying their default sandboxes) and drops the server's
// sandbox handles (the other sandboxes live on). Idempotent.
func (s *Server) Close() error {
	s.closeMCP()
	s.builds.Close()
	s.previews.CloseIdleConnections()
	err := s.lc.Close()
	s.audit.Close()
	return err
}

// Capabilities is what the server can do for a client: what its provider can do
// (provider.CapabilitiesOf: its declared capabilities and optional interfaces), plus an
// exact get-or-create by key (the server serializes it) and persistence (sandboxes outlive
// the client). A terminal is served over a WebSocket (GET /v1/sandboxes/{id}/terminal).
func (s *Server) Capabilities() provider.Capabilities {
	caps := provider.CapabilitiesOf(s.prov)
	caps[provider.CapExactKey] = true
	caps[provider.CapPersistent] = true
	return caps
}

// scope is who may call a route.
type scope int

const (
	scopePublic  scope = iota // no credential
	scopeAccount              // an API key
	scopeSandbox              // an API key, or the token of the sandbox named by {id}
	scopeAny                  // an API key or any sandbox token
	scopePreview              // as scopeSandbox, but none for a port exposed as public
)

// route is one entry of the route table: the mux pattern, who may call it, and its handler.
type route struct {
	Method string
	Path   string
	Scope  scope
	h      func(w http.ResponseWriter, r *http.Request, c *caller)
}

// caller is who made a request.
type caller struct {
	KeyID     string // set for an API key
	SandboxID string // set for a sandbox token
}

// credential returns the credential of a request: Authorization: Bearer X, or X-API-Key: X.
func credential(r *http.Request) string {
	if a := r.Header.Get("Authorization"); a != "" {
		scheme, tok, ok := strings.Cut(a, " ")
		if ok && strings.EqualFold(scheme, "Bearer") {
			return strings.TrimSpace(tok)
		}
		return ""
	}
	return strings.TrimSpace(r.Header.Get("X-API-Key"))
}

var (
	errNoCredential  = provider.Errorf(provider.CodeUnauthorized, "no credential: send Authorization: Bearer <API key or sandbox token>")
	errBadCredential = provider.Errorf(provider.CodeUnauthorized, "the credential is not an API key (ak_… or e2b_…) or a sandbox token (sbt_…)")
)

// authenticate returns the caller of r, or an unauthorized/forbidden error for rt. With a
// forbidden error it returns the caller too: the credential was good, the route not its to
// call (the audit log records the attempt).
func (s *Server) authenticate(r *http.Request, rt route) (*caller, error) {
	cred := credential(r)
	switch {
	case cred == "":
		return nil, errNoCredential
	case strings.HasPrefix(cred, store.KeyPrefix), strings.HasPrefix(cred, store.E2BKeyPrefix):
		k, err := s.st.AuthenticateKey(r.Context(), cred)
		if err != nil {
			return nil, err
		}
		return &caller{KeyID: k.ID}, nil
	case strings.HasPrefix(cred, store.TokenPrefix):
		id, err := s.st.SandboxForToken(r.Context(), cred)
		if err != nil {
			return nil, err
		}
		if rt.Scope == scopeAny {
			return &caller{SandboxID: id}, nil
		}
		if rt.Scope != scopeSandbox && rt.Scope != scopePreview {
			return &caller{SandboxID: id}, provider.Errorf(provider.CodeForbidden, "this route needs an API key: a sandbox token may use only its own sandbox's routes, and may not snapshot it")
		}
		if subtle.ConstantTimeCompare([]byte(id), []byte(r.PathValue("id"))) != 1 {
			return &caller{SandboxID: id}, provider.Errorf(provider.CodeForbidden, "this sandbox token belongs to another sandbox")
		}
		return &caller{SandboxID: id}, nil
	}
	return nil, errBadCredential
}

func (s *Server) wrap(rt route) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := &caller{}
		if rt.Scope == scopePreview && s.isPublicPort(r) {
			httpdeadline.LiftRead(w)
			rt.h(w, r, c)
			return
		}
		if rt.Scope != scopePublic {
			var err error
			if c, err = s.authenticate(r, rt); err != nil {
				if provider.CodeOf(err) == provider.CodeUnauthorized {
					w.Header().Set("WWW-Authenticate", `Bearer realm="tupper"`)
				}
				deny := func(w http.ResponseWriter, _ *http.Request) { writeError(w, err) }
				if action := auditAction(rt); action != "" && c != nil {
					// A good credential on a route it may not call: recorded, refused.
					s.audit.Wrap(w, r, "rest", action, auditCaller(c), deny)
					return
				}
				deny(w, r)
				return
			}
			httpdeadline.LiftRead(w)
		}
		if action := auditAction(rt); action != "" {
			s.audit.Wrap(w, r, "rest", action, auditCaller(c), func(w http.ResponseWriter, r *http.Request) { rt.h(w, r, c) })
			return
		}
		rt.h(w, r, c)
	})
}

// box returns the server's handle to a live sandbox it made (lifecycle.Service.Handle).
func (s *Server) box(ctx context.Context, id string) (*sandbox.Sandbox, error) {
	return s.lc.Handle(ctx, id)
}
