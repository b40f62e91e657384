package server

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/providers/memory"
	"github.com/tupper-dev/tupper/server/api"
)

// previewProvider is the memory provider with previews: every port of every sandbox is the
// test's backend server.
type previewProvider struct {
	*memory.Provider
	target string
}

type previewInstance struct {
	provider.Instance
	target string
}

func (p previewProvider) Capabilities() provider.Capabilities {
	c := p.Provider.Capabilities()
	c[provider.CapPreview] = true
	return c
}

func (p previewProvider) Create(ctx context.Context, spec provider.CreateSpec) (provider.Instance, error) {
	in, err := p.Provider.Create(ctx, spec)
	if err != nil {
		return nil, err
	}
	return previewInstance{in, p.target}, nil
}

func (p previewProvider) Connect(ctx context.Context, id string) (provider.Instance, error) {
	in, err := p.Provider.Connect(ctx, id)
	if err != nil {
		return nil, err
	}
	return previewInstance{in, p.target}, nil
}

func (i previewInstance) PreviewURL(ctx context.Context, port int) (string, error) {
	return i.target + "/", nil
}

// backend answers plain requests with what it saw, and echoes after an Upgrade.
func backend(t *testing.T) *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") == "websocket" {
			c, brw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
			brw.Flush()
			buf := make([]byte, 5)
			if _, err := io.ReadFull(brw, buf); err == nil {
				c.Write(buf)
			}
			return
		}
		w.Header().Set("X-Seen-Auth", r.Header.Get("Authorization")+r.Header.Get("X-API-Key"))
		io.WriteString(w, r.Method+" "+r.URL.RequestURI())
	}))
}

func TestPreview(t *testing.T) {
	be := backend(t)
	defer be.Close()
	e := newEnv(t, func(c *Config) {
		c.Provider = previewProvider{memory.New(), be.URL}
		c.Domain = "preview.test"
	})
	sb := e.create(nil)
	var port api.Port
	e.want(200, &port, "POST", "/v1/sandboxes/"+sb.ID+"/ports/3000/expose", sb.Token, nil)
	if !strings.HasSuffix(port.URL, "/v1/sandboxes/"+sb.ID+"/proxy/3000/") || port.HostURL != "http://3000-"+sb.ID+".preview.test/" || port.Public {
		t.Fatalf("expose = %+v", port)
	}
	// Path form: needs a credential; the credential is not passed on to the sandbox.
	e.want(401, nil, "GET", "/v1/sandboxes/"+sb.ID+"/proxy/3000/a/b?x=1", "", nil)
	resp, body := e.do("GET", "/v1/sandboxes/"+sb.ID+"/proxy/3000/a/b?x=1", sb.Token, nil)
	if resp.StatusCode != 200 || string(body) != "GET /a/b?x=1" || resp.Header.Get("X-Seen-Auth") != "" {
		t.Fatalf("path preview: %d %q auth %q", resp.StatusCode, body, resp.Header.Get("X-Seen-Auth"))
	}
	// Signed link: no credential needed; a tampered one is refused.
	u, _ := url.Parse(port.SignedURL)
	resp, body = e.do("POST", u.Path+"x", "", nil)
	if resp.StatusCode != 200 || string(body) != "POST /x" {
		t.Fatalf("signed preview: %d %q", resp.StatusCode, body)
	}
	e.want(401, nil, "GET", strings.Replace(u.Path, ".", ".A", 1), "", nil)
	// Host routing.
	hostGet := func(cred string) (*http.Response, string) {
		return portGet(t, e.ts.URL+"/h?q=2", "3000-"+sb.ID+".preview.test", nil, cred)
	}
	// E2B's routing headers name the same port on any host, with the same rules.
	headerGet := func(cred string) (*http.Response, string) {
		return portGet(t, e.ts.URL+"/h?q=2", "", map[string]string{"E2b-Sandbox-Id": sb.ID, "E2b-Sandbox-Port": "3000"}, cred)
	}
	if resp, _ := hostGet(""); resp.StatusCode != 401 {
		t.Fatalf("host preview without credential: %d", resp.StatusCode)
	}
	if resp, _ := headerGet(""); resp.StatusCode != 401 {
		t.Fatalf("header preview without credential: %d", resp.StatusCode)
	}
	if resp, body := hostGet(e.key); resp.StatusCode != 200 || body != "GET /h?q=2" {
		t.Fatalf("host preview: %d %q", resp.StatusCode, body)
	}
	if resp, body := headerGet(e.key); resp.StatusCode != 200 || body != "GET /h?q=2" {
		t.Fatalf("header preview: %d %q", resp.StatusCode, body)
	}
	// Made public: no credential needed, in every form.
	e.want(200, &port, "POST", "/v1/sandboxes/"+sb.ID+"/ports/3000/expose", sb.Token, map[string]bool{"public": true})
	if resp, body := hostGet(""); resp.StatusCode != 200 || body != "GET /h?q=2" {
		t.Fatalf("public host preview: %d %q", resp.StatusCode, body)
	}
	if resp, body := headerGet(""); resp.StatusCode != 200 || body != "GET /h?q=2" {
		t.Fatalf("public header preview: %d %q", resp.StatusCode, body)
	}
	e.want(200, nil, "GET", "/v1/sandboxes/"+sb.ID+"/proxy/3000/", "", nil)
	e.want(401, nil, "GET", "/v1/sandboxes/"+sb.ID+"/proxy/3001/", "", nil) // another port stays private
	// A WebSocket upgrade passes through.
	c, err := net.Dial("tcp", strings.TrimPrefix(e.ts.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, "GET /v1/sandboxes/"+sb.ID+"/proxy/3000/ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nAuthorization: Bearer "+sb.Token+"\r\n\r\n")
	br := bufio.NewReader(c)
	status, _ := br.ReadString('\n')
	if !strings.Contains(status, "101") {
		t.Fatalf("upgrade: %q", status)
	}
	for line, _ := br.ReadString('\n'); line != "\r\n" && line != ""; line, _ = br.ReadString('\n') {
	}
	io.WriteString(c, "hello")
	echo := make([]byte, 5)
	if _, err := io.ReadFull(br, echo); err != nil || string(echo) != "hello" {
		t.Fatalf("websocket echo %q %v", echo, err)
	}
	var ports struct{ Ports []api.Port }
	e.want(200, &ports, "GET", "/v1/sandboxes/"+sb.ID+"/ports", sb.Token, nil)
	if len(ports.Ports) != 1 || !ports.Ports[0].Public {
		t.Fatalf("ports = %+v", ports)
	}
	e.want(204, nil, "DELETE", "/v1/sandboxes/"+sb.ID+"/ports/3000", sb.Token, nil)
	e.want(401, nil, "GET", "/v1/sandboxes/"+sb.ID+"/proxy/3000/", "", nil)
}

// portGet sends GET u with Host set to host (when not ""), the headers and a bearer
// credential (when not ""), and returns the response and its body.
func portGet(t *testing.T, u, host string, headers map[string]string, cred string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", u, nil)
	if host != "" {
		req.Host = host
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	if cred != "" {
		req.Header.Set("Authorization", "Bearer "+cred)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func TestPresignedFiles(t *testing.T) {
	e := newEnv(t)
	sb := e.create(nil)
	var put, get struct{ URL string }
	e.want(200, &put, "POST", "/v1/sandboxes/"+sb.ID+"/files/presign", sb.Token, map[string]any{"path": "big/file.bin", "method": "PUT"})
	e.want(200, &get, "POST", "/v1/sandboxes/"+sb.ID+"/files/presign", sb.Token, map[string]any{"path": "big/file.bin"})
	data := strings.Repeat("0123456789", 100000)
	req, _ := http.NewRequest("PUT", put.URL, strings.NewReader(data))
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 204 {
		t.Fatalf("upload: %v %v", resp, err)
	}
	resp.Body.Close()
	resp, err = http.Get(get.URL)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(got) != data {
		t.Fatalf("download: %d, %d bytes", resp.StatusCode, len(got))
	}
	// A GET link cannot upload, a changed path or expiry breaks the signature.
	for _, bad := range []string{
		strings.Replace(get.URL, "method=GET", "method=PUT", 1),
		strings.Replace(get.URL, "file.bin", "other.bin", 1),
		strings.Replace(get.URL, "expires=", "expires=9", 1),
	} {
		resp, err := http.Get(bad)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 401 {
			t.Errorf("tampered link %s: %d", bad, resp.StatusCode)
		}
	}
	// An expired link.
	old := e.srv.cfg
	_ = old
	q := url.Values{"sandbox": {sb.ID}, "path": {"big/file.bin"}, "method": {"GET"}, "expires": {"1"}}
	q.Set("sig", hexMAC(e.srv, "files", "GET", sb.ID, "big/file.bin", "1"))
	resp, _ = http.Get(e.ts.URL + "/v1/signed/files?" + q.Encode())
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Errorf("expired link: %d", resp.StatusCode)
	}
	// Streaming download by the API, with a range.
	r2, body := e.do("GET", "/v1/sandboxes/"+sb.ID+"/files/content?path=big/file.bin&offset=10&length=5", sb.Token, nil)
	if r2.StatusCode != 200 || string(body) != "01234" {
		t.Fatalf("range: %d %q", r2.StatusCode, body)
	}
}

func hexMAC(s *Server, parts ...string) string {
	const hexdigits = "0123456789abcdef"
	m := s.mac(parts...)
	out := make([]byte, 0, 2*len(m))
	for _, b := range m {
		out = append(out, hexdigits[b>>4], hexdigits[b&15])
	}
	return string(out)
}
