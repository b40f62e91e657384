package server

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tupper-dev/tupper/internal/httpdeadline"
	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/sandbox"
	"github.com/tupper-dev/tupper/server/api"
	"github.com/tupper-dev/tupper/server/e2b"
	"github.com/tupper-dev/tupper/server/internal/audit"
)

// DefaultSignedTTL is how long a signed preview or file URL stays valid unless asked otherwise.
const DefaultSignedTTL = 15 * time.Minute

// MaxSignedTTL is the longest validity of a signed URL.
const MaxSignedTTL = 7 * 24 * time.Hour

// signedTTL is a signed URL's validity from a request's expiresInMs: 0 is DefaultSignedTTL,
// more than MaxSignedTTL is refused.
func signedTTL(ms int64) (time.Duration, error) {
	ttl, err := durMS("expiresInMs", ms)
	switch {
	case err != nil:
		return 0, err
	case ttl == 0:
		return DefaultSignedTTL, nil
	case ttl > MaxSignedTTL:
		return 0, badRequest("expiresInMs is more than %v", MaxSignedTTL)
	}
	return ttl, nil
}

// baseURL is the server's public URL for links it hands out: Config.BaseURL, never the
// request's Host.
func (s *Server) baseURL() string { return s.cfg.BaseURL }

func (s *Server) mac(parts ...string) []byte {
	m := hmac.New(sha256.New, s.signer)
	m.Write([]byte(strings.Join(parts, "\n")))
	return m.Sum(nil)
}

// signPreview returns the path segment of a signed preview URL for port of sandbox id.
func (s *Server) signPreview(id string, port int, exp time.Time) string {
	payload := fmt.Sprintf("%s:%d:%d", id, port, exp.Unix())
	sig := s.mac("preview", payload)
	return base64.RawURLEncoding.EncodeToString([]byte(payload)) + "." + base64.RawURLEncoding.EncodeToString(sig)
}

func (s *Server) verifyPreview(seg string) (id string, port int, err error) {
	bad := provider.Errorf(provider.CodeUnauthorized, "the preview link is not valid or has expired")
	p64, s64, ok := strings.Cut(seg, ".")
	if !ok {
		return "", 0, bad
	}
	payload, err1 := base64.RawURLEncoding.DecodeString(p64)
	sig, err2 := base64.RawURLEncoding.DecodeString(s64)
	if err1 != nil || err2 != nil || !hmac.Equal(sig, s.mac("preview", string(payload))) {
		return "", 0, bad
	}
	parts := strings.Split(string(payload), ":")
	if len(parts) != 3 {
		return "", 0, bad
	}
	port, _ = strconv.Atoi(parts[1])
	exp, _ := strconv.ParseInt(parts[2], 10, 64)
	if time.Now().Unix() > exp {
		return "", 0, bad
	}
	return parts[0], port, nil
}

func portParam(r *http.Request) (int, error) {
	p, err := strconv.Atoi(r.PathValue("port"))
	if err != nil || p < 1 || p > 65535 {
		return 0, badRequest("port %q is not a number from 1 to 65535", r.PathValue("port"))
	}
	return p, nil
}

// portJSON is the exposed port of sandbox id on the wire, with a signed URL valid for ttl.
func (s *Server) portJSON(r *http.Request, id string, port int, public bool, ttl time.Duration) api.Port {
	exp := time.Now().Add(ttl).Truncate(time.Second)
	base := s.baseURL()
	path, _ := s.previewPath(r.Context(), id, port)
	out := api.Port{
		Port: port, Public: public,
		URL:       path,
		SignedURL: fmt.Sprintf("%s/v1/preview/%s/", base, s.signPreview(id, port, exp)),
		ExpiresAt: exp.UTC(),
	}
	if s.cfg.Domain != "" {
		scheme := "http"
		if strings.HasPrefix(base, "https:") {
			scheme = "https"
		}
		out.HostURL = fmt.Sprintf("%s://%d-%s.%s/", scheme, port, id, s.cfg.Domain)
	}
	return out
}

// exposePort checks the provider has previews and returns the URLs that proxy to it.
func (s *Server) exposePort(w http.ResponseWriter, r *http.Request, _ *caller) {
	port, err := portParam(r)
	if err != nil {
		writeError(w, err)
		return
	}
	var req api.ExposeRequest
	if err := decode(w, r, &req, true); err != nil {
		writeError(w, err)
		return
	}
	ttl, err := signedTTL(req.ExpiresInMS)
	if err != nil {
		writeError(w, err)
		return
	}
	s.withBox(w, r, func(b *sandbox.Sandbox) error {
		if !b.Capabilities.Has(provider.CapPreview) {
			return provider.Errorf(provider.CodeUnsupported, "provider %s has no previews", b.Provider)
		}
		if err := s.st.ExposePort(r.Context(), b.ID, port, req.Public); err != nil {
			return err
		}
		s.emit(r.Context(), EventPortExposed, b.ID, map[string]any{"port": port, "public": req.Public})
		writeJSON(w, http.StatusOK, s.portJSON(r, b.ID, port, req.Public, ttl))
		return nil
	})
}

func (s *Server) listPorts(w http.ResponseWriter, r *http.Request, _ *caller) {
	s.withBox(w, r, func(b *sandbox.Sandbox) error {
		ps, err := s.st.Ports(r.Context(), b.ID)
		if err != nil {
			return err
		}
		out := make([]api.Port, 0, len(ps))
		for _, p := range ps {
			out = append(out, s.portJSON(r, b.ID, p.Port, p.Public, DefaultSignedTTL))
		}
		writeJSON(w, http.StatusOK, api.PortList{Ports: out})
		return nil
	})
}

func (s *Server) unexposePort(w http.ResponseWriter, r *http.Request, _ *caller) {
	port, err := portParam(r)
	if err != nil {
		writeError(w, err)
		return
	}
	s.withBox(w, r, func(b *sandbox.Sandbox) error {
		if err := s.st.UnexposePort(r.Context(), b.ID, port); err != nil {
			return err
		}
		s.emit(r.Context(), EventPortClosed, b.ID, map[string]any{"port": port})
		w.WriteHeader(http.StatusNoContent)
		return nil
	})
}

// isPublicPort reports whether the preview request names a port exposed as public.
func (s *Server) isPublicPort(r *http.Request) bool {
	port, err := strconv.Atoi(r.PathValue("port"))
	if err != nil {
		return false
	}
	exposed, public, err := s.st.PortExposure(r.Context(), r.PathValue("id"), port)
	return err == nil && exposed && public
}

// proxyPath is the path form of a preview: /v1/sandboxes/{id}/proxy/{port}/{path...}.
func (s *Server) proxyPath(w http.ResponseWriter, r *http.Request, _ *caller) {
	port, err := portParam(r)
	if err != nil {
		writeError(w, err)
		return
	}
	s.proxy(w, r, r.PathValue("id"), port, "/"+r.PathValue("path"), true)
}

// proxySigned is a signed preview link: /v1/preview/{sig}/{path...}.
func (s *Server) proxySigned(w http.ResponseWriter, r *http.Request, _ *caller) {
	id, port, err := s.verifyPreview(r.PathValue("sig"))
	if err != nil {
		writeError(w, err)
		return
	}
	httpdeadline.Lift(w)
	s.proxy(w, r, id, port, "/"+r.PathValue("path"), true)
}

// serveHostPreview serves a port of a sandbox named by its host, {port}-{id}.{domain}, or by
// E2B's routing headers (e2b.Server.SandboxPort): a sandbox that is not live is E2B's 502
// "The sandbox was not found" to anyone (e2b.SandboxGone); public ports to anyone, others to a caller
// with an API key or the sandbox's token; the code-interpreter port also to E2B's access token
// (e2b.PortAccessToken), and the requests of E2B's Code Interpreter SDK that carry none
// (e2b.CodeInterpreterOpen); but every port of a sandbox created through E2B's
// API with allowPublicTraffic false only with its traffic access token (e2b.PublicTraffic).
func (s *Server) serveHostPreview(w http.ResponseWriter, r *http.Request, id string, port int) {
	r.SetPathValue("id", id)
	r.SetPathValue("port", strconv.Itoa(port))
	if s.e2b.SandboxGone(w, r, id) {
		return // E2B's host forms answer a sandbox that is gone as E2B's proxy does
	}
	if restricted, ok := s.e2b.PublicTraffic(w, r, id); restricted {
		if !ok {
			return
		}
	} else if !(port == e2b.CodeInterpreterPort && s.e2b.PortAccessToken(r, id)) && !s.isPublicPort(r) && !e2b.CodeInterpreterOpen(r, port) {
		if _, err := s.authenticate(r, route{Scope: scopePreview}); err != nil {
			writeError(w, err)
			return
		}
	}
	httpdeadline.Lift(w)
	s.proxy(w, r, id, port, r.URL.Path, false)
}

// previewPath is the path-form preview URL of port in sandbox id: the server's own routing,
// which it answers for Process.URL and MCP's expose_port, so no caller makes the provider
// open a listener on this host (sandbox.CreateOptions.PreviewURL).
func (s *Server) previewPath(_ context.Context, id string, port int) (string, error) {
	return fmt.Sprintf("%s/v1/sandboxes/%s/proxy/%d/", s.baseURL(), id, port), nil
}

// pathPreviewCSP goes on every answer of a path-form preview (/v1/sandboxes/{id}/proxy/…
// and /v1/preview/…), which is served on the API's own origin. "sandbox" without
// allow-same-origin gives the page an opaque origin: it cannot register a Service Worker over
// the server (which would see every later request of the browser, signed links included),
// read the origin's storage or cookies, or make credentialed same-origin requests to the API.
// Scripts, forms, pop-ups, modal dialogs and downloads stay allowed so an ordinary app still
// runs; one that needs its own origin (storage, cookies read by script, fetch to its own
// paths without CORS) is served on a host preview ({port}-{id}.{Domain}), which gets no CSP.
const pathPreviewCSP = "sandbox allow-scripts allow-forms allow-popups allow-modals allow-downloads"

// portHostSuffix ends the host of the preview transport's requests, {port}-{id}.port.invalid:
// dialPort finds the sandbox and port in it, and the transport keeps idle connections per
// (sandbox, port).
const portHostSuffix = ".port.invalid"

// newPreviewTransport is the proxy's transport: every connection is Sandbox.DialPort's (the
// provider's tunnel into the sandbox), never one to a listener on this host.
func (s *Server) newPreviewTransport() *http.Transport {
	return &http.Transport{
		Proxy:                 nil,
		DialContext:           s.dialPort,
		MaxIdleConnsPerHost:   16,
		IdleConnTimeout:       30 * time.Second,
		ExpectContinueTimeout: time.Second,
		ResponseHeaderTimeout: 0, // a preview answers when it answers; the client may go away
	}
}

// dialPort connects to the sandbox and port named by addr ({port}-{id}.port.invalid:80).
func (s *Server) dialPort(ctx context.Context, _, addr string) (net.Conn, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	label, ok := strings.CutSuffix(host, portHostSuffix)
	ps, id, ok2 := strings.Cut(label, "-")
	port, err := strconv.Atoi(ps)
	if !ok || !ok2 || err != nil {
		return nil, provider.Errorf(provider.CodeInvalidArgument, "no sandbox port %q", host)
	}
	b, err := s.box(ctx, id)
	if err != nil {
		return nil, err
	}
	return b.DialPort(ctx, port)
}

// urlTransport is the proxy's transport to the preview URLs of providers without a tunnel.
var urlTransport = sync.OnceValue(func() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Proxy = nil // never through an HTTP proxy of this host's environment
	t.MaxIdleConnsPerHost = 16
	return t
})

// proxy forwards r to port in sandbox id, over a connection from Sandbox.DialPort where the
// provider has a tunnel (provider.PortDialer); a provider that reaches ports only through
// URLs (E2B's, another tupper server) is proxied to its PreviewURL. WebSocket and other
// upgrades pass through. The caller's credentials are not forwarded into the
// sandbox. pathForm says the answer is served on the API's origin: it then carries
// pathPreviewCSP, and the sandbox's Service-Worker-Allowed is removed.
func (s *Server) proxy(w http.ResponseWriter, r *http.Request, id string, port int, path string, pathForm bool) {
	b, err := s.box(r.Context(), id)
	if err != nil {
		writeError(w, err)
		return
	}
	if !b.Capabilities.Has(provider.CapPreview) {
		writeError(w, provider.Errorf(provider.CodeUnsupported, "provider %s has no previews", b.Provider))
		return
	}
	// Through the tunnel, the app sees the Host it would see if the browser were on its machine.
	var transport http.RoundTripper = s.previews
	target := &url.URL{Scheme: "http", Host: strconv.Itoa(port) + "-" + id + portHostSuffix}
	host := "localhost:" + strconv.Itoa(port)
	if m := s.e2b.MaskedHost(r.Context(), id, port); m != "" {
		host = m // E2B's network.maskRequestHost
	}
	raw, err := b.PortTarget(r.Context(), port)
	if err != nil {
		writeError(w, err)
		return
	}
	if raw != "" {
		if target, err = url.Parse(raw); err != nil || target.Host == "" {
			writeError(w, provider.Errorf(provider.CodeProvider, "provider gave a preview URL that is not absolute"))
			return
		}
		transport, host = urlTransport(), target.Host
	}
	rp := &httputil.ReverseProxy{
		Transport: transport,
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = target.Scheme
			pr.Out.URL.Host = target.Host
			pr.Out.URL.Path = strings.TrimSuffix(target.Path, "/") + path
			pr.Out.URL.RawPath = ""
			pr.Out.URL.RawQuery = r.URL.RawQuery
			pr.Out.Host = host
			pr.Out.Header.Del("Authorization")
			pr.Out.Header.Del("X-API-Key")
			pr.SetXForwarded()
		},
		ModifyResponse: func(resp *http.Response) error {
			if pathForm {
				resp.Header.Del("Service-Worker-Allowed")
				resp.Header.Add("Content-Security-Policy", pathPreviewCSP)
			}
			return nil
		},
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if r.Context().Err() != nil {
				return // the client went away
			}
			var pe *provider.Error
			if errors.As(err, &pe) && pe.Code != provider.CodeUnavailable && pe.Code != provider.CodeProvider {
				writeError(w, err)
				return
			}
			writeError(w, provider.Errorf(provider.CodeUnavailable, "nothing answers on port %d in the sandbox: %v", port, err))
		},
	}
	// Full duplex, as the E2B data plane's proxy: otherwise the server closes the request
	// body once the sandbox's answer starts, the Transport's last read of it (for EOF) can
	// fail, and the Transport cuts the answer's stream (one streamed /execute of the
	// code interpreter in thirty, cut short).
	if err := http.NewResponseController(w).EnableFullDuplex(); err != nil && r.ProtoMajor == 1 {
		s.log.Debug("preview: cannot serve full duplex", "err", err)
	}
	rp.ServeHTTP(w, r)
}

// presign returns an expiring URL that downloads (GET) or uploads (PUT) one file without a
// credential.
func (s *Server) presign(w http.ResponseWriter, r *http.Request, _ *caller) {
	var req api.PresignRequest
	if err := decode(w, r, &req, false); err != nil {
		writeError(w, err)
		return
	}
	if req.Method == "" {
		req.Method = http.MethodGet
	}
	if req.Method != http.MethodGet && req.Method != http.MethodPut {
		writeError(w, badRequest("method must be GET or PUT"))
		return
	}
	if req.Path == "" {
		writeError(w, badRequest("path is empty"))
		return
	}
	ttl, err := signedTTL(req.ExpiresInMS)
	if err != nil {
		writeError(w, err)
		return
	}
	s.withBox(w, r, func(b *sandbox.Sandbox) error {
		exp := time.Now().Add(ttl).Unix()
		q := url.Values{}
		q.Set("sandbox", b.ID)
		q.Set("path", req.Path)
		q.Set("method", req.Method)
		q.Set("expires", strconv.FormatInt(exp, 10))
		q.Set("sig", hex.EncodeToString(s.mac("files", req.Method, b.ID, req.Path, q.Get("expires"))))
		writeJSON(w, http.StatusOK, map[string]any{
			"url": s.baseURL() + "/v1/signed/files?" + q.Encode(), "method": req.Method,
			"expiresAt": time.Unix(exp, 0).UTC(),
		})
		return nil
	})
}

func (s *Server) verifyFileURL(r *http.Request, method string) (id, path string, err error) {
	q := r.URL.Query()
	bad := provider.Errorf(provider.CodeUnauthorized, "the signed URL is not valid or has expired")
	sig, err := hex.DecodeString(q.Get("sig"))
	if err != nil || q.Get("method") != method {
		return "", "", bad
	}
	if !hmac.Equal(sig, s.mac("files", method, q.Get("sandbox"), q.Get("path"), q.Get("expires"))) {
		return "", "", bad
	}
	exp, err := strconv.ParseInt(q.Get("expires"), 10, 64)
	if err != nil || time.Now().Unix() > exp {
		return "", "", bad
	}
	return q.Get("sandbox"), q.Get("path"), nil
}

func (s *Server) signedDownload(w http.ResponseWriter, r *http.Request, _ *caller) {
	id, p, err := s.verifyFileURL(r, http.MethodGet)
	if err != nil {
		writeError(w, err)
		return
	}
	httpdeadline.Lift(w)
	s.withSandbox(w, r, id, func(b *sandbox.Sandbox) error { return s.serveFile(w, r, b, p, 0, -1) })
}

func (s *Server) signedUpload(w http.ResponseWriter, r *http.Request, _ *caller) {
	id, p, err := s.verifyFileURL(r, http.MethodPut)
	if err != nil {
		writeError(w, err)
		return
	}
	// A write by whoever holds the URL, on the authority of the sandbox's owner who signed it.
	audit.SetCaller(r.Context(), audit.Caller{SandboxID: id, Via: "signed"})
	audit.SetTarget(r.Context(), id)
	httpdeadline.Lift(w)
	s.withSandbox(w, r, id, func(b *sandbox.Sandbox) error { return s.writeBody(w, r, b, p, nil) })
}

func (s *Server) withSandbox(w http.ResponseWriter, r *http.Request, id string, fn func(b *sandbox.Sandbox) error) {
	b, err := s.box(r.Context(), id)
	if err == nil {
		err = fn(b)
	}
	if err != nil {
		writeError(w, err)
	}
}
