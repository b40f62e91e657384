package remote

import (
	"context"
	"net/http"
	"net/url"
	"time"

	"github.com/tupper-dev/tupper/provider"
)

var _ provider.Volumer = (*Provider)(nil)

// volumeJSON is a volume of the server's API.
type volumeJSON struct {
	Name      string    `json:"name"`
	SizeMB    int       `json:"sizeMB"`
	UsedBytes int64     `json:"usedBytes"`
	CreatedAt time.Time `json:"createdAt"`
	MountedBy []string  `json:"mountedBy"`
}

func (v volumeJSON) info() provider.VolumeInfo {
	return provider.VolumeInfo{Name: v.Name, SizeMB: v.SizeMB, UsedBytes: v.UsedBytes, CreatedAt: v.CreatedAt, MountedBy: v.MountedBy}
}

// CreateVolume makes a volume on the server (POST /v1/volumes).
func (p *Provider) CreateVolume(ctx context.Context, req provider.VolumeRequest) (provider.VolumeInfo, error) {
	var out volumeJSON
	in := map[string]any{"name": req.Name}
	if req.SizeMB != 0 {
		in["sizeMB"] = req.SizeMB
	}
	if err := p.call(ctx, http.MethodPost, "/v1/volumes", in, &out); err != nil {
		return provider.VolumeInfo{}, err
	}
	return out.info(), nil
}

// Volumes lists the server's volumes (GET /v1/volumes).
func (p *Provider) Volumes(ctx context.Context) ([]provider.VolumeInfo, error) {
	var out struct {
		Volumes []volumeJSON `json:"volumes"`
	}
	if err := p.call(ctx, http.MethodGet, "/v1/volumes", nil, &out); err != nil {
		return nil, err
	}
	list := make([]provider.VolumeInfo, 0, len(out.Volumes))
	for _, v := range out.Volumes {
		list = append(list, v.info())
	}
	return list, nil
}

// VolumeInfo describes one of the server's volumes (GET /v1/volumes/{name}).
func (p *Provider) VolumeInfo(ctx context.Context, name string) (provider.VolumeInfo, error) {
	var out volumeJSON
	if err := p.call(ctx, http.MethodGet, "/v1/volumes/"+url.PathEscape(name), nil, &out); err != nil {
		return provider.VolumeInfo{}, err
	}
	return out.info(), nil
}

// DeleteVolume deletes one of the server's volumes (DELETE /v1/volumes/{name}).
func (p *Provider) DeleteVolume(ctx context.Context, name string) error {
	return p.call(ctx, http.MethodDelete, "/v1/volumes/"+url.PathEscape(name), nil, nil)
}
