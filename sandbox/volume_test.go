package sandbox_test

import (
	"context"
	"errors"
	"testing"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/providers/memory"
	"github.com/tupper-dev/tupper/sandbox"
)

// TestVolumeOptions: names and mount paths that are paths, reserved or repeated are refused
// before any provider is asked, and a provider without volumes refuses every volume call and
// a create with volumes before anything is made.
func TestVolumeOptions(t *testing.T) {
	for _, m := range [][]sandbox.VolumeMount{
		{{Name: "a/b", Path: "/x"}},
		{{Name: "..", Path: "/x"}},
		{{Name: ".hidden", Path: "/x"}},
		{{Name: "", Path: "/x"}},
		{{Name: "ok", Path: "relative"}},
		{{Name: "ok", Path: "/"}},
		{{Name: "ok", Path: "/a/../b"}},
		{{Name: "ok", Path: "/proc/x"}},
		{{Name: "ok", Path: "/.tupper"}},
		{{Name: "ok", Path: "/dev"}},
		{{Name: "ok", Path: "/x"}, {Name: "other", Path: "/x"}},
	} {
		if err := (sandbox.CreateOptions{Volumes: m}).Validate(); !errors.Is(err, sandbox.CodeInvalidArgument) {
			t.Errorf("%+v: %v; want invalid_argument", m, err)
		}
	}
	if err := (sandbox.CreateOptions{Volumes: []sandbox.VolumeMount{{Name: "data", Path: "/data"}, {Name: "data", Path: "/ro", ReadOnly: true}}}).Validate(); err != nil {
		t.Errorf("one volume at two paths: %v", err)
	}
	for in, want := range map[string]provider.VolumeMount{
		"data:/data":    {Name: "data", Path: "/data"},
		"data:/data:ro": {Name: "data", Path: "/data", ReadOnly: true},
		"data:/data:rw": {Name: "data", Path: "/data"},
	} {
		if got, err := provider.ParseVolumeMount(in); err != nil || got != want {
			t.Errorf("ParseVolumeMount(%q) = %+v, %v", in, got, err)
		}
	}
	for _, in := range []string{"data", "data:/data:rx", "data:/a:ro:x", "../x:/data"} {
		if _, err := provider.ParseVolumeMount(in); !errors.Is(err, sandbox.CodeInvalidArgument) {
			t.Errorf("ParseVolumeMount(%q): %v", in, err)
		}
	}

	ctx := context.Background()
	p := memory.New()
	if _, err := sandbox.CreateVolume(ctx, p, "data", sandbox.VolumeOptions{}); !errors.Is(err, sandbox.CodeUnsupported) {
		t.Errorf("CreateVolume on memory: %v", err)
	}
	if _, err := sandbox.Volumes(ctx, p); !errors.Is(err, sandbox.CodeUnsupported) {
		t.Errorf("Volumes on memory: %v", err)
	}
	if err := sandbox.DeleteVolume(ctx, p, "data"); !errors.Is(err, sandbox.CodeUnsupported) {
		t.Errorf("DeleteVolume on memory: %v", err)
	}
	_, err := sandbox.Create(ctx, p, sandbox.CreateOptions{Volumes: []sandbox.VolumeMount{{Name: "data", Path: "/data"}}})
	if !errors.Is(err, sandbox.CodeUnsupported) {
		t.Errorf("create with a volume on memory: %v", err)
	}
	if list, _ := sandbox.List(ctx, p, sandbox.ListOptions{}); len(list) != 0 {
		t.Errorf("the refused create made %d sandboxes", len(list))
	}
}
