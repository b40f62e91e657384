//go:build linux

package e2b_test

import (
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tupper-dev/tupper/providers/memory"
	"github.com/tupper-dev/tupper/server"
	"github.com/tupper-dev/tupper/server/e2b"
	"github.com/tupper-dev/tupper/server/servertest"
)

// call sends one request to the server and decodes a JSON answer into out (when not nil).
func call(t *testing.T, method, url, key, body string, hdr map[string]string, out any) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("X-API-Key", key)
	}
	for k, v := range hdr {
		if k == "Host" {
			req.Host = v
		}
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil && len(b) > 0 {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %v: %s", method, url, err, b)
		}
	}
	return resp
}

// The control plane over the memory provider (no envd data plane there): statuses, bodies,
// records shared with the native API, paging, auth and the proxy's not-found answer.
func TestControlPlane(t *testing.T) {
	srv := servertest.Start(t, memory.New(), "")
	_, key, err := srv.Store.CreateE2BKey(t.Context(), "test")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^e2b_[0-9a-f]{40}$`).MatchString(key) {
		t.Fatalf("e2b key %q does not have the form E2B's SDKs validate", key)
	}
	u := srv.URL

	var e struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
	if r := call(t, "POST", u+"/v2/sandboxes", "", `{"templateID":"base"}`, nil, &e); r.StatusCode != 401 || e.Code != 401 || e.Message == "" {
		t.Errorf("create without a key: %d %+v", r.StatusCode, e)
	}
	if r := call(t, "POST", u+"/v2/sandboxes", "e2b_"+strings.Repeat("0", 40), `{"templateID":"base"}`, nil, &e); r.StatusCode != 401 || e.Code != 401 {
		t.Errorf("create with a wrong key: %d %+v", r.StatusCode, e)
	}

	type sandboxJSON struct {
		SandboxID, TemplateID, ClientID, EnvdVersion, EnvdAccessToken string
		Domain                                                        *string
	}
	var v1, v2 sandboxJSON
	if r := call(t, "POST", u+"/sandboxes", key, `{"templateID":"base","metadata":{"who":"v1"},"secure":true}`, nil, &v1); r.StatusCode != 201 {
		t.Fatalf("POST /sandboxes: %d", r.StatusCode)
	}
	if r := call(t, "POST", u+"/v2/sandboxes", key, `{"templateID":"base","metadata":{"who":"v2"},"envVars":{"A":"1"},"timeout":120}`, nil, &v2); r.StatusCode != 201 {
		t.Fatalf("POST /v2/sandboxes: %d", r.StatusCode)
	}
	for _, sb := range []sandboxJSON{v1, v2} {
		if !regexp.MustCompile(`^[a-z0-9]+$`).MatchString(sb.SandboxID) || sb.ClientID != "6532622b" ||
			sb.EnvdVersion == "" || !strings.HasPrefix(sb.EnvdAccessToken, "sbt_") || sb.Domain != nil {
			t.Errorf("created sandbox: %+v", sb)
		}
	}
	// The envd token is a credential of the data plane only: the native API and the control
	// plane refuse it for everything (it used to delete, expose, presign, snapshot and extend).
	envdAuth := map[string]string{"Authorization": "Bearer " + v2.EnvdAccessToken}
	for _, op := range []struct{ method, path, body string }{
		{"GET", "/v1/sandboxes/" + v2.SandboxID, ""},
		{"DELETE", "/v1/sandboxes/" + v2.SandboxID, ""},
		{"POST", "/v1/sandboxes/" + v2.SandboxID + "/timeout", `{"timeoutMs":3153600000000}`},
		{"POST", "/v1/sandboxes/" + v2.SandboxID + "/snapshot", `{}`},
		{"POST", "/v1/sandboxes/" + v2.SandboxID + "/ports/3000/expose", `{"public":true}`},
		{"POST", "/v1/sandboxes/" + v2.SandboxID + "/files/presign", `{"path":"/etc/passwd"}`},
		{"POST", "/v1/sandboxes/" + v2.SandboxID + "/run", `{"command":"true"}`},
	} {
		if r := call(t, op.method, u+op.path, "", op.body, envdAuth, nil); r.StatusCode != 401 {
			t.Errorf("%s %s with the envd token: %d, want 401", op.method, op.path, r.StatusCode)
		}
	}
	if r := call(t, "DELETE", u+"/sandboxes/"+v2.SandboxID, v2.EnvdAccessToken, "", nil, nil); r.StatusCode != 401 {
		t.Errorf("E2B kill with the envd token as the API key: %d, want 401", r.StatusCode)
	}
	if r := call(t, "GET", u+"/sandboxes/"+v2.SandboxID, key, "", nil, nil); r.StatusCode != 200 {
		t.Errorf("the sandbox after the envd token's attempts: %d, want it alive (200)", r.StatusCode)
	}
	// The e2b_ key is an account key of the native API.
	var native struct {
		Sandboxes []struct{ ID string } `json:"sandboxes"`
	}
	if r := call(t, "GET", u+"/v1/sandboxes", "", "", map[string]string{"Authorization": "Bearer " + key}, &native); r.StatusCode != 200 || len(native.Sandboxes) != 2 {
		t.Errorf("GET /v1/sandboxes with the e2b key: %d, %d sandboxes", r.StatusCode, len(native.Sandboxes))
	}

	var detail struct {
		SandboxID, State, EndAt, StartedAt string
		Metadata                           map[string]string
		CPUCount, MemoryMB                 int
	}
	if r := call(t, "GET", u+"/sandboxes/"+v2.SandboxID, key, "", nil, &detail); r.StatusCode != 200 ||
		detail.State != "running" || detail.Metadata["who"] != "v2" || detail.CPUCount < 1 || detail.EndAt == "" {
		t.Errorf("GET /sandboxes/{id}: %d %+v", r.StatusCode, detail)
	}

	// Paging: one per page, newest first (E2B's default order), then no token.
	var ids []string
	next := ""
	for page := 0; page < 5; page++ {
		var list []struct{ SandboxID string }
		q := "?limit=1"
		if next != "" {
			q += "&nextToken=" + next
		}
		r := call(t, "GET", u+"/v2/sandboxes"+q, key, "", nil, &list)
		if r.StatusCode != 200 {
			t.Fatalf("GET /v2/sandboxes: %d", r.StatusCode)
		}
		for _, s := range list {
			ids = append(ids, s.SandboxID)
		}
		if next = r.Header.Get("X-Next-Token"); next == "" {
			break
		}
	}
	if len(ids) != 2 || ids[0] != v2.SandboxID || ids[1] != v1.SandboxID {
		t.Errorf("paged list: %v, want [%s %s]", ids, v2.SandboxID, v1.SandboxID)
	}
	var filtered []struct{ SandboxID string }
	call(t, "GET", u+"/v2/sandboxes?metadata=who%3Dv1", key, "", nil, &filtered)
	if len(filtered) != 1 || filtered[0].SandboxID != v1.SandboxID {
		t.Errorf("metadata filter who=v1: %+v", filtered)
	}
	call(t, "GET", u+"/v2/sandboxes?state=paused", key, "", nil, &filtered)
	if len(filtered) != 0 {
		t.Errorf("state=paused: %+v", filtered)
	}

	var conn sandboxJSON
	if r := call(t, "POST", u+"/sandboxes/"+v1.SandboxID+"/connect", key, `{"timeout":300}`, nil, &conn); r.StatusCode != 200 || conn.EnvdAccessToken != v1.EnvdAccessToken {
		t.Errorf("connect to a running sandbox: %d, same token: %v", r.StatusCode, conn.EnvdAccessToken == v1.EnvdAccessToken)
	}
	if r := call(t, "POST", u+"/sandboxes/"+v1.SandboxID+"/timeout", key, `{"timeout":60}`, nil, nil); r.StatusCode != 204 {
		t.Errorf("set timeout: %d", r.StatusCode)
	}
	var forks []struct {
		Sandbox *sandboxJSON `json:"sandbox"`
	}
	if r := call(t, "POST", u+"/sandboxes/"+v1.SandboxID+"/fork", key, `{"count":2,"timeout":60}`, nil, &forks); r.StatusCode != 201 ||
		len(forks) != 2 || forks[0].Sandbox == nil || forks[1].Sandbox == nil || forks[0].Sandbox.SandboxID == forks[1].Sandbox.SandboxID {
		t.Errorf("fork: %d %+v", r.StatusCode, forks)
	}
	for _, f := range forks {
		if f.Sandbox != nil {
			if r := call(t, "DELETE", u+"/sandboxes/"+f.Sandbox.SandboxID, key, "", nil, nil); r.StatusCode != 204 {
				t.Errorf("kill fork %s: %d", f.Sandbox.SandboxID, r.StatusCode)
			}
		}
	}
	// The memory provider cannot pause: a sandbox paused at its timeout is refused before
	// anything is made (test/e2b runs autoPause and autoResume on real sandboxes).
	if r := call(t, "POST", u+"/v2/sandboxes", key, `{"templateID":"base","autoPause":true}`, nil, &e); r.StatusCode != 501 || !strings.Contains(e.Message, "cannot pause") {
		t.Errorf("create with autoPause on a provider without pause: %d %+v", r.StatusCode, e)
	}
	var d struct {
		Lifecycle struct {
			OnTimeout  string `json:"onTimeout"`
			AutoResume bool   `json:"autoResume"`
		} `json:"lifecycle"`
	}
	call(t, "GET", u+"/sandboxes/"+v1.SandboxID, key, "", nil, &d)
	if d.Lifecycle.OnTimeout != "kill" || d.Lifecycle.AutoResume {
		t.Errorf("the lifecycle of a sandbox created without autoPause: %+v", d.Lifecycle)
	}
	for _, c := range []struct {
		body   string
		status int
		msg    string
	}{
		{`{"templateID":"base","autoPause":true,"autoPauseMemory":false}`, 501, `lacks the "pause-cold" capability`},
		{`{"templateID":"base","autoResume":{"enabled":true}}`, 400, "autoResume needs onTimeout pause"},
		// As E2B's API: a sandbox paused without its memory is resumed only when asked.
		{`{"templateID":"base","autoPause":true,"autoPauseMemory":false,"autoResume":{"enabled":true}}`, 400, "autoResume cannot go with a pause that drops memory"},
	} {
		e.Message = ""
		if r := call(t, "POST", u+"/v2/sandboxes", key, c.body, nil, &e); r.StatusCode != c.status || !strings.Contains(e.Message, c.msg) {
			t.Errorf("create %s: %d %+v, want %d %q", c.body, r.StatusCode, e, c.status, c.msg)
		}
	}
	e.Message = ""
	if r := call(t, "POST", u+"/sandboxes/"+v1.SandboxID+"/pause", key, `{"memory":false}`, nil, &e); r.StatusCode != 501 || !strings.Contains(e.Message, "cannot pause a sandbox without its memory") {
		t.Errorf("a pause without memory on a provider without pause-cold: %d %+v", r.StatusCode, e)
	}

	// The data plane answers for unknown sandboxes as E2B's proxy does.
	var nf struct {
		SandboxID string `json:"sandboxId"`
		Message   string `json:"message"`
		Code      int    `json:"code"`
	}
	if r := call(t, "GET", u+"/health", "", "", map[string]string{"E2b-Sandbox-Id": "nosuchsandbox"}, &nf); r.StatusCode != 502 ||
		nf.Code != 502 || nf.SandboxID != "nosuchsandbox" || nf.Message != "The sandbox was not found" {
		t.Errorf("envd of an unknown sandbox: %d %+v", r.StatusCode, nf)
	}
	// A known sandbox without the token is refused before anything reaches the provider.
	if r := call(t, "POST", u+"/filesystem.Filesystem/ListDir", "", `{"path":"/"}`, map[string]string{"E2b-Sandbox-Id": v1.SandboxID, "Content-Type": "application/json"}, nil); r.StatusCode != 401 {
		t.Errorf("envd call without X-Access-Token: %d", r.StatusCode)
	}

	if r := call(t, "DELETE", u+"/sandboxes/"+v1.SandboxID, key, "", nil, nil); r.StatusCode != 204 {
		t.Errorf("kill: %d", r.StatusCode)
	}
	if r := call(t, "DELETE", u+"/sandboxes/"+v1.SandboxID, key, "", nil, &e); r.StatusCode != 404 || e.Code != 404 {
		t.Errorf("kill again: %d %+v", r.StatusCode, e)
	}
	if r := call(t, "GET", u+"/sandboxes/"+v1.SandboxID, key, "", nil, &e); r.StatusCode != 404 {
		t.Errorf("get after kill: %d", r.StatusCode)
	}
	var events struct {
		Events []struct{ Type, SandboxID string } `json:"events"`
	}
	call(t, "GET", u+"/v1/events?sandbox="+v1.SandboxID, "", "", map[string]string{"Authorization": "Bearer " + srv.Key}, &events)
	var types []string
	for _, ev := range events.Events {
		types = append(types, ev.Type)
	}
	if got := strings.Join(types, ","); !strings.Contains(got, "sandbox.created") || !strings.Contains(got, "sandbox.destroyed") {
		t.Errorf("events of an E2B sandbox: %s", got)
	}
}

// With a domain, 49983-{id}.{domain} hosts go to the data plane (before previews).
func TestEnvdHost(t *testing.T) {
	srv := servertest.Start(t, memory.New(), "", func(c *server.Config) { c.Domain = "sandboxes.test" })
	var nf struct {
		SandboxID string `json:"sandboxId"`
		Code      int    `json:"code"`
	}
	r := call(t, "GET", srv.URL+"/health", "", "", map[string]string{"Host": "49983-nosuchsandbox.sandboxes.test"}, &nf)
	if r.StatusCode != 502 || nf.SandboxID != "nosuchsandbox" || nf.Code != 502 {
		t.Errorf("envd host of an unknown sandbox: %d %+v", r.StatusCode, nf)
	}
}

// apiErr is E2B's error body.
type apiErr struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// Every path of E2B's API answers with E2B's error body: the operations the server does not
// serve 501 naming E2B's own pattern (so DELETE /templates/tags is not taken for DELETE
// /templates/{templateID}), other paths 404, other methods 405; template builds on a provider
// that builds none 501 saying so. Before, paths outside
// /sandboxes, /v2/sandboxes, /snapshots and /templates/ fell through to the native API's
// plain-text 404, and GET /templates/aliases/{alias} was not served.
func TestRouteTable(t *testing.T) {
	srv := servertest.Start(t, memory.New(), "")
	u, key := srv.URL, srv.Key
	for _, c := range []struct {
		method, path string
		status       int
		message      string // the start of the message
	}{
		{"POST", "/v3/templates", 501, "the memory provider does not build templates"},
		{"POST", "/v2/templates/abc/builds/def", 501, "the memory provider does not build templates"},
		{"PATCH", "/v2/templates/abc", 501, "PATCH /v2/templates/{templateID} is not supported"},
		{"DELETE", "/templates/tags", 501, "the memory provider does not build templates"},
		{"POST", "/templates/tags", 501, "the memory provider does not build templates"},
		{"DELETE", "/templates/mine", 501, "provider memory cannot delete snapshots"},
		{"GET", "/templates/mine/tags", 501, "the memory provider does not build templates"},
		{"GET", "/templates/mine/files/0123", 501, "the memory provider does not build templates"},
		{"PUT", "/templates/mine/files/0123", 401, "invalid upload signature"},
		{"GET", "/templates/aliases/tags", 404, `template alias "tags" not found`},
		{"GET", "/templates/aliases/nosuch", 404, `template alias "nosuch" not found`},
		{"GET", "/volumes", 501, "provider memory has no volumes"},
		{"POST", "/volumes", 400, "volume name \"\" must be 1 to 63 characters"},
		{"GET", "/volumecontent/v1/dir", 501, "provider memory has no volumes"},
		{"GET", "/teams", 501, "GET /teams is not supported"},
		{"GET", "/api-keys", 501, "GET /api-keys is not supported"},
		{"GET", "/admin/sandboxes/running-counts", 501, "GET /admin/sandboxes/running-counts is not supported"},
		{"GET", "/sandboxes/metrics", 501, "GET /sandboxes/metrics is not supported"},
		{"GET", "/snapshots", 501, "provider memory cannot list snapshots"},
		{"GET", "/volumes/a/b/c", 404, "no route GET /volumes/a/b/c"},
		{"GET", "/teams/", 404, "no route GET /teams/"},
		{"GET", "/sandboxes/abc/nosuch", 404, "no route"},
		{"PUT", "/volumes", 405, "method PUT is not allowed on /volumes"},
		{"DELETE", "/v2/sandboxes", 405, "method DELETE is not allowed"},
	} {
		var e apiErr
		r := call(t, c.method, u+c.path, key, "{}", map[string]string{"Content-Type": "application/json"}, &e)
		if r.StatusCode != c.status || e.Code != c.status || !strings.HasPrefix(e.Message, c.message) ||
			!strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
			t.Errorf("%s %s: %d %s %+v, want %d %q…", c.method, c.path, r.StatusCode, r.Header.Get("Content-Type"), e, c.status, c.message)
		}
		if c.status == 405 && r.Header.Get("Allow") == "" {
			t.Errorf("%s %s: 405 without Allow", c.method, c.path)
		}
	}
	var alias struct {
		TemplateID string `json:"templateID"`
		Public     *bool  `json:"public"`
	}
	if r := call(t, "GET", u+"/templates/aliases/base", key, "", nil, &alias); r.StatusCode != 200 || alias.TemplateID != "base" || alias.Public == nil || !*alias.Public {
		t.Errorf("GET /templates/aliases/base: %d %+v", r.StatusCode, alias)
	}
	// A provider without templates lists base alone: the alias of its default, ready.
	for _, path := range []string{"/templates", "/v2/templates"} {
		var list []struct {
			TemplateID, BuildStatus string
			Aliases                 []string
		}
		if r := call(t, "GET", u+path, key, "", nil, &list); r.StatusCode != 200 || len(list) != 1 || list[0].TemplateID != "base" || list[0].BuildStatus != "ready" || len(list[0].Aliases) != 1 {
			t.Errorf("GET %s: %d %+v", path, r.StatusCode, list)
		}
	}
	// Without a key, E2B's 401 first.
	var e apiErr
	if r := call(t, "GET", u+"/volumes", "", "", nil, &e); r.StatusCode != 401 || e.Code != 401 {
		t.Errorf("GET /volumes without a key: %d %+v", r.StatusCode, e)
	}
	// The native API is untouched.
	if r := call(t, "GET", u+"/v1/health", "", "", nil, nil); r.StatusCode != 200 {
		t.Errorf("GET /v1/health: %d", r.StatusCode)
	}
}

// created creates a sandbox through E2B's API and returns its id, start time and the
// answer's trafficAccessToken.
func created(t *testing.T, u, key, body string, hdr map[string]string) (id string, startedAt time.Time, traffic *string) {
	t.Helper()
	var sb struct {
		SandboxID          string  `json:"sandboxID"`
		TrafficAccessToken *string `json:"trafficAccessToken"`
	}
	if r := call(t, "POST", u+"/v2/sandboxes", key, body, hdr, &sb); r.StatusCode != 201 {
		t.Fatalf("POST /v2/sandboxes %s: %d", body, r.StatusCode)
	}
	var d struct {
		StartedAt time.Time `json:"startedAt"`
	}
	call(t, "GET", u+"/sandboxes/"+sb.SandboxID, key, "", nil, &d)
	return sb.SandboxID, d.StartedAt, sb.TrafficAccessToken
}

type listed struct {
	SandboxID string            `json:"sandboxID"`
	StartedAt time.Time         `json:"startedAt"`
	Metadata  map[string]string `json:"metadata"`
}

func listIDs(t *testing.T, u, key, query string) []string {
	t.Helper()
	var l []listed
	if r := call(t, "GET", u+query, key, "", nil, &l); r.StatusCode != 200 {
		t.Fatalf("GET %s: %d", query, r.StatusCode)
	}
	var ids []string
	for _, s := range l {
		ids = append(ids, s.SandboxID)
	}
	return ids
}

// Lists are newest first unless order=asc (both versions), startedAfter takes a sandbox
// that started at that very instant, and metadata come back exactly as set: the
// sandbox-sdk label the server adds for `tupper ls` (and its own labels) stay internal.
func TestListOrderAndMetadata(t *testing.T) {
	srv := servertest.Start(t, memory.New(), "")
	u, key := srv.URL, srv.Key
	older, olderAt, tok := created(t, u, key, `{"templateID":"base","metadata":{"who":"older"}}`, nil)
	if tok != nil {
		t.Errorf("a sandbox with public traffic has a traffic access token %q", *tok)
	}
	// Start times are shown to the millisecond: make the second one's differ.
	for !time.Now().UTC().Truncate(time.Millisecond).After(olderAt) {
		time.Sleep(100 * time.Microsecond)
	}
	newer, newerAt, _ := created(t, u, key, `{"templateID":"base","metadata":{"who":"newer"}}`, nil)
	if !newerAt.After(olderAt) {
		t.Fatalf("start times %v and %v", olderAt, newerAt)
	}
	want := func(name string, got []string, want ...string) {
		t.Helper()
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("%s: %v, want %v", name, got, want)
		}
	}
	want("GET /v2/sandboxes", listIDs(t, u, key, "/v2/sandboxes"), newer, older)
	want("order=desc", listIDs(t, u, key, "/v2/sandboxes?order=desc"), newer, older)
	want("order=asc", listIDs(t, u, key, "/v2/sandboxes?order=asc"), older, newer)
	want("GET /sandboxes (v1)", listIDs(t, u, key, "/sandboxes"), newer, older)
	at := func(tm time.Time) string { return url.QueryEscape(tm.Format(time.RFC3339Nano)) }
	want("startedAfter the newer one's startedAt", listIDs(t, u, key, "/v2/sandboxes?startedAfter="+at(newerAt)), newer)
	want("startedAfter the older one's startedAt", listIDs(t, u, key, "/v2/sandboxes?startedAfter="+at(olderAt)), newer, older)
	want("startedAfter a millisecond after the newer one", listIDs(t, u, key, "/v2/sandboxes?startedAfter="+at(newerAt.Add(time.Millisecond))))

	var l []listed
	call(t, "GET", u+"/v2/sandboxes?metadata=who%3Dolder", key, "", nil, &l)
	if len(l) != 1 || !maps.Equal(l[0].Metadata, map[string]string{"who": "older"}) {
		t.Errorf("listed metadata: %+v", l)
	}
	var d struct{ Metadata map[string]string }
	call(t, "GET", u+"/sandboxes/"+older, key, "", nil, &d)
	if !maps.Equal(d.Metadata, map[string]string{"who": "older"}) {
		t.Errorf("GET /sandboxes/{id} metadata: %v", d.Metadata)
	}
	if ids := listIDs(t, u, key, "/v2/sandboxes?metadata=sandbox-sdk%3Dtrue"); len(ids) != 0 {
		t.Errorf("the internal sandbox-sdk label matches a metadata filter: %v", ids)
	}
	// The server keeps its label: the native API (and so `tupper ls`) lists the sandbox by it.
	var native struct {
		Sandboxes []struct{ ID string } `json:"sandboxes"`
	}
	call(t, "GET", u+"/v1/sandboxes?label=sandbox-sdk=true", key, "", nil, &native)
	if len(native.Sandboxes) != 2 {
		t.Errorf("native list by sandbox-sdk=true: %+v", native)
	}
	// Metadata the client sets, sandbox-sdk included, come back as set (providers/e2b sets
	// it, with Tupper-Metadata-Exact), and the server's prefix is refused.
	exact, _, _ := created(t, u, key, `{"templateID":"base","metadata":{"sandbox-sdk":"true","k":"v"}}`, map[string]string{e2b.HeaderMetadataExact: "true"})
	own, _, _ := created(t, u, key, `{"templateID":"base","metadata":{"sandbox-sdk":"true"}}`, nil)
	for _, id := range []string{exact, own} {
		call(t, "GET", u+"/sandboxes/"+id, key, "", nil, &d)
		if d.Metadata["sandbox-sdk"] != "true" {
			t.Errorf("%s: sandbox-sdk set by the client is not shown: %v", id, d.Metadata)
		}
	}
	var e apiErr
	if r := call(t, "POST", u+"/v2/sandboxes", key, `{"templateID":"base","metadata":{"tupper.e2b/allow-public-traffic":"false"}}`, nil, &e); r.StatusCode != 400 || e.Code != 400 {
		t.Errorf("metadata under the server's prefix: %d %+v", r.StatusCode, e)
	}
}

// A signed /files URL that has expired is refused with envd's words, with E2B's routing
// header and without it (the server then finds the sandbox that signed it); a forged one
// too. The checks come before anything reaches the provider (the memory provider has no data
// plane).
func TestSignedURLErrors(t *testing.T) {
	srv := servertest.Start(t, memory.New(), "")
	u, key := srv.URL, srv.Key
	var sb struct{ SandboxID, EnvdAccessToken string }
	if r := call(t, "POST", u+"/v2/sandboxes", key, `{"templateID":"base"}`, nil, &sb); r.StatusCode != 201 {
		t.Fatalf("create: %d", r.StatusCode)
	}
	past := time.Now().Add(-10 * time.Second).Unix()
	q := url.Values{"path": {"/home/user/a.txt"}, "signature_expiration": {strconv.FormatInt(past, 10)}}
	q.Set("signature", e2b.Signature("/home/user/a.txt", "read", "", sb.EnvdAccessToken, past))
	var e apiErr
	for _, hdr := range []map[string]string{{"E2b-Sandbox-Id": sb.SandboxID}, nil} {
		if r := call(t, "GET", u+"/files?"+q.Encode(), "", "", hdr, &e); r.StatusCode != 401 || e != (apiErr{401, "signature is already expired"}) {
			t.Errorf("expired, headers %v: %d %+v", hdr, r.StatusCode, e)
		}
		forged := url.Values{"path": {"/etc/shadow"}, "signature_expiration": q["signature_expiration"], "signature": q["signature"]}
		if r := call(t, "GET", u+"/files?"+forged.Encode(), "", "", hdr, &e); r.StatusCode != 401 || e != (apiErr{401, "invalid signature"}) {
			t.Errorf("forged, headers %v: %d %+v", hdr, r.StatusCode, e)
		}
	}
}

// A signed URL that names no sandbox is checked against the live sandboxes the server lists
// at most once a second, but a sandbox created since counts at once: its URL, used the
// moment it is made, is its own (here expired, which only its signer's URLs are told), not
// "invalid signature". (It was refused for up to a second.)
func TestSignedURLOfANewSandbox(t *testing.T) {
	srv := servertest.Start(t, memory.New(), "")
	u, key := srv.URL, srv.Key
	past := time.Now().Add(-10 * time.Second).Unix()
	expired := func(token string) string {
		q := url.Values{"path": {"/home/user/a.txt"}, "signature_expiration": {strconv.FormatInt(past, 10)}}
		q.Set("signature", e2b.Signature("/home/user/a.txt", "read", "", token, past))
		return u + "/files?" + q.Encode()
	}
	for i := range 3 {
		var sb struct{ SandboxID, EnvdAccessToken string }
		if r := call(t, "POST", u+"/v2/sandboxes", key, `{"templateID":"base"}`, nil, &sb); r.StatusCode != 201 {
			t.Fatalf("create: %d", r.StatusCode)
		}
		var e apiErr
		if r := call(t, "GET", expired(sb.EnvdAccessToken), "", "", nil, &e); r.StatusCode != 401 || e != (apiErr{401, "signature is already expired"}) {
			t.Errorf("sandbox %d's URL at once: %d %+v, want its own (expired)", i, r.StatusCode, e)
		}
	}
}

// network.allowPublicTraffic false: create and connect return a traffic access token, the
// detail says so, and the sandbox's {port}-{id}.{domain} hosts take requests only with the
// token in e2b-traffic-access-token (403 with E2B's body otherwise, even with an API key);
// with it, the request goes on to the preview (which the memory provider cannot serve:
// 501). allowPublicTraffic true makes the ports public, as on E2B; a sandbox that did not
// ask keeps the server's own rules (a credential).
func TestPrivateTraffic(t *testing.T) {
	srv := servertest.Start(t, memory.New(), "", func(c *server.Config) { c.Domain = "sandboxes.test" })
	u, key := srv.URL, srv.Key
	priv, _, tok := created(t, u, key, `{"templateID":"base","network":{"allowPublicTraffic":false}}`, nil)
	open, _, openTok := created(t, u, key, `{"templateID":"base","network":{"allowPublicTraffic":true}}`, nil)
	def, _, _ := created(t, u, key, `{"templateID":"base"}`, nil)
	if tok == nil || len(*tok) != 40 || openTok != nil {
		t.Fatalf("trafficAccessToken: private %v, public %v", tok, openTok)
	}
	var conn struct{ TrafficAccessToken *string }
	if call(t, "POST", u+"/sandboxes/"+priv+"/connect", key, `{"timeout":60}`, nil, &conn); conn.TrafficAccessToken == nil || *conn.TrafficAccessToken != *tok {
		t.Errorf("connect: trafficAccessToken %v, want %s", conn.TrafficAccessToken, *tok)
	}
	var d struct {
		Metadata map[string]string
		Network  *struct{ AllowPublicTraffic *bool }
	}
	call(t, "GET", u+"/sandboxes/"+priv, key, "", nil, &d)
	if d.Network == nil || d.Network.AllowPublicTraffic == nil || *d.Network.AllowPublicTraffic || len(d.Metadata) != 0 {
		t.Errorf("detail of the private sandbox: network %+v, metadata %v", d.Network, d.Metadata)
	}
	host := func(id string) map[string]string { return map[string]string{"Host": "8080-" + id + ".sandboxes.test"} }
	with := func(h map[string]string, k, v string) map[string]string {
		h[k] = v
		return h
	}
	for _, c := range []struct {
		name   string
		key    string
		hdr    map[string]string
		status int
	}{
		{"private, no token", "", host(priv), 403},
		{"private, a wrong token", "", with(host(priv), "E2b-Traffic-Access-Token", strings.Repeat("0", 40)), 403},
		{"private, the other sandbox's envd token", "", with(host(priv), "E2b-Traffic-Access-Token", "sbt_x"), 403},
		{"private, an API key", key, host(priv), 403},
		{"private, the token", "", with(host(priv), "E2b-Traffic-Access-Token", *tok), 501},
		// allowPublicTraffic true, asked for: anyone, as on E2B (the memory provider then
		// cannot serve the port: 501).
		{"public, no credential", "", host(open), 501},
		{"public, an API key", key, host(open), 501},
		// Not asked for: the server's preview rules, a credential (docs/e2b.md says why).
		{"default, no credential", "", host(def), 401},
		{"default, an API key", key, host(def), 501},
	} {
		var e struct {
			SandboxID string `json:"sandboxId"`
			Code      any    `json:"code"` // the native API's bodies have a string code
			Message   string `json:"message"`
		}
		r := call(t, "GET", u+"/index.html", c.key, "", c.hdr, &e)
		if r.StatusCode != c.status {
			t.Errorf("%s: %d %+v, want %d", c.name, r.StatusCode, e, c.status)
		}
		if _, native := e.Code.(string); c.status != 403 && !native {
			t.Errorf("%s: %+v is not the preview's answer", c.name, e)
		}
		if c.status == 403 && (e.Code != float64(403) || e.SandboxID != priv || !strings.Contains(e.Message, "e2b-traffic-access-token")) {
			t.Errorf("%s: body %+v", c.name, e)
		}
	}
}

// A request to a port of a sandbox that was killed (or never was), by E2B's host form or
// its routing headers, is E2B's proxy answer, 502 "The sandbox was not found", with a
// credential or without; it was the preview's 401, or 404 with a key.
func TestPortOfAGoneSandbox(t *testing.T) {
	srv := servertest.Start(t, memory.New(), "", func(c *server.Config) { c.Domain = "sandboxes.test" })
	u, key := srv.URL, srv.Key
	killed, _, _ := created(t, u, key, `{"templateID":"base"}`, nil)
	if r := call(t, "DELETE", u+"/sandboxes/"+killed, key, "", nil, nil); r.StatusCode != 204 {
		t.Fatalf("kill: %d", r.StatusCode)
	}
	for _, id := range []string{killed, "nosuchsandbox0000000"} {
		for _, c := range []struct {
			name string
			key  string
			hdr  map[string]string
		}{
			{"host form", "", map[string]string{"Host": "8080-" + id + ".sandboxes.test"}},
			{"host form with a key", key, map[string]string{"Host": "8080-" + id + ".sandboxes.test"}},
			{"routing headers", "", map[string]string{"E2b-Sandbox-Id": id, "E2b-Sandbox-Port": "8080"}},
			{"routing headers with a key", key, map[string]string{"E2b-Sandbox-Id": id, "E2b-Sandbox-Port": "8080"}},
		} {
			var e struct {
				SandboxID string `json:"sandboxId"`
				Code      any    `json:"code"`
				Message   string `json:"message"`
			}
			r := call(t, "GET", u+"/index.html", c.key, "", c.hdr, &e)
			if r.StatusCode != 502 || e.Code != float64(502) || e.SandboxID != id || e.Message != "The sandbox was not found" {
				t.Errorf("%s, %s: %d %+v, want 502 The sandbox was not found", id, c.name, r.StatusCode, e)
			}
		}
	}
}

// A request to a port of a sandbox ({port}-{id}.{domain}, not envd's) is the sandbox's, whatever
// its path or headers: its web app's /health, /v2/sandboxes or signed-looking /files are not
// E2B's API. (They were: E2B's control plane and signed-URL routing came first.)
func TestPortHostIsTheSandboxs(t *testing.T) {
	srv := servertest.Start(t, memory.New(), "", func(c *server.Config) { c.Domain = "sandboxes.test" })
	id, _, _ := created(t, srv.URL, srv.Key, `{"templateID":"base"}`, nil)
	for _, c := range []struct {
		path string
		hdr  map[string]string
	}{
		{"/health", nil},
		{"/v2/sandboxes", nil},
		{"/templates/aliases/base", nil},
		{"/files?path=%2Fetc%2Fpasswd&signature=v1_x", nil},
		{"/index.html", map[string]string{"E2b-Sandbox-Id": id}},
	} {
		hdr := map[string]string{"Host": "3000-" + id + ".sandboxes.test"}
		maps.Copy(hdr, c.hdr)
		var e struct {
			Code any `json:"code"`
		}
		// The preview's answer to a caller without a credential: 401 with the native body.
		r := call(t, "GET", srv.URL+c.path, "", "", hdr, &e)
		if _, native := e.Code.(string); r.StatusCode != 401 || !native {
			t.Errorf("GET %s on the sandbox's port 3000, headers %v: %d %+v, want the preview's 401", c.path, c.hdr, r.StatusCode, e)
		}
	}
	// Port 49983 is envd's: E2B's data plane.
	var nf struct{ Message string }
	if r := call(t, "GET", srv.URL+"/health", "", "", map[string]string{"Host": "49983-" + id + ".sandboxes.test"}, &nf); r.StatusCode != 502 || nf.Message == "" {
		t.Errorf("envd's host: %d %+v", r.StatusCode, nf)
	}
}
