package api

import (
	"time"

	"github.com/tupper-dev/tupper/provider"
)

// Volume is a volume on the wire (/v1/volumes). MountedBy is never null.
type Volume struct {
	Name      string    `json:"name"`
	SizeMB    int       `json:"sizeMB"`
	UsedBytes int64     `json:"usedBytes"`
	CreatedAt time.Time `json:"createdAt"`
	MountedBy []string  `json:"mountedBy"`
}

// VolumeOf is v on the wire.
func VolumeOf(v provider.VolumeInfo) Volume {
	out := Volume{Name: v.Name, SizeMB: v.SizeMB, UsedBytes: v.UsedBytes, CreatedAt: v.CreatedAt.UTC(), MountedBy: v.MountedBy}
	if out.MountedBy == nil {
		out.MountedBy = []string{}
	}
	return out
}

// Info is v as the provider contract's.
func (v Volume) Info() provider.VolumeInfo {
	return provider.VolumeInfo{Name: v.Name, SizeMB: v.SizeMB, UsedBytes: v.UsedBytes, CreatedAt: v.CreatedAt, MountedBy: v.MountedBy}
}

// VolumeRequest is the body of POST /v1/volumes; SizeMB 0 is the server's default.
type VolumeRequest struct {
	Name   string `json:"name"`
	SizeMB int    `json:"sizeMB,omitempty"`
}

// VolumeList is the answer of GET /v1/volumes.
type VolumeList struct {
	Volumes []Volume `json:"volumes"`
}
