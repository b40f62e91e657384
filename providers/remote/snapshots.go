package remote

import (
	"context"
	"net/http"
	"net/url"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/server/api"
)

var (
	_ provider.KindSnapshotter = (*Instance)(nil)
	_ provider.Forker          = (*Instance)(nil)
	_ provider.SnapshotLister  = (*Provider)(nil)
	_ provider.SnapshotDeleter = (*Provider)(nil)
)

// SnapshotKind takes a snapshot of req.Kind with req.Name on the server
// (POST /v1/sandboxes/{id}/snapshot).
func (in *Instance) SnapshotKind(ctx context.Context, req provider.SnapshotRequest) (string, error) {
	if err := in.p.Refuse(provider.CapSnapshot); err != nil {
		return "", err
	}
	var out api.SnapshotTaken
	body := api.SnapshotRequest{ExpiresInMS: ceilMS(req.Expires), Kind: string(req.Kind), Name: req.Name}
	err := in.p.call(ctx, http.MethodPost, in.path+"/snapshot", body, &out)
	return out.ID, err
}

// Fork is the server's fork (POST /v1/sandboxes/{id}/fork): the server decides the kind
// from the sandbox (memory and processes under runsc, files elsewhere).
func (in *Instance) Fork(ctx context.Context, req provider.ForkRequest) ([]provider.Instance, error) {
	var out api.SandboxList
	body := api.ForkRequest{N: req.N, Labels: req.Labels}
	if req.Timeout > 0 {
		body.TimeoutMS = ceilMS(req.Timeout)
	}
	if err := in.p.call(ctx, http.MethodPost, in.path+"/fork", body, &out); err != nil {
		return nil, err
	}
	kids := make([]provider.Instance, 0, len(out.Sandboxes))
	for _, sb := range out.Sandboxes {
		kids = append(kids, in.p.instance(sb))
	}
	return kids, nil
}

// Snapshots lists the server's snapshots (GET /v1/snapshots).
func (p *Provider) Snapshots(ctx context.Context) ([]provider.SnapshotInfo, error) {
	return list(ctx, p, "/v1/snapshots", "snapshots", api.Snapshot.Info)
}

// SnapshotInfo describes one of the server's snapshots (GET /v1/snapshots/{id}).
func (p *Provider) SnapshotInfo(ctx context.Context, id string) (provider.SnapshotInfo, error) {
	return get(ctx, p, "/v1/snapshots/"+url.PathEscape(id), api.Snapshot.Info)
}

// DeleteSnapshot deletes one of the server's snapshots (DELETE /v1/snapshots/{id}).
func (p *Provider) DeleteSnapshot(ctx context.Context, id string) error {
	return p.call(ctx, http.MethodDelete, "/v1/snapshots/"+url.PathEscape(id), nil, nil)
}
