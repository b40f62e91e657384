package sandbox

import (
	"errors"
	"testing"
	"time"

	"github.com/tupper-dev/tupper/provider"
)

func TestCreateOptionsValidate(t *testing.T) {
	bad := map[string]CreateOptions{
		"keyMode":         {Key: "k", KeyMode: "strict"},
		"exactWithoutKey": {KeyMode: KeyExact},
		"sizeName":        {Size: Size{Name: "huge"}},
		"sizeMixed":       {Size: Size{Name: "small", CPU: 2}},
		"sizeCPU":         {Size: Size{CPU: -1, MemoryMB: 512, DiskGB: 1}},
		"sizeMem":         {Size: Size{CPU: 1, MemoryMB: 1, DiskGB: 1}},
		"network":         {Network: Network{Mode: "some"}},
		"allowEmpty":      {Network: Network{Mode: provider.NetworkAllow}},
		"allowWithNone":   {Network: Network{Mode: provider.NetworkNone, Allow: []string{"x"}}},
		"port":            {Ports: []int{70000}},
		"label":           {Labels: map[string]string{"bad key!": "v"}},
		"envName":         {Env: map[string]string{"1X": "v"}},
		"envNUL":          {Env: map[string]string{"X": "a\x00"}},
		"secretName":      {Secrets: map[string]string{"A-B": "v"}},
		"negTimeout":      {Timeout: -time.Second},
		"longKey":         {Key: string(make([]byte, 300))},
		"boundName":       {BoundSecrets: map[string]BoundSecret{"A-B": {Value: "v", Hosts: []string{"a.test"}}}},
		"boundNoHosts":    {BoundSecrets: map[string]BoundSecret{"A": {Value: "v"}}},
		"boundAddress":    {BoundSecrets: map[string]BoundSecret{"A": {Value: "v", Hosts: []string{"10.0.0.1"}}}},
		"boundEmpty":      {BoundSecrets: map[string]BoundSecret{"A": {Hosts: []string{"a.test"}}}},
		"boundNewline":    {BoundSecrets: map[string]BoundSecret{"A": {Value: "v\r\nX-Injected: 1", Hosts: []string{"a.test"}}}},
		"boundAlsoSecret": {Secrets: map[string]string{"A": "x"}, BoundSecrets: map[string]BoundSecret{"A": {Value: "v", Hosts: []string{"a.test"}}}},
		"boundAlsoEnv":    {Env: map[string]string{"A": "x"}, BoundSecrets: map[string]BoundSecret{"A": {Value: "v", Hosts: []string{"a.test"}}}},
		"boundNoNetwork":  {Network: NetworkNone, BoundSecrets: map[string]BoundSecret{"A": {Value: "v", Hosts: []string{"a.test"}}}},
		"headerHost":      {BoundSecrets: map[string]BoundSecret{"A": {Value: "v", Hosts: []string{"a.test"}, Header: "Host"}}},
		"headerLength":    {BoundSecrets: map[string]BoundSecret{"A": {Value: "v", Hosts: []string{"a.test"}, Header: "content-length"}}},
		"headerName":      {BoundSecrets: map[string]BoundSecret{"A": {Value: "v", Hosts: []string{"a.test"}, Header: "X:Y"}}},
		"headerNewline":   {BoundSecrets: map[string]BoundSecret{"A": {Value: "v\nX: 1", Hosts: []string{"a.test"}, Header: "X-Key"}}},
	}
	for name, o := range bad {
		if err := o.Validate(); !errors.Is(err, CodeInvalidArgument) {
			t.Errorf("%s: Validate() = %v, want invalid_argument", name, err)
		}
	}
	good := []CreateOptions{
		{},
		{Key: "user:1", KeyMode: KeyExact, Size: SizeSmall, Network: NetworkNone, Ports: []int{3000},
			Labels: map[string]string{"team": "a"}, Env: map[string]string{"A": "1"}, Secrets: map[string]string{"TOKEN": "x"}},
		{Size: Size{CPU: 0.5, MemoryMB: 256, DiskGB: 1}, Network: NetworkAllowList("example.com")},
		{Secrets: map[string]string{"PLAIN": "x"}, BoundSecrets: map[string]BoundSecret{"GH": {Value: "v", Hosts: []string{"api.github.com", "*.github.com"}}}},
		// A header's secret sets no variable: its name may be an environment variable's.
		{Env: map[string]string{"GH": "x"}, BoundSecrets: map[string]BoundSecret{"GH": {Value: "Bearer v", Hosts: []string{"api.github.com"}, Header: "Authorization"}}},
	}
	for i, o := range good {
		if err := o.Validate(); err != nil {
			t.Errorf("good[%d]: %v", i, err)
		}
	}
}

func TestSnapshotExpiryValidation(t *testing.T) {
	for _, d := range []time.Duration{-time.Millisecond, 1500 * time.Microsecond, 1} {
		if err := (SnapshotOptions{ExpiresIn: d}).validate(); !errors.Is(err, CodeInvalidArgument) {
			t.Errorf("ExpiresIn %v: %v, want invalid_argument", d, err)
		}
	}
	for _, d := range []time.Duration{0, time.Millisecond, time.Hour} {
		if err := (SnapshotOptions{ExpiresIn: d}).validate(); err != nil {
			t.Errorf("ExpiresIn %v: %v", d, err)
		}
	}
}

func TestWriteModeValidation(t *testing.T) {
	for _, m := range []int{-1, 0o10000, 1 << 30} {
		if _, err := (WriteOptions{Mode: Mode(m)}).mode("w"); !errors.Is(err, CodeInvalidArgument) {
			t.Errorf("mode %o: %v, want invalid_argument", m, err)
		}
	}
	for _, m := range []int{0, 0o600, 0o7777} {
		got, err := (WriteOptions{Mode: Mode(m)}).mode("w")
		if err != nil || *got != uint32(m) {
			t.Errorf("mode %o: %v %v", m, got, err)
		}
	}
}

func TestErrorsCarryCodes(t *testing.T) {
	for _, c := range provider.Codes() {
		err := error(errorf(c, "op", "with a token ghp_abcdefghijklmnopqrstuvwxyz0123"))
		var se *Error
		if !errors.As(err, &se) || se.Code != c || !errors.Is(err, c) {
			t.Errorf("%s: errors.As/Is failed for %v", c, err)
		}
		if got := err.Error(); contains(got, "ghp_abcdefghij") {
			t.Errorf("%s: credential in message %q", c, got)
		}
	}
}

func contains(s, sub string) bool {
	return len(sub) > 0 && len(s) >= len(sub) && (s == sub || indexOf(s, sub) >= 0)
}

func indexOf(s, sub string) int {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return i
		}
	}
	return -1
}

func TestCursorRoundTrip(t *testing.T) {
	c := cursor{gen: "abc", out: 10, err: 7}
	got, err := parseCursor(c.String(), "abc")
	if err != nil || got != c {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	if got, _ := parseCursor(c.String(), "other"); got.out != 0 || got.err != 0 {
		t.Fatalf("a cursor of an earlier generation should restart: %+v", got)
	}
	for _, bad := range []string{"!!", "YQ", c.String() + "$$"} {
		if _, err := parseCursor(bad, "abc"); !errors.Is(err, CodeInvalidArgument) {
			t.Errorf("cursor %q: %v", bad, err)
		}
	}
}

func TestDefaultProcName(t *testing.T) {
	a := defaultProcName("npm run dev")
	if a != defaultProcName("npm run dev") || !procName.MatchString(a) || a[:4] != "npm-" {
		t.Fatalf("unstable or invalid default name %q", a)
	}
	if a == defaultProcName("npm run build") {
		t.Fatal("different commands got one name")
	}
	for _, cmd := range []string{"", "   ", "/usr/bin/python3 -m http.server", "$(weird) cmd", string(make([]byte, 200))} {
		if n := defaultProcName(cmd); !procName.MatchString(n) {
			t.Errorf("default name %q of %q is invalid", n, cmd)
		}
	}
}
