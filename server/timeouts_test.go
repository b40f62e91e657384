package server

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tupper-dev/tupper/providers/memory"
	"github.com/tupper-dev/tupper/server/api"
)

// closedWithin reports how long the server took to close c, reading (and discarding) what it
// sends, while trickle writes to it every 100 ms; limit bounds the wait.
func closedWithin(t *testing.T, c net.Conn, limit time.Duration, trickle func(i int) string) time.Duration {
	t.Helper()
	start := time.Now()
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		_, _ = io.Copy(io.Discard, c)
	}()
	for i := 0; ; i++ {
		select {
		case <-closed:
			return time.Since(start)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Since(start) > limit {
			t.Fatalf("the server kept the connection open for %v", limit)
		}
		if trickle != nil {
			if _, err := io.WriteString(c, trickle(i)); err != nil {
				<-closed
				return time.Since(start)
			}
		}
	}
}

func dialServer(t *testing.T, e *env) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(e.ts.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// A client that trickles its headers (slowloris), one that trickles the body of a request
// it has no credential for, and an idle keep-alive connection are cut at the configured
// timeouts.
func TestSlowClientsCut(t *testing.T) {
	e := newEnv(t, func(c *Config) {
		c.ReadHeaderTimeout = 500 * time.Millisecond
		c.ReadTimeout = time.Second
		c.IdleTimeout = 500 * time.Millisecond
	})
	t.Run("headers", func(t *testing.T) {
		c := dialServer(t, e)
		io.WriteString(c, "GET /v1/health HTTP/1.1\r\nHost: x\r\n")
		d := closedWithin(t, c, 10*time.Second, func(i int) string { return fmt.Sprintf("X-Slow-%d: y\r\n", i) })
		t.Logf("trickled headers: cut after %v", d)
		if d > 2*time.Second {
			t.Errorf("trickled headers cut after %v, want about 500 ms", d)
		}
	})
	t.Run("unauthenticated body", func(t *testing.T) {
		c := dialServer(t, e)
		io.WriteString(c, "POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{")
		d := closedWithin(t, c, 10*time.Second, func(int) string { return " " })
		t.Logf("trickled body: cut after %v", d)
		if d > 3*time.Second {
			t.Errorf("trickled body cut after %v, want about 1 s", d)
		}
	})
	t.Run("idle", func(t *testing.T) {
		c := dialServer(t, e)
		io.WriteString(c, "GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n")
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		start := time.Now()
		_, err = br.ReadByte() // blocks until the server closes the idle connection
		if d := time.Since(start); err == nil || d > 3*time.Second {
			t.Errorf("idle connection: %v after %v, want closed after about 500 ms", err, d)
		}
	})
}

// Streams and other answers that last as long as the caller asks outlive the read and
// write timeouts (here 1 s): an NDJSON run of 3 s, a plain run of 2 s, and an authenticated
// upload whose body takes 2 s to arrive.
func TestStreamsOutliveTimeouts(t *testing.T) {
	e := newEnv(t, func(c *Config) {
		c.ReadTimeout = time.Second
		c.WriteTimeout = time.Second
	})
	sb := e.create(nil)
	start := time.Now()
	resp, body := e.do("POST", "/v1/sandboxes/"+sb.ID+"/run", sb.Token, map[string]any{"command": "echo start; sleep 3; echo done"}, "Accept", "application/x-ndjson")
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"done`) || !strings.Contains(string(body), `"type":"result"`) {
		t.Errorf("NDJSON run of 3 s: %d %s", resp.StatusCode, body)
	}
	t.Logf("NDJSON run took %v", time.Since(start))
	var res api.RunResult
	e.want(200, &res, "POST", "/v1/sandboxes/"+sb.ID+"/run", sb.Token, map[string]any{"command": "sleep 2; echo late"})
	if res.Stdout != "late\n" {
		t.Errorf("plain run of 2 s: %+v", res)
	}
	pr, pw := io.Pipe()
	go func() {
		for i := 0; i < 10; i++ {
			fmt.Fprintf(pw, "line %d\n", i)
			time.Sleep(200 * time.Millisecond)
		}
		pw.Close()
	}()
	req, _ := http.NewRequest("PUT", e.ts.URL+"/v1/sandboxes/"+sb.ID+"/files/content?path=/tmp/slow.txt", pr)
	req.Header.Set("Authorization", "Bearer "+sb.Token)
	up, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	up.Body.Close()
	if up.StatusCode != 204 {
		t.Errorf("upload over 2 s: %d", up.StatusCode)
	}
	var rd struct{ Content string }
	e.want(200, &rd, "POST", "/v1/sandboxes/"+sb.ID+"/files/read", sb.Token, map[string]string{"path": "/tmp/slow.txt"})
	if strings.Count(rd.Content, "\n") != 10 {
		t.Errorf("uploaded %q", rd.Content)
	}
}

// Links the server hands out (previews, pre-signed files) use Config.BaseURL, never the
// Host header of the request, which the client chooses.
func TestLinksUseBaseURL(t *testing.T) {
	be := backend(t)
	defer be.Close()
	e := newEnv(t, func(c *Config) {
		c.Provider = previewProvider{memory.New(), be.URL}
		c.BaseURL = "https://sandboxes.example.test/"
	})
	sb := e.create(nil)
	var port api.Port
	e.want(200, &port, "POST", "/v1/sandboxes/"+sb.ID+"/ports/3000/expose", sb.Token, nil, "Host", "attacker.example")
	var signed struct{ URL string }
	e.want(200, &signed, "POST", "/v1/sandboxes/"+sb.ID+"/files/presign", sb.Token, map[string]string{"path": "a"}, "Host", "attacker.example")
	for what, u := range map[string]string{"preview url": port.URL, "signed preview": port.SignedURL, "pre-signed file": signed.URL} {
		if !strings.HasPrefix(u, "https://sandboxes.example.test/v1/") {
			t.Errorf("%s = %q, want it on the configured base URL", what, u)
		}
	}
	if _, err := New(t.Context(), Config{Provider: memory.New(), Store: e.st}); err == nil {
		t.Error("New without a BaseURL succeeded")
	}
}
