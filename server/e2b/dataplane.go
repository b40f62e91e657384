package e2b

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/tupper-dev/tupper/agent/spec/process"
	"github.com/tupper-dev/tupper/internal/httpdeadline"
	"github.com/tupper-dev/tupper/internal/metrics"
	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/server/internal/audit"
)

// The routing headers of E2B's SDKs.
const (
	headerSandboxID   = "E2b-Sandbox-Id"
	headerSandboxPort = "E2b-Sandbox-Port"
	headerAccessToken = "X-Access-Token"
)

// defaultUser is the user E2B's SDKs expect commands and relative paths to use.
const defaultUser = "user"

// envdHostSuffix names a sandbox's agent in outgoing URLs: {id}.envd.invalid. Only the
// proxy's own transport resolves it (by dialing the provider), and it pools connections per
// sandbox.
const envdHostSuffix = ".envd.invalid"

// target is which sandbox a data-plane request is for.
type target struct {
	id string // from the header or the host; "" for a signed /files URL that names none
}

// dataPlane reports whether r is for a sandbox's envd, and which.
func (s *Server) dataPlane(r *http.Request) (target, bool) {
	if port, id, ok := s.SandboxPort(r); ok {
		// A request for another port is the sandbox's own, whatever its path and headers.
		return target{id: id}, port == EnvdPort
	}
	if id := r.Header.Get(headerSandboxID); id != "" {
		return target{id: id}, true
	}
	if r.URL.Path == "/files" && r.URL.Query().Get("signature") != "" {
		// A signed URL made against E2B_SANDBOX_URL: it names no sandbox (serveEnvd refuses it).
		return target{}, true
	}
	return target{}, false
}

// SandboxPort reports whether r is for a port of a sandbox, and which: a host of the form
// {port}-{id}.{Config.Domain} (E2B's getHost), or E2B's routing headers E2b-Sandbox-Id and
// E2b-Sandbox-Port on any host (what E2B's SDKs send to E2B_SANDBOX_URL, and what a client
// without wildcard DNS sends to reach a port). The envd port is the data plane's; any other
// is the sandbox's own traffic, which the server's preview rules decide.
func (s *Server) SandboxPort(r *http.Request) (port int, id string, ok bool) {
	if port, id, ok := ParsePortHost(r.Host, s.cfg.Domain); ok {
		return port, id, true
	}
	id, ps := r.Header.Get(headerSandboxID), r.Header.Get(headerSandboxPort)
	if id == "" || ps == "" {
		return 0, "", false
	}
	port, err := strconv.Atoi(ps)
	if err != nil || port < 1 || port > 65535 {
		return 0, "", false
	}
	return port, id, true
}

// ParsePortHost parses host as {port}-{id}.{domain} (with or without a :port of its own),
// the host of a port of a sandbox. An empty domain matches nothing.
func ParsePortHost(host, domain string) (port int, id string, ok bool) {
	if domain == "" {
		return 0, "", false
	}
	if i := strings.LastIndexByte(host, ':'); i >= 0 && !strings.Contains(host[i:], "]") {
		host = host[:i]
	}
	label, ok := strings.CutSuffix(strings.ToLower(host), "."+strings.ToLower(domain))
	if !ok || strings.Contains(label, ".") {
		return 0, "", false
	}
	ps, id, ok := strings.Cut(label, "-")
	port, err := strconv.Atoi(ps)
	if !ok || err != nil || port < 1 || port > 65535 || id == "" {
		return 0, "", false
	}
	return port, id, true
}

// SandboxGone answers a request for a port of sandbox id (SandboxPort) as E2B's proxy does
// when the sandbox is not live (killed, timed out, never made): 502 "The sandbox was not
// found", whatever the credential, and reports whether it did. A live sandbox's request is
// left alone.
func (s *Server) SandboxGone(w http.ResponseWriter, r *http.Request, id string) bool {
	if _, err := s.st.Sandbox(r.Context(), id); !errors.Is(err, provider.CodeNotFound) {
		return false
	}
	writeSandboxNotFound(w, id)
	return true
}

// writeSandboxNotFound is what E2B's proxy answers for a sandbox it does not know.
func writeSandboxNotFound(w http.ResponseWriter, id string) {
	writeJSON(w, http.StatusBadGateway, map[string]any{"sandboxId": id, "message": "The sandbox was not found", "code": http.StatusBadGateway})
}

// writeEnvdError writes envd's REST error body.
func writeEnvdError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, apiError{Code: status, Message: msg})
}

// writeSandboxPaused is what the proxy answers for a paused sandbox: E2B's proxy answer
// for a sandbox it cannot reach (502), which the SDKs' isRunning reads as "not running".
func writeSandboxPaused(w http.ResponseWriter, id string) {
	writeJSON(w, http.StatusBadGateway, map[string]any{"sandboxId": id, "message": "The sandbox is paused", "code": http.StatusBadGateway})
}

const unauthorizedMessage = "unauthorized access, please provide a valid access token or method signing if supported"

func (s *Server) serveEnvd(w http.ResponseWriter, r *http.Request, t target) {
	ctx := r.Context()
	q := r.URL.Query()
	id := t.id
	if id == "" {
		// A signed /files URL made against E2B_SANDBOX_URL: the sandbox is the one whose
		// token signed it (signedSandbox).
		var err error
		if id, err = s.signedSandbox(ctx, r.Method, q, time.Now()); err != nil {
			writeEnvdError(w, http.StatusUnauthorized, err.Error())
			return
		}
	}
	if !idPattern.MatchString(id) {
		writeSandboxNotFound(w, id)
		return
	}
	rec, err := s.st.Sandbox(ctx, id)
	if err != nil {
		if errors.Is(err, provider.CodeNotFound) {
			writeSandboxNotFound(w, id)
			return
		}
		writeEnvdError(w, http.StatusInternalServerError, provider.StripCredentials(message(err)))
		return
	}
	if rec.State == provider.StatePaused && rec.AutoResume {
		// Its use resumes it.
		running, err := s.lc.Wake(ctx, id)
		if err != nil {
			writeEnvdError(w, http.StatusBadGateway, provider.StripCredentials(message(err)))
			return
		}
		if running {
			rec.State = provider.StateRunning
		}
	}
	if rec.State == provider.StatePaused {
		// Said here, from the record, before anything is sent: a connection the proxy keeps
		// to the agent of a sandbox that was reached before its pause still stands, but the
		// agent is frozen and would never answer.
		writeSandboxPaused(w, id)
		return
	}
	if !envdPath(r.URL.Path) {
		// The agent serves more than envd's API (its tunnel to the sandbox's ports, its
		// deadlines): the server's own, never the data plane's.
		writeEnvdError(w, http.StatusNotFound, "no route "+r.Method+" "+r.URL.Path)
		return
	}
	signed, err := s.envdAuthorize(r, id, q)
	if err != nil {
		writeEnvdError(w, http.StatusUnauthorized, err.Error())
		return
	}
	// Commands, watches and file transfers last as long as the caller asks.
	httpdeadline.Lift(w)
	if signed {
		// A signed URL acts as the user it was signed for, or the default user when it
		// names none (as envd does): never one the request adds in its Authorization.
		user := q.Get("username")
		if user == "" {
			user = defaultUser
		}
		r.Header.Del("Authorization")
		r.SetBasicAuth(user, "")
	}
	if r.Method == http.MethodPost && r.URL.Path == "/process.Process/Start" {
		if err := startIn(r, s.defaultCwd(ctx, id)); err != nil {
			writeEnvdError(w, http.StatusBadRequest, err.Error())
			return
		}
		// A command's latency: from here to the end of its stream, its exit (the metrics
		// of the lifecycle's server).
		start := time.Now()
		defer func() { s.lc.Metrics().ObserveExec(metrics.APIE2B, time.Since(start)) }()
	}
	r = r.WithContext(context.WithValue(ctx, sandboxKey{}, id))
	if action := envdAction(r); action != "" {
		via := "token"
		if signed {
			via = "signed"
		}
		s.cfg.Audit.Wrap(w, r, "e2b", action, &audit.Caller{SandboxID: id, Via: via}, func(w http.ResponseWriter, r *http.Request) {
			audit.SetTarget(r.Context(), id)
			s.proxy.ServeHTTP(w, r)
		})
		return
	}
	s.proxy.ServeHTTP(w, r)
}

// envdPath reports whether path is in envd's API, the part of the agent's API the data
// plane passes on: /health, /files and the Connect services process.Process and
// filesystem.Filesystem.
func envdPath(path string) bool {
	return path == "/health" || path == "/files" ||
		strings.HasPrefix(path, "/process.Process/") || strings.HasPrefix(path, "/filesystem.Filesystem/")
}

// envdAuthorize applies envd's rules with the sandbox's token: X-Access-Token on every
// request but GET /health and /files, where a valid signed URL also does (signed is then
// true). It returns why the request is refused, or nil.
func (s *Server) envdAuthorize(r *http.Request, id string, q url.Values) (signed bool, err error) {
	if r.URL.Path == "/health" && r.Method == http.MethodGet {
		return false, nil
	}
	if s.tokenOK(r.Context(), id, r.Header.Get(headerAccessToken)) {
		return false, nil
	}
	if r.URL.Path == "/files" && q.Has("signature") && (r.Method == http.MethodGet || r.Method == http.MethodHead || r.Method == http.MethodPost) {
		if err := s.checkSignature(id, r.Method, q, time.Now()); err != nil {
			return false, err
		}
		return true, nil
	}
	return false, errors.New(unauthorizedMessage)
}

// HeaderTrafficToken carries the traffic access token of a sandbox whose ports take
// public traffic only with it.
const HeaderTrafficToken = "E2b-Traffic-Access-Token"

// PublicTraffic decides a request for a port of sandbox id other than envd's (see
// SandboxPort). A sandbox created through E2B's API with
// network.allowPublicTraffic false takes such requests only with its traffic access token
// (trafficAccessToken of create and connect) in the e2b-traffic-access-token header, which
// is then all they need, as on E2B: restricted is true, and ok says whether the token is
// the sandbox's. When it is not, PublicTraffic has answered 403 with E2B's proxy error
// body; when it is, it removes the header, so the token does not reach the sandbox. One
// created with allowPublicTraffic true takes them from anyone, as on E2B: restricted and ok
// are true. For any other sandbox restricted is false, w and r are left alone, and the
// server's own rules for previews apply (a credential unless the port is public).
func (s *Server) PublicTraffic(w http.ResponseWriter, r *http.Request, id string) (restricted, ok bool) {
	rec, err := s.st.Sandbox(r.Context(), id)
	if err != nil || !idPattern.MatchString(id) {
		return false, false
	}
	if public(rec.Labels) {
		return true, true
	}
	if !private(rec.Labels) {
		return false, false
	}
	tok := r.Header.Get(HeaderTrafficToken)
	var msg string
	switch {
	case tok == "":
		msg = "this sandbox takes requests to its ports only with its traffic access token in the e2b-traffic-access-token header"
	case subtle.ConstantTimeCompare([]byte(tok), []byte(s.trafficToken(id))) != 1:
		msg = "the token in the e2b-traffic-access-token header is not this sandbox's traffic access token"
	default:
		r.Header.Del(HeaderTrafficToken)
		return true, true
	}
	writeJSON(w, http.StatusForbidden, map[string]any{"sandboxId": id, "message": msg, "code": http.StatusForbidden})
	return true, false
}

type sandboxKey struct{}

// newProxy is the reverse proxy to the agents: HTTP/1.1 over dial (the provider's
// EnvdDialer), every write flushed at once (streamed RPCs), no compression added,
// credentials of the server removed, and the default user set.
//
// Requests are served full duplex. By default Go's HTTP/1 server discards and closes the
// rest of a request body when the handler writes its response headers. A proxied request
// body is still being copied upstream by the Transport at that point: once it has sent the
// Content-Length bytes, it reads once more to see EOF. An agent answers a server stream
// (WatchDir, Start) as soon as it has the request message, so that last read could come
// after the close, fail with "invalid Read on closed Body", and make the Transport drop
// the connection to the agent. The stream then died just after its start message: the
// agent cancelled the watch, and the client saw only "terminated".
func (s *Server) newProxy(dial func(ctx context.Context, network, addr string) (net.Conn, error)) *envdProxy {
	tr := &http.Transport{
		DialContext:           dial,
		MaxIdleConnsPerHost:   32,
		IdleConnTimeout:       60 * time.Second,
		DisableCompression:    true,
		ForceAttemptHTTP2:     false,
		ExpectContinueTimeout: time.Second,
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			id, _ := pr.In.Context().Value(sandboxKey{}).(string)
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = id + envdHostSuffix
			pr.Out.Host = "localhost"
			pr.Out.Header.Del(headerAccessToken)
			pr.Out.Header.Del("X-Api-Key")
			if a := pr.Out.Header.Get("Authorization"); !strings.HasPrefix(strings.ToLower(a), "basic ") {
				pr.Out.SetBasicAuth(defaultUser, "")
			}
		},
		Transport:     tr,
		FlushInterval: -1,
		ErrorLog:      slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			id, _ := r.Context().Value(sandboxKey{}).(string)
			switch {
			case r.Context().Err() != nil:
				// The client went away.
			case errors.Is(err, provider.CodeNotFound):
				writeSandboxNotFound(w, id)
			case errors.Is(err, provider.CodeConflict):
				writeJSON(w, http.StatusBadGateway, map[string]any{"sandboxId": id, "message": "The sandbox is paused", "code": http.StatusBadGateway})
			default:
				s.log.Warn("e2b data plane", "sandbox", id, "err", provider.StripCredentials(err.Error()))
				writeJSON(w, http.StatusBadGateway, map[string]any{"sandboxId": id, "message": "The sandbox cannot be reached: " + provider.StripCredentials(message(err)), "code": http.StatusBadGateway})
			}
		},
	}
	return &envdProxy{tr: tr, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := http.NewResponseController(w).EnableFullDuplex(); err != nil && r.ProtoMajor == 1 {
			s.log.Warn("e2b data plane: cannot serve full duplex; streams may be cut", "err", err)
		}
		rp.ServeHTTP(w, r)
	})}
}

// envdProxy is the data plane's reverse proxy and the connections it keeps to agents.
type envdProxy struct {
	http.Handler
	tr *http.Transport
}

// closeIdle closes the connections kept for reuse, after a pause or a resume: a sandbox's
// agent may not survive either with its connections (a checkpoint does not), and a frozen
// agent's connections are of no use until it thaws.
func (p *envdProxy) closeIdle() { p.tr.CloseIdleConnections() }

// dialEnvd connects to the agent of the sandbox named by addr ({id}.envd.invalid:80).
func (s *Server) dialEnvd(ctx context.Context, _, addr string) (net.Conn, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	id, ok := strings.CutSuffix(host, envdHostSuffix)
	if !ok || !idPattern.MatchString(id) {
		return nil, provider.Errorf(provider.CodeNotFound, "no sandbox %q", host)
	}
	inst, err := s.prov.Connect(ctx, id)
	if err != nil {
		return nil, err
	}
	d, ok := inst.(provider.EnvdDialer)
	if !ok {
		inst.Close()
		return nil, provider.Errorf(provider.CodeUnsupported, "provider %s has no envd data plane", s.prov.Name())
	}
	c, err := d.DialEnvd(ctx)
	if err != nil {
		inst.Close()
		return nil, err
	}
	return &instConn{Conn: c, inst: inst}, nil
}

// instConn closes the instance handle with the connection.
type instConn struct {
	net.Conn
	inst provider.Instance
	once sync.Once
}

func (c *instConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.inst.Close() })
	return err
}

// maxStartBody bounds a Start request the proxy rewrites.
const maxStartBody = 4 << 20

// defaultCwd is where envd starts a process given no cwd in sandbox id: the template's
// working directory (provider.Info.Workdir: an image's WorkingDir, a Dockerfile's WORKDIR,
// E2B's setWorkdir) when it names one, else the user's home ("~"). When the provider cannot
// say, the home: the request then fails on its own if the sandbox is gone.
func (s *Server) defaultCwd(ctx context.Context, id string) string {
	inst, err := s.prov.Connect(ctx, id)
	if err != nil {
		return "~"
	}
	defer inst.Close()
	if info, err := inst.Info(ctx); err == nil && info.Workdir != "" {
		return info.Workdir
	}
	return "~"
}

// startIn makes a process started without a cwd start in dir (defaultCwd), as under envd,
// instead of the agent's default working directory. It rewrites Connect streaming requests
// (JSON or binary, uncompressed) and leaves anything else alone.
func startIn(r *http.Request, dir string) error {
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	asJSON := ct == "application/connect+json"
	if !asJSON && ct != "application/connect+proto" {
		return nil
	}
	if enc := r.Header.Get("Connect-Content-Encoding"); enc != "" && enc != "identity" {
		return nil
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxStartBody+1))
	r.Body.Close()
	if err != nil {
		return errors.New("reading the request: " + err.Error())
	}
	if len(body) > maxStartBody {
		return errors.New("the Start request is too large")
	}
	out := body
	if len(body) >= 5 && body[0] == 0 && int(binary.BigEndian.Uint32(body[1:5])) == len(body)-5 {
		var req process.StartRequest
		msg := body[5:]
		if asJSON {
			err = protojson.UnmarshalOptions{DiscardUnknown: true}.Unmarshal(msg, &req)
		} else {
			err = proto.Unmarshal(msg, &req)
		}
		if err == nil && req.GetProcess() != nil && req.GetProcess().Cwd == nil {
			req.Process.Cwd = &dir
			var nm []byte
			if asJSON {
				nm, err = protojson.Marshal(&req)
			} else {
				nm, err = proto.Marshal(&req)
			}
			if err == nil {
				out = make([]byte, 5, 5+len(nm))
				binary.BigEndian.PutUint32(out[1:5], uint32(len(nm)))
				out = append(out, nm...)
			}
		}
	}
	r.Body = io.NopCloser(bytes.NewReader(out))
	r.ContentLength = int64(len(out))
	r.Header.Set("Content-Length", strconv.Itoa(len(out)))
	r.Header.Del("Transfer-Encoding")
	return nil
}

// CodeInterpreterPort is the port of the code-interpreter server in a sandbox
// (@e2b/code-interpreter's JUPYTER_PORT).
const CodeInterpreterPort = 49999

// CodeInterpreterOpen reports whether r, for port of a sandbox, is one of the requests E2B's
// Code Interpreter SDK sends without a credential: @e2b/code-interpreter 2.8.0 sends the
// sandbox's access token (X-Access-Token) with /execute only, not with /health or the
// /contexts routes, which list, create, restart and remove kernels but run no code. They are
// served on the sandbox's id alone, as E2B serves them; /execute still needs the token.
func CodeInterpreterOpen(r *http.Request, port int) bool {
	if port != CodeInterpreterPort {
		return false
	}
	p := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	switch {
	case r.Method == http.MethodGet && len(p) == 1 && p[0] == "health":
		return true
	case (r.Method == http.MethodGet || r.Method == http.MethodPost) && len(p) == 1 && p[0] == "contexts":
		return true
	case r.Method == http.MethodDelete && len(p) == 2 && p[0] == "contexts":
		return true
	case r.Method == http.MethodPost && len(p) == 3 && p[0] == "contexts" && p[2] == "restart":
		return true
	}
	return false
}

// PortAccessToken reports whether r carries sandbox id's access token in X-Access-Token
// (the envdAccessToken of create and connect, which @e2b/code-interpreter also sends to the
// code-interpreter port with /execute), a credential there as at its envd. It removes the
// header either way: the token never reaches the sandbox.
func (s *Server) PortAccessToken(r *http.Request, id string) bool {
	tok := strings.TrimSpace(r.Header.Get(headerAccessToken))
	r.Header.Del(headerAccessToken)
	return s.tokenOK(r.Context(), id, tok)
}
