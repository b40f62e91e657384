//go:build linux

package server_test

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/tupper-dev/tupper/server"
	"github.com/tupper-dev/tupper/server/servertest"
)

// previewServer serves ports 4000..4000+n-1 of a sandbox, each answering "port P PATH"
// with Service-Worker-Allowed: / (a page that wants a Service Worker over the whole origin).
const previewServer = `import http.server, threading
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        b = ("port %d %s" % (self.server.server_port, self.path)).encode()
        self.send_response(200)
        self.send_header("Service-Worker-Allowed", "/")
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(b)))
        self.end_headers()
        self.wfile.write(b)
    def log_message(self, *a):
        pass
for p in range(4001, 4000 + NPORTS):
    s = http.server.ThreadingHTTPServer(("127.0.0.1", p), H)
    threading.Thread(target=s.serve_forever, daemon=True).start()
http.server.ThreadingHTTPServer(("127.0.0.1", 4000), H).serve_forever()
`

// listening counts the TCP sockets of this process in the LISTEN state.
func listening(t *testing.T) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	mine := map[string]bool{}
	for _, fd := range fds {
		l, err := os.Readlink("/proc/self/fd/" + fd.Name())
		if ino, ok := strings.CutPrefix(l, "socket:["); err == nil && ok {
			mine[strings.TrimSuffix(ino, "]")] = true
		}
	}
	n := 0
	for _, f := range []string{"/proc/self/net/tcp", "/proc/self/net/tcp6"} {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(strings.NewReader(string(data)))
		sc.Scan() // the header
		for sc.Scan() {
			fs := strings.Fields(sc.Text())
			if len(fs) > 9 && fs[3] == "0A" && mine[fs[9]] {
				n++
			}
		}
	}
	return n
}

// Previews go through the agent's tunnel (Sandbox.DialPort): previewing many ports of a
// sandbox whose network is none opens no listening socket in the server's process (each
// previewed port used to open one on 127.0.0.1, for ever, reachable by any local process
// without a credential). Path-form previews, served on the API's origin, carry
// Content-Security-Policy: sandbox and lose the sandbox's Service-Worker-Allowed; host
// previews, on an origin of their own, are passed as they are.
func TestPreviewThroughTunnel(t *testing.T) {
	const ports = 32
	prov := servertest.Provider(t, 42)
	if !prov.Capabilities().Has("preview") {
		servertestSkip(t, "the provider has no previews (memory); TestPreview covers the proxy")
	}
	srv := servertest.Start(t, prov, "", func(c *server.Config) { c.Domain = "preview.test" })
	before := listening(t)

	var sb struct{ ID, Token string }
	if code := call(t, "POST", srv.URL+"/v1/sandboxes", srv.Key, map[string]any{"network": map[string]string{"mode": "none"}}, &sb); code != 201 {
		t.Fatalf("create: %d", code)
	}
	base := srv.URL + "/v1/sandboxes/" + sb.ID
	if code := call(t, "POST", base+"/files/write", sb.Token, map[string]string{"path": "/tmp/previews.py", "content": strings.Replace(previewServer, "NPORTS", fmt.Sprint(ports), 1)}, nil); code != 200 && code != 204 {
		t.Fatalf("write: %d", code)
	}
	var proc struct {
		Ready bool
		URL   string
	}
	if code := call(t, "POST", base+"/processes", sb.Token, map[string]any{
		"command": "python3 /tmp/previews.py", "name": "web",
		"ready": map[string]any{"port": 4000, "http": true, "path": "/"}, "readyTimeoutMs": 60000,
	}, &proc); code != 201 && code != 200 {
		t.Fatalf("start: %d", code)
	}
	// The readiness check dialled through the tunnel; the URL is the server's own route.
	if !proc.Ready || proc.URL != base+"/proxy/4000/" {
		t.Fatalf("process = %+v, want ready with URL %s", proc, base+"/proxy/4000/")
	}

	get := func(u, cred, host string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", u, nil)
		if cred != "" {
			req.Header.Set("Authorization", "Bearer "+cred)
		}
		if host != "" {
			req.Host = host
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	checkPathForm := func(what string, resp *http.Response) {
		t.Helper()
		if v := resp.Header.Values("Service-Worker-Allowed"); len(v) != 0 {
			t.Errorf("%s: Service-Worker-Allowed %q reached the client", what, v)
		}
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.HasPrefix(csp, "sandbox ") || strings.Contains(csp, "allow-same-origin") {
			t.Errorf("%s: Content-Security-Policy %q, want sandbox without allow-same-origin", what, csp)
		}
	}
	for p := 4000; p < 4000+ports; p++ {
		var port struct{ URL, SignedURL string }
		if code := call(t, "POST", fmt.Sprintf("%s/ports/%d/expose", base, p), sb.Token, nil, &port); code != 200 {
			t.Fatalf("expose %d: %d", p, code)
		}
		resp, body := get(port.URL+"a?b=1", sb.Token, "")
		if want := fmt.Sprintf("port %d /a?b=1", p); resp.StatusCode != 200 || body != want {
			t.Fatalf("path preview of %d: %d %q, want %q", p, resp.StatusCode, body, want)
		}
		checkPathForm(fmt.Sprintf("path preview of %d", p), resp)
		su, _ := url.Parse(port.SignedURL)
		resp, body = get(srv.URL+su.Path+"s", "", "")
		if want := fmt.Sprintf("port %d /s", p); resp.StatusCode != 200 || body != want {
			t.Fatalf("signed preview of %d: %d %q, want %q", p, resp.StatusCode, body, want)
		}
		checkPathForm(fmt.Sprintf("signed preview of %d", p), resp)
	}
	resp, body := get(srv.URL+"/h", srv.Key, fmt.Sprintf("4001-%s.preview.test", sb.ID))
	if resp.StatusCode != 200 || body != "port 4001 /h" || resp.Header.Get("Service-Worker-Allowed") != "/" || resp.Header.Get("Content-Security-Policy") != "" {
		t.Errorf("host preview: %d %q, headers %v", resp.StatusCode, body, resp.Header)
	}
	if after := listening(t); after > before {
		t.Fatalf("the server's process listens on %d TCP sockets after previewing %d ports, %d before", after, ports, before)
	}
	// Nothing answers on a port no process listens on: a clear error, not a hang.
	if resp, body := get(base+"/proxy/4999/", sb.Token, ""); resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("preview of a closed port: %d %s", resp.StatusCode, body)
	}
}
