package sandbox

import (
	"context"

	"github.com/tupper-dev/tupper/provider"
)

// VolumeInfo describes a named volume.
type VolumeInfo = provider.VolumeInfo

// VolumeMount is one volume in a sandbox (CreateOptions.Volumes).
type VolumeMount = provider.VolumeMount

// VolumeOptions is what CreateVolume takes.
type VolumeOptions struct {
	SizeMB int // the limit; 0: 1024 (provider.DefaultVolumeSizeMB)
}

// volumer is p's provider.Volumer, or a CodeUnsupported error naming op where p is none or
// refuses it (provider.Refuser). Every volume call, and a create with volumes, goes through
// it.
func volumer(p provider.Provider, op string) (provider.Volumer, error) {
	v, ok := p.(provider.Volumer)
	if !ok {
		return nil, errorf(CodeUnsupported, op, "provider %s has no volumes", p.Name())
	}
	if err := provider.Refusal(p, provider.CapVolumes); err != nil {
		return nil, wrapProvider(err, op)
	}
	return v, nil
}

// CreateVolume makes the named volume on p: persistent storage of at most opts.SizeMB that
// sandboxes mount with CreateOptions.Volumes and that outlives them. A name taken is
// CodeConflict; a provider without volumes, CodeUnsupported.
func CreateVolume(ctx context.Context, p provider.Provider, name string, opts VolumeOptions) (VolumeInfo, error) {
	const op = "create_volume"
	req := provider.VolumeRequest{Name: name, SizeMB: opts.SizeMB}
	if err := req.Validate(); err != nil {
		return VolumeInfo{}, wrapProvider(err, op)
	}
	v, err := volumer(p, op)
	if err != nil {
		return VolumeInfo{}, err
	}
	info, err := v.CreateVolume(ctx, req)
	return info, wrapProvider(err, op)
}

// Volumes lists p's volumes, by name.
func Volumes(ctx context.Context, p provider.Provider) ([]VolumeInfo, error) {
	v, err := volumer(p, "volumes")
	if err != nil {
		return nil, err
	}
	out, err := v.Volumes(ctx)
	return out, wrapProvider(err, "volumes")
}

// InspectVolume describes the named volume on p: CodeNotFound when there is none.
func InspectVolume(ctx context.Context, p provider.Provider, name string) (VolumeInfo, error) {
	const op = "volume"
	if err := provider.ValidVolumeName(name); err != nil {
		return VolumeInfo{}, wrapProvider(err, op)
	}
	v, err := volumer(p, op)
	if err != nil {
		return VolumeInfo{}, err
	}
	info, err := v.VolumeInfo(ctx, name)
	return info, wrapProvider(err, op)
}

// DeleteVolume deletes the named volume and its files: CodeNotFound when there is none,
// CodeConflict while a sandbox mounts it.
func DeleteVolume(ctx context.Context, p provider.Provider, name string) error {
	const op = "delete_volume"
	if err := provider.ValidVolumeName(name); err != nil {
		return wrapProvider(err, op)
	}
	v, err := volumer(p, op)
	if err != nil {
		return err
	}
	return wrapProvider(v.DeleteVolume(ctx, name), op)
}
