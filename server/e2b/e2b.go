package e2b

import (
	"context"
	"log/slog"
	"net/http"
	"strings"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/provider/httpcode"
	"github.com/tupper-dev/tupper/server/builds"
	"github.com/tupper-dev/tupper/server/internal/audit"
	"github.com/tupper-dev/tupper/server/internal/httpjson"
	"github.com/tupper-dev/tupper/server/lifecycle"
	"github.com/tupper-dev/tupper/store"
)

// EnvdVersion is the envd version reported for every sandbox: the newest whose gated SDK
// features the agent implements: file metadata (0.6.2), entries in watch events (0.6.3) and
// watches that allow network mounts (0.6.4, which a sandbox here does not have).
const EnvdVersion = "0.6.4"

// EnvdPort is the port E2B's SDKs address envd on.
const EnvdPort = 49983

// ClientID is the constant clientID of E2B's API.
const ClientID = "6532622b"

// Config configures a Server. Provider and Store are required.
type Config struct {
	Provider provider.Provider
	Store    *store.Store
	// Logger receives the server's own messages; nil discards.
	Logger *slog.Logger
	// Domain, when set, is returned as the sandboxes' domain (so SDKs without E2B_SANDBOX_URL
	// use https://49983-{id}.{Domain}), and such hosts are routed to the data plane.
	Domain string
	// Lifecycle is the server's sandbox lifecycle, shared with its other APIs (so the same
	// request behaves the same in each). Nil: one of the E2B API's own, on Provider and Store,
	// without events.
	Lifecycle *lifecycle.Service
	// Builds runs template builds (E2B's template API), shared with the server's other APIs;
	// nil: E2B's template builds answer 501. BaseURL is the server's public URL, that of the
	// upload URLs handed out; MaxUploadBytes bounds one uploaded file (0: 1 GiB).
	Builds         *builds.Service
	BaseURL        string
	MaxUploadBytes int64
	// Audit records the calls that change something (audit.go); nil records none.
	Audit *audit.Recorder
}

// Server serves E2B's control plane and data plane. Create it with New.
type Server struct {
	cfg      Config
	lc       *lifecycle.Service
	prov     provider.Provider
	st       *store.Store
	log      *slog.Logger
	tokenKey []byte
	control  *router
	proxy    *envdProxy
	scan     *signedScan // signed URLs that name no sandbox
	tbuilds  templateBuilds
}

// New builds a Server. It reads (creating it the first time) the key that derives sandbox
// access tokens from the store.
func New(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.Provider == nil || cfg.Store == nil {
		return nil, provider.Errorf(provider.CodeInvalidArgument, "e2b: Provider and Store are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	key, err := cfg.Store.Setting(ctx, "e2b-envd-token-key", 32)
	if err != nil {
		return nil, err
	}
	if cfg.Lifecycle == nil {
		if cfg.Lifecycle, err = lifecycle.New(lifecycle.Config{Provider: cfg.Provider, Store: cfg.Store, Logger: cfg.Logger}); err != nil {
			return nil, err
		}
	}
	s := &Server{cfg: cfg, lc: cfg.Lifecycle, prov: cfg.Provider, st: cfg.Store, log: cfg.Logger, tokenKey: key, scan: newSignedScan()}
	if err := s.forgetEnvdTokens(ctx); err != nil {
		return nil, err
	}
	s.control = s.controlMux()
	s.proxy = s.newProxy(s.dialEnvd)
	return s, nil
}

// Match reports whether r belongs to the E2B API: its data plane (an E2b-Sandbox-Id header,
// a 49983-{id}.{Domain} host, or a signed /files URL) or its control plane (every path in
// an area of E2B's API: /sandboxes…, /v2/sandboxes…, /templates…, /health, and those the
// server does not serve, such as /volumes…, which answer E2B's error body). A request to
// another port of a sandbox (SandboxPort) is the sandbox's own traffic, whatever its path:
// never the E2B API's.
func (s *Server) Match(r *http.Request) bool {
	if _, ok := s.dataPlane(r); ok {
		return true
	}
	if _, _, ok := s.SandboxPort(r); ok {
		return false
	}
	return s.control.covers(r.URL.Path)
}

// ServeHTTP serves a request Match accepted.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if how, ok := s.dataPlane(r); ok {
		s.serveEnvd(w, r, how)
		return
	}
	s.control.ServeHTTP(w, r)
}

// credential is the API key of a control-plane request: X-API-Key, or Authorization: Bearer.
func credential(r *http.Request) string {
	if k := strings.TrimSpace(r.Header.Get("X-API-Key")); k != "" {
		return k
	}
	if scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " "); ok && strings.EqualFold(scheme, "Bearer") {
		return strings.TrimSpace(tok)
	}
	return ""
}

// authenticate returns the id of the API key of r.
func (s *Server) authenticate(r *http.Request) (string, error) {
	cred := credential(r)
	if cred == "" {
		return "", provider.Errorf(provider.CodeUnauthorized, "missing API key: send X-API-Key")
	}
	k, err := s.st.AuthenticateKey(r.Context(), cred)
	if err != nil {
		if provider.CodeOf(err) == provider.CodeUnauthorized {
			return "", provider.Errorf(provider.CodeUnauthorized, "invalid API key")
		}
		return "", err
	}
	return k.ID, nil
}

// apiError is E2B's error body.
type apiError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// writeError answers with E2B's error body; the status comes from the error's code.
func writeError(w http.ResponseWriter, err error) {
	status := httpcode.StatusOf(err)
	writeJSON(w, status, apiError{Code: status, Message: provider.StripCredentials(message(err))})
}

// message is an error's text without the "op: code: " prefixes of provider.Error, as the
// native API sends it.
func message(err error) string { return provider.MessageOf(err) }

// writeJSON answers with status and v as JSON.
func writeJSON(w http.ResponseWriter, status int, v any) {
	httpjson.Write(w, status, v, `{"code":500,"message":"encoding the response failed"}`)
}
