//go:build linux

package sandbox_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tupper-dev/tupper/internal/testenv"
	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/providers/local"
	"github.com/tupper-dev/tupper/sandbox"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

// TestTemplatesLocal: the template calls of the SDK on the local provider, opened through the
// registry with its configuration: a build (its events, its layer), the list, a look-up by
// tag, a build directory, a retag, a failing step as a *provider.BuildError, and deletes.
func TestTemplatesLocal(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireBinary(t, "runc")
	home, err := os.MkdirTemp("/tmp", "sdk") // short: socket paths below it stay under 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(home) })
	if err := os.Chmod(home, 0o711); err != nil { // sandboxes' uids traverse it
		t.Fatal(err)
	}
	p, err := provider.Open("local", local.Config{Home: home, AgentPath: testenv.TupperBinary(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := sandbox.CanBuildTemplates(p); err != nil {
		t.Fatalf("CanBuildTemplates(local): %v", err)
	}

	dir := t.TempDir()
	for name, body := range map[string]string{"Dockerfile": "FROM scratch\nCOPY app.txt /app/\n", "bad.Dockerfile": "FROM scratch\nCOPY missing.txt /app/\n", "app.txt": "an app\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var kinds []string
	built, err := sandbox.BuildTemplate(ctx, p, sandbox.BuildRequest{
		Name: "app", Tags: []string{"app:1"}, Context: dir, Network: provider.NetworkNone,
		Progress: func(ev sandbox.BuildEvent) { kinds = append(kinds, ev.Kind) },
	})
	if err != nil {
		t.Fatalf("BuildTemplate: %v", err)
	}
	if built.Name != "app" || len(built.LayerIDs) != 1 || built.Layers != 1 || built.Size != int64(len("an app\n")) || built.Build == "" {
		t.Errorf("built: %+v", built)
	}
	if !slices.Contains(kinds, "step") || !slices.Contains(kinds, "done") {
		t.Errorf("build events: %v", kinds)
	}

	all, err := sandbox.Templates(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if i := slices.IndexFunc(all, func(in sandbox.TemplateInfo) bool { return in.Name == "app" }); i < 0 || all[i].Layers != 1 || all[0].Name != local.TemplateHost {
		t.Errorf("Templates: %+v", all)
	}
	if in, err := sandbox.InspectTemplate(ctx, p, "app:1"); err != nil || in.Name != "app" || in.Build != built.Build {
		t.Errorf("InspectTemplate by tag = %+v, %v", in, err)
	}

	bd, err := sandbox.TemplateBuildDir(p)
	if err != nil || !strings.HasPrefix(bd, home) {
		t.Errorf("TemplateBuildDir = %q, %v; want a directory under %s", bd, err, home)
	}
	os.RemoveAll(bd)

	in, err := sandbox.RetagTemplate(ctx, p, "app:1", func(in sandbox.TemplateInfo) ([]string, error) { return append(in.Tags, "app:2"), nil })
	if err != nil || in.Name != "app" || !slices.Equal(in.Tags, []string{"app:1", "app:2"}) {
		t.Errorf("RetagTemplate = %+v, %v", in, err)
	}
	refuse := errors.New("no")
	if _, err := sandbox.RetagTemplate(ctx, p, "app", func(sandbox.TemplateInfo) ([]string, error) { return nil, refuse }); !errors.Is(err, refuse) {
		t.Errorf("RetagTemplate whose change fails: %v", err)
	}

	_, err = sandbox.BuildTemplate(ctx, p, sandbox.BuildRequest{Name: "bad", Context: dir, Dockerfile: "bad.Dockerfile", Network: provider.NetworkNone})
	var be *provider.BuildError
	if !errors.As(err, &be) || be.Line != 2 {
		t.Errorf("a failing step: %v, want a *provider.BuildError of line 2", err)
	}

	if err := sandbox.DeleteTemplate(ctx, p, "app:2", false); err != nil {
		t.Fatalf("DeleteTemplate by tag: %v", err)
	}
	if _, err := sandbox.InspectTemplate(ctx, p, "app"); !errors.Is(err, sandbox.CodeNotFound) {
		t.Errorf("InspectTemplate after the delete: %v", err)
	}
	if err := sandbox.DeleteTemplate(ctx, p, local.TemplateHost, false); !errors.Is(err, sandbox.CodeInvalidArgument) {
		t.Errorf("DeleteTemplate(host): %v", err)
	}
}
