//go:build linux

package server_test

import (
	"bytes"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/server/servertest"
	"github.com/tupper-dev/tupper/store"
)

// dialect is one API's form of the lifecycle's operations: each returns the HTTP status.
type dialect struct {
	name                                              string
	create                                            func(labels map[string]string, timeoutSec int) (id string, status int)
	setTimeout, pause, resume, snapshot, destroy, get func(id string) int
	pauseCold                                         func(id string) int // a pause without memory
}

// TestDialectsAgree: the same lifecycle, asked through the native REST API and through
// E2B's API, leaves the same record in the store, emits the same events and fails the same
// way (pausing twice, resuming a running sandbox, destroying twice, touching a destroyed
// sandbox). Both go through one lifecycle.Service; this is what keeps them from drifting.
func TestDialectsAgree(t *testing.T) {
	prov := servertest.Provider(t, 44)
	srv := servertest.Start(t, prov, "")
	_, key, err := srv.Store.CreateE2BKey(t.Context(), "dialects")
	if err != nil {
		t.Fatal(err)
	}
	do := func(method, path, body string, hdr map[string]string, out any) int {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), method, srv.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if out != nil && resp.StatusCode < 300 {
			if err := json.Unmarshal(b, out); err != nil {
				t.Fatalf("%s %s: %v: %s", method, path, err, b)
			}
		}
		return resp.StatusCode
	}
	native := map[string]string{"Authorization": "Bearer " + key}
	e2bHdr := map[string]string{"X-API-Key": key}
	body := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	dialects := []dialect{
		{
			name: "native",
			create: func(labels map[string]string, timeoutSec int) (string, int) {
				var out struct{ ID string }
				st := do("POST", "/v1/sandboxes", body(map[string]any{"labels": labels, "timeoutMs": timeoutSec * 1000}), native, &out)
				return out.ID, st
			},
			setTimeout: func(id string) int {
				return do("POST", "/v1/sandboxes/"+id+"/timeout", `{"timeoutMs":600000}`, native, nil)
			},
			pause: func(id string) int { return do("POST", "/v1/sandboxes/"+id+"/pause", "", native, nil) },
			pauseCold: func(id string) int {
				return do("POST", "/v1/sandboxes/"+id+"/pause", `{"keepMemory":false}`, native, nil)
			},
			resume:   func(id string) int { return do("POST", "/v1/sandboxes/"+id+"/resume", "", native, nil) },
			snapshot: func(id string) int { return do("POST", "/v1/sandboxes/"+id+"/snapshot", `{}`, native, nil) },
			destroy:  func(id string) int { return do("DELETE", "/v1/sandboxes/"+id, "", native, nil) },
			get:      func(id string) int { return do("GET", "/v1/sandboxes/"+id, "", native, nil) },
		},
		{
			name: "e2b",
			create: func(labels map[string]string, timeoutSec int) (string, int) {
				var out struct{ SandboxID string }
				st := do("POST", "/v2/sandboxes", body(map[string]any{"templateID": "base", "metadata": labels, "timeout": timeoutSec}), e2bHdr, &out)
				return out.SandboxID, st
			},
			setTimeout: func(id string) int {
				return do("POST", "/sandboxes/"+id+"/timeout", `{"timeout":600}`, e2bHdr, nil)
			},
			pause: func(id string) int { return do("POST", "/sandboxes/"+id+"/pause", "", e2bHdr, nil) },
			pauseCold: func(id string) int {
				return do("POST", "/sandboxes/"+id+"/pause", `{"memory":false}`, e2bHdr, nil)
			},
			resume:   func(id string) int { return do("POST", "/sandboxes/"+id+"/resume", "", e2bHdr, nil) },
			snapshot: func(id string) int { return do("POST", "/sandboxes/"+id+"/snapshots", `{}`, e2bHdr, nil) },
			destroy:  func(id string) int { return do("DELETE", "/sandboxes/"+id, "", e2bHdr, nil) },
			get:      func(id string) int { return do("GET", "/sandboxes/"+id, "", e2bHdr, nil) },
		},
	}

	// outcome is what a dialect's run left: per operation "ok" or the error status, the
	// record after create and after the timeout, and the events.
	type outcome struct {
		Steps           []string
		Created, Timed  store.Sandbox
		Events          []string
		CreateEventKeys []string
		PauseData       []string // the data of sandbox.paused and sandbox.resumed
		ColdRecord      store.Sandbox
	}
	caps := prov.Capabilities()
	run := func(d dialect) outcome {
		var o outcome
		step := func(name string, status int) {
			s := "ok"
			if status >= 300 {
				s = http.StatusText(status)
			}
			o.Steps = append(o.Steps, name+": "+s)
		}
		id, st := d.create(map[string]string{"team": "a"}, 120)
		step("create", st)
		if st >= 300 {
			t.Fatalf("%s: create: %d", d.name, st)
		}
		t0 := time.Now()
		rec, err := srv.Store.Sandbox(t.Context(), id)
		if err != nil {
			t.Fatalf("%s: record: %v", d.name, err)
		}
		if dl := rec.Deadline.Sub(t0); dl < 100*time.Second || dl > 121*time.Second {
			t.Errorf("%s: the recorded deadline is %v away, want about 120 s", d.name, dl)
		}
		o.Created = normalize(rec)
		step("timeout", d.setTimeout(id))
		if rec, err = srv.Store.Sandbox(t.Context(), id); err != nil {
			t.Fatalf("%s: record: %v", d.name, err)
		}
		if dl := time.Until(rec.Deadline); dl < 590*time.Second || dl > 601*time.Second {
			t.Errorf("%s: the recorded deadline after the timeout is %v away, want about 600 s", d.name, dl)
		}
		o.Timed = normalize(rec)
		step("resume while running", d.resume(id))
		if caps.Has(provider.CapPause) {
			step("pause", d.pause(id))
			step("pause again", d.pause(id))
			step("resume", d.resume(id))
		}
		if caps.Has(provider.CapPauseCold) {
			step("pause without memory", d.pauseCold(id))
			rec, err := srv.Store.Sandbox(t.Context(), id)
			if err != nil {
				t.Fatalf("%s: record: %v", d.name, err)
			}
			o.ColdRecord = normalize(rec)
			o.ColdRecord.MemoryDropped = rec.MemoryDropped
			step("pause without memory again", d.pauseCold(id))
			step("resume after it", d.resume(id))
		}
		if caps.Has(provider.CapSnapshot) {
			step("snapshot", d.snapshot(id))
		}
		step("destroy", d.destroy(id))
		step("destroy again", d.destroy(id))
		step("get after destroy", d.get(id))
		step("timeout after destroy", d.setTimeout(id))
		evs, err := srv.Store.Events(t.Context(), store.EventFilter{SandboxID: id})
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs {
			o.Events = append(o.Events, ev.Type)
			if ev.Type == "sandbox.paused" || ev.Type == "sandbox.resumed" {
				o.PauseData = append(o.PauseData, ev.Type+" "+string(ev.Data))
			}
			if ev.Type == "sandbox.created" {
				var data map[string]json.RawMessage
				if err := json.Unmarshal(ev.Data, &data); err != nil {
					t.Fatal(err)
				}
				delete(data, "api") // says which API made it
				o.CreateEventKeys = slices.Sorted(maps.Keys(data))
			}
		}
		return o
	}
	a, b := run(dialects[0]), run(dialects[1])
	ja, _ := json.MarshalIndent(a, "", " ")
	jb, _ := json.MarshalIndent(b, "", " ")
	if !bytes.Equal(ja, jb) {
		t.Errorf("the dialects disagree:\nnative: %s\ne2b:    %s", ja, jb)
	}
	// And what they agree on is the lifecycle's contract.
	want := []string{"create: ok", "timeout: ok", "resume while running: Conflict"}
	if caps.Has(provider.CapPause) {
		want = append(want, "pause: ok", "pause again: Conflict", "resume: ok")
	}
	if caps.Has(provider.CapPauseCold) {
		want = append(want, "pause without memory: ok", "pause without memory again: Conflict", "resume after it: ok")
		if a.ColdRecord.State != provider.StatePaused || !a.ColdRecord.MemoryDropped {
			t.Errorf("the record after a pause without memory: %+v", a.ColdRecord)
		}
	}
	if caps.Has(provider.CapSnapshot) {
		want = append(want, "snapshot: ok")
	}
	want = append(want, "destroy: ok", "destroy again: Not Found", "get after destroy: Not Found", "timeout after destroy: Not Found")
	if !slices.Equal(a.Steps, want) {
		t.Errorf("steps: %q, want %q", a.Steps, want)
	}
	wantEvents := []string{"sandbox.created", "sandbox.timeout_set"}
	if caps.Has(provider.CapPause) {
		wantEvents = append(wantEvents, "sandbox.paused", "sandbox.resumed")
	}
	if caps.Has(provider.CapPauseCold) {
		wantEvents = append(wantEvents, "sandbox.paused", "sandbox.resumed")
	}
	if caps.Has(provider.CapSnapshot) {
		wantEvents = append(wantEvents, "sandbox.snapshot_created")
	}
	wantEvents = append(wantEvents, "sandbox.destroyed")
	if !slices.Equal(a.Events, wantEvents) {
		t.Errorf("events: %q, want %q", a.Events, wantEvents)
	}
}

// normalize keeps what a record should share across dialects: the labels the client set
// (without the keys the E2B API keeps under tupper.e2b/), owner, provider and state; ids
// and times differ.
func normalize(rec store.Sandbox) store.Sandbox {
	labels := map[string]string{}
	for k, v := range rec.Labels {
		if !strings.HasPrefix(k, "tupper.e2b/") {
			labels[k] = v
		}
	}
	return store.Sandbox{Provider: rec.Provider, APIKeyID: rec.APIKeyID, Key: rec.Key, Labels: labels, State: rec.State}
}
