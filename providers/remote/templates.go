package remote

import (
	"context"
	"net/http"
	"net/url"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/server/api"
)

var _ provider.Templater = (*Provider)(nil)

// Templates lists the server's templates (GET /v1/templates).
func (p *Provider) Templates(ctx context.Context) ([]provider.TemplateInfo, error) {
	return list(ctx, p, "/v1/templates", "templates", api.Template.Info)
}

// Template describes one of the server's templates by name or tag
// (GET /v1/templates/{name}).
func (p *Provider) Template(ctx context.Context, name string) (provider.TemplateInfo, error) {
	return get(ctx, p, "/v1/templates/"+url.PathEscape(name), api.Template.Info)
}

// DeleteTemplate deletes one of the server's templates (DELETE /v1/templates/{name}), one
// that sandboxes or snapshots use only with force.
func (p *Provider) DeleteTemplate(ctx context.Context, name string, force bool) error {
	path := "/v1/templates/" + url.PathEscape(name)
	if force {
		path += "?force=true"
	}
	return p.call(ctx, http.MethodDelete, path, nil, nil)
}
