package server

import (
	"context"
	"errors"
	"time"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/sandbox"
	"github.com/tupper-dev/tupper/store"
)

// takeSnapshot snapshots b for the API key keyID, the one path of the native and the E2B
// API: within the server's quotas (Config.SnapshotsPerSandbox, SnapshotsPerKey), expiring
// after expires (0: Config.SnapshotExpiry, which is also the most a request may ask), and
// recorded so the reaper deletes it when it expires.
func (s *Server) takeSnapshot(ctx context.Context, b *sandbox.Sandbox, keyID string, expires time.Duration) (string, error) {
	if limit := s.cfg.SnapshotExpiry; limit > 0 {
		if expires > limit {
			return "", provider.Errorf(provider.CodeInvalidArgument, "expiresInMs is more than the server's longest snapshot expiry, %v", limit)
		}
		if expires == 0 {
			expires = limit
		}
	}
	var exp time.Time
	if expires > 0 {
		exp = time.Now().Add(expires)
	}
	reserved, err := s.st.ReserveSnapshot(ctx, store.Snapshot{SandboxID: b.ID, APIKeyID: keyID, ExpiresAt: exp},
		store.SnapshotQuota{PerSandbox: s.cfg.SnapshotsPerSandbox, PerKey: s.cfg.SnapshotsPerKey})
	if err != nil {
		return "", err
	}
	id, err := b.Snapshot(ctx, sandbox.SnapshotOptions{ExpiresIn: expires})
	if err != nil {
		_ = s.st.DeleteSnapshot(context.WithoutCancel(ctx), reserved)
		return "", err
	}
	if err := s.st.SetSnapshotID(context.WithoutCancel(ctx), reserved, id); err != nil {
		s.log.Warn("recording a snapshot", "sandbox", b.ID, "snapshot", id, "err", err)
	}
	return id, nil
}

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
