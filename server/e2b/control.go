package e2b

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tupper-dev/tupper/internal/httpdeadline"
	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/sandbox"
	"github.com/tupper-dev/tupper/server/lifecycle"
	"github.com/tupper-dev/tupper/store"
)

// Default lifetimes of E2B's API, in seconds.
const (
	defaultTimeoutV1 = 15
	defaultTimeoutV2 = 300
	connectTimeout   = 300
	maxTimeout       = 365 * 24 * 3600
)

// HeaderMetadataExact, "true" on a create, records the metadata exactly as given. Without it
// the server adds sandbox-sdk=true, the label of sandboxes made through the SDK (which the
// server uses), so `tupper ls` lists them (E2B's API does not show it); providers/e2b sends
// it so that a raw provider.Create stays without that label, as through the native API's
// labelsExact. E2B's own API ignores the header.
const HeaderMetadataExact = "Tupper-Metadata-Exact"

// idPattern is the shape of an E2B sandbox id.
var idPattern = lowerAlnum{}

// lowerAlnum matches ^[a-z0-9]+$ without a regexp compiled at start-up.
type lowerAlnum struct{}

func (lowerAlnum) MatchString(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('a' <= c && c <= 'z' || '0' <= c && c <= '9') {
			return false
		}
	}
	return s != ""
}

func (s *Server) controlMux() *router {
	m := &router{}
	h := func(pattern string, fn func(w http.ResponseWriter, r *http.Request, keyID string)) {
		m.handle(pattern, func(w http.ResponseWriter, r *http.Request) {
			keyID, err := s.authenticate(r)
			if err != nil {
				writeError(w, err)
				return
			}
			httpdeadline.LiftRead(w)
			s.recordKey(pattern, keyID, w, r, func(w http.ResponseWriter, r *http.Request) { fn(w, r, keyID) })
		})
	}
	m.handle("GET /health", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"message": "Health check successful"})
	})
	h("POST /sandboxes", func(w http.ResponseWriter, r *http.Request, k string) { s.create(w, r, k, defaultTimeoutV1) })
	h("POST /v2/sandboxes", func(w http.ResponseWriter, r *http.Request, k string) { s.create(w, r, k, defaultTimeoutV2) })
	h("GET /sandboxes", s.listV1)
	h("GET /v2/sandboxes", s.listV2)
	h("GET /sandboxes/{sandboxID}", s.get)
	h("DELETE /sandboxes/{sandboxID}", s.kill)
	h("POST /sandboxes/{sandboxID}/connect", s.connect)
	h("POST /v2/sandboxes/{sandboxID}/connect", s.connect)
	h("POST /sandboxes/{sandboxID}/timeout", s.setTimeout)
	h("PUT /sandboxes/{sandboxID}/network", s.updateNetwork)
	h("POST /sandboxes/{sandboxID}/refreshes", s.refresh)
	h("POST /sandboxes/{sandboxID}/pause", s.pause)
	h("POST /sandboxes/{sandboxID}/resume", s.resume)
	h("GET /sandboxes/{sandboxID}/metrics", s.metrics)
	h("GET /sandboxes/{sandboxID}/logs", s.logsV1)
	h("GET /v2/sandboxes/{sandboxID}/logs", s.logsV2)
	h("POST /sandboxes/{sandboxID}/snapshots", s.snapshot)
	h("GET /snapshots", s.listSnapshots)
	h("DELETE /templates/{templateID}", s.deleteTemplate)
	h("POST /sandboxes/{sandboxID}/fork", s.fork)
	h("GET /templates/aliases/{alias}", s.templateAlias)
	s.templateRoutes(m, h)
	s.volumeRoutes(m, h)
	s.secretRoutes(h)
	for _, op := range notServed {
		h(op.pattern, func(w http.ResponseWriter, r *http.Request, _ string) {
			writeError(w, unsupported("%s is not supported by tupper%s", r.Pattern, op.why))
		})
	}
	return m
}

// Why the server does not serve parts of E2B's API.
const (
	whyTemplates = ": a sandbox's templateID names a template of the server's provider (\"base\" is its default); templates are built with the Template SDK (v2 and v3 builds) and listed and deleted with the native API (/v1/templates)"
	whyAccount   = ": manage the server's API keys with `tupper keys`"
	whyAdmin     = ": E2B's admin API is not served"
)

// notServed are the operations of E2B's API (its openapi.yml, and the volume content paths
// of its SDKs) the server does not serve: they answer 501 with E2B's error body, naming
// E2B's pattern, so an SDK raises a clear error. Listing them also claims their areas
// (/volumes, /teams, …) for E2B's API (router.covers): any other path there answers 404,
// also with E2B's error body.
var notServed = []struct{ pattern, why string }{
	{"GET /sandboxes/metrics", ""},

	{"POST /templates", whyTemplates},
	{"GET /templates/{templateID}", whyTemplates},
	{"POST /templates/{templateID}", whyTemplates},
	{"PATCH /templates/{templateID}", whyTemplates},
	{"PATCH /v2/templates/{templateID}", whyTemplates},
	{"POST /templates/{templateID}/builds/{buildID}", whyTemplates},

	{"GET /teams", whyAccount},
	{"GET /teams/{teamID}/metrics", whyAccount},
	{"GET /teams/{teamID}/metrics/max", whyAccount},
	{"GET /api-keys", whyAccount},
	{"POST /api-keys", whyAccount},
	{"PATCH /api-keys/{apiKeyID}", whyAccount},
	{"DELETE /api-keys/{apiKeyID}", whyAccount},
	{"POST /access-tokens", whyAccount},
	{"DELETE /access-tokens/{accessTokenID}", whyAccount},

	{"GET /nodes", whyAdmin},
	{"GET /nodes/{nodeID}", whyAdmin},
	{"POST /nodes/{nodeID}", whyAdmin},
	{"POST /admin/teams/{teamID}/sandboxes/kill", whyAdmin},
	{"GET /admin/sandboxes/running-counts", whyAdmin},
	{"POST /admin/teams/{teamID}/builds/cancel", whyAdmin},
	{"POST /admin/teams/{teamID}/api-keys", whyAdmin},
	{"DELETE /admin/teams/{teamID}/api-keys/{apiKeyID}", whyAdmin},
}

// templateAlias is GET /templates/aliases/{alias}: E2B's TemplateAliasResponse for "base",
// the alias of the provider's default template, the only alias the server knows. Other
// template ids are provider template names (or snapshot ids), which are not aliases:
// 404.
func (s *Server) templateAlias(w http.ResponseWriter, r *http.Request, _ string) {
	alias := r.PathValue("alias")
	if alias == baseTemplate {
		writeJSON(w, http.StatusOK, map[string]any{"templateID": baseTemplate, "public": true})
		return
	}
	// The provider's own templates are aliases of themselves.
	t, err := sandbox.InspectTemplate(r.Context(), s.prov, alias)
	if err == nil {
		writeJSON(w, http.StatusOK, map[string]any{"templateID": t.Name, "public": false})
		return
	}
	if provider.CodeOf(err) != provider.CodeNotFound {
		writeError(w, err)
		return
	}
	writeError(w, provider.Errorf(provider.CodeNotFound, "template alias %q not found: the aliases are %q and the provider's templates", alias, baseTemplate))
}

// hasTemplate reports whether the provider has a template called name, made (not a
// built-in one it would make on first use): E2B's "base" is the provider's own "base" once it
// exists (the local provider's: Python, Node.js, git, curl and sudo, as E2B's), else the
// provider's default template, so that a create never waits minutes for a build.
func (s *Server) hasTemplate(ctx context.Context, name string) bool {
	t, err := sandbox.InspectTemplate(ctx, s.prov, name)
	return err == nil && t.Name == name && t.Layers > 0
}

func unsupported(format string, args ...any) error {
	return provider.Errorf(provider.CodeUnsupported, format, args...)
}

// options turns a create request of API key keyID into sandbox options.
func (s *Server) options(ctx context.Context, req newSandbox, defTimeout int64, keyID string) (sandbox.CreateOptions, error) {
	var opts sandbox.CreateOptions
	switch {
	case isSet(req.IAM):
		return opts, unsupported("iam is not supported")
	}
	timeout := defTimeout
	if req.Timeout != nil {
		timeout = *req.Timeout
	}
	if timeout < 0 || timeout > maxTimeout {
		return opts, provider.Errorf(provider.CodeInvalidArgument, "timeout must be between 0 and %d seconds", maxTimeout)
	}
	if timeout == 0 {
		timeout = defTimeout
	}
	d := time.Duration(timeout) * time.Second
	for k := range req.Metadata {
		if strings.HasPrefix(k, reservedPrefix) {
			return opts, provider.Errorf(provider.CodeInvalidArgument, "metadata key %q: keys beginning with %q are reserved for the server", k, reservedPrefix)
		}
	}
	opts.Labels = maps.Clone(req.Metadata)
	// The SDK on the server sets its own label on the provider's sandbox.
	delete(opts.Labels, sandbox.SDKLabel)
	opts.Env = req.EnvVars
	for _, m := range req.VolumeMounts {
		opts.Volumes = append(opts.Volumes, provider.VolumeMount{Name: m.Name, Path: m.Path})
	}
	switch {
	case req.TemplateID == codeInterpreterDefault:
		opts.Template = codeInterpreterTemplate
	case req.TemplateID != baseTemplate && req.TemplateID != mcpTemplate:
		opts.Template = req.TemplateID
	case s.hasTemplate(ctx, baseTemplate):
		opts.Template = baseTemplate
	}
	if hasMCP(req.MCP) {
		if _, err := mcpRefusal(req.MCP); err != nil {
			return opts, err
		}
	}
	// On a provider that cannot enforce it the server's reaper does (lifecycle.CreateOptions).
	opts.Timeout = d
	var allowOut, denyOut []string
	var egressProxy *provider.EgressProxy
	if n := req.Network; n != nil {
		var err error
		if egressProxy, err = egressProxyOf(n.EgressProxy); err != nil {
			return opts, err
		}
		allowOut, denyOut = n.AllowOut, n.DenyOut
		if n.MaskRequestHost != nil {
			if err := validMaskHost(*n.MaskRequestHost); err != nil {
				return opts, err
			}
		}
		// Header transforms: bound secrets that set headers, outside the sandbox.
		if opts.BoundSecrets, err = s.ruleHeaders(ctx, keyID, n.Rules); err != nil {
			return opts, err
		}
	}
	if req.AllowInternetAccess != nil && !*req.AllowInternetAccess {
		// The same as denyOut 0.0.0.0/0, E2B says.
		denyOut = append(slices.Clone(denyOut), allTraffic)
	}
	var err error
	if opts.Network, err = networkFromE2B(allowOut, denyOut); err != nil {
		return opts, err
	}
	opts.Network = withEgressProxy(opts.Network, egressProxy)
	return opts, opts.Validate()
}

// maskPort is what E2B replaces in network.maskRequestHost with the port a request is for.
const maskPort = "${PORT}"

// validMaskHost checks network.maskRequestHost as E2B does: with ${PORT} as a port, a host
// name (ASCII letters, digits, '-', '_' and '.') or an address, with or without a :port.
func validMaskHost(mask string) error {
	bad := provider.Errorf(provider.CodeInvalidArgument, "mask request host is not valid: %s", mask)
	h := strings.ReplaceAll(mask, maskPort, "1")
	if strings.Contains(h, ":") && !strings.HasSuffix(h, "]") {
		host, port, err := net.SplitHostPort(h)
		if err != nil {
			return bad
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return bad
		}
		h = host
	}
	if ip, err := netip.ParseAddr(strings.Trim(h, "[]")); err == nil && ip.IsValid() {
		return nil
	}
	if h == "" || len(h) > 253 || strings.Trim(h, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") != "" {
		return bad
	}
	return nil
}

// MaskedHost is the Host header that requests to port of sandbox id carry into it: the
// sandbox's network.maskRequestHost, ${PORT} replaced by the port, as E2B's proxy sends it
// (with the client's host in X-Forwarded-Host); "" for a sandbox created without one.
func (s *Server) MaskedHost(ctx context.Context, id string, port int) string {
	rec, err := s.st.Sandbox(ctx, id)
	if err != nil || rec.Labels[labelMaskHost] == "" {
		return ""
	}
	return strings.ReplaceAll(rec.Labels[labelMaskHost], maskPort, strconv.Itoa(port))
}

// egressProxyOf parses E2B's SandboxEgressProxyConfig (nil when absent or null): a SOCKS5
// proxy, its form checked (provider.EgressProxy.Validate); where its address leads, the
// provider checks before it makes anything.
func egressProxyOf(raw json.RawMessage) (*provider.EgressProxy, error) {
	if !isSet(raw) {
		return nil, nil
	}
	var px provider.EgressProxy
	if err := json.Unmarshal(raw, &px); err != nil {
		return nil, provider.Errorf(provider.CodeInvalidArgument, "network.egressProxy is an object {address, username, password} of strings")
	}
	if px.Address == "" {
		return nil, provider.Errorf(provider.CodeInvalidArgument, "network.egressProxy.address is required (host:port)")
	}
	if err := px.Validate(); err != nil {
		return nil, err
	}
	return &px, nil
}

// withEgressProxy is n with its allowed TCP tunnelled through px: a policy, so network all
// becomes allow with no lists, and none allow with everything denied (so that a later
// update can open it, still through the proxy).
func withEgressProxy(n sandbox.Network, px *provider.EgressProxy) sandbox.Network {
	if px == nil {
		return n
	}
	switch n.Normalized().Mode {
	case provider.NetworkAll:
		n = sandbox.Network{Mode: provider.NetworkAllow}
	case provider.NetworkNone:
		n = sandbox.Network{Mode: provider.NetworkAllow, Deny: []string{allTraffic}}
	}
	n.Proxy = px
	return n
}

// allTraffic is E2B's denyOut entry for everything.
const allTraffic = "0.0.0.0/0"

// networkFromE2B maps E2B's egress lists onto a policy. In E2B an allowOut entry wins over
// a denyOut one, where in ours deny wins; the two agree in every case mapped here:
//
//   - no denyOut: everything is allowed (allowOut adds nothing);
//   - denyOut holding 0.0.0.0/0: only allowOut is allowed (the other denyOut entries could
//     only take back what allowOut gives, which E2B does not let them), none without it;
//   - other denyOut: everything but denyOut, when no allowOut entry lies inside a denyOut
//     range (then allowOut adds nothing); an exception carved out of a denied range has no
//     equivalent and is refused (unsupported).
func networkFromE2B(allowOut, denyOut []string) (sandbox.Network, error) {
	switch {
	case len(denyOut) == 0:
		return sandbox.NetworkAll, nil
	case slices.Contains(denyOut, allTraffic):
		if len(allowOut) == 0 {
			return sandbox.NetworkNone, nil
		}
		return sandbox.NetworkAllowList(allowOut...), nil
	}
	for _, a := range allowOut {
		ap, err := netip.ParsePrefix(a)
		if err != nil {
			addr, aerr := netip.ParseAddr(a)
			if aerr != nil {
				return sandbox.Network{}, unsupported("network.allowOut names a host (%s) with a denyOut other than 0.0.0.0/0: an exception to a deny list is supported only for addresses", a)
			}
			ap = netip.PrefixFrom(addr, addr.BitLen())
		}
		for _, d := range denyOut {
			dp, err := netip.ParsePrefix(d)
			if err != nil {
				addr, aerr := netip.ParseAddr(d)
				if aerr != nil {
					continue // the SDK's validation reports it
				}
				dp = netip.PrefixFrom(addr, addr.BitLen())
			}
			if dp.Overlaps(ap) {
				return sandbox.Network{}, unsupported("network.allowOut %s lies inside denyOut %s: an exception carved out of a denied range is not supported", a, d)
			}
		}
	}
	return sandbox.Network{Mode: provider.NetworkAllow, Deny: denyOut}, nil
}

func isSet(raw json.RawMessage) bool {
	s := strings.TrimSpace(string(raw))
	return s != "" && s != "null" && s != "{}" && s != "[]"
}

// lifecycleOf maps E2B's autoPause, autoPauseMemory and autoResume onto the lifecycle's
// OnTimeout and AutoResume (which check them against each other and the provider):
// autoPauseMemory false is a pause that keeps only the files (OnTimeoutPauseCold), which
// autoResume cannot go with.
func lifecycleOf(req newSandbox) (onTimeout string, autoResume bool) {
	onTimeout = store.OnTimeoutKill
	if req.AutoPause != nil && *req.AutoPause {
		onTimeout = store.OnTimeoutPause
		if req.AutoPauseMemory != nil && !*req.AutoPauseMemory {
			onTimeout = store.OnTimeoutPauseCold
		}
	}
	return onTimeout, isTrue(req.AutoResume)
}

// isTrue reports whether raw is true or {"enabled": true}.
func isTrue(raw json.RawMessage) bool {
	var b bool
	if json.Unmarshal(raw, &b) == nil {
		return b
	}
	var o struct {
		Enabled bool `json:"enabled"`
	}
	return json.Unmarshal(raw, &o) == nil && o.Enabled
}

func (s *Server) create(w http.ResponseWriter, r *http.Request, keyID string, defTimeout int64) {
	httpdeadline.Lift(w) // a template or a snapshot may take a while to start from
	var req newSandbox
	if err := decodeBody(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	if req.TemplateID == "" {
		writeError(w, provider.Errorf(provider.CodeInvalidArgument, "templateID is required"))
		return
	}
	opts, err := s.options(r.Context(), req, defTimeout, keyID)
	if err != nil {
		writeError(w, err)
		return
	}
	onTimeout, autoResume := lifecycleOf(req)
	labels := maps.Clone(req.Metadata)
	if labels == nil {
		labels = map[string]string{}
	}
	if _, set := labels[sandbox.SDKLabel]; !set && r.Header.Get(HeaderMetadataExact) != "true" {
		labels[sandbox.SDKLabel] = "true"
		labels[labelSDKAdded] = "true"
	}
	if n := req.Network; n != nil && n.AllowPublicTraffic != nil {
		// Absent, the ports need a credential (docs/e2b.md says why); asked for either
		// way, they are as E2B's.
		labels[labelPublicTraffic] = strconv.FormatBool(*n.AllowPublicTraffic)
	}
	if n := req.Network; n != nil && n.MaskRequestHost != nil && *n.MaskRequestHost != "" {
		labels[labelMaskHost] = *n.MaskRequestHost
	}
	if hasMCP(req.MCP) {
		labels[labelMCP] = "true"
	}
	cr, err := s.lc.Create(r.Context(), lifecycle.CreateOptions{
		Sandbox: opts, KeyID: keyID, Labels: labels, TemplateMayBeSnapshot: true,
		Prepare: func(ctx context.Context, b *sandbox.Sandbox) error {
			if !idPattern.MatchString(b.ID) {
				return provider.Errorf(provider.CodeUnsupported, "provider %s makes sandbox ids E2B clients cannot use", s.prov.Name())
			}
			if hasMCP(req.MCP) {
				refusal, _ := mcpRefusal(req.MCP) // checked by options
				return installMCPGateway(ctx, b, refusal)
			}
			return nil
		},
		Event:     map[string]any{"api": "e2b"},
		OnTimeout: onTimeout, AutoResume: autoResume,
	})
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, s.sandboxJSON(cr.Record.ID, cr.Info.Template, cr.Record.Labels))
}

// lookup returns a live sandbox, or CodeNotFound with E2B's message.
func (s *Server) lookup(ctx context.Context, id string) (lifecycle.Box, error) {
	box, err := s.lc.Get(ctx, id)
	return box, e2bError(id, err)
}

// e2bError is err with the lifecycle's plain message when it says the sandbox is not found
// (the one E2B's SDKs expect, without the cause the native API may add).
func e2bError(id string, err error) error {
	if errors.Is(err, provider.CodeNotFound) {
		return lifecycle.NotFound(id)
	}
	return err
}

func (s *Server) get(w http.ResponseWriter, r *http.Request, _ string) {
	box, err := s.lookup(r.Context(), r.PathValue("sandboxID"))
	if err != nil {
		writeError(w, err)
		return
	}
	d := sandboxDetail{
		listedSandbox: s.listed(box.Record, box.Info), EnvdAccessToken: s.envdToken(box.Record.ID), Domain: s.domain(),
		Lifecycle: &sandboxLifecycle{OnTimeout: e2bOnTimeout(box.Record.OnTimeout), AutoResume: box.Record.AutoResume},
	}
	if mask := box.Record.Labels[labelMaskHost]; private(box.Record.Labels) || mask != "" {
		d.Network = &networkDetail{AllowPublicTraffic: !private(box.Record.Labels), MaskRequestHost: mask}
	}
	// The egress proxy in force, without its password, from providers that report it.
	if b, err := s.lc.Peek(r.Context(), box.Record.ID); err == nil {
		if n, err := b.Network(r.Context()); err == nil && n.Proxy != nil {
			if d.Network == nil {
				d.Network = &networkDetail{AllowPublicTraffic: !private(box.Record.Labels)}
			}
			d.Network.EgressProxy = n.Proxy.Redacted()
		}
	}
	writeJSON(w, http.StatusOK, d)
}

// e2bOnTimeout is the lifecycle's onTimeout as E2B's SandboxDetail says it: kill or pause
// (a pause without memory is a pause there too).
func e2bOnTimeout(onTimeout string) string {
	if store.PausesAtTimeout(onTimeout) {
		return store.OnTimeoutPause
	}
	return store.OnTimeoutKill
}

// kill is DELETE /sandboxes/{id}: 404 for a sandbox that had already ended.
func (s *Server) kill(w http.ResponseWriter, r *http.Request, keyID string) {
	id := r.PathValue("sandboxID")
	if err := s.lc.Destroy(r.Context(), id, keyID); err != nil {
		writeError(w, e2bError(id, err))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func timeoutBody(w http.ResponseWriter, r *http.Request, field string, required bool) (time.Duration, bool, error) {
	var body map[string]json.RawMessage
	if err := decodeBody(w, r, &body); err != nil {
		return 0, false, err
	}
	raw, ok := body[field]
	if !ok || string(raw) == "null" {
		if required {
			return 0, false, provider.Errorf(provider.CodeInvalidArgument, "%s is required", field)
		}
		return 0, false, nil
	}
	var secs int64
	if err := json.Unmarshal(raw, &secs); err != nil || secs < 0 || secs > maxTimeout {
		return 0, false, provider.Errorf(provider.CodeInvalidArgument, "%s must be a number of seconds between 0 and %d", field, maxTimeout)
	}
	return time.Duration(secs) * time.Second, true, nil
}

// timeoutOr is the body's optional timeout field, or def when it is absent or 0; a bad one
// is answered, and ok is false.
func timeoutOr(w http.ResponseWriter, r *http.Request, field string, def time.Duration) (d time.Duration, ok bool) {
	d, given, err := timeoutBody(w, r, field, false)
	if err != nil {
		writeError(w, err)
		return 0, false
	}
	if !given || d == 0 {
		d = def
	}
	return d, true
}

func (s *Server) setTimeout(w http.ResponseWriter, r *http.Request, _ string) {
	d, _, err := timeoutBody(w, r, "timeout", true)
	if err != nil {
		writeError(w, err)
		return
	}
	if d <= 0 {
		writeError(w, provider.Errorf(provider.CodeInvalidArgument, "timeout must be positive"))
		return
	}
	id := r.PathValue("sandboxID")
	if _, err := s.lc.SetTimeout(r.Context(), id, d); err != nil {
		writeError(w, e2bError(id, err))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// updateNetwork is E2B's SandboxNetworkUpdateConfig: it replaces the egress rules, an
// omitted field cleared.
func (s *Server) updateNetwork(w http.ResponseWriter, r *http.Request, _ string) {
	var req struct {
		AllowInternetAccess *bool           `json:"allow_internet_access"`
		AllowOut            []string        `json:"allowOut"`
		DenyOut             []string        `json:"denyOut"`
		EgressProxy         json.RawMessage `json:"egressProxy"`
		Rules               json.RawMessage `json:"rules"`
	}
	if err := decodeBody(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	if isSet(req.Rules) {
		writeError(w, unsupported("network rules are set when a sandbox is created; changing them on a running sandbox is not supported"))
		return
	}
	px, err := egressProxyOf(req.EgressProxy)
	if err != nil {
		writeError(w, err)
		return
	}
	deny := req.DenyOut
	if req.AllowInternetAccess != nil && !*req.AllowInternetAccess {
		deny = append(slices.Clone(deny), allTraffic)
	}
	n, err := networkFromE2B(req.AllowOut, deny)
	if err != nil {
		writeError(w, err)
		return
	}
	// An update without egressProxy stops tunnelling, as E2B's does.
	n = withEgressProxy(n, px)
	id := r.PathValue("sandboxID")
	b, err := s.lc.Handle(r.Context(), id)
	if err == nil {
		err = b.SetNetwork(r.Context(), n)
	}
	if err != nil {
		writeError(w, e2bError(id, err))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// refresh is the old keep-alive: extend the lifetime by duration seconds when that is later.
func (s *Server) refresh(w http.ResponseWriter, r *http.Request, _ string) {
	d, ok := timeoutOr(w, r, "duration", defaultTimeoutV2*time.Second)
	if !ok {
		return
	}
	id := r.PathValue("sandboxID")
	if _, err := s.lc.ExtendTimeout(r.Context(), id, d); err != nil {
		writeError(w, e2bError(id, err))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// connect resumes a paused sandbox (201) and extends its lifetime to d from now when that
// is later, as E2B does.
func (s *Server) connect(w http.ResponseWriter, r *http.Request, _ string) {
	d, ok := timeoutOr(w, r, "timeout", connectTimeout*time.Second)
	if !ok {
		return
	}
	s.resumeAndExtend(w, r, d, false)
}

// resumeAndExtend resumes the sandbox when it is paused (else CodeConflict when mustResume),
// extends its lifetime to d and answers with the sandbox: 201 when resumed.
func (s *Server) resumeAndExtend(w http.ResponseWriter, r *http.Request, d time.Duration, mustResume bool) {
	ctx := r.Context()
	id := r.PathValue("sandboxID")
	box, err := s.lookup(ctx, id)
	if err != nil {
		writeError(w, err)
		return
	}
	status := http.StatusOK
	if box.Info.State == provider.StatePaused || mustResume {
		switch err := s.lc.Resume(ctx, id); {
		case err == nil:
			s.proxy.closeIdle()
			status = http.StatusCreated
		case !mustResume && errors.Is(err, provider.CodeConflict):
			// Running by now (another connect resumed it first): what a connect asks for.
		default:
			writeError(w, e2bError(id, err))
			return
		}
	}
	if _, err := s.lc.ExtendTimeout(ctx, id, d); err != nil {
		writeError(w, e2bError(id, err))
		return
	}
	writeJSON(w, status, s.sandboxJSON(id, box.Info.Template, box.Record.Labels))
}

// pause is POST /sandboxes/{id}/pause: 204, 409 when paused already. A pause keeps the
// sandbox's memory (where the provider has "pause-frees-memory", on disk); {"memory":
// false} keeps only its files (the provider's "pause-cold", else 501), and its resume
// (connect) boots it again.
func (s *Server) pause(w http.ResponseWriter, r *http.Request, _ string) {
	var req struct {
		Memory *bool `json:"memory"`
	}
	if err := decodeBody(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	id := r.PathValue("sandboxID")
	opts := sandbox.PauseOptions{DropMemory: req.Memory != nil && !*req.Memory}
	if err := s.lc.Pause(r.Context(), id, opts); err != nil {
		writeError(w, e2bError(id, err))
		return
	}
	s.proxy.closeIdle()
	w.WriteHeader(http.StatusNoContent)
}

// resume is E2B's deprecated POST /sandboxes/{id}/resume: 201 Sandbox, 409 when running.
func (s *Server) resume(w http.ResponseWriter, r *http.Request, _ string) {
	d, ok := timeoutOr(w, r, "timeout", defaultTimeoutV1*time.Second)
	if !ok {
		return
	}
	s.resumeAndExtend(w, r, d, true)
}

// live lists the live sandboxes with ids E2B clients can use.
func (s *Server) live(ctx context.Context) ([]listedSandbox, error) {
	list, err := s.lc.List(ctx, lifecycle.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := []listedSandbox{}
	for _, l := range list {
		if idPattern.MatchString(l.Record.ID) {
			out = append(out, s.listed(l.Record, l.Info))
		}
	}
	return out, nil
}

// metadataFilter parses E2B's metadata query: URL-encoded key=value pairs joined by &.
func metadataFilter(q url.Values) (map[string]string, error) {
	out := map[string]string{}
	for _, raw := range q["metadata"] {
		pairs, err := url.ParseQuery(raw)
		if err != nil {
			return nil, provider.Errorf(provider.CodeInvalidArgument, "metadata filter %q: %v", raw, err)
		}
		for k, v := range pairs {
			out[k] = v[len(v)-1]
		}
	}
	return out, nil
}

func matches(sb listedSandbox, md map[string]string) bool {
	return provider.ListFilter{Labels: md}.Matches(sb.Metadata)
}

// listV1 is GET /sandboxes: the running sandboxes, filtered by metadata.
func (s *Server) listV1(w http.ResponseWriter, r *http.Request, _ string) {
	md, err := metadataFilter(r.URL.Query())
	if err != nil {
		writeError(w, err)
		return
	}
	all, err := s.live(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	out := []listedSandbox{}
	for _, sb := range all {
		if sb.State == "running" && matches(sb, md) {
			out = append(out, sb)
		}
	}
	// Newest first, as E2B lists.
	slices.SortFunc(out, func(a, b listedSandbox) int { return pageKeyOf(b).compare(pageKeyOf(a)) })
	writeJSON(w, http.StatusOK, out)
}

// listV2 is GET /v2/sandboxes with filters and X-Next-Token paging.
func (s *Server) listV2(w http.ResponseWriter, r *http.Request, _ string) {
	q := r.URL.Query()
	md, err := metadataFilter(q)
	if err != nil {
		writeError(w, err)
		return
	}
	states := map[string]bool{}
	for _, v := range q["state"] {
		for st := range strings.SplitSeq(v, ",") {
			if st = strings.TrimSpace(st); st != "" {
				if st != "running" && st != "paused" {
					writeError(w, provider.Errorf(provider.CodeInvalidArgument, "state %q: want running or paused", st))
					return
				}
				states[st] = true
			}
		}
	}
	// startedAfter is "at or after": a client may pass back a startedAt it was given.
	var after time.Time
	if v := q.Get("startedAfter"); v != "" {
		if after, err = time.Parse(time.RFC3339Nano, v); err != nil {
			writeError(w, provider.Errorf(provider.CodeInvalidArgument, "startedAfter %q is not an RFC 3339 time", v))
			return
		}
	}
	// Newest first unless asked otherwise, as E2B lists.
	desc := true
	switch q.Get("order") {
	case "", "desc":
	case "asc":
		desc = false
	default:
		writeError(w, provider.Errorf(provider.CodeInvalidArgument, "order must be asc or desc"))
		return
	}
	limit, cursor, err := pageOf(q)
	if err != nil {
		writeError(w, err)
		return
	}
	all, err := s.live(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	tmpl := q.Get("template")
	var sel []listedSandbox
	for _, sb := range all {
		if (len(states) > 0 && !states[sb.State]) || !matches(sb, md) ||
			(!after.IsZero() && sb.started.Before(after)) || (tmpl != "" && sb.TemplateID != tmpl) {
			continue
		}
		sel = append(sel, sb)
	}
	slices.SortFunc(sel, func(a, b listedSandbox) int {
		c := pageKeyOf(a).compare(pageKeyOf(b))
		if desc {
			c = -c
		}
		return c
	})
	if cursor != nil {
		i := 0
		for i < len(sel) {
			c := pageKeyOf(sel[i]).compare(*cursor)
			if (!desc && c > 0) || (desc && c < 0) {
				break
			}
			i++
		}
		sel = sel[i:]
	}
	if len(sel) > limit {
		sel = sel[:limit]
		w.Header().Set("X-Next-Token", pageKeyOf(sel[limit-1]).String())
	}
	if sel == nil {
		sel = []listedSandbox{}
	}
	writeJSON(w, http.StatusOK, sel)
}

// pageKey is the position of a sandbox in a listing: its start time, then its id.
type pageKey struct {
	at int64 // unix nanoseconds
	id string
}

func pageKeyOf(sb listedSandbox) pageKey { return pageKey{sb.StartedAt.UnixNano(), sb.SandboxID} }

func (k pageKey) compare(o pageKey) int {
	switch {
	case k.at < o.at:
		return -1
	case k.at > o.at:
		return 1
	}
	return strings.Compare(k.id, o.id)
}

func (k pageKey) String() string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(k.at, 10) + "." + k.id))
}

// pageOf reads a list's page from its query: limit (1 to 100, default 100) and nextToken
// (the cursor a previous page handed out; nil for the first page).
func pageOf(q url.Values) (int, *pageKey, error) {
	limit := 100
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			return 0, nil, provider.Errorf(provider.CodeInvalidArgument, "limit must be between 1 and 100")
		}
		limit = n
	}
	if v := q.Get("nextToken"); v != "" {
		k, err := parsePageKey(v)
		if err != nil {
			return 0, nil, err
		}
		return limit, &k, nil
	}
	return limit, nil, nil
}

func parsePageKey(s string) (pageKey, error) {
	bad := provider.Errorf(provider.CodeInvalidArgument, "nextToken is not valid")
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return pageKey{}, bad
	}
	at, id, ok := strings.Cut(string(b), ".")
	n, err := strconv.ParseInt(at, 10, 64)
	if !ok || err != nil || !idPattern.MatchString(id) {
		return pageKey{}, bad
	}
	return pageKey{n, id}, nil
}
