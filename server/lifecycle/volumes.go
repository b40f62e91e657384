package lifecycle

import (
	"context"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/sandbox"
	"github.com/tupper-dev/tupper/server/internal/audit"
)

// CreateVolume creates a volume of the provider, for every API of the server, within
// Config.VolumesTotalMB: the sizes of the volumes there and of the new one together may not
// pass it (resource_exhausted). Creates take turns, so two at once cannot both fit.
func (s *Service) CreateVolume(ctx context.Context, name string, opts sandbox.VolumeOptions) (sandbox.VolumeInfo, error) {
	// A bad request is refused as such first, before any list.
	if err := (provider.VolumeRequest{Name: name, SizeMB: opts.SizeMB}).Validate(); err != nil {
		return sandbox.VolumeInfo{}, err
	}
	audit.SetTarget(ctx, name) // whichever API asked
	if s.cfg.VolumesTotalMB > 0 {
		s.vmu.Lock()
		defer s.vmu.Unlock()
		all, err := sandbox.Volumes(ctx, s.prov)
		if err != nil {
			return sandbox.VolumeInfo{}, err
		}
		size := opts.SizeMB
		if size == 0 {
			size = provider.DefaultVolumeSizeMB
		}
		used := 0
		for _, v := range all {
			used += v.SizeMB
		}
		if used+size > s.cfg.VolumesTotalMB {
			return sandbox.VolumeInfo{}, provider.Errorf(provider.CodeResourceExhausted,
				"volume %q of %d MB: the server's volumes may take %d MB together, and %d MB are taken (delete a volume, or ask for a smaller one)",
				name, size, s.cfg.VolumesTotalMB, used)
		}
	}
	return sandbox.CreateVolume(ctx, s.prov, name, opts)
}
