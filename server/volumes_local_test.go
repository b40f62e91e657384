//go:build linux

package server_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/tupper-dev/tupper/server"
	"github.com/tupper-dev/tupper/server/servertest"
)

// TestVolumesAPI drives /v1/volumes and the volumes of a create through a real `tupper
// serve` on the local provider: a volume outlives its sandboxes and a kill -9 of the
// server, is refused deletion while mounted, and is the API key's alone to manage.
func TestVolumesAPI(t *testing.T) {
	home := localServeHome(t, "volumes need the local provider: ")
	key := newKey(t, home)
	a := serve(t, home, "local")
	type volume struct {
		Name      string
		SizeMB    int
		UsedBytes int64
		MountedBy []string
	}
	var v volume
	if code := call(t, "POST", a.url+"/v1/volumes", key, map[string]any{"name": "data", "sizeMB": 32}, &v); code != 201 || v.Name != "data" || v.SizeMB != 32 {
		t.Fatalf("create volume: %d %+v: %s", code, v, a.logs())
	}
	if code := call(t, "POST", a.url+"/v1/volumes", key, map[string]any{"name": "data"}, nil); code != 409 {
		t.Errorf("create it again: %d, want 409", code)
	}
	for _, bad := range []string{"../x", ".hidden", "a/b", ""} {
		if code := call(t, "POST", a.url+"/v1/volumes", key, map[string]any{"name": bad}, nil); code != 400 {
			t.Errorf("create volume %q: %d, want 400", bad, code)
		}
	}
	var sb struct{ ID, Token string }
	body := map[string]any{"network": map[string]string{"mode": "none"}, "volumes": []map[string]any{{"name": "data", "path": "/data"}}}
	if code := call(t, "POST", a.url+"/v1/sandboxes", key, body, &sb); code != 201 {
		t.Fatalf("create with a volume: %d: %s", code, a.logs())
	}
	// A sandbox token manages no volume, its own sandbox's included.
	for _, r := range [][2]string{{"GET", "/v1/volumes"}, {"GET", "/v1/volumes/data"}, {"DELETE", "/v1/volumes/data"}, {"POST", "/v1/volumes"}} {
		if code := call(t, r[0], a.url+r[1], sb.Token, map[string]any{"name": "other"}, nil); code != 403 {
			t.Errorf("%s %s with a sandbox token: %d", r[0], r[1], code)
		}
	}
	if code := call(t, "POST", a.url+"/v1/sandboxes", key, map[string]any{"network": map[string]string{"mode": "none"}, "volumes": []map[string]any{{"name": "data", "path": "/proc/x"}}}, nil); code != 400 {
		t.Errorf("a volume at /proc/x: %d, want 400", code)
	}
	if code := call(t, "POST", a.url+"/v1/sandboxes", key, map[string]any{"network": map[string]string{"mode": "none"}, "volumes": []map[string]any{{"name": "nope", "path": "/data"}}}, nil); code != 404 {
		t.Errorf("an unknown volume: %d, want 404", code)
	}
	var res struct {
		ExitCode int
		Stdout   string
	}
	if call(t, "POST", a.url+"/v1/sandboxes/"+sb.ID+"/run", sb.Token, map[string]string{"command": "echo kept > /data/f"}, &res); res.ExitCode != 0 {
		t.Fatalf("write: %+v", res)
	}
	if code := call(t, "DELETE", a.url+"/v1/volumes/data", key, nil, nil); code != 409 {
		t.Errorf("delete while mounted: %d, want 409", code)
	}
	if code := call(t, "GET", a.url+"/v1/volumes/data", key, nil, &v); code != 200 || len(v.MountedBy) != 1 || v.MountedBy[0] != sb.ID || v.UsedBytes == 0 {
		t.Errorf("inspect: %d %+v", code, v)
	}
	if code := call(t, "DELETE", a.url+"/v1/sandboxes/"+sb.ID, key, nil, nil); code != 204 {
		t.Fatalf("delete the sandbox: %d", code)
	}
	a.kill()

	b := serve(t, home, "local")
	var list struct{ Volumes []volume }
	if code := call(t, "GET", b.url+"/v1/volumes", key, nil, &list); code != 200 || len(list.Volumes) != 1 || list.Volumes[0].Name != "data" || len(list.Volumes[0].MountedBy) != 0 {
		t.Fatalf("after kill -9 and restart: %d %+v", code, list)
	}
	body["volumes"] = []map[string]any{{"name": "data", "path": "/mnt/ro", "readOnly": true}}
	if code := call(t, "POST", b.url+"/v1/sandboxes", key, body, &sb); code != 201 {
		t.Fatalf("create after restart: %d: %s", code, b.logs())
	}
	if call(t, "POST", b.url+"/v1/sandboxes/"+sb.ID+"/run", key, map[string]string{"command": "cat /mnt/ro/f"}, &res); res.Stdout != "kept\n" {
		t.Errorf("read after restart: %+v", res)
	}
	if call(t, "POST", b.url+"/v1/sandboxes/"+sb.ID+"/run", key, map[string]string{"command": "echo x > /mnt/ro/g"}, &res); res.ExitCode == 0 {
		t.Errorf("root wrote through a read-only volume")
	}
	if code := call(t, "DELETE", b.url+"/v1/sandboxes/"+sb.ID, key, nil, nil); code != 204 {
		t.Fatalf("delete the sandbox: %d", code)
	}
	if code := call(t, "DELETE", b.url+"/v1/volumes/data", key, nil, nil); code != 204 {
		t.Errorf("delete: %d", code)
	}
	if code := call(t, "GET", b.url+"/v1/volumes/data", key, nil, nil); code != 404 {
		t.Errorf("inspect after delete: %d", code)
	}
}

// TestVolumesBound: the sizes of a server's volumes together stay within its bound
// (VolumesTotalMB, `tupper serve --volumes-gib`) through both APIs: a volume that would pass
// it is 429 resource_exhausted; deleting one makes room again.
func TestVolumesBound(t *testing.T) {
	prov := servertest.Local(t, 63)
	srv := servertest.Start(t, prov, "", func(c *server.Config) { c.VolumesTotalMB = 100 })
	if code := call(t, "POST", srv.URL+"/v1/volumes", srv.Key, map[string]any{"name": "a", "sizeMB": 64}, nil); code != 201 {
		t.Fatalf("a 64 MB volume under a 100 MB bound: %d", code)
	}
	if code := call(t, "POST", srv.URL+"/v1/volumes", srv.Key, map[string]any{"name": "b", "sizeMB": 64}, nil); code != 429 {
		t.Errorf("a second 64 MB volume: %d, want 429", code)
	}
	// E2B's create asks for the default size (1 GiB).
	_, e2bKey, err := srv.Store.CreateE2BKey(t.Context(), "bound")
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequestWithContext(t.Context(), "POST", srv.URL+"/volumes", strings.NewReader(`{"name":"c"}`))
	req.Header.Set("X-API-Key", e2bKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 429 {
		t.Errorf("an E2B volume past the bound: %d, want 429", resp.StatusCode)
	}
	if code := call(t, "POST", srv.URL+"/v1/volumes", srv.Key, map[string]any{"name": "b", "sizeMB": 36}, nil); code != 201 {
		t.Errorf("a volume that fits exactly: %d", code)
	}
	if code := call(t, "DELETE", srv.URL+"/v1/volumes/a", srv.Key, nil, nil); code != 204 {
		t.Fatalf("delete: %d", code)
	}
	if code := call(t, "POST", srv.URL+"/v1/volumes", srv.Key, map[string]any{"name": "d", "sizeMB": 64}, nil); code != 201 {
		t.Errorf("a volume after a delete made room: %d", code)
	}
}
