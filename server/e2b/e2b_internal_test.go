package e2b

import (
	"bytes"
	"encoding/binary"
	"io"
	"maps"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/tupper-dev/tupper/agent/spec/process"
)

// The vectors come from getSignature of npm e2b 2.51.0.
func TestSignatureMatchesTheSDK(t *testing.T) {
	for _, c := range []struct {
		path, op, user, token string
		exp                   int64
		want                  string
	}{
		{"/home/user/a.txt", "read", "", "sbt_0123456789abcdef0123456789abcdef01234567", 0, "v1_u9gpPyBQDdZEbf41zaKj8jltai9gSA5L4Qd3h46L1UY"},
		{"a b.txt", "write", "root", "tok", 1796018592, "v1_B93Ycb8AmpgmziGFBZHxLxxxVTkdK+MUfLvQVb8lXkc"},
	} {
		if got := Signature(c.path, c.op, c.user, c.token, c.exp); got != c.want {
			t.Errorf("Signature(%q, %q, %q, …, %d) = %s, want %s", c.path, c.op, c.user, c.exp, got, c.want)
		}
	}
}

func TestCheckSignature(t *testing.T) {
	s := &Server{tokenKey: []byte("k")}
	tok := s.envdToken("abc")
	now := time.Unix(1_800_000_000, 0)
	q := func(path, user string, exp int64, sig string) url.Values {
		v := url.Values{"path": {path}, "signature": {sig}}
		if user != "" {
			v.Set("username", user)
		}
		if exp != 0 {
			v.Set("signature_expiration", strconv.FormatInt(exp, 10))
		}
		return v
	}
	good := Signature("/x", "read", "", tok, 0)
	exp := now.Unix() + 60
	timed := Signature("/x", "write", "", tok, exp)
	for _, c := range []struct {
		name, id, method string
		q                url.Values
		now              time.Time
		want             error
	}{
		{"a valid read signature", "abc", "GET", q("/x", "", 0, good), now, nil},
		{"a read signature for a write", "abc", "POST", q("/x", "", 0, good), now, errSignatureInvalid},
		{"another sandbox", "abd", "GET", q("/x", "", 0, good), now, errSignatureInvalid},
		{"another path", "abc", "GET", q("/y", "", 0, good), now, errSignatureInvalid},
		{"another user", "abc", "GET", q("/x", "root", 0, good), now, errSignatureInvalid},
		{"no signature", "abc", "GET", url.Values{"path": {"/x"}}, now, errSignatureInvalid},
		{"a valid expiring signature", "abc", "POST", q("/x", "", exp, timed), now, nil},
		{"at its expiration", "abc", "POST", q("/x", "", exp, timed), time.Unix(exp, 0), nil},
		{"after its expiration", "abc", "POST", q("/x", "", exp, timed), now.Add(2 * time.Minute), errSignatureExpired},
		{"another expiration", "abc", "POST", q("/x", "", exp+1, timed), now, errSignatureInvalid},
		// Only the sandbox's own URLs are said to be expired.
		{"expired for another sandbox", "abd", "POST", q("/x", "", exp, timed), now.Add(2 * time.Minute), errSignatureInvalid},
		{"an expiration that is not a number", "abc", "POST", url.Values{"path": {"/x"}, "signature": {timed}, "signature_expiration": {"soon"}}, now, errSignatureInvalid},
	} {
		if got := s.checkSignature(c.id, c.method, c.q, c.now); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
	if errSignatureExpired.Error() != "signature is already expired" || errSignatureInvalid.Error() != "invalid signature" {
		t.Error("the messages are not envd's, which E2B's SDK tests read")
	}
}

func TestTrafficTokenIsKeyedAndNotASandboxToken(t *testing.T) {
	a := &Server{tokenKey: []byte("one")}
	b := &Server{tokenKey: []byte("two")}
	if a.trafficToken("x") != a.trafficToken("x") || len(a.trafficToken("x")) != 40 {
		t.Errorf("traffic token %q: want 40 hex digits, stable", a.trafficToken("x"))
	}
	if a.trafficToken("x") == a.trafficToken("y") || a.trafficToken("x") == b.trafficToken("x") {
		t.Error("traffic tokens of different sandboxes or keys are equal")
	}
	if strings.Contains(a.envdToken("x"), a.trafficToken("x")) {
		t.Error("the traffic token is part of the envd token")
	}
}

func TestMetadataHidesTheServersLabels(t *testing.T) {
	for _, c := range []struct {
		labels, want map[string]string
	}{
		{nil, map[string]string{}},
		{map[string]string{"a": "1", "sandbox-sdk": "true", labelSDKAdded: "true"}, map[string]string{"a": "1"}},
		// Set by the client (providers/e2b does): shown.
		{map[string]string{"a": "1", "sandbox-sdk": "true"}, map[string]string{"a": "1", "sandbox-sdk": "true"}},
		{map[string]string{"a": "1", labelPublicTraffic: "false"}, map[string]string{"a": "1"}},
	} {
		if got := metadata(c.labels); !maps.Equal(got, c.want) {
			t.Errorf("metadata(%v) = %v, want %v", c.labels, got, c.want)
		}
	}
}

func TestEnvdTokenIsStableAndKeyed(t *testing.T) {
	a := &Server{tokenKey: []byte("one")}
	b := &Server{tokenKey: []byte("two")}
	if a.envdToken("x") != a.envdToken("x") {
		t.Error("the token of a sandbox changed")
	}
	if a.envdToken("x") == a.envdToken("y") || a.envdToken("x") == b.envdToken("x") {
		t.Error("tokens of different sandboxes or keys are equal")
	}
	if got := a.envdToken("x"); len(got) != 44 || got[:4] != "sbt_" {
		t.Errorf("token %q: want sbt_ and 40 hex digits", got)
	}
}

func envelope(msg []byte) []byte {
	b := make([]byte, 5, 5+len(msg))
	binary.BigEndian.PutUint32(b[1:], uint32(len(msg)))
	return append(b, msg...)
}

func TestStartInHome(t *testing.T) {
	for _, c := range []struct {
		name, ctype string
		body        []byte
		wantCwd     string // "" : left alone
	}{
		{"json without cwd", "application/connect+json", envelope([]byte(`{"process":{"cmd":"/bin/bash","args":["-l","-c","pwd"]},"stdin":false}`)), "~"},
		{"json with cwd", "application/connect+json", envelope([]byte(`{"process":{"cmd":"/bin/bash","cwd":"/tmp"}}`)), "/tmp"},
		{"proto without cwd", "application/connect+proto", envelope(mustProto(t, &process.StartRequest{Process: &process.ProcessConfig{Cmd: "ls"}})), "~"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := httptest.NewRequest("POST", "/process.Process/Start", bytes.NewReader(c.body))
			r.Header.Set("Content-Type", c.ctype)
			if err := startIn(r, "~"); err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(r.Body)
			if r.ContentLength != int64(len(b)) || int(binary.BigEndian.Uint32(b[1:5])) != len(b)-5 {
				t.Fatalf("lengths do not match the body: %d, %q", r.ContentLength, b)
			}
			var req process.StartRequest
			if c.ctype == "application/connect+json" {
				if err := protojson.Unmarshal(b[5:], &req); err != nil {
					t.Fatal(err)
				}
			} else if err := proto.Unmarshal(b[5:], &req); err != nil {
				t.Fatal(err)
			}
			if got := req.GetProcess().GetCwd(); got != c.wantCwd {
				t.Errorf("cwd = %q, want %q", got, c.wantCwd)
			}
		})
	}
	// Anything else passes unchanged.
	body := []byte(`not an envelope`)
	r := httptest.NewRequest("POST", "/process.Process/Start", bytes.NewReader(body))
	r.Header.Set("Content-Type", "application/connect+json")
	if err := startIn(r, "~"); err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(r.Body); !bytes.Equal(b, body) {
		t.Errorf("a body that is not one envelope changed: %q", b)
	}
}

func mustProto(t *testing.T, m proto.Message) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestPageKeyRoundTrip(t *testing.T) {
	k := pageKey{at: 1_700_000_000_123_456_789, id: "abc123"}
	got, err := parsePageKey(k.String())
	if err != nil || got != k {
		t.Fatalf("parsePageKey(%q) = %v, %v", k.String(), got, err)
	}
	for _, bad := range []string{"", "!!", "bm9kb3Q", "MTIzLkEtQg"} {
		if _, err := parsePageKey(bad); err == nil {
			t.Errorf("parsePageKey(%q) accepted", bad)
		}
	}
}
