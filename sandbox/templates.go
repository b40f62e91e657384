package sandbox

import (
	"context"

	"github.com/tupper-dev/tupper/provider"
)

// TemplateInfo describes one of a provider's templates: what CreateOptions.Template names.
type TemplateInfo = provider.TemplateInfo

// A provider without provider.Templater has no templates to list or find
// (CreateOptions.Template still names whatever it knows) and deletes none: each call below
// says so beside its assertion, and every caller (the server, its E2B dialect, the CLI) goes
// through these calls.

// Templates lists p's templates; none when p does not list them (provider.Templater).
func Templates(ctx context.Context, p provider.Provider) ([]TemplateInfo, error) {
	t, ok := p.(provider.Templater)
	if !ok {
		return nil, nil
	}
	out, err := t.Templates(ctx)
	return out, wrapProvider(err, "templates")
}

// InspectTemplate describes template name (or the one tagged name) on p: CodeNotFound when
// there is none, as for every name when p lists no templates (provider.Templater).
func InspectTemplate(ctx context.Context, p provider.Provider, name string) (TemplateInfo, error) {
	t, ok := p.(provider.Templater)
	if !ok {
		return TemplateInfo{}, errorf(CodeNotFound, "template", "template %q not found: the %s provider lists no templates", name, p.Name())
	}
	info, err := t.Template(ctx, name)
	return info, wrapProvider(err, "template")
}

// DeleteTemplate deletes template name on p: CodeConflict while a sandbox or snapshot uses
// it unless force, CodeNotFound when there is none, CodeUnsupported when p cannot delete
// templates (provider.Templater).
func DeleteTemplate(ctx context.Context, p provider.Provider, name string, force bool) error {
	t, ok := p.(provider.Templater)
	if !ok {
		return errorf(CodeUnsupported, "delete_template", "the %s provider does not manage templates", p.Name())
	}
	return wrapProvider(t.DeleteTemplate(ctx, name, force), "delete_template")
}
