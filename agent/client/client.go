// Package client is the host-side Go client of the in-sandbox agent
// (package agent): exec with streaming output, detached processes, signals,
// file transfer and file operations, watches, deadlines and TCP tunnels, all
// over the agent's unix socket. The agent speaks envd's protocol, so the same
// client reaches an E2B envd over the network (Options.HTTPClient and
// BaseURL) for the calls envd has: everything but Busy, SetDeadline,
// SetLimits, DialPort and the offset, length and mode of file transfers,
// which are the agent's own.
//
// The client speaks HTTP/1.1 with a pool of keep-alive connections. On a
// unix socket there is no handshake to amortise, so a pooled HTTP/1.1
// connection costs one write and one read per request, without HTTP/2's
// framing, HPACK and flow-control windows (which also cap bulk transfers);
// the port tunnel needs an HTTP/1.1 upgrade anyway. RPCs use Connect with
// the binary protobuf codec and no compression.
//
// Everything the agent sends is untrusted: code in the sandbox can replace
// the agent. Message sizes are bounded (Options.MaxMessageBytes), error
// bodies are read up to a small limit, and names and paths returned by the
// agent are data to validate, never paths to use on the host unchecked.
//
// A Client is safe for concurrent use.
package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/tupper-dev/tupper/agent/internal/zerocopy"
	"github.com/tupper-dev/tupper/agent/spec/filesystem/filesystemconnect"
	"github.com/tupper-dev/tupper/agent/spec/process/processconnect"
)

// DialFunc opens a new connection to the agent.
type DialFunc func(ctx context.Context) (net.Conn, error)

// Options configure a Client. The zero value is not usable: set SocketPath,
// Dial, or BaseURL and HTTPClient.
type Options struct {
	// SocketPath is the agent's unix socket, used when Dial is nil.
	SocketPath string
	// Dial opens a connection to the agent; it overrides SocketPath.
	Dial DialFunc
	// HTTPClient, when set, sends every request to BaseURL instead of
	// connections from Dial or SocketPath (an envd reached over the network,
	// as E2B's are). DialPort, which needs a connection of its own, is then
	// not available.
	HTTPClient *http.Client
	// BaseURL is the agent's base URL with HTTPClient, such as
	// https://49983-ID.e2b.app; unused without it.
	BaseURL string
	// Header is set on every request: routing headers of a proxy in front of
	// the agent (E2B's E2b-Sandbox-Id).
	Header http.Header
	// AccessToken is sent as X-Access-Token when non-empty.
	AccessToken string
	// User is the default OS user for every call; empty means the agent's
	// default user. See WithUser.
	User string
	// MaxMessageBytes bounds one RPC message from the agent (an output
	// chunk, a directory listing). Zero means 64 MiB.
	MaxMessageBytes int
}

// Client talks to one agent.
type Client struct {
	hc     *http.Client
	tr     *http.Transport // nil with Options.HTTPClient
	dial   DialFunc        // nil with Options.HTTPClient
	base   string
	header http.Header
	token  string
	user   string
	maxMsg int
	rpc    *rpcClients
}

// rpcClients are the Connect clients of the agent's two services, each built on first
// use: building one costs reflection over its service's descriptors, and most programs
// (tupper exec, for one) use only one service.
type rpcClients struct {
	procOnce sync.Once
	proc     processconnect.ProcessClient
	fsOnce   sync.Once
	fs       filesystemconnect.FilesystemClient
}

const baseURL = "http://tupper-agent"

// maxErrorBody bounds how much of an error response is read.
const maxErrorBody = 64 << 10

// New returns a client for the agent listening on the unix socket at path.
func New(socketPath string) *Client { return NewWithOptions(Options{SocketPath: socketPath}) }

// NewWithDialer returns a client that reaches the agent through dial.
func NewWithDialer(dial DialFunc) *Client { return NewWithOptions(Options{Dial: dial}) }

// NewWithOptions returns a client configured by o.
func NewWithOptions(o Options) *Client {
	maxMsg := o.MaxMessageBytes
	if maxMsg <= 0 {
		maxMsg = 64 << 20
	}
	c := &Client{base: baseURL, header: o.Header.Clone(), token: o.AccessToken, user: o.User, maxMsg: maxMsg}
	if o.HTTPClient != nil {
		c.hc, c.base = o.HTTPClient, strings.TrimSuffix(o.BaseURL, "/")
		c.initRPC()
		return c
	}
	dial := o.Dial
	if dial == nil {
		path := o.SocketPath
		dial = func(ctx context.Context) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		}
	}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			c, err := dial(ctx)
			if err != nil {
				return nil, err
			}
			// Request bodies from files go out with sendfile(2), in-memory
			// ones with one write, not in 32 KiB copies.
			return zerocopy.Wrap(c), nil
		},
		DisableCompression:     true,
		MaxIdleConns:           64,
		MaxIdleConnsPerHost:    64,
		IdleConnTimeout:        90 * time.Second,
		ResponseHeaderTimeout:  0,
		MaxResponseHeaderBytes: 64 << 10,
		WriteBufferSize:        64 << 10,
		ReadBufferSize:         64 << 10,
	}
	c.hc, c.tr, c.dial = &http.Client{Transport: tr}, tr, dial
	c.initRPC()
	return c
}

func (c *Client) initRPC() { c.rpc = &rpcClients{} }

func (c *Client) rpcOptions() []connect.ClientOption {
	return []connect.ClientOption{
		connect.WithReadMaxBytes(c.maxMsg),
		connect.WithAcceptCompression("gzip", nil, nil), // never ask for compressed replies
		connect.WithInterceptors(headerInterceptor{c}),
	}
}

func (c *Client) procRPC() processconnect.ProcessClient {
	r := c.rpc
	r.procOnce.Do(func() { r.proc = processconnect.NewProcessClient(c.hc, c.base, c.rpcOptions()...) })
	return r.proc
}

func (c *Client) fsRPC() filesystemconnect.FilesystemClient {
	r := c.rpc
	r.fsOnce.Do(func() { r.fs = filesystemconnect.NewFilesystemClient(c.hc, c.base, c.rpcOptions()...) })
	return r.fs
}

// WithUser returns a client that acts as the OS user name (sharing c's
// connections); "" means the agent's default user.
func (c *Client) WithUser(name string) *Client {
	d := *c
	d.user = name
	d.initRPC()
	return &d
}

// Close releases idle connections (none of an Options.HTTPClient, which is
// the caller's). The client stays usable.
func (c *Client) Close() error {
	if c.tr != nil {
		c.tr.CloseIdleConnections()
	}
	return nil
}

// setHeaders sets Options.Header and the access token on a request.
func (c *Client) setHeaders(hdr http.Header) {
	for k, v := range c.header {
		hdr[k] = append([]string(nil), v...)
	}
	if c.token != "" {
		hdr.Set("X-Access-Token", c.token)
	}
}

// setUser names user, or the client's user when user is empty, in the
// request's Authorization, unless it already has one.
func (c *Client) setUser(hdr http.Header, user string) {
	if user == "" {
		user = c.user
	}
	if user != "" && hdr.Get("Authorization") == "" {
		hdr.Set("Authorization", basicAuth(user))
	}
}

// headerInterceptor adds the headers, the access token and (on unary calls)
// the user to every RPC. A streaming call's user is set on its request by its
// method: connect adds a request's headers to the stream's after the
// interceptors ran, so a user set here would come first, as a second
// Authorization, and win over the request's.
type headerInterceptor struct{ c *Client }

func (h headerInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		h.c.setHeaders(req.Header())
		h.c.setUser(req.Header(), "")
		return next(ctx, req)
	}
}

func (h headerInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		h.c.setHeaders(conn.RequestHeader())
		return conn
	}
}

func (h headerInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// Code classifies an agent error. The values are Connect's code names; REST
// statuses are mapped onto them.
type Code string

// Error codes returned in Error.Code.
const (
	CodeNotFound           Code = "not_found"
	CodeAlreadyExists      Code = "already_exists"
	CodeInvalidArgument    Code = "invalid_argument"
	CodeUnauthenticated    Code = "unauthenticated"
	CodePermissionDenied   Code = "permission_denied"
	CodeResourceExhausted  Code = "resource_exhausted"
	CodeDeadlineExceeded   Code = "deadline_exceeded"
	CodeFailedPrecondition Code = "failed_precondition"
	CodeUnavailable        Code = "unavailable"
	CodeInternal           Code = "internal"
	CodeUnknown            Code = "unknown"
)

// Error is a failure reported by the agent.
type Error struct {
	Code Code
	// HTTPStatus is the REST status, 0 for RPCs.
	HTTPStatus int
	Message    string
}

func (e *Error) Error() string { return "agent: " + string(e.Code) + ": " + e.Message }

// CodeOf returns err's Code, or "" when err is not an *Error.
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// IsNotFound reports whether err says the process, file or watcher does not exist.
func IsNotFound(err error) bool { return CodeOf(err) == CodeNotFound }

// rpcErr converts connect errors into *Error; other errors pass through.
func rpcErr(err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		if ce.Code() == connect.CodeCanceled || ce.Code() == connect.CodeDeadlineExceeded {
			if cause := errors.Unwrap(ce); cause != nil && (errors.Is(cause, context.Canceled) || errors.Is(cause, context.DeadlineExceeded)) {
				return cause // the caller's context, not the agent
			}
		}
		return &Error{Code: Code(ce.Code().String()), Message: bounded(ce.Message())}
	}
	return err
}

func bounded(s string) string {
	if len(s) > 4096 {
		return s[:4096] + "…"
	}
	return s
}

func statusCode(status int) Code {
	switch status {
	case http.StatusNotFound:
		return CodeNotFound
	case http.StatusBadRequest:
		return CodeInvalidArgument
	case http.StatusUnauthorized:
		return CodeUnauthenticated
	case http.StatusForbidden:
		return CodePermissionDenied
	case http.StatusConflict:
		return CodeAlreadyExists
	case http.StatusInsufficientStorage, http.StatusTooManyRequests:
		return CodeResourceExhausted
	case http.StatusBadGateway, http.StatusServiceUnavailable:
		return CodeUnavailable
	case http.StatusGatewayTimeout:
		return CodeDeadlineExceeded
	}
	if status >= 500 {
		return CodeInternal
	}
	return CodeUnknown
}

// httpError reads a bounded REST error body {"code","message"}.
func httpError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	var body struct {
		Message string `json:"message"`
	}
	msg := strings.TrimSpace(string(b))
	if json.Unmarshal(b, &body) == nil && body.Message != "" {
		msg = body.Message
	}
	if msg == "" {
		msg = resp.Status
	}
	return &Error{Code: statusCode(resp.StatusCode), HTTPStatus: resp.StatusCode, Message: bounded(msg)}
}

func (c *Client) newRequest(ctx context.Context, method, path string, q url.Values, body io.Reader) (*http.Request, error) {
	u := c.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, err
	}
	c.setHeaders(req.Header)
	return req, nil
}

// do sends req and returns the response when its status is want.
func (c *Client) do(req *http.Request, want int) (*http.Response, error) {
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != want {
		defer resp.Body.Close()
		return nil, httpError(resp)
	}
	return resp, nil
}

// Health checks that the agent answers GET /health with 204.
func (c *Client) Health(ctx context.Context) error {
	req, err := c.newRequest(ctx, http.MethodGet, "/health", nil, nil)
	if err != nil {
		return err
	}
	resp, err := c.do(req, http.StatusNoContent)
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// BusyInfo is the answer of Busy.
type BusyInfo struct {
	// Busy is true while any process started through the agent runs.
	Busy bool `json:"busy"`
	// Processes counts those processes.
	Processes int `json:"processes"`
	// LastActivityUnixMs is when the agent last saw a request or a process end.
	LastActivityUnixMs int64 `json:"lastActivityUnixMs"`
	// DeadlineUnix is the agent's lifetime deadline, 0 if none.
	DeadlineUnix int64 `json:"deadlineUnix"`
}

// Busy reports whether processes started through the agent are running.
// It does not count as activity for the agent's idle timeout.
func (c *Client) Busy(ctx context.Context) (BusyInfo, error) {
	var out BusyInfo
	req, err := c.newRequest(ctx, http.MethodGet, "/tupper/busy", nil, nil)
	if err != nil {
		return out, err
	}
	resp, err := c.do(req, http.StatusOK)
	if err != nil {
		return out, err
	}
	defer resp.Body.Close()
	err = json.NewDecoder(io.LimitReader(resp.Body, maxErrorBody)).Decode(&out)
	return out, err
}

// SetDeadline sets the agent's lifetime deadline; the zero time clears it.
// At the deadline the agent kills every process and exits.
func (c *Client) SetDeadline(ctx context.Context, t time.Time) error {
	return c.postDeadline(ctx, `{"deadlineUnix":`+strconv.FormatInt(deadlineUnix(t), 10)+`}`)
}

// SetLimits sets the agent's lifetime deadline (the zero time clears it) and
// its idle timeout (rounded up to whole seconds; 0: never), counted from now,
// in one request.
func (c *Client) SetLimits(ctx context.Context, deadline time.Time, idle time.Duration) error {
	if idle < 0 {
		return errors.New("negative idle timeout")
	}
	secs := int64((idle + time.Second - 1) / time.Second)
	return c.postDeadline(ctx, `{"deadlineUnix":`+strconv.FormatInt(deadlineUnix(deadline), 10)+
		`,"idleTimeoutSeconds":`+strconv.FormatInt(secs, 10)+`}`)
}

func deadlineUnix(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return max(t.Unix(), 1)
}

func (c *Client) postDeadline(ctx context.Context, s string) error {
	return c.post(ctx, "/tupper/deadline", nil, "application/json", strings.NewReader(s))
}

// post sends body of contentType to path with query q, for an answer 200 whose body is
// read and dropped (so the connection is reused).
func (c *Client) post(ctx context.Context, path string, q url.Values, contentType string, body io.Reader) error {
	req, err := c.newRequest(ctx, http.MethodPost, path, q, body)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", contentType)
	resp, err := c.do(req, http.StatusOK)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody))
	resp.Body.Close()
	return nil
}

// DialPort opens a TCP connection to 127.0.0.1:port inside the sandbox
// through the agent (GET /tupper/tunnel upgraded to a raw stream), which
// works even when the sandbox has no network. The returned conn supports
// CloseWrite.
func (c *Client) DialPort(ctx context.Context, port int) (net.Conn, error) {
	if port < 1 || port > 65535 {
		return nil, &Error{Code: CodeInvalidArgument, Message: "port out of range"}
	}
	if c.dial == nil {
		return nil, errors.New("agent: DialPort needs a client that dials the agent (Options.Dial or SocketPath)")
	}
	conn, err := c.dial(ctx)
	if err != nil {
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	fail := func(err error) (net.Conn, error) {
		stop()
		conn.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "GET /tupper/tunnel?port=%d HTTP/1.1\r\nHost: tupper-agent\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n", port)
	if c.token != "" {
		fmt.Fprintf(&b, "X-Access-Token: %s\r\n", c.token)
	}
	b.WriteString("\r\n")
	if _, err := io.WriteString(conn, b.String()); err != nil {
		return fail(err)
	}
	br := bufio.NewReaderSize(conn, 4096)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return fail(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		err := httpError(resp)
		resp.Body.Close()
		return fail(err)
	}
	if !stop() {
		conn.Close()
		return nil, ctx.Err()
	}
	return &tunnelConn{Conn: conn, r: br}, nil
}

// tunnelConn reads first what the response parser buffered.
type tunnelConn struct {
	net.Conn
	r *bufio.Reader
}

func (t *tunnelConn) Read(p []byte) (int, error) { return t.r.Read(p) }

// CloseWrite half-closes the tunnel: the sandbox side sees EOF.
func (t *tunnelConn) CloseWrite() error {
	if cw, ok := t.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.New("close write not supported")
}

// Quiesce asks the agent to close its listener and every connection before its sandbox is
// checkpointed (see package agent, "Checkpoints"), and returns once the agent has closed
// them all. The agent listens again when its init gets SIGUSR2. Idle connections of c are
// dropped: they are closed on the agent's side.
func (c *Client) Quiesce(ctx context.Context) error {
	if c.dial == nil {
		return &Error{Code: CodeFailedPrecondition, Message: "quiesce needs a dialled agent"}
	}
	conn, err := c.dial(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Now()) })
	defer stop()
	req := "POST /tupper/quiesce HTTP/1.1\r\nHost: tupper-agent\r\nContent-Length: 0\r\n"
	if c.token != "" {
		req += "X-Access-Token: " + c.token + "\r\n"
	}
	if _, err := io.WriteString(conn, req+"\r\n"); err != nil {
		return err
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return fmt.Errorf("quiesce: %w", err)
	}
	if resp.StatusCode != http.StatusNoContent {
		return httpError(resp)
	}
	// The agent closes this connection last: its end is the end of every host socket.
	if _, err := io.Copy(io.Discard, conn); err != nil {
		return fmt.Errorf("quiesce: %w", err)
	}
	c.tr.CloseIdleConnections()
	return nil
}
