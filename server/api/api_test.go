package api

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/tupper-dev/tupper/provider"
)

// A network goes to the wire and back whole, in every form a client sends: the fork route
// once kept only its mode and allow list, dropping deny (a policy widened) and learn.
func TestNetworkRoundTrip(t *testing.T) {
	for _, n := range []provider.Network{
		{Mode: provider.NetworkAll},
		{Mode: provider.NetworkNone},
		{Mode: provider.NetworkAllow, Allow: []string{"*.example.test", "10.0.0.0/8"}, Deny: []string{"bad.example.test"}},
		{Mode: provider.NetworkAllow, Learn: true},
	} {
		b, err := json.Marshal(CreateRequest{Network: NetworkOf(n)})
		if err != nil {
			t.Fatal(err)
		}
		var back CreateRequest
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		if got := back.Network.Provider(); !reflect.DeepEqual(got, n) {
			t.Errorf("%s came back as %+v, want %+v", b, got, n)
		}
	}
}

func TestNetworkForms(t *testing.T) {
	for _, c := range []struct {
		json string
		want Network
		err  string
	}{
		{`"all"`, Network{Mode: "all"}, ""},
		{`{"allow": ["a.test"]}`, Network{Mode: "allow", Allow: []string{"a.test"}}, ""},
		{`{"deny": []}`, Network{Mode: "allow", Deny: []string{}}, ""}, // a policy, never all
		{`{"mode": "none"}`, Network{Mode: "none"}, ""},
		{`{"learn": true}`, Network{Mode: "allow", Learn: true}, ""},
		{`{"allowed": ["a.test"]}`, Network{}, `unknown field "allowed"`},
		{`7`, Network{}, `"network" is "all"`},
	} {
		var n Network
		err := json.Unmarshal([]byte(c.json), &n)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: err %v, want one containing %q", c.json, err, c.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(n, c.want) {
			t.Errorf("%s: %+v, %v; want %+v", c.json, n, err, c.want)
		}
	}
}

// TestSecretsForms: "secrets" holds plain secrets (strings) and bound ones (objects) side by
// side, and round-trips.
func TestSecretsForms(t *testing.T) {
	var req CreateRequest
	body := `{"secrets": {"PLAIN": "p", "GITHUB_TOKEN": {"value": "v", "hosts": ["api.github.com", "*.github.com"]}}}`
	if err := json.Unmarshal([]byte(body), &req); err != nil {
		t.Fatal(err)
	}
	want := Secrets{Plain: map[string]string{"PLAIN": "p"},
		Bound: map[string]provider.BoundSecret{"GITHUB_TOKEN": {Value: "v", Hosts: []string{"api.github.com", "*.github.com"}}}}
	if !reflect.DeepEqual(req.Secrets, want) {
		t.Fatalf("decoded %+v, want %+v", req.Secrets, want)
	}
	b, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	var back CreateRequest
	if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back.Secrets, want) {
		t.Errorf("round trip: %s → %+v, %v", b, back.Secrets, err)
	}
	if b, _ := json.Marshal(CreateRequest{}); strings.Contains(string(b), "secrets") {
		t.Errorf("no secrets marshals as %s", b)
	}
	for _, bad := range []string{`{"secrets": {"A": {"value": "v", "host": ["a.test"]}}}`, `{"secrets": {"A": 7}}`, `{"secrets": []}`} {
		if err := json.Unmarshal([]byte(bad), &req); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}
