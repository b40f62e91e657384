//go:build linux

package server_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tupper-dev/tupper/internal/testenv"
	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/server"
	"github.com/tupper-dev/tupper/server/api"
	"github.com/tupper-dev/tupper/server/servertest"
	"github.com/tupper-dev/tupper/store"
)

// sendReq is send (builds_local_test.go) with a body to read and headers in a map.
func sendReq(t *testing.T, method, url string, body io.Reader, hdr map[string]string) (int, []byte) {
	t.Helper()
	var data []byte
	if body != nil {
		data, _ = io.ReadAll(body)
	}
	var pairs []string
	for k, v := range hdr {
		pairs = append(pairs, k, v)
	}
	resp, b := send(t, method, url, "", "", data, pairs...)
	return resp.StatusCode, b
}

// TestAuditLog drives a workload through every API — REST with a key and with a sandbox
// token, E2B's control and data planes, MCP, a signed URL — and checks that the audit log
// names each change with its key, source, action, target and result, that its filters
// select them, and that no secret, file contents, command line, command output, env value
// or credential of the workload is anywhere in it.
func TestAuditLog(t *testing.T) {
	prov := servertest.Provider(t, 53)
	dir := t.TempDir()
	srv := servertest.Start(t, prov, dir, func(c *server.Config) { c.AllowPrivateWebhooks = true })
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	key, err := srv.Store.AuthenticateKey(ctx, srv.Key)
	if err != nil {
		t.Fatal(err)
	}
	mark := fmt.Sprint(time.Now().UnixNano())
	var (
		secretValue = "secretvalue-" + mark
		fileContent = "filecontent-" + mark
		envValue    = "envvalue-" + mark
		cmdLine     = "cmdline-" + mark // the command prints it in upper case: output differs
	)
	bearer := map[string]string{"Authorization": "Bearer " + srv.Key, "Content-Type": "application/json"}
	jsonBody := func(v any) io.Reader { b, _ := json.Marshal(v); return bytes.NewReader(b) }

	// REST: create, exec, files with the key and with the sandbox's token.
	var sb api.Sandbox
	st, b := sendReq(t, "POST", srv.URL+"/v1/sandboxes", jsonBody(map[string]any{"env": map[string]string{"AUDIT_ENV": envValue}}), bearer)
	if st != http.StatusCreated || json.Unmarshal(b, &sb) != nil || sb.Token == "" {
		t.Fatalf("create: %d %s", st, b)
	}
	defer sendReq(t, "DELETE", srv.URL+"/v1/sandboxes/"+sb.ID, nil, bearer)
	st, b = sendReq(t, "POST", srv.URL+"/v1/sandboxes/"+sb.ID+"/run", jsonBody(api.RunRequest{Command: "echo " + cmdLine + " $AUDIT_ENV | tr a-z A-Z"}), bearer)
	if st != http.StatusOK || !strings.Contains(string(b), strings.ToUpper(cmdLine)) {
		t.Fatalf("run: %d %s", st, b)
	}
	tokenHdr := map[string]string{"Authorization": "Bearer " + sb.Token, "Content-Type": "application/json"}
	if st, b := sendReq(t, "POST", srv.URL+"/v1/sandboxes/"+sb.ID+"/files/write", jsonBody(api.WriteFile{Path: "/tmp/a.txt", Content: fileContent}), tokenHdr); st != http.StatusOK && st != http.StatusNoContent {
		t.Fatalf("files/write with the token: %d %s", st, b)
	}
	if st, b := sendReq(t, "PUT", srv.URL+"/v1/sandboxes/"+sb.ID+"/files/content?path=/tmp/b.txt", strings.NewReader(fileContent), map[string]string{"Authorization": "Bearer " + srv.Key}); st >= 300 {
		t.Fatalf("files/content: %d %s", st, b)
	}
	if st, b := sendReq(t, "POST", srv.URL+"/v1/sandboxes/"+sb.ID+"/files/remove", jsonBody(api.RemoveRequest{Path: "/tmp/a.txt"}), bearer); st >= 300 {
		t.Fatalf("files/remove: %d %s", st, b)
	}
	// A signed upload: whoever holds the URL writes, as the sandbox's owner.
	var signed struct{ URL string }
	st, b = sendReq(t, "POST", srv.URL+"/v1/sandboxes/"+sb.ID+"/files/presign", jsonBody(map[string]any{"path": "/tmp/s.txt", "method": "PUT"}), bearer)
	if st != http.StatusOK || json.Unmarshal(b, &signed) != nil || signed.URL == "" {
		t.Fatalf("presign: %d %s", st, b)
	}
	if st, b := sendReq(t, "PUT", signed.URL, strings.NewReader(fileContent), nil); st >= 300 {
		t.Fatalf("signed upload: %d %s", st, b)
	}
	// Failures are recorded with their code; reads are not recorded at all.
	if st, _ := sendReq(t, "DELETE", srv.URL+"/v1/sandboxes/sbx-no-such", nil, bearer); st != http.StatusNotFound {
		t.Fatalf("destroying a sandbox that does not exist: %d", st)
	}
	sendReq(t, "GET", srv.URL+"/v1/sandboxes/"+sb.ID, nil, bearer)
	sendReq(t, "POST", srv.URL+"/v1/sandboxes/"+sb.ID+"/files/read", jsonBody(api.PathRequest{Path: "/tmp/b.txt"}), bearer)
	var hook api.Webhook
	st, b = sendReq(t, "POST", srv.URL+"/v1/webhooks", jsonBody(api.WebhookRequest{URL: "http://127.0.0.1:1/hook"}), bearer)
	if st != http.StatusCreated || json.Unmarshal(b, &hook) != nil {
		t.Fatalf("webhook: %d %s", st, b)
	}
	if st, _ := sendReq(t, "DELETE", srv.URL+"/v1/webhooks/"+hook.ID, nil, bearer); st >= 300 {
		t.Fatalf("webhook delete: %d", st)
	}

	// E2B: a stored secret, a sandbox, a command and an upload through the data plane.
	e2bHdr := map[string]string{"X-API-Key": srv.Key, "Content-Type": "application/json"}
	var secret struct {
		ID string `json:"secretID"`
	}
	st, b = sendReq(t, "POST", srv.URL+"/secrets", jsonBody(map[string]any{"name": "AUDIT_SECRET", "value": secretValue}), e2bHdr)
	if st != http.StatusCreated || json.Unmarshal(b, &secret) != nil || secret.ID == "" {
		t.Fatalf("e2b secret: %d %s", st, b)
	}
	var eb struct{ SandboxID, EnvdAccessToken string }
	st, b = sendReq(t, "POST", srv.URL+"/sandboxes", jsonBody(map[string]any{"templateID": "base", "envVars": map[string]string{"AUDIT_ENV": envValue}}), e2bHdr)
	if st != http.StatusCreated || json.Unmarshal(b, &eb) != nil || eb.EnvdAccessToken == "" {
		t.Fatalf("e2b create: %d %s", st, b)
	}
	defer sendReq(t, "DELETE", srv.URL+"/sandboxes/"+eb.SandboxID, nil, e2bHdr)
	envd := map[string]string{"E2b-Sandbox-Id": eb.SandboxID, "X-Access-Token": eb.EnvdAccessToken}
	start, _ := json.Marshal(map[string]any{"process": map[string]any{"cmd": "/bin/sh", "args": []string{"-c", "echo " + cmdLine + "-e2b | tr a-z A-Z"}}})
	frame := binary.BigEndian.AppendUint32([]byte{0}, uint32(len(start)))
	hdr := map[string]string{"Content-Type": "application/connect+json", "Connect-Protocol-Version": "1"}
	for k, v := range envd {
		hdr[k] = v
	}
	st, b = sendReq(t, "POST", srv.URL+"/process.Process/Start", bytes.NewReader(append(frame, start...)), hdr)
	if out := stdoutOf(b); st != http.StatusOK || !strings.Contains(out, strings.ToUpper(cmdLine)+"-E2B") {
		t.Fatalf("e2b Start: %d, stdout %q, body %q", st, out, b)
	}
	var form bytes.Buffer
	mw := multipart.NewWriter(&form)
	fw, _ := mw.CreateFormFile("file", "c.txt")
	fw.Write([]byte(fileContent))
	mw.Close()
	hdr = map[string]string{"Content-Type": mw.FormDataContentType()}
	for k, v := range envd {
		hdr[k] = v
	}
	if st, b := sendReq(t, "POST", srv.URL+"/files?path=/tmp/c.txt", &form, hdr); st != http.StatusOK {
		t.Fatalf("e2b upload: %d %s", st, b)
	}

	// A sandbox's token on another sandbox's route: refused, and recorded as its owner's.
	if st, _ := sendReq(t, "POST", srv.URL+"/v1/sandboxes/"+eb.SandboxID+"/files/write", jsonBody(api.WriteFile{Path: "/tmp/x", Content: fileContent}), tokenHdr); st != http.StatusForbidden {
		t.Fatalf("a token on another sandbox's route: %d", st)
	}
	// No credential, or a wrong one: refused, and not recorded (anyone can send those).
	sendReq(t, "POST", srv.URL+"/v1/sandboxes/"+sb.ID+"/files/write", jsonBody(api.WriteFile{Path: "/tmp/x", Content: fileContent}), map[string]string{"Authorization": "Bearer ak_wrong"})
	sendReq(t, "DELETE", srv.URL+"/v1/sandboxes/"+sb.ID, nil, nil)

	// MCP: a command and a file in the session's default sandbox.
	cs := mcpSession(ctx, t, srv)
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "run_command", Arguments: map[string]any{"command": "echo " + cmdLine + "-mcp | tr a-z A-Z"}})
	if err != nil || res.IsError || !strings.Contains(fmt.Sprint(res.StructuredContent), strings.ToUpper(cmdLine)+"-MCP") {
		t.Fatalf("mcp run_command: %v %+v", err, res)
	}
	if res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "write_file", Arguments: map[string]any{"path": "/tmp/d.txt", "content": fileContent}}); err != nil || res.IsError {
		t.Fatalf("mcp write_file: %v %+v", err, res)
	}
	if res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "read_file", Arguments: map[string]any{"path": "/tmp/d.txt"}}); err != nil || res.IsError {
		t.Fatalf("mcp read_file: %v %+v", err, res)
	}

	// A terminal, with the token: what is typed in it is never in the log either.
	terminal := provider.CapabilitiesOf(prov).Has("terminal")
	if terminal {
		conn, resp, err := websocket.Dial(ctx, srv.URL+"/v1/sandboxes/"+sb.ID+"/terminal?cols=80&rows=24",
			&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + sb.Token}}})
		if err != nil {
			t.Fatalf("terminal: %v (%v)", err, resp)
		}
		if err := conn.Write(ctx, websocket.MessageBinary, []byte("echo "+cmdLine+"-term | tr a-z A-Z\n")); err != nil {
			t.Fatal(err)
		}
		var out strings.Builder
		for !strings.Contains(out.String(), strings.ToUpper(cmdLine)+"-TERM") {
			typ, data, err := conn.Read(ctx)
			if err != nil {
				t.Fatalf("terminal: %v; output %q", err, out.String())
			}
			if typ == websocket.MessageBinary {
				out.Write(data)
			}
		}
		conn.Close(websocket.StatusNormalClosure, "")
	}

	if st, b := sendReq(t, "DELETE", srv.URL+"/v1/sandboxes/"+sb.ID, nil, bearer); st >= 300 {
		t.Fatalf("destroy: %d %s", st, b)
	}

	list := func(query string) []api.AuditEntry {
		t.Helper()
		st, b := sendReq(t, "GET", srv.URL+"/v1/audit"+query, nil, bearer)
		var out api.AuditList
		if st != http.StatusOK || json.Unmarshal(b, &out) != nil {
			t.Fatalf("GET /v1/audit%s: %d %s", query, st, b)
		}
		return out.Entries
	}
	all := list("")
	for _, e := range all {
		t.Logf("%+v", e)
	}
	type want struct{ api, action, via, target, result string }
	has := func(w want) *api.AuditEntry {
		for i, e := range all {
			if e.API == w.api && e.Action == w.action && e.Via == w.via && e.Target == w.target && e.Result == w.result {
				return &all[i]
			}
		}
		t.Errorf("no entry %+v", w)
		return nil
	}
	for _, w := range []want{
		{"rest", "sandbox.create", "key", sb.ID, "ok"},
		{"rest", "sandbox.exec", "key", sb.ID, "ok"},
		{"rest", "file.write", "token", sb.ID, "ok"},
		{"rest", "file.write", "key", sb.ID, "ok"},
		{"rest", "file.delete", "key", sb.ID, "ok"},
		{"rest", "file.presign", "key", sb.ID, "ok"},
		{"rest", "file.write", "signed", sb.ID, "ok"},
		{"rest", "sandbox.destroy", "key", "sbx-no-such", "not_found"},
		{"rest", "webhook.create", "key", hook.ID, "ok"},
		{"rest", "webhook.delete", "key", hook.ID, "ok"},
		{"rest", "sandbox.destroy", "key", sb.ID, "ok"},
		{"rest", "file.write", "token", eb.SandboxID, "forbidden"},
		{"rest", "sandbox.terminal", "token", sb.ID, "ok"},
		{"e2b", "secret.create", "key", secret.ID, "ok"},
		{"e2b", "sandbox.create", "key", eb.SandboxID, "ok"},
		{"e2b", "sandbox.exec", "token", eb.SandboxID, "ok"},
		{"e2b", "file.write", "token", eb.SandboxID, "ok"},
		{"mcp", "sandbox.exec", "key", "", "ok"},
		{"mcp", "file.write", "key", "", "ok"},
	} {
		if w.action == "sandbox.terminal" && !terminal {
			continue
		}
		if w.api == "mcp" {
			// The session's default sandbox: whichever it made.
			for _, e := range all {
				if e.API == "mcp" && e.Action == w.action {
					w.target = e.Target
				}
			}
			if w.target == "" {
				t.Errorf("mcp %s names no sandbox", w.action)
			}
		}
		e := has(w)
		if e == nil {
			continue
		}
		// A token's or signed URL's call is its sandbox owner's: the key that made it.
		if e.KeyID != key.ID || e.Time.IsZero() || e.ID == 0 {
			t.Errorf("%+v: want key %s, a time and an id", *e, key.ID)
		}
		if e.API != "mcp" && (e.Source != "127.0.0.1" || e.Status == 0) {
			t.Errorf("%+v: want source 127.0.0.1 and a status", *e)
		}
		if e.Action == "sandbox.terminal" && e.Status != http.StatusSwitchingProtocols {
			t.Errorf("%+v: want status 101", *e)
		}
	}
	for _, e := range all {
		if e.Action == "sandbox.get" || strings.HasPrefix(e.Action, "mcp.") || e.Action == "file.read" {
			t.Errorf("a read was recorded: %+v", e)
		}
		if e.Result == "not_found" && e.Status != http.StatusNotFound {
			t.Errorf("%+v: result not_found with status %d", e, e.Status)
		}
		if e.Result == "unauthorized" {
			t.Errorf("a call without a valid credential was recorded: %+v", e)
		}
	}

	// The filters.
	if got := list("?action=sandbox.exec"); len(got) != 3 {
		t.Errorf("action=sandbox.exec: %d entries, want 3 (REST, E2B, MCP)", len(got))
	}
	if got := list("?action=file.*&target=" + sb.ID); len(got) != 5 {
		t.Errorf("action=file.*&target=%s: %d entries, want 5", sb.ID, len(got))
	}
	if got := list("?key=" + key.ID); len(got) != len(all) {
		t.Errorf("key=%s: %d entries of %d", key.ID, len(got), len(all))
	}
	if got := list("?key=key_nobody"); len(got) != 0 {
		t.Errorf("key=key_nobody: %d entries", len(got))
	}
	page := list("?limit=2")
	if len(page) != 2 || page[0].ID != all[0].ID {
		t.Fatalf("limit=2: %+v", page)
	}
	if next := list(fmt.Sprintf("?limit=2&after=%d", page[1].ID)); len(next) != 2 || next[0].ID != all[2].ID {
		t.Errorf("the second page: %+v", next)
	}
	if got := list("?from=" + time.Now().Add(time.Minute).UTC().Format(time.RFC3339)); len(got) != 0 {
		t.Errorf("from a minute ahead: %d entries", len(got))
	}
	if got := list(fmt.Sprintf("?to=%d", time.Now().Add(-time.Hour).UnixMilli())); len(got) != 0 {
		t.Errorf("to an hour ago: %d entries", len(got))
	}
	if st, _ := sendReq(t, "GET", srv.URL+"/v1/audit", nil, map[string]string{"Authorization": "Bearer " + sb.Token}); st != http.StatusForbidden && st != http.StatusUnauthorized {
		t.Errorf("a sandbox token read the audit log: %d", st)
	}

	// Nothing of the workload's secrets, contents, commands or credentials is in the log:
	// not in the API's answer, not in the table, read again through a new connection.
	st2, err := store.OpenURL(ctx, testenv.StoreSpec(t, dir))
	if err != nil {
		t.Fatal(err)
	}
	defer st2.Close()
	rows, err := st2.Audit(ctx, store.AuditFilter{})
	if err != nil || len(rows) != len(all) {
		t.Fatalf("the table holds %d entries, %v; the API listed %d", len(rows), err, len(all))
	}
	listed, _ := json.Marshal(all)
	table := fmt.Sprintf("%#v", rows)
	for name, v := range map[string]string{
		"the secret's value": secretValue, "file contents": fileContent, "an env value": envValue,
		"the command line": cmdLine, "the command's output": strings.ToUpper(cmdLine),
		"the API key": srv.Key, "the sandbox token": sb.Token, "the envd token": eb.EnvdAccessToken,
		"the secret's name": "AUDIT_SECRET", "the file path": "/tmp/",
	} {
		if strings.Contains(strings.ToLower(string(listed)), strings.ToLower(v)) || strings.Contains(strings.ToLower(table), strings.ToLower(v)) {
			t.Errorf("%s (%q) is in the audit log", name, v)
		}
	}
}

// stdoutOf is the standard output of a Connect stream of process.Process/Start in JSON.
func stdoutOf(stream []byte) string {
	var out strings.Builder
	for _, m := range regexp.MustCompile(`"stdout":"([^"]*)"`).FindAllSubmatch(stream, -1) {
		b, _ := base64.StdEncoding.DecodeString(string(m[1]))
		out.Write(b)
	}
	return out.String()
}

// TestAuditAcrossRestarts runs `tupper serve`, `tupper keys` and `tupper audit` as an
// operator does: changes of keys made by the CLI are in the log with the API's calls; a
// server stopped (SIGTERM) right after a call has written its entry before it exits, one
// killed (kill -9) keeps every entry it has listed; and --audit-retention deletes entries
// past it.
func TestAuditAcrossRestarts(t *testing.T) {
	home := t.TempDir()
	srv := serve(t, home, "memory")
	henv := stateEnv(t, home)
	newKey := func(name string) (id, secret string) {
		t.Helper()
		out, errOut, err := tupper(t, henv, "keys", "create", "--name", name, "--json")
		var k struct{ ID, Key string }
		if err != nil || json.Unmarshal([]byte(out), &k) != nil {
			t.Fatalf("keys create: %v: %s %s", err, out, errOut)
		}
		return k.ID, k.Key
	}
	keyID, key := newKey("audit")
	doomed, _ := newKey("doomed")
	if _, errOut, err := tupper(t, henv, "keys", "revoke", doomed); err != nil {
		t.Fatalf("keys revoke: %v: %s", err, errOut)
	}
	if _, _, err := tupper(t, henv, "keys", "revoke", "key_no_such"); err == nil {
		t.Fatal("revoking a key that does not exist succeeded")
	}
	var sb api.Sandbox
	if st := call(t, "POST", srv.url+"/v1/sandboxes", key, map[string]any{}, &sb); st != http.StatusCreated {
		t.Fatalf("create: %d", st)
	}
	if st := call(t, "POST", srv.url+"/v1/sandboxes/"+sb.ID+"/run", key, api.RunRequest{Command: "true"}, nil); st != http.StatusOK {
		t.Fatalf("run: %d", st)
	}
	// Stopped at once: the entries still queued are written before it exits.
	if err := srv.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := srv.cmd.Wait(); err != nil {
		t.Fatalf("tupper serve after SIGTERM: %v: %s", err, srv.logs())
	}

	srv = serve(t, home, "memory")
	env := append(henv, "TUPPER_URL="+srv.url, "TUPPER_API_KEY="+key)
	audit := func(args ...string) []api.AuditEntry {
		t.Helper()
		out, errOut, err := tupper(t, env, append([]string{"audit", "--json"}, args...)...)
		var l api.AuditList
		if err != nil || json.Unmarshal([]byte(out), &l) != nil {
			t.Fatalf("tupper audit %v: %v: %s %s", args, err, out, errOut)
		}
		return l.Entries
	}
	entries := audit()
	got := map[string]api.AuditEntry{}
	for _, e := range entries {
		got[e.API+" "+e.Action+" "+e.Target+" "+e.Result] = e
	}
	for _, k := range []string{
		"cli key.create " + keyID + " ok", "cli key.create " + doomed + " ok", "cli key.revoke " + doomed + " ok",
		"cli key.revoke key_no_such not_found",
		"rest sandbox.create " + sb.ID + " ok", "rest sandbox.exec " + sb.ID + " ok",
	} {
		e, ok := got[k]
		if !ok {
			t.Errorf("no entry %q in %+v", k, entries)
			continue
		}
		if e.API == "cli" && (e.Via != "local" || e.Source != "local" || e.KeyID != "") {
			t.Errorf("%q: %+v; want via and source local, no key", k, e)
		}
		if e.API == "rest" && e.KeyID != keyID {
			t.Errorf("%q: key %q, want %s", k, e.KeyID, keyID)
		}
	}
	if f := audit("--action", "key.*", "--limit", "2"); len(f) != 2 || f[0].Action != "key.create" {
		t.Errorf("--action 'key.*' --limit 2: %+v", f)
	}
	if f := audit("--key", keyID); len(f) != 2 {
		t.Errorf("--key %s: %d entries, want the create and the run", keyID, len(f))
	}
	if f := audit("--from", "2000-01-01T00:00:00Z", "--to", "1h"); len(f) != 0 {
		t.Errorf("--to 1h: %d entries, want none", len(f))
	}
	if _, errOut, err := tupper(t, henv, "audit"); err == nil || !strings.Contains(errOut, "pass --url") {
		t.Errorf("tupper audit without a server: %v %s", err, errOut)
	}
	if _, errOut, err := tupper(t, env, "audit", "--from", "yesterday"); err == nil || !strings.Contains(errOut, "duration") {
		t.Errorf("tupper audit --from yesterday: %v %s", err, errOut)
	}
	table, errOut, err := tupper(t, env, "audit", "--action", "key.revoke")
	if err != nil || !strings.Contains(table, "ACTION") || !strings.Contains(table, doomed) || strings.Count(table, "key.revoke") != 2 {
		t.Errorf("tupper audit's table: %v %q %s", err, table, errOut)
	}

	// Killed outright: what it listed is in the store.
	var hook api.Webhook
	if st := call(t, "POST", srv.url+"/v1/webhooks", key, api.WebhookRequest{URL: "http://127.0.0.1:1/hook"}, &hook); st != http.StatusCreated {
		t.Fatalf("webhook: %d", st)
	}
	if st := call(t, "GET", srv.url+"/v1/audit?action=webhook.create", key, nil, nil); st != http.StatusOK {
		t.Fatalf("GET /v1/audit: %d", st)
	}
	srv.kill()
	srv = serve(t, home, "memory")
	env = append(henv, "TUPPER_URL="+srv.url, "TUPPER_API_KEY="+key)
	if f := audit("--action", "webhook.create"); len(f) != 1 || f[0].Target != hook.ID {
		t.Errorf("after kill -9: %+v", f)
	}
	srv.kill()

	// A retention of a millisecond: the reaper's first pass deletes everything before it.
	srv = startServeArgs(t, home, []string{"--provider", "memory", "--audit-retention", "1ms"})
	if err := srv.waitServing(60 * time.Second); err != nil {
		t.Fatal(err)
	}
	env = append(henv, "TUPPER_URL="+srv.url, "TUPPER_API_KEY="+key)
	deadline := time.Now().Add(30 * time.Second)
	for n := len(audit()); n > 0; n = len(audit()) {
		if time.Now().After(deadline) {
			t.Fatalf("%d entries left 30 s after a server with --audit-retention 1ms started", n)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
