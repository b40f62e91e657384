package remote

import (
	"context"
	"net/http"
	"net/url"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/server/api"
)

var _ provider.Volumer = (*Provider)(nil)

// CreateVolume makes a volume on the server (POST /v1/volumes).
func (p *Provider) CreateVolume(ctx context.Context, req provider.VolumeRequest) (provider.VolumeInfo, error) {
	var out api.Volume
	in := api.VolumeRequest{Name: req.Name, SizeMB: req.SizeMB}
	if err := p.call(ctx, http.MethodPost, "/v1/volumes", in, &out); err != nil {
		return provider.VolumeInfo{}, err
	}
	return out.Info(), nil
}

// Volumes lists the server's volumes (GET /v1/volumes).
func (p *Provider) Volumes(ctx context.Context) ([]provider.VolumeInfo, error) {
	return list(ctx, p, "/v1/volumes", "volumes", api.Volume.Info)
}

// VolumeInfo describes one of the server's volumes (GET /v1/volumes/{name}).
func (p *Provider) VolumeInfo(ctx context.Context, name string) (provider.VolumeInfo, error) {
	return get(ctx, p, "/v1/volumes/"+url.PathEscape(name), api.Volume.Info)
}

// DeleteVolume deletes one of the server's volumes (DELETE /v1/volumes/{name}).
func (p *Provider) DeleteVolume(ctx context.Context, name string) error {
	return p.call(ctx, http.MethodDelete, "/v1/volumes/"+url.PathEscape(name), nil, nil)
}
