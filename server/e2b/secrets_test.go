//go:build linux

package e2b_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/tupper-dev/tupper/providers/memory"
	"github.com/tupper-dev/tupper/server/servertest"
)

// rawCall is call returning the status and the body as it came, to look for values in it.
func rawCall(t *testing.T, method, u, key, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("X-API-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

type secretInfo struct {
	SecretID       string            `json:"secretID"`
	Name           string            `json:"name"`
	CurrentVersion int64             `json:"currentVersion"`
	Metadata       map[string]string `json:"metadata"`
	CreatedAt      string            `json:"createdAt"`
	UpdatedAt      string            `json:"updatedAt"`
}

// TestSecrets is E2B's /secrets over a real server on loopback: E2B's bodies and
// statuses, values never in any answer, names checked as E2B's SDKs check them, one key's
// secrets invisible and unusable to another, and a create's network.rules resolved from
// the key's own secrets (the memory provider, without bound secrets, refuses them after).
// The egress side, a real sandbox and a real upstream, is providers/local's
// TestEgressPolicy/*/e2b_secrets.
func TestSecrets(t *testing.T) {
	srv := servertest.Start(t, memory.New(), "")
	_, keyA, err := srv.Store.CreateE2BKey(t.Context(), "a")
	if err != nil {
		t.Fatal(err)
	}
	_, keyB, err := srv.Store.CreateE2BKey(t.Context(), "b")
	if err != nil {
		t.Fatal(err)
	}
	u := srv.URL
	const value = "sk-secretValue-0123456789"
	var answers []string // every body, searched for the value at the end
	do := func(method, path, key, body string, wantStatus int, out any) string {
		t.Helper()
		status, b := rawCall(t, method, u+path, key, body)
		answers = append(answers, b)
		if status != wantStatus {
			t.Fatalf("%s %s: %d, want %d: %s", method, path, status, wantStatus, b)
		}
		if wantStatus >= 400 {
			var e struct {
				Code    int
				Message string
			}
			if json.Unmarshal([]byte(b), &e) != nil || e.Code != wantStatus || e.Message == "" {
				t.Errorf("%s %s: error body %s, want E2B's {code, message}", method, path, b)
			}
		}
		if out != nil {
			if err := json.Unmarshal([]byte(b), out); err != nil {
				t.Fatalf("%s %s: %v: %s", method, path, err, b)
			}
		}
		return b
	}
	js := func(v any) string { b, _ := json.Marshal(v); return string(b) }

	var made secretInfo
	body := do("POST", "/secrets", keyA, js(map[string]any{"name": "OpenAI-Key", "value": value, "metadata": map[string]string{"env": "test"}}), 201, &made)
	if !strings.HasPrefix(made.SecretID, "sec_") || made.Name != "openai-key" || made.CurrentVersion != 1 ||
		made.Metadata["env"] != "test" || made.CreatedAt == "" || made.UpdatedAt == "" || strings.Contains(body, `"value"`) {
		t.Errorf("create: %s", body)
	}
	do("POST", "/secrets", keyA, js(map[string]any{"name": "OPENAI-KEY", "value": "x"}), 409, nil)
	do("POST", "/secrets", "", js(map[string]any{"name": "n", "value": "x"}), 401, nil)
	t.Run("bad requests", func(t *testing.T) {
		for _, name := range []string{"", "{name", "name}", "name\n", "name\x00", "na\u0085me", "sec_abc", strings.Repeat("n", 300)} {
			do("POST", "/secrets", keyA, js(map[string]any{"name": name, "value": "x"}), 400, nil)
		}
		do("POST", "/secrets", keyA, `{"name":"n"}`, 400, nil)
		do("POST", "/secrets", keyA, `{"value":"x"}`, 400, nil)
		do("POST", "/secrets", keyA, js(map[string]any{"name": "n", "value": "a\r\nX-Injected: 1"}), 400, nil)
		do("POST", "/secrets", keyA, js(map[string]any{"name": "n", "value": strings.Repeat("v", 65<<10)}), 400, nil)
		do("POST", "/secrets", keyA, `{"name":`, 400, nil)
		// A body past the control plane's bound is cut off, not read.
		do("POST", "/secrets", keyA, `{"name":"n","value":"`+strings.Repeat("v", 2<<20)+`"}`, 400, nil)
		md := map[string]string{}
		for i := range 33 {
			md[strings.Repeat("k", i+1)] = "v"
		}
		do("POST", "/secrets", keyA, js(map[string]any{"name": "n", "value": "x", "metadata": md}), 400, nil)
		do("GET", "/secrets?limit=0", keyA, "", 400, nil)
		do("GET", "/secrets?nextToken=%21", keyA, "", 400, nil)
	})

	var got secretInfo
	for _, ref := range []string{made.SecretID, "openai-key", "OpenAI-Key"} {
		body = do("GET", "/secrets/"+url.PathEscape(ref), keyA, "", 200, &got)
		if got.SecretID != made.SecretID || strings.Contains(body, `"value"`) {
			t.Errorf("get %s: %s", ref, body)
		}
	}
	do("GET", "/secrets/missing", keyA, "", 404, nil)
	do("POST", "/secrets/missing", keyA, `{"value":"x"}`, 404, nil)
	do("DELETE", "/secrets/missing", keyA, "", 404, nil)
	do("POST", "/secrets/openai-key", keyA, js(map[string]any{"value": value + "2"}), 200, &got)
	if got.CurrentVersion != 2 || got.Metadata["env"] != "test" || got.CreatedAt != made.CreatedAt {
		t.Errorf("update without metadata: %+v", got)
	}
	do("POST", "/secrets/"+made.SecretID, keyA, js(map[string]any{"value": value, "metadata": map[string]string{"env": "prod"}}), 200, &got)
	if got.CurrentVersion != 3 || got.Metadata["env"] != "prod" {
		t.Errorf("update with metadata: %+v", got)
	}
	do("POST", "/secrets/openai-key", keyA, `{"value":""}`, 400, nil)

	t.Run("paging", func(t *testing.T) {
		for _, n := range []string{"p1", "p2"} {
			do("POST", "/secrets", keyA, js(map[string]any{"name": n, "value": "x"}), 201, nil)
		}
		var names []string
		path := "/secrets?limit=2"
		for range 3 {
			req, _ := http.NewRequestWithContext(t.Context(), "GET", u+path, nil)
			req.Header.Set("X-API-Key", keyA)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var page []secretInfo
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			answers = append(answers, string(b))
			if resp.StatusCode != 200 || json.Unmarshal(b, &page) != nil {
				t.Fatalf("list: %d %s", resp.StatusCode, b)
			}
			for _, s := range page {
				names = append(names, s.Name)
			}
			next := resp.Header.Get("X-Next-Token")
			if next == "" {
				break
			}
			path = "/secrets?limit=2&nextToken=" + url.QueryEscape(next)
		}
		if strings.Join(names, ",") != "openai-key,p1,p2" {
			t.Errorf("listed %q in pages of 2", names)
		}
		for _, n := range []string{"p1", "p2"} {
			do("DELETE", "/secrets/"+n, keyA, "", 204, nil)
		}
		do("DELETE", "/secrets/p1", keyA, "", 404, nil)
	})

	t.Run("another key", func(t *testing.T) {
		if b := do("GET", "/secrets", keyB, "", 200, nil); strings.TrimSpace(b) != "[]" {
			t.Errorf("key b lists %s", b)
		}
		do("GET", "/secrets/"+made.SecretID, keyB, "", 404, nil)
		do("GET", "/secrets/openai-key", keyB, "", 404, nil)
		do("POST", "/secrets/"+made.SecretID, keyB, `{"value":"stolen"}`, 404, nil)
		do("DELETE", "/secrets/"+made.SecretID, keyB, "", 404, nil)
		// Naming key a's secret in a rule is naming a secret key b does not have.
		var e struct{ Message string }
		b := do("POST", "/v2/sandboxes", keyB, rules(map[string]any{"api.example.com": header("Authorization", "Bearer ${e2b.secrets.openai-key}")}), 400, &e)
		if !strings.Contains(e.Message, `secret "openai-key" not found`) {
			t.Errorf("key b's create naming key a's secret: %s", b)
		}
		// Its own secret of the same name is its own.
		do("POST", "/secrets", keyB, js(map[string]any{"name": "openai-key", "value": "b-value"}), 201, nil)
		do("GET", "/secrets/"+made.SecretID, keyB, "", 404, nil)
	})

	t.Run("network rules", func(t *testing.T) {
		auth := header("Authorization", "Bearer ${e2b.secrets.OpenAI-Key}")
		for _, c := range []struct {
			what   string
			body   string
			status int
			says   string
		}{
			{"a missing secret", rules(map[string]any{"api.example.com": header("Authorization", "${e2b.secrets.nope}")}), 400, `"nope" not found`},
			{"an unclosed placeholder", rules(map[string]any{"api.example.com": header("Authorization", "${e2b.secrets.openai-key")}), 400, "closing"},
			{"a bad name in a placeholder", rules(map[string]any{"api.example.com": header("Authorization", "${e2b.secrets.}")}), 400, "empty"},
			{"a workload token", rules(map[string]any{"api.example.com": header("Authorization", "${e2b.identity.tokens.aws}")}), 501, "e2b.identity.tokens.aws"},
			{"a rule for an address", rules(map[string]any{"10.1.2.3": auth}), 501, "addresses"},
			{"a rule for a CIDR range", rules(map[string]any{"10.1.0.0/16": auth}), 501, "addresses"},
			{"a rule for a bad host", rules(map[string]any{"*": auth}), 400, "*"},
			{"the Host header", rules(map[string]any{"api.example.com": header("Host", "evil.test")}), 400, "Host"},
			{"a header name with a colon", rules(map[string]any{"api.example.com": header("X:Y", "v")}), 400, "X:Y"},
			{"a line break in a literal value", rules(map[string]any{"api.example.com": header("X-Y", "a\r\nX-Injected: 1")}), 400, "line break"},
			{"another transform", rules(map[string]any{"api.example.com": []any{map[string]any{"transform": map[string]any{"body": "x"}}}}), 501, "transform.body"},
			{"another rule field", rules(map[string]any{"api.example.com": []any{map[string]any{"match": "x"}}}), 501, "match"},
			{"rules not an object", `{"templateID":"base","network":{"rules":[1]}}`, 400, "network.rules"},
			// An egress proxy's form is checked first (400); a good one the memory provider,
			// without CapEgressProxy, refuses (501). The local provider's are in
			// providers/local's TestSocksEgress.
			{"an egress proxy", `{"templateID":"base","network":{"egressProxy":{"address":"p.example:1080"}}}`, 501, "egress proxy"},
			{"an egress proxy without a port", `{"templateID":"base","network":{"egressProxy":{"address":"p.example"}}}`, 400, "host:port"},
			{"an egress proxy without an address", `{"templateID":"base","network":{"egressProxy":{"username":"u"}}}`, 400, "address is required"},
			{"an egress proxy password alone", `{"templateID":"base","network":{"egressProxy":{"address":"p.example:1080","password":"pw"}}}`, 400, "without a username"},
			{"an egress proxy username too long", `{"templateID":"base","network":{"egressProxy":{"address":"p.example:1080","username":"` + strings.Repeat("u", 256) + `"}}}`, 400, "255 bytes"},
			// Resolved: then the memory provider, which has no egress proxy, refuses.
			{"a provider without bound secrets", rules(map[string]any{"api.example.com": auth, "*.example.com": header("X-Org", "org-1")}), 501, "bound secrets"},
		} {
			var e struct{ Message string }
			if b := do("POST", "/v2/sandboxes", keyA, c.body, c.status, &e); !strings.Contains(e.Message, c.says) {
				t.Errorf("%s: %s, want it to say %q", c.what, b, c.says)
			}
		}
		var sb struct{ SandboxID string }
		do("POST", "/v2/sandboxes", keyA, `{"templateID":"base"}`, 201, &sb)
		do("PUT", "/sandboxes/"+sb.SandboxID+"/network", keyA, js(map[string]any{"rules": map[string]any{"api.example.com": auth}}), 501, nil)
		var e struct{ Message string }
		if b := do("PUT", "/sandboxes/"+sb.SandboxID+"/network", keyA, js(map[string]any{"egressProxy": map[string]any{"address": "p.example:1080"}}), 501, &e); !strings.Contains(e.Message, "egress proxy") {
			t.Errorf("an egress proxy on an update, memory provider: %s", b)
		}
	})

	for _, b := range answers {
		if strings.Contains(b, "secretValue") {
			t.Errorf("an answer holds a secret's value: %s", b)
		}
	}
}

// rules is a create body with network.rules.
func rules(r map[string]any) string {
	b, _ := json.Marshal(map[string]any{"templateID": "base", "network": map[string]any{"rules": r}})
	return string(b)
}

// header is one host's rules: one transform setting name to value.
func header(name, value string) []any {
	return []any{map[string]any{"transform": map[string]any{"headers": map[string]string{name: value}}}}
}
