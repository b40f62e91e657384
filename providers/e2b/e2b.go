// Package e2b is the provider that runs Tupper's sandboxes on any E2B-compatible API: E2B's
// cloud, or a tupper server (`tupper serve`, whose E2B API is package server/e2b).
//
//	prov, err := e2b.New(e2b.Config{APIKey: os.Getenv("E2B_API_KEY")})
//	box, err := sandbox.Create(ctx, prov, sandbox.CreateOptions{Timeout: 10 * time.Minute})
//
// Importing the package registers it as "e2b", configured from E2B_API_KEY, E2B_API_URL,
// E2B_SANDBOX_URL and E2B_DOMAIN, with the meaning E2B's SDKs give them. It is never picked
// implicitly: ask for it by name.
//
// The control plane is E2B's REST API with X-API-Key (create, get, list, kill, timeout,
// pause, connect). The data plane is envd's, spoken by the one client of that protocol,
// agent/client, through provider/agentinst's Envd (shared with the providers whose
// sandboxes run Tupper's agent): the process and filesystem Connect services and /files,
// with E2B's routing headers and the sandbox's access token. Exec runs /bin/sh -c through
// Process.Start, streaming stdout and stderr and feeding stdin with SendInput and
// CloseStdin; when ctx ends first, the process group is killed with SendSignal. Files go up
// as octet streams (envd ≥ 0.5.7) and down as raw bytes. FileSystem maps to Stat, ListDir,
// Remove, MakeDir and Move.
//
// A sandbox's key and labels are kept in its E2B metadata (the key under KeyMetadata). E2B
// sandboxes always have a lifetime: a sandbox created without a timeout gets
// Config.DefaultTimeout. Commands run as root unless ExecRequest.User says otherwise (E2B's
// SDKs default to "user").
//
// A *Provider and its instances may be used from many goroutines at once.
package e2b

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/provider/httpcode"
)

// Name is the registry name.
const Name = "e2b"

// KeyMetadata is the metadata entry that holds a sandbox's get-or-create key.
const KeyMetadata = "tupper-key"

func init() {
	provider.Register(provider.Registration{
		Name: Name,
		Factory: func() (provider.Provider, error) {
			return New(Config{
				APIKey: os.Getenv("E2B_API_KEY"), APIURL: os.Getenv("E2B_API_URL"),
				SandboxURL: os.Getenv("E2B_SANDBOX_URL"), Domain: os.Getenv("E2B_DOMAIN"),
			})
		},
		Install: "an E2B API: set E2B_API_KEY (and E2B_API_URL, E2B_SANDBOX_URL for tupper serve or another self-hosted API)",
	})
}

// Config configures the provider. The zero value of every field but APIKey is E2B's default.
type Config struct {
	// APIKey is sent as X-API-Key.
	APIKey string
	// Domain is E2B's domain; "" is e2b.app.
	Domain string
	// APIURL is the control plane; "" is https://api.{Domain}.
	APIURL string
	// SandboxURL, when set, is the envd base URL of every sandbox (tupper serve: the server's
	// URL); "" is https://49983-{id}.{domain of the sandbox}.
	SandboxURL string
	// Template is the template of a sandbox created without one; "" is "base".
	Template string
	// DefaultTimeout is the lifetime of a sandbox created without a timeout; 0 is one hour.
	DefaultTimeout time.Duration
	// Pause says the API pauses and resumes sandboxes (E2B's
	// cloud does; tupper serve does when its provider can).
	Pause bool
	// HTTPClient sends every request; nil is a client without an overall timeout (streams
	// last as long as their command; every call is bounded by its ctx).
	HTTPClient *http.Client
}

// Provider drives sandboxes through an E2B-compatible API.
type Provider struct {
	cfg  Config
	hc   *http.Client
	caps provider.Capabilities
}

var (
	_ provider.Provider   = (*Provider)(nil)
	_ provider.Prototyper = (*Provider)(nil)
	_ provider.Refuser    = (*Provider)(nil)
)

// New returns the provider. It makes no request: Available checks the API and the key.
func New(cfg Config) (*Provider, error) {
	if cfg.Domain == "" {
		cfg.Domain = "e2b.app"
	}
	if cfg.APIURL == "" {
		cfg.APIURL = "https://api." + cfg.Domain
	}
	cfg.APIURL = strings.TrimSuffix(cfg.APIURL, "/")
	cfg.SandboxURL = strings.TrimSuffix(cfg.SandboxURL, "/")
	for _, u := range []string{cfg.APIURL, cfg.SandboxURL} {
		if u == "" {
			continue
		}
		if p, err := url.Parse(u); err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			return nil, provider.Errorf(provider.CodeInvalidArgument, "e2b: %q is not an http(s) URL", u)
		}
	}
	if cfg.Template == "" {
		cfg.Template = "base"
	}
	if cfg.DefaultTimeout <= 0 {
		cfg.DefaultTimeout = time.Hour
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = &http.Client{}
	}
	caps := []provider.Capability{
		provider.CapShell, provider.CapTimeout, provider.CapUsers, provider.CapPersistent,
		provider.CapNetworkNone,
	}
	return &Provider{cfg: cfg, hc: hc, caps: provider.NewCapabilities(caps...)}, nil
}

// Name is "e2b".
func (p *Provider) Name() string { return Name }

// Capabilities: a shell (E2B templates are Linux images), lifetimes, users, persistence,
// and sandboxes without network (allow_internet_access: false). Pause is its sandboxes'
// provider.Pauser, refused unless configured (Refuse).
func (p *Provider) Capabilities() provider.Capabilities { return p.caps.Clone() }

// Prototype is an *Instance, for provider.CapabilitiesOf.
func (p *Provider) Prototype() provider.Instance { return (*Instance)(nil) }

// Refuse refuses pause unless Config.Pause says the API has it.
func (p *Provider) Refuse(c provider.Capability) error {
	if c == provider.CapPause && !p.cfg.Pause {
		return provider.Errorf(provider.CodeUnsupported, "e2b: pause is not configured for this API (Config.Pause): not every E2B-compatible API pauses sandboxes")
	}
	return nil
}

// Available lists one sandbox, which checks the URL and the key.
func (p *Provider) Available(ctx context.Context) error {
	if p.cfg.APIKey == "" {
		return provider.Missingf("E2B_API_KEY is not set")
	}
	err := p.call(ctx, "GET", "/v2/sandboxes?limit=1", nil, nil, "available")
	if err != nil {
		return provider.Errorf(provider.CodeUnavailable, "the E2B API at %s: %v", p.cfg.APIURL, err)
	}
	return nil
}

// apiError is E2B's error body.
type apiError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// errorFrom turns an error response into a provider error by its status.
func errorFrom(resp *http.Response, op string) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var e apiError
	msg := strings.TrimSpace(string(b))
	if json.Unmarshal(b, &e) == nil && e.Message != "" {
		msg = e.Message
	}
	if msg == "" {
		msg = resp.Status
	}
	return &provider.Error{Code: httpcode.FromStatus(resp.StatusCode), Op: op, Message: provider.StripCredentials(msg)}
}

func transportErr(ctx context.Context, op string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%s: %w", op, ctx.Err())
	}
	return &provider.Error{Code: provider.CodeUnavailable, Op: op, Message: provider.StripCredentials(err.Error()), Err: err}
}

// call does one control-plane request: in as the JSON body, out from a 2xx JSON answer.
func (p *Provider) call(ctx context.Context, method, path string, in, out any, op string) error {
	_, err := p.callStatus(ctx, method, path, in, out, op)
	return err
}

func (p *Provider) callStatus(ctx context.Context, method, path string, in, out any, op string) (*http.Response, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, provider.Errorf(provider.CodeInternal, "%s: %v", op, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, p.cfg.APIURL+path, body)
	if err != nil {
		return nil, provider.Errorf(provider.CodeInvalidArgument, "%s: %v", op, err)
	}
	req.Header.Set("X-API-Key", p.cfg.APIKey)
	// tupper serve records the metadata as given (E2B's API keeps it so anyway).
	req.Header.Set("Tupper-Metadata-Exact", "true")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := p.hc.Do(req)
	if err != nil {
		return nil, transportErr(ctx, op, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return resp, errorFrom(resp, op)
	}
	if out != nil {
		if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(out); err != nil {
			return resp, provider.Errorf(provider.CodeProvider, "%s: reading the answer: %v", op, err)
		}
	}
	return resp, nil
}

// sandboxJSON is E2B's Sandbox (create and connect) and SandboxDetail (get), merged.
type sandboxJSON struct {
	SandboxID       string            `json:"sandboxID"`
	TemplateID      string            `json:"templateID"`
	EnvdVersion     string            `json:"envdVersion"`
	EnvdAccessToken string            `json:"envdAccessToken"`
	Domain          *string           `json:"domain"`
	StartedAt       time.Time         `json:"startedAt"`
	EndAt           time.Time         `json:"endAt"`
	State           string            `json:"state"`
	Metadata        map[string]string `json:"metadata"`
}

func (s sandboxJSON) info() provider.Info {
	labels := maps.Clone(s.Metadata)
	if labels == nil {
		labels = map[string]string{}
	}
	key := labels[KeyMetadata]
	delete(labels, KeyMetadata)
	st := provider.StateRunning
	if s.State == "paused" {
		st = provider.StatePaused
	}
	end := s.EndAt
	if end.Year() >= 9999 {
		end = time.Time{}
	}
	return provider.Info{
		ID: s.SandboxID, Key: key, Labels: labels, State: st, CreatedAt: s.StartedAt,
		Template: s.TemplateID, Deadline: end,
	}
}

func seconds(d time.Duration) int64 { return int64((d + time.Second - 1) / time.Second) }

// Create makes a sandbox with POST /v2/sandboxes. The core has checked spec against the
// capabilities: sizes, idle timeouts, allow-lists and snapshots never get here.
func (p *Provider) Create(ctx context.Context, spec provider.CreateSpec) (provider.Instance, error) {
	if len(spec.BoundSecrets) > 0 {
		return nil, provider.Errorf(provider.CodeUnsupported, "e2b: bound secrets are not passed to E2B (its own secrets are set on its side)")
	}
	tmpl := spec.Template
	if tmpl == "" {
		tmpl = p.cfg.Template
	}
	timeout := spec.Timeout
	if timeout <= 0 {
		timeout = p.cfg.DefaultTimeout
	}
	md := maps.Clone(spec.Labels)
	if md == nil {
		md = map[string]string{}
	}
	if spec.Key != "" {
		md[KeyMetadata] = spec.Key
	}
	env := map[string]string{}
	maps.Copy(env, spec.Env)
	maps.Copy(env, spec.Secrets)
	body := map[string]any{"templateID": tmpl, "timeout": seconds(timeout), "metadata": md, "envVars": env}
	switch spec.Network.Mode {
	case provider.NetworkNone:
		body["allow_internet_access"] = false
	case provider.NetworkAllow:
		return nil, provider.Errorf(provider.CodeUnsupported, "e2b: network allow-lists are not supported by this provider")
	}
	var sb sandboxJSON
	if err := p.call(ctx, "POST", "/v2/sandboxes", body, &sb, "create"); err != nil {
		return nil, err
	}
	in := p.instance(sb)
	if ctx.Err() != nil {
		_ = p.Destroy(context.WithoutCancel(ctx), sb.SandboxID)
		return nil, fmt.Errorf("create: %w", ctx.Err())
	}
	return in, nil
}

// FindByKey returns the live sandbox whose metadata holds key.
func (p *Provider) FindByKey(ctx context.Context, key string) (provider.Instance, error) {
	infos, err := p.list(ctx, map[string]string{KeyMetadata: key})
	if err != nil {
		return nil, err
	}
	for _, in := range infos {
		if in.Key == key {
			return p.Connect(ctx, in.ID)
		}
	}
	return nil, provider.Errorf(provider.CodeNotFound, "no sandbox with key %q", key)
}

// Connect returns a handle to a sandbox after GET /sandboxes/{id} (which also gives its
// access token). It neither resumes it nor changes its lifetime.
func (p *Provider) Connect(ctx context.Context, id string) (provider.Instance, error) {
	sb, err := p.get(ctx, id)
	if err != nil {
		return nil, err
	}
	return p.instance(sb), nil
}

func (p *Provider) get(ctx context.Context, id string) (sandboxJSON, error) {
	if id == "" || strings.ContainsAny(id, "/?#%") {
		return sandboxJSON{}, provider.Errorf(provider.CodeNotFound, "no sandbox %q", id)
	}
	var sb sandboxJSON
	err := p.call(ctx, "GET", "/sandboxes/"+id, nil, &sb, "connect")
	return sb, err
}

// List returns the running and paused sandboxes whose labels include filter.Labels.
func (p *Provider) List(ctx context.Context, filter provider.ListFilter) ([]provider.Info, error) {
	infos, err := p.list(ctx, filter.Labels)
	if err != nil {
		return nil, err
	}
	out := infos[:0]
	for _, in := range infos {
		if filter.Matches(in.Labels) {
			out = append(out, in)
		}
	}
	return out, nil
}

// list pages through GET /v2/sandboxes with a metadata filter.
func (p *Provider) list(ctx context.Context, md map[string]string) ([]provider.Info, error) {
	q := url.Values{}
	q.Set("state", "running,paused")
	q.Set("limit", "100")
	if len(md) > 0 {
		pairs := url.Values{}
		for k, v := range md {
			pairs.Set(k, v)
		}
		q.Set("metadata", pairs.Encode())
	}
	var out []provider.Info
	for page := 0; page < 10000; page++ {
		var sbs []sandboxJSON
		resp, err := p.callStatus(ctx, "GET", "/v2/sandboxes?"+q.Encode(), nil, &sbs, "list")
		if err != nil {
			return nil, err
		}
		for _, sb := range sbs {
			out = append(out, sb.info())
		}
		next := resp.Header.Get("X-Next-Token")
		if next == "" {
			return out, nil
		}
		q.Set("nextToken", next)
	}
	return nil, provider.Errorf(provider.CodeProvider, "list: too many pages")
}

// Destroy kills the sandbox: DELETE /sandboxes/{id}.
func (p *Provider) Destroy(ctx context.Context, id string) error {
	if id == "" || strings.ContainsAny(id, "/?#%") {
		return provider.Errorf(provider.CodeNotFound, "no sandbox %q", id)
	}
	return p.call(ctx, "DELETE", "/sandboxes/"+id, nil, nil, "destroy")
}

// envdURL is the base URL of a sandbox's envd.
func (p *Provider) envdURL(sb sandboxJSON) string {
	if p.cfg.SandboxURL != "" {
		return p.cfg.SandboxURL
	}
	domain := p.cfg.Domain
	if sb.Domain != nil && *sb.Domain != "" {
		domain = *sb.Domain
	}
	return "https://" + strconv.Itoa(envdPort) + "-" + sb.SandboxID + "." + domain
}

func (p *Provider) previewHost(sb sandboxJSON, port int) string {
	domain := p.cfg.Domain
	if sb.Domain != nil && *sb.Domain != "" {
		domain = *sb.Domain
	}
	return strconv.Itoa(port) + "-" + sb.SandboxID + "." + domain
}
