package server

import (
	"context"
	"errors"
	"time"

	"github.com/tupper-dev/tupper/provider"
)

// reapSnapshots deletes the snapshots made through the server that have expired: from the
// provider when it can delete them (provider.SnapshotDeleter; otherwise the provider removes
// them itself after their expiry), then from the store.
func (s *Server) reapSnapshots(ctx context.Context) error {
	expired, err := s.st.ExpiredSnapshots(ctx, time.Now())
	if err != nil {
		return err
	}
	d, _ := s.prov.(provider.SnapshotDeleter)
	for _, sn := range expired {
		if d != nil {
			if err := d.DeleteSnapshot(ctx, sn.ID); err != nil && !errors.Is(err, provider.CodeNotFound) {
				s.log.Warn("deleting an expired snapshot", "snapshot", sn.ID, "err", err)
				continue
			}
		}
		if err := s.st.DeleteSnapshot(ctx, sn.ID); err != nil {
			return err
		}
	}
	return nil
}
