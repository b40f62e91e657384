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

// BuildRequest is a build of a template from a Dockerfile (BuildTemplate).
type BuildRequest = provider.BuildRequest

// BuiltTemplate is what a build made.
type BuiltTemplate = provider.BuiltTemplate

// BuildEvent is one event of a build (BuildRequest.Progress).
type BuildEvent = provider.BuildEvent

// templateBuilder is p's provider.TemplateBuilder, or the CodeUnsupported error (named op)
// of every build call when p builds no templates.
func templateBuilder(p provider.Provider, op string) (provider.TemplateBuilder, error) {
	b, ok := p.(provider.TemplateBuilder)
	if !ok {
		return nil, errorf(CodeUnsupported, op, "the %s provider does not build templates", p.Name())
	}
	return b, nil
}

// CanBuildTemplates is nil when p builds templates, else the CodeUnsupported error each
// build call returns: for a server to refuse a build before it reads the request.
func CanBuildTemplates(p provider.Provider) error {
	_, err := templateBuilder(p, "build_template")
	return err
}

// BuildTemplate builds template req.Name on p from a Dockerfile, each step in a sandbox of
// p, its events to req.Progress: see provider.TemplateBuilder. The error is p's as it gave
// it, so that a failing step stays a *provider.BuildError (its line, exit code and
// output); CodeUnsupported when p builds no templates.
func BuildTemplate(ctx context.Context, p provider.Provider, req BuildRequest) (BuiltTemplate, error) {
	b, err := templateBuilder(p, "build_template")
	if err != nil {
		return BuiltTemplate{}, err
	}
	return b.BuildTemplate(ctx, req)
}

// TemplateBuildDir makes an empty directory on p's side for a build's context, the caller's
// to remove. CodeUnsupported when p builds no templates.
func TemplateBuildDir(p provider.Provider) (string, error) {
	b, err := templateBuilder(p, "build_dir")
	if err != nil {
		return "", err
	}
	dir, err := b.BuildDir()
	return dir, wrapProvider(err, "build_dir")
}

// RetagTemplate sets the tags of template name (or the one tagged name) on p to what change
// returns for it, and returns the template as written: CodeNotFound when there is none,
// change's error when it fails, CodeUnsupported when p builds no templates (tags are the
// names builds give).
func RetagTemplate(ctx context.Context, p provider.Provider, name string, change func(TemplateInfo) ([]string, error)) (TemplateInfo, error) {
	b, err := templateBuilder(p, "retag_template")
	if err != nil {
		return TemplateInfo{}, err
	}
	t, err := b.RetagTemplate(ctx, name, change)
	return t, wrapProvider(err, "retag_template")
}
