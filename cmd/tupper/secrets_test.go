package main

import (
	"reflect"
	"strings"
	"testing"

	"github.com/tupper-dev/tupper/sandbox"
)

// TestParseSecrets: --secret's forms, the value after the first = whatever it holds.
func TestParseSecrets(t *testing.T) {
	env := func(k string) (string, bool) {
		if k == "FROM_ENV" {
			return "env-value", true
		}
		return "", false
	}
	plain, bound, err := parseSecrets([]string{"A=x=y@z", "FROM_ENV", "GH@api.github.com,*.githubusercontent.com=tok@en", "FROM_ENV@a.test"}, env)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"A": "x=y@z", "FROM_ENV": "env-value"}; !reflect.DeepEqual(plain, want) {
		t.Errorf("plain %v, want %v", plain, want)
	}
	want := map[string]sandbox.BoundSecret{
		"GH":       {Value: "tok@en", Hosts: []string{"api.github.com", "*.githubusercontent.com"}},
		"FROM_ENV": {Value: "env-value", Hosts: []string{"a.test"}},
	}
	if !reflect.DeepEqual(bound, want) {
		t.Errorf("bound %v, want %v", bound, want)
	}
	for _, bad := range []string{"=v", "@a.test=v", "MISSING", "MISSING@a.test"} {
		if _, _, err := parseSecrets([]string{bad}, env); err == nil {
			t.Errorf("--secret %q: no error", bad)
		}
	}
}

// TestSecretFlag: a plain secret reaches the command and is redacted from what it prints; a
// bound one is refused, saying why, by a provider without an egress proxy.
func TestSecretFlag(t *testing.T) {
	home := t.TempDir()
	r := tupper(t, home, "", "run", "--provider", "memory", "--secret", "TOK=s3cr3t-value", "--", "sh", "-c", `echo "[$TOK]"; test "$TOK" = s3cr3t-value && echo same`)
	if r.code != 0 || r.stdout != "["+sandbox.Redacted+"]\nsame\n" {
		t.Errorf("run --secret: %+v", r)
	}
	r = tupper(t, home, "", "run", "--provider", "memory", "--secret", "TOK@a.test=v", "--", "true")
	if r.code != exitTupperError || !strings.Contains(r.stderr, "bound secrets") {
		t.Errorf("run --secret TOK@a.test on memory: %+v, want a refusal naming bound secrets", r)
	}
	r = tupper(t, home, "", "run", "--provider", "memory", "--secret", "TOK@10.0.0.1=v", "--", "true")
	if r.code != exitTupperError || !strings.Contains(r.stderr, "not an address") {
		t.Errorf("run --secret TOK@10.0.0.1: %+v, want a refusal of the address", r)
	}
}
