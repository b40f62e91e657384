package egress

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tupper-dev/tupper/provider"
)

// TestReload: a policy file the proxy can take is enforced and its generation written to the
// Applied file; one it cannot leaves the policy in force and says why in the same file, which
// is all the host reads (the proxy's stderr reaches nobody).
func TestReload(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "egress-policy.json")
	p, err := NewProxy(Config{}, MustParse([]string{"a.test"}, nil))
	if err != nil {
		t.Fatal(err)
	}
	write := func(b []byte) {
		t.Helper()
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	applied := func() string {
		t.Helper()
		b, err := os.ReadFile(Applied(path))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}

	b, _ := json.Marshal(File{Allow: []string{"b.test"}, Generation: 42})
	write(b)
	if err := Reload(p, path); err != nil {
		t.Fatal(err)
	}
	if got := applied(); got != "42" {
		t.Errorf("Applied after a good file: %q, want 42", got)
	}
	if !p.Policy().AllowsName("b.test") || p.Policy().AllowsName("a.test") {
		t.Errorf("after the reload b.test allowed %v, a.test %v; want the new file's policy", p.Policy().AllowsName("b.test"), p.Policy().AllowsName("a.test"))
	}

	for name, bad := range map[string][]byte{
		"not JSON":       []byte("{"),
		"a bad name":     mustJSON(t, File{Allow: []string{"bad name!"}, Generation: 43}),
		"a bad proxy":    mustJSON(t, File{Allow: []string{"c.test"}, Proxy: &provider.EgressProxy{Address: "no port"}, Generation: 44}),
		"no file at all": nil,
	} {
		if bad == nil {
			os.Remove(path)
		} else {
			write(bad)
		}
		err := Reload(p, path)
		if err == nil {
			t.Errorf("%s: Reload took it", name)
			continue
		}
		got := applied()
		if !strings.HasPrefix(got, AppliedError) || !strings.Contains(got, "keeping the policy in force") {
			t.Errorf("%s: Applied is %q, want %q and why", name, got, AppliedError)
		}
		if !p.Policy().AllowsName("b.test") {
			t.Errorf("%s: the policy in force changed: b.test refused", name)
		}
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
