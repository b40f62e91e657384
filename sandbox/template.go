package sandbox

import (
	"context"

	"github.com/tupper-dev/tupper/provider"
)

// TemplateInfo describes one of a provider's templates: what CreateOptions.Template names.
type TemplateInfo = provider.TemplateInfo

// templater is p's provider.Templater, or a CodeUnsupported error naming op. Every
// template call goes through it.
func templater(p provider.Provider, op string) (provider.Templater, error) {
	t, ok := p.(provider.Templater)
	if !ok {
		return nil, errorf(CodeUnsupported, op, "provider %s does not list templates", p.Name())
	}
	return t, nil
}

// Templates lists p's templates. CodeUnsupported when p cannot (provider.Templater).
func Templates(ctx context.Context, p provider.Provider) ([]TemplateInfo, error) {
	t, err := templater(p, "templates")
	if err != nil {
		return nil, err
	}
	out, err := t.Templates(ctx)
	return out, wrapProvider(err, "templates")
}

// InspectTemplate describes template name (or the one tagged name) on p: CodeNotFound when
// there is none, CodeUnsupported when p cannot say (provider.Templater).
func InspectTemplate(ctx context.Context, p provider.Provider, name string) (TemplateInfo, error) {
	t, err := templater(p, "template")
	if err != nil {
		return TemplateInfo{}, err
	}
	info, err := t.Template(ctx, name)
	return info, wrapProvider(err, "template")
}

// DeleteTemplate deletes template name on p: CodeConflict while a sandbox or snapshot uses
// it unless force, CodeNotFound when there is none, CodeUnsupported when p cannot delete
// templates (provider.Templater).
func DeleteTemplate(ctx context.Context, p provider.Provider, name string, force bool) error {
	t, err := templater(p, "delete_template")
	if err != nil {
		return err
	}
	return wrapProvider(t.DeleteTemplate(ctx, name, force), "delete_template")
}
