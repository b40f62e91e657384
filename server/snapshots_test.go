package server

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// A snapshot is a lasting copy of a sandbox's disk on the host: a sandbox token may not make
// one (it could fill the host's disk), an API key makes a bounded number per sandbox and per
// key, through the native and the E2B API alike, and each expires.
func TestSnapshotBounds(t *testing.T) {
	e := newEnv(t, func(c *Config) {
		c.SnapshotsPerSandbox, c.SnapshotsPerKey, c.SnapshotExpiry = 2, 3, time.Hour
	})
	a, b := e.create(nil), e.create(nil)
	snap := func(id string) string { return "/v1/sandboxes/" + id + "/snapshot" }
	body := e.want(403, nil, "POST", snap(a.ID), a.Token, nil)
	if !strings.Contains(string(body), "API key") {
		t.Errorf("sandbox token: %s", body)
	}
	e.want(400, nil, "POST", snap(a.ID), e.key, map[string]any{"expiresInMs": 2 * time.Hour.Milliseconds()})
	e.want(201, nil, "POST", snap(a.ID), e.key, nil)
	e.want(201, nil, "POST", snap(a.ID), e.key, map[string]any{"expiresInMs": 60000})
	var apiErr struct{ Code, Message string }
	if err := json.Unmarshal(e.want(429, nil, "POST", snap(a.ID), e.key, nil), &apiErr); err != nil ||
		apiErr.Code != "resource_exhausted" || !strings.Contains(apiErr.Message, "per sandbox") {
		t.Fatalf("third snapshot of a sandbox: %+v %v", apiErr, err)
	}
	// E2B's API counts against the same key.
	if resp, data := e.do("POST", "/sandboxes/"+b.ID+"/snapshots", "", map[string]any{}, "X-API-Key", e.key); resp.StatusCode != 201 {
		t.Fatalf("E2B snapshot: %d %s", resp.StatusCode, data)
	}
	if resp, data := e.do("POST", "/sandboxes/"+b.ID+"/snapshots", "", map[string]any{}, "X-API-Key", e.key); resp.StatusCode != 429 || !strings.Contains(string(data), "per key") {
		t.Fatalf("E2B snapshot past the key's quota: %d %s", resp.StatusCode, data)
	}
	e.want(429, nil, "POST", snap(b.ID), e.key, nil)
	// Every one expires: none an hour from now... all three after it.
	ctx := context.Background()
	if got, _ := e.st.ExpiredSnapshots(ctx, time.Now().Add(59*time.Minute)); len(got) != 1 {
		t.Errorf("expired within 59 min: %d snapshots, want the one asked for 1 min", len(got))
	}
	if got, _ := e.st.ExpiredSnapshots(ctx, time.Now().Add(61*time.Minute)); len(got) != 3 {
		t.Errorf("expired within 61 min: %d snapshots, want 3", len(got))
	}
}
