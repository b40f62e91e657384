// Package remote is the provider that drives sandboxes on a tupper server (`tupper serve`)
// over its REST API, so the Go SDK works the same against a server as on this machine:
//
//	prov := remote.New(remote.Config{URL: "http://127.0.0.1:7423", APIKey: os.Getenv("TUPPER_API_KEY")})
//	box, err := sandbox.Create(ctx, prov, sandbox.CreateOptions{})
//
// Importing the package registers it as "remote", configured from TUPPER_URL and
// TUPPER_API_KEY. The provider's capabilities are the server's (GET /v1/info): the server's
// provider's, plus an exact get-or-create by key and persistence. Every primitive is one
// HTTP request: Exec streams NDJSON frames with stdin streamed in the same request (full
// duplex), files stream both ways, and the optional interfaces (FileSystem, Searcher,
// ChangeTracker, ActivityReporter, KeyedCreator, Pauser, ColdPauser, Snapshotter, TimeoutSetter,
// RangeReader) map to the server's routes; Terminaler is a WebSocket (terminal.go). PreviewURL returns the server's signed preview
// link, which works without a credential until it expires.
//
// A *Provider and its instances may be used from many goroutines at once.
package remote

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/provider/httpcode"
	"github.com/tupper-dev/tupper/server/api"
)

// Name is the registry name.
const Name = "remote"

func init() {
	provider.Register(provider.Registration{
		Name: Name,
		Factory: func() (provider.Provider, error) {
			u := os.Getenv("TUPPER_URL")
			if u == "" {
				return nil, provider.Missingf("TUPPER_URL is not set")
			}
			return New(Config{URL: u, APIKey: os.Getenv("TUPPER_API_KEY")}), nil
		},
		Install: "a tupper server (tupper serve): set TUPPER_URL to its URL and TUPPER_API_KEY to a key of it",
	})
}

// Config configures the provider.
type Config struct {
	URL    string // the server, e.g. http://127.0.0.1:7423
	APIKey string // an account API key, ak_…
	// HTTPClient sends the requests; nil is a client without an overall timeout (streams may
	// last long; every call is bounded by its ctx).
	HTTPClient *http.Client
}

// Provider is a tupper server.
type Provider struct {
	cfg    Config
	base   string
	client *http.Client

	mu     sync.Mutex
	caps   provider.Capabilities // the server's, as GET /v1/info lists them
	server string                // the server's provider
}

var (
	_ provider.Provider     = (*Provider)(nil)
	_ provider.KeyedCreator = (*Provider)(nil)
	_ provider.Prototyper   = (*Provider)(nil)
	_ provider.Refuser      = (*Provider)(nil)
)

// defaultTransport is made on first use, not at start-up of every program linking this.
var defaultTransport = sync.OnceValue(func() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 256
	return t
})

// New returns the provider for the server at cfg.URL. It does not contact the server; call
// Available to check it.
func New(cfg Config) *Provider {
	c := cfg.HTTPClient
	if c == nil {
		c = &http.Client{Transport: defaultTransport()}
	}
	return &Provider{cfg: cfg, base: strings.TrimSuffix(cfg.URL, "/"), client: c}
}

// Name returns "remote".
func (p *Provider) Name() string { return Name }

// Capabilities returns the capabilities the server declares, asking it the first time (an
// empty set if it cannot be reached; the next call asks again). The optional interfaces
// its sandboxes and it have are listed by provider.CapabilitiesOf: this provider implements
// every one, and refuses those the server lacks (Refuse), so the listing is the server's.
func (p *Provider) Capabilities() provider.Capabilities {
	caps, _ := p.serverCaps()
	return caps.Declared()
}

// serverCaps is the server's capabilities and provider, asked for the first time they are
// needed (nil if the server cannot be reached; the next call asks again).
func (p *Provider) serverCaps() (provider.Capabilities, string) {
	p.mu.Lock()
	caps, name := p.caps, p.server
	p.mu.Unlock()
	if caps != nil {
		return caps, name
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.fetchInfo(ctx); err != nil {
		return nil, ""
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.caps, p.server
}

// Prototype is an *Instance, for provider.CapabilitiesOf.
func (p *Provider) Prototype() provider.Instance { return (*Instance)(nil) }

// Refuse refuses an optional interface the server does not list (its provider lacks it),
// with the error the server's 501 would carry, without asking it.
func (p *Provider) Refuse(c provider.Capability) error {
	if !provider.NamesInterface(c) {
		return nil
	}
	caps, server := p.serverCaps()
	if caps == nil {
		return provider.Errorf(provider.CodeUnsupported, "the server at %s did not say what it can do (is it reachable?): %q is refused", p.base, c)
	}
	if !caps.Has(c) {
		return provider.Errorf(provider.CodeUnsupported, "the server's provider %s lacks %q", server, c)
	}
	return nil
}

func (p *Provider) fetchInfo(ctx context.Context) error {
	var info api.Info
	if err := p.call(ctx, http.MethodGet, "/v1/info", nil, &info); err != nil {
		return err
	}
	caps := provider.Capabilities{}
	for _, c := range info.Capabilities {
		caps[provider.Capability(c)] = true
	}
	p.mu.Lock()
	p.caps, p.server = caps, info.Provider
	p.mu.Unlock()
	return nil
}

// Available checks that the server answers and accepts the API key.
func (p *Provider) Available(ctx context.Context) error {
	if p.base == "" {
		return provider.Errorf(provider.CodeUnavailable, "no server URL: set TUPPER_URL or Config.URL")
	}
	if u, err := url.Parse(p.base); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return provider.Errorf(provider.CodeUnavailable, "server URL %q is not an http(s) URL", p.base)
	}
	if p.cfg.APIKey == "" {
		return provider.Errorf(provider.CodeUnavailable, "no API key: set TUPPER_API_KEY (create one on the server with `tupper keys create`)")
	}
	if err := p.fetchInfo(ctx); err != nil {
		if provider.CodeOf(err) == provider.CodeUnauthorized {
			return provider.Errorf(provider.CodeUnavailable, "the server at %s refused the API key: %v", p.base, err)
		}
		return provider.Errorf(provider.CodeUnavailable, "the server at %s: %v", p.base, err)
	}
	return nil
}

// errorFrom turns a non-2xx response into a *provider.Error with the server's code.
func errorFrom(resp *http.Response) error {
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var e api.Error
	if json.Unmarshal(data, &e) == nil && e.Code.Valid() {
		return &provider.Error{Code: e.Code, Message: e.Message}
	}
	msg := strings.TrimSpace(string(data))
	if len(msg) > 200 {
		msg = msg[:200]
	}
	if msg == "" {
		msg = resp.Status
	}
	return &provider.Error{Code: httpcode.FromStatus(resp.StatusCode), Message: provider.StripCredentials(msg)}
}

// transportErr wraps a failed round trip: a context error stays one (wrapped), anything else
// is CodeUnavailable.
func transportErr(ctx context.Context, op string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%s: %w", op, ctx.Err())
	}
	var pe *provider.Error
	if errors.As(err, &pe) {
		return err
	}
	return &provider.Error{Code: provider.CodeUnavailable, Op: op, Message: provider.StripCredentials(err.Error()), Err: err}
}

// request builds a request to the server with the API key.
func (p *Provider) request(ctx context.Context, method, path string, body io.Reader) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, p.base+path, body)
	if err != nil {
		return nil, provider.Errorf(provider.CodeInvalidArgument, "request: %v", err)
	}
	req.Header.Set("Authorization", "Bearer "+p.cfg.APIKey)
	return req, nil
}

// do sends req and returns the response when it is 2xx, else the server's error.
func (p *Provider) do(req *http.Request, op string) (*http.Response, error) {
	resp, err := p.client.Do(req)
	if err != nil {
		return nil, transportErr(req.Context(), op, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		defer resp.Body.Close()
		return nil, errorFrom(resp)
	}
	return resp, nil
}

// call sends a JSON request (in may be nil) and decodes a JSON answer into out (may be nil).
func (p *Provider) call(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		data, err := json.Marshal(in)
		if err != nil {
			return provider.Errorf(provider.CodeInvalidArgument, "encoding the request: %v", err)
		}
		body = bytes.NewReader(data)
	}
	req, err := p.request(ctx, method, path, body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := p.do(req, strings.ToLower(method)+" "+path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return transportErr(ctx, path, provider.Errorf(provider.CodeProvider, "decoding the server's answer: %v", err))
	}
	return nil
}

// list gets path, whose answer is an object that holds a list of W under field (as
// {"templates": [...]}), and converts each element with conv.
func list[W, T any](ctx context.Context, p *Provider, path, field string, conv func(W) T) ([]T, error) {
	var out map[string][]W
	if err := p.call(ctx, http.MethodGet, path, nil, &out); err != nil {
		return nil, err
	}
	items := make([]T, 0, len(out[field]))
	for _, w := range out[field] {
		items = append(items, conv(w))
	}
	return items, nil
}

// get gets path, whose answer is one W, and converts it with conv.
func get[W, T any](ctx context.Context, p *Provider, path string, conv func(W) T) (T, error) {
	var out W
	if err := p.call(ctx, http.MethodGet, path, nil, &out); err != nil {
		var zero T
		return zero, err
	}
	return conv(out), nil
}

// infoOf is the provider's description of the server's sandbox sb.
func infoOf(sb api.Sandbox) provider.Info {
	labels := maps.Clone(sb.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	return provider.Info{
		ID: sb.ID, Key: sb.Key, Labels: labels, State: provider.State(sb.State), CreatedAt: sb.CreatedAt,
		Template: sb.Template, Runtime: sb.Runtime, Deadline: sb.Deadline, Workdir: sb.Workdir,
		Restarts: restartsOf(sb.Restarts),
	}
}

// restartsOf is the provider's form of the server's restarts of a sandbox.
func restartsOf(rs []api.Restart) []provider.Restart {
	var out []provider.Restart
	for _, r := range rs {
		out = append(out, provider.Restart{At: r.At, Reason: r.Reason})
	}
	return out
}

// ceilMS rounds a duration up to whole milliseconds, so a positive one never becomes 0.
func ceilMS(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

func createBody(spec provider.CreateSpec) api.CreateRequest {
	req := api.CreateRequest{
		Key: spec.Key, Labels: spec.Labels, LabelsExact: true, Env: spec.Env, Secrets: api.Secrets{Plain: spec.Secrets, Bound: spec.BoundSecrets}, Ports: spec.Ports,
		TimeoutMS: ceilMS(spec.Timeout), IdleTimeoutMS: ceilMS(spec.IdleTimeout),
		From: spec.From, Template: spec.Template, Runtime: spec.Runtime, Volumes: spec.Volumes,
	}
	if !spec.Size.IsZero() {
		if spec.Size.Name != "" {
			req.Size = &api.Size{Name: spec.Size.Name} // the server resolves presets itself
		} else {
			req.Size = &api.Size{CPU: spec.Size.CPU, MemoryMB: spec.Size.MemoryMB, DiskGB: spec.Size.DiskGB}
		}
	}
	if spec.Network.Mode != "" || len(spec.Network.Allow) > 0 || len(spec.Network.Deny) > 0 || spec.Network.Learn {
		req.Network = api.NetworkOf(spec.Network)
	}
	return req
}

// Create makes a sandbox on the server. With a key, the server returns the live sandbox made
// with that key if there is one (its get-or-create is exact).
func (p *Provider) Create(ctx context.Context, spec provider.CreateSpec) (provider.Instance, error) {
	inst, _, err := p.GetOrCreate(ctx, spec)
	return inst, err
}

// GetOrCreate is the server's exact get-or-create by spec.Key.
func (p *Provider) GetOrCreate(ctx context.Context, spec provider.CreateSpec) (provider.Instance, bool, error) {
	var sb api.Sandbox
	if err := p.call(ctx, http.MethodPost, "/v1/sandboxes", createBody(spec), &sb); err != nil {
		return nil, false, err
	}
	created := sb.Created == nil || *sb.Created
	return p.instance(sb), created, nil
}

// FindByKey returns the live sandbox made with key.
func (p *Provider) FindByKey(ctx context.Context, key string) (provider.Instance, error) {
	var list api.SandboxList
	if err := p.call(ctx, http.MethodGet, "/v1/sandboxes?key="+url.QueryEscape(key), nil, &list); err != nil {
		return nil, err
	}
	if len(list.Sandboxes) == 0 {
		return nil, provider.Errorf(provider.CodeNotFound, "no sandbox with that key")
	}
	return p.instance(list.Sandboxes[len(list.Sandboxes)-1]), nil
}

// Connect returns a handle to the sandbox id, or CodeNotFound.
func (p *Provider) Connect(ctx context.Context, id string) (provider.Instance, error) {
	if id == "" || strings.ContainsAny(id, "/?#") {
		return nil, provider.Errorf(provider.CodeNotFound, "no sandbox %q", id)
	}
	var sb api.Sandbox
	if err := p.call(ctx, http.MethodGet, "/v1/sandboxes/"+url.PathEscape(id), nil, &sb); err != nil {
		return nil, err
	}
	return p.instance(sb), nil
}

// List returns the server's sandboxes whose labels include filter.Labels.
func (p *Provider) List(ctx context.Context, filter provider.ListFilter) ([]provider.Info, error) {
	q := url.Values{}
	for k, v := range filter.Labels {
		q.Add("label", k+"="+v)
	}
	var list api.SandboxList
	path := "/v1/sandboxes"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	if err := p.call(ctx, http.MethodGet, path, nil, &list); err != nil {
		return nil, err
	}
	out := make([]provider.Info, 0, len(list.Sandboxes))
	for _, sb := range list.Sandboxes {
		in := infoOf(sb)
		if filter.Matches(in.Labels) {
			out = append(out, in)
		}
	}
	return out, nil
}

// Ended returns the sandboxes that ended whose labels include every pair of filter.Labels,
// the latest to end first (the server keeps the last 100 it lists), each with why it ended
// (api.Sandbox.End). A server older than end reasons lists none.
func (p *Provider) Ended(ctx context.Context, filter provider.ListFilter) ([]api.Sandbox, error) {
	q := url.Values{"all": {"true"}}
	for k, v := range filter.Labels {
		q.Add("label", k+"="+v)
	}
	var list api.SandboxList
	if err := p.call(ctx, http.MethodGet, "/v1/sandboxes?"+q.Encode(), nil, &list); err != nil {
		return nil, err
	}
	var out []api.Sandbox
	for _, sb := range list.Sandboxes {
		if sb.End != nil && filter.Matches(sb.Labels) {
			out = append(out, sb)
		}
	}
	return out, nil
}

// Destroy destroys the sandbox id; CodeNotFound when it is already gone.
func (p *Provider) Destroy(ctx context.Context, id string) error {
	if id == "" || strings.ContainsAny(id, "/?#") {
		return provider.Errorf(provider.CodeNotFound, "no sandbox %q", id)
	}
	return p.call(ctx, http.MethodDelete, "/v1/sandboxes/"+url.PathEscape(id), nil, nil)
}

func (p *Provider) instance(sb api.Sandbox) *Instance {
	return &Instance{p: p, id: sb.ID, path: "/v1/sandboxes/" + url.PathEscape(sb.ID), previews: map[int]preview{}}
}

// CloseIdleConnections closes the provider's idle keep-alive connections to the server.
func (p *Provider) CloseIdleConnections() { p.client.CloseIdleConnections() }
