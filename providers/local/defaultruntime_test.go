//go:build linux

package local

import (
	"errors"
	"strings"
	"testing"

	"github.com/tupper-dev/tupper/provider"
)

// The default runtime is crun when it can run here, else runc, never runsc; the reason names
// what was missing.
func TestDefaultRuntimePick(t *testing.T) {
	found := func(names ...string) map[string]ociRuntime {
		m := map[string]ociRuntime{}
		for _, n := range names {
			m[n] = ociRuntime{name: n, path: "/usr/bin/" + n}
		}
		return m
	}
	refused := map[string]error{RuntimeCrun: errors.New("cgroups in hybrid mode not supported")}
	for _, tc := range []struct {
		name     string
		found    map[string]ociRuntime
		unusable map[string]error
		want     string
		why      string
	}{
		{"all three", found(RuntimeRunc, RuntimeCrun, RuntimeRunsc), nil, RuntimeCrun, "usable"},
		{"crun alone", found(RuntimeCrun), nil, RuntimeCrun, "usable"},
		{"crun refused", found(RuntimeRunc, RuntimeCrun, RuntimeRunsc), refused, RuntimeRunc, "hybrid mode"},
		{"no crun", found(RuntimeRunc, RuntimeRunsc), nil, RuntimeRunc, "not installed"},
		{"runsc alone", found(RuntimeRunsc), nil, RuntimeRunc, "neither"},
	} {
		got, why := defaultRuntime(tc.found, tc.unusable)
		if got != tc.want || !strings.Contains(why, tc.why) {
			t.Errorf("%s: got %s (%q), want %s (mentioning %q)", tc.name, got, why, tc.want, tc.why)
		}
	}
}

// A provider without a configured runtime creates with the one DefaultRuntime names, and the
// pool is of that runtime; an explicit Config.Runtime stays as it was, and a create can still
// ask for another.
func TestDefaultRuntimeOnHost(t *testing.T) {
	p := newTestProvider(t, "")
	name, why := p.DefaultRuntime()
	wantCrun := p.runtimes[RuntimeCrun].path != "" && p.unusable[RuntimeCrun] == nil
	if (name == RuntimeCrun) != wantCrun || why == "" {
		t.Fatalf("default runtime %s (%s); crun found %q, unusable: %v", name, why, p.runtimes[RuntimeCrun].path, p.unusable[RuntimeCrun])
	}
	t.Logf("default runtime here: %s: %s", name, why)
	inst := create(t, p, provider.CreateSpec{Network: netNone})
	if rec, err := p.lay.readRecord(inst.ID()); err != nil || rec.Runtime != name {
		t.Fatalf("a create without a runtime ran under %q (%v), want %s", rec.Runtime, err, name)
	}
	if got := run(t, inst, "echo ok"); got != "ok" {
		t.Fatalf("echo under the default runtime: %q", got)
	}
	if !p.poolable(provider.CreateSpec{Network: netNone, Runtime: name}) {
		t.Errorf("a create naming the default runtime %s does not fit the pool", name)
	}
	if name != RuntimeRunc {
		inst := create(t, p, provider.CreateSpec{Network: netNone, Runtime: RuntimeRunc})
		if rec, err := p.lay.readRecord(inst.ID()); err != nil || rec.Runtime != RuntimeRunc {
			t.Fatalf("a create asking for runc ran under %q (%v)", rec.Runtime, err)
		}
		if p.poolable(provider.CreateSpec{Network: netNone, Runtime: RuntimeRunc}) {
			t.Errorf("a create asking for runc fits a pool of %s", name)
		}
	}

	explicit := newTestProvider(t, RuntimeRunc)
	if name, why := explicit.DefaultRuntime(); name != RuntimeRunc || !strings.Contains(why, "configuration") {
		t.Errorf("Config.Runtime runc: default %s (%s)", name, why)
	}
}
