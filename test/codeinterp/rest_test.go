//go:build linux

package codeinterp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/tupper-dev/tupper/providers/remote"
	"github.com/tupper-dev/tupper/sandbox"
	"github.com/tupper-dev/tupper/server/api"
	"github.com/tupper-dev/tupper/server/servertest"
	"github.com/tupper-dev/tupper/template"
)

// TestCodeREST runs cells through tupper serve's POST /v1/sandboxes/{id}/code and its
// contexts routes, on a real sandbox of the template: state kept between two calls, a
// streamed matplotlib PNG, the cell's error, a context of its own.
func TestCodeREST(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Minute)
	defer cancel()
	p, _ := setup(ctx, t)
	srv := servertest.Start(t, p, "")

	call := func(method, path, cred, accept string, body any) (*http.Response, []byte) {
		t.Helper()
		var rd io.Reader
		if body != nil {
			buf, _ := json.Marshal(body)
			rd = bytes.NewReader(buf)
		}
		req, err := http.NewRequestWithContext(ctx, method, srv.URL+path, rd)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+cred)
		req.Header.Set("Content-Type", "application/json")
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp, data
	}
	resp, data := call("POST", "/v1/sandboxes", srv.Key, "", map[string]any{"template": template.CodeInterpreter})
	var sb api.Sandbox
	if resp.StatusCode != 201 || json.Unmarshal(data, &sb) != nil || sb.Token == "" {
		t.Fatalf("create: %d %s", resp.StatusCode, data)
	}
	defer call("DELETE", "/v1/sandboxes/"+sb.ID, srv.Key, "", nil)
	code := "/v1/sandboxes/" + sb.ID + "/code"
	run := func(body map[string]any) api.Execution {
		t.Helper()
		resp, data := call("POST", code, sb.Token, "", body)
		var ex api.Execution
		if resp.StatusCode != 200 || json.Unmarshal(data, &ex) != nil {
			t.Fatalf("%v: %d %s", body, resp.StatusCode, data)
		}
		return ex
	}

	run(map[string]any{"code": "x = 40"})
	if ex := run(map[string]any{"code": "print('hi')\nx + 2"}); len(ex.Results) != 1 || !ex.Results[0].IsMainResult ||
		ex.Results[0].Text != "42" || strings.Join(ex.Stdout, "") != "hi\n" || ex.ExecutionCount < 2 {
		t.Errorf("the second call: %+v", ex)
	}
	if ex := run(map[string]any{"code": "1/0"}); ex.Error == nil || ex.Error.Name != "ZeroDivisionError" ||
		!strings.Contains(ex.Error.Traceback, "ZeroDivisionError") {
		t.Errorf("an error: %+v", ex)
	}

	// Streamed: the frames as they come, then end.
	resp, data = call("POST", code, sb.Token, "application/x-ndjson", map[string]any{
		"code": "import matplotlib.pyplot as plt\nprint('plotting')\nplt.plot([1, 3, 2])\nplt.title('Line')\nplt.show()",
	})
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/x-ndjson" {
		t.Fatalf("stream: %d %s", resp.StatusCode, data)
	}
	var types []string
	var png []byte
	var chart map[string]any
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var f struct {
			Type string `json:"type"`
			api.CodeResult
			ExecutionCount int `json:"executionCount"`
		}
		if err := json.Unmarshal(sc.Bytes(), &f); err != nil {
			t.Fatalf("a frame: %v: %s", err, sc.Bytes())
		}
		types = append(types, f.Type)
		if f.Type == "result" {
			png, _ = base64.StdEncoding.DecodeString(f.PNG)
			chart = f.Chart
		}
		if f.Type == "end" && f.ExecutionCount < 4 {
			t.Errorf("end: executionCount %d", f.ExecutionCount)
		}
	}
	if strings.Join(types, " ") != "stdout result end" || !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) ||
		chart["type"] != "line" || chart["title"] != "Line" {
		t.Errorf("the streamed chart: frames %v, %d bytes of PNG, chart %v", types, len(png), chart)
	}

	// A context of its own, through the contexts routes.
	resp, data = call("POST", code+"/contexts", sb.Token, "", map[string]any{"cwd": "/tmp"})
	var c api.CodeContext
	if resp.StatusCode != 201 || json.Unmarshal(data, &c) != nil || c.Language != "python" || c.Cwd != "/tmp" {
		t.Fatalf("create a context: %d %s", resp.StatusCode, data)
	}
	if ex := run(map[string]any{"code": "x", "contextId": c.ID}); ex.Error == nil || ex.Error.Name != "NameError" {
		t.Errorf("the new context sees the default one's x: %+v", ex)
	}
	resp, data = call("GET", code+"/contexts", sb.Token, "", nil)
	var list api.CodeContextList
	if resp.StatusCode != 200 || json.Unmarshal(data, &list) != nil || !strings.Contains(string(data), c.ID) {
		t.Errorf("list contexts: %d %s", resp.StatusCode, data)
	}
	run(map[string]any{"code": "y = 1", "contextId": c.ID})
	if resp, data = call("POST", code+"/contexts/"+c.ID+"/restart", sb.Token, "", nil); resp.StatusCode != 204 {
		t.Fatalf("restart: %d %s", resp.StatusCode, data)
	}
	if ex := run(map[string]any{"code": "y", "contextId": c.ID}); ex.Error == nil || ex.Error.Name != "NameError" {
		t.Errorf("y after a restart: %+v", ex)
	}
	if resp, data = call("DELETE", code+"/contexts/"+c.ID, srv.Key, "", nil); resp.StatusCode != 204 {
		t.Fatalf("remove: %d %s", resp.StatusCode, data)
	}
	if resp, data = call("POST", code, sb.Token, "application/x-ndjson", map[string]any{"code": "1", "contextId": c.ID}); resp.StatusCode != 404 {
		t.Errorf("a removed context: %d %s", resp.StatusCode, data)
	}
	// Past its timeout the cell is interrupted (504-ish, not 200) and the context stays.
	if resp, data = call("POST", code, sb.Token, "", map[string]any{"code": "while True: pass", "timeoutMs": 1000}); resp.StatusCode < 400 {
		t.Errorf("a cell past its timeout: %d %s", resp.StatusCode, data)
	}
	if ex := run(map[string]any{"code": "x"}); len(ex.Results) != 1 || ex.Results[0].Text != "40" {
		t.Errorf("x after an interrupt: %+v", ex)
	}

	// The Go SDK through the remote provider (a server): RunCode in the same context.
	rb, err := sandbox.Connect(ctx, remote.New(remote.Config{URL: srv.URL, APIKey: srv.Key}), sb.ID, sandbox.ConnectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var streamed []string
	if ex, err := rb.RunCode(ctx, "print('remote')\nx + 3", sandbox.CodeOptions{OnStdout: func(s string) { streamed = append(streamed, s) }}); err != nil ||
		ex.Text() != "43" || strings.Join(streamed, "") != "remote\n" {
		t.Errorf("RunCode through the remote provider: %+v %v", ex, err)
	}
	if cs, err := rb.CodeContexts(ctx); err != nil || len(cs) == 0 {
		t.Errorf("CodeContexts through the remote provider: %v %v", cs, err)
	}

	// MCP's run_code, through the official Go client over the server's /mcp (whose sessions
	// reach the sandboxes they made): state across calls, a chart as image content.
	hc := &http.Client{Transport: bearer{srv.Key}}
	mc := mcp.NewClient(&mcp.Implementation{Name: "codeinterp-test", Version: "1"}, nil)
	ms, err := mc.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: srv.URL + "/mcp", HTTPClient: hc, DisableStandaloneSSE: true}, nil)
	if err != nil {
		t.Fatalf("MCP: %v", err)
	}
	defer ms.Close()
	res, err := ms.CallTool(ctx, &mcp.CallToolParams{Name: "create_sandbox", Arguments: map[string]any{"template": template.CodeInterpreter}})
	if err != nil || res.IsError {
		t.Fatalf("MCP create_sandbox: %v %+v", err, res)
	}
	nb, _ := res.StructuredContent.(map[string]any)["sandbox_id"].(string)
	if _, err = ms.CallTool(ctx, &mcp.CallToolParams{Name: "run_code", Arguments: map[string]any{"sandbox_id": nb, "code": "x = 40"}}); err != nil {
		t.Fatal(err)
	}
	res, err = ms.CallTool(ctx, &mcp.CallToolParams{Name: "run_code", Arguments: map[string]any{
		"sandbox_id": nb, "code": "import matplotlib.pyplot as plt\nplt.bar(['a', 'b'], [x, 2])\nplt.show()\nx + 1",
	}})
	if err != nil {
		t.Fatalf("run_code: %v", err)
	}
	var text string
	var img *mcp.ImageContent
	for _, c := range res.Content {
		switch c := c.(type) {
		case *mcp.TextContent:
			text += c.Text
		case *mcp.ImageContent:
			img = c
		}
	}
	if res.IsError || !strings.Contains(text, "41") || img == nil || img.MIMEType != "image/png" || !bytes.HasPrefix(img.Data, []byte("\x89PNG")) {
		t.Errorf("MCP run_code: error %v, text %q, image %v", res.IsError, text, img != nil)
	}
	res, err = ms.CallTool(ctx, &mcp.CallToolParams{Name: "run_code", Arguments: map[string]any{"sandbox_id": nb, "code": "undefined_name"}})
	if err != nil || !res.IsError || len(res.Content) == 0 || !strings.Contains(res.Content[0].(*mcp.TextContent).Text, "NameError") {
		t.Errorf("MCP run_code of an error: %v %+v", err, res)
	}
}

// bearer adds an API key to each request.
type bearer struct{ key string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.key)
	return http.DefaultTransport.RoundTrip(r)
}
