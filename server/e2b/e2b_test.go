package e2b_test

import (
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/tupper-dev/tupper/providers/memory"
	"github.com/tupper-dev/tupper/server"
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
	// The envd token is also a sandbox token of the native API.
	if r := call(t, "GET", u+"/v1/sandboxes/"+v2.SandboxID, "", "", map[string]string{"Authorization": "Bearer " + v2.EnvdAccessToken}, nil); r.StatusCode != 200 {
		t.Errorf("GET /v1/sandboxes/{id} with the envd token: %d", r.StatusCode)
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

	// Paging: one per page, in order, then no token.
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
	if len(ids) != 2 || ids[0] != v1.SandboxID || ids[1] != v2.SandboxID {
		t.Errorf("paged list: %v, want [%s %s]", ids, v1.SandboxID, v2.SandboxID)
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
	if r := call(t, "POST", u+"/sandboxes/"+v1.SandboxID+"/fork", key, `{}`, nil, &e); r.StatusCode != 501 || e.Code != 501 {
		t.Errorf("fork: %d %+v", r.StatusCode, e)
	}
	if r := call(t, "POST", u+"/v2/sandboxes", key, `{"templateID":"base","autoPause":true}`, nil, &e); r.StatusCode != 501 {
		t.Errorf("create with autoPause: %d %+v", r.StatusCode, e)
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
