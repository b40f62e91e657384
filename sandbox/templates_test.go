package sandbox_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/providers/memory"
	"github.com/tupper-dev/tupper/sandbox"
)

// TestTemplatesFallback: a provider without templates (provider.Templater) lists none, finds
// none and deletes none, the same answer for every caller (the server, its E2B dialect, the
// CLI).
func TestTemplatesFallback(t *testing.T) {
	ctx := context.Background()
	p := memory.New()
	if _, ok := any(p).(provider.Templater); ok {
		t.Fatal("the memory provider has templates: this test needs a provider without")
	}
	all, err := sandbox.Templates(ctx, p)
	if err != nil || len(all) != 0 {
		t.Errorf("Templates = %v, %v; want none, nil", all, err)
	}
	if _, err := sandbox.InspectTemplate(ctx, p, "py"); !errors.Is(err, sandbox.CodeNotFound) || !strings.Contains(err.Error(), `"py"`) {
		t.Errorf("InspectTemplate: %v, want not_found naming the template", err)
	}
	if err := sandbox.DeleteTemplate(ctx, p, "py", false); !errors.Is(err, sandbox.CodeUnsupported) {
		t.Errorf("DeleteTemplate: %v, want unsupported", err)
	}
	// Nor does it build any: every build call says so, in the same words.
	const builds = "the memory provider does not build templates"
	for name, err := range map[string]error{
		"CanBuildTemplates": sandbox.CanBuildTemplates(p),
		"BuildTemplate":     second(sandbox.BuildTemplate(ctx, p, sandbox.BuildRequest{Name: "py", DockerfileText: "FROM scratch\n"})),
		"TemplateBuildDir":  second(sandbox.TemplateBuildDir(p)),
		"RetagTemplate": second(sandbox.RetagTemplate(ctx, p, "py", func(sandbox.TemplateInfo) ([]string, error) {
			t.Error("RetagTemplate called change on a provider without templates")
			return nil, nil
		})),
	} {
		if !errors.Is(err, sandbox.CodeUnsupported) || !strings.Contains(err.Error(), builds) {
			t.Errorf("%s: %v, want unsupported: %s", name, err, builds)
		}
	}
}

func second[T any](_ T, err error) error { return err }

// plainTerminal is a terminal without Wait (provider.TerminalWaiter).
type plainTerminal struct{ provider.Terminal }

type waitTerminal struct {
	provider.Terminal
	res provider.ExecResult
}

func (w waitTerminal) Wait(context.Context) (provider.ExecResult, error) { return w.res, nil }

// TestWaitTerminal: a terminal that can say how its process ended says it; one that cannot
// is unsupported, which callers take for "the end of the output is all there is".
func TestWaitTerminal(t *testing.T) {
	ctx := context.Background()
	if _, err := sandbox.WaitTerminal(ctx, plainTerminal{}); !errors.Is(err, sandbox.CodeUnsupported) {
		t.Errorf("WaitTerminal without Wait: %v, want unsupported", err)
	}
	res, err := sandbox.WaitTerminal(ctx, waitTerminal{res: provider.ExecResult{ExitCode: 3}})
	if err != nil || res.ExitCode != 3 {
		t.Errorf("WaitTerminal = %+v, %v; want exit 3", res, err)
	}
}
