package server

import (
	"net/http"
	"time"

	"github.com/tupper-dev/tupper/sandbox"
)

// volumeJSON is a volume in the native API.
type volumeJSON struct {
	Name      string    `json:"name"`
	SizeMB    int       `json:"sizeMB"`
	UsedBytes int64     `json:"usedBytes"`
	CreatedAt time.Time `json:"createdAt"`
	MountedBy []string  `json:"mountedBy"`
}

func toVolumeJSON(in sandbox.VolumeInfo) volumeJSON {
	out := volumeJSON{Name: in.Name, SizeMB: in.SizeMB, UsedBytes: in.UsedBytes, CreatedAt: in.CreatedAt.UTC(), MountedBy: in.MountedBy}
	if out.MountedBy == nil {
		out.MountedBy = []string{}
	}
	return out
}

// volumeRequest is the body of POST /v1/volumes.
type volumeRequest struct {
	Name   string `json:"name"`
	SizeMB int    `json:"sizeMB,omitempty"`
}

func (s *Server) createVolume(w http.ResponseWriter, r *http.Request, _ *caller) {
	var req volumeRequest
	if err := decode(w, r, &req, false); err != nil {
		writeError(w, err)
		return
	}
	in, err := s.lc.CreateVolume(r.Context(), req.Name, sandbox.VolumeOptions{SizeMB: req.SizeMB})
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, toVolumeJSON(in))
}

func (s *Server) listVolumes(w http.ResponseWriter, r *http.Request, _ *caller) {
	list, err := sandbox.Volumes(r.Context(), s.prov)
	if err != nil {
		writeError(w, err)
		return
	}
	out := make([]volumeJSON, 0, len(list))
	for _, in := range list {
		out = append(out, toVolumeJSON(in))
	}
	writeJSON(w, http.StatusOK, map[string]any{"volumes": out})
}

func (s *Server) getVolume(w http.ResponseWriter, r *http.Request, _ *caller) {
	in, err := sandbox.InspectVolume(r.Context(), s.prov, r.PathValue("name"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, toVolumeJSON(in))
}

func (s *Server) deleteVolume(w http.ResponseWriter, r *http.Request, _ *caller) {
	if err := sandbox.DeleteVolume(r.Context(), s.prov, r.PathValue("name")); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
