package server

import (
	"net/http"

	"github.com/tupper-dev/tupper/sandbox"
	"github.com/tupper-dev/tupper/server/api"
)

func (s *Server) createVolume(w http.ResponseWriter, r *http.Request, _ *caller) {
	var req api.VolumeRequest
	if err := decode(w, r, &req, false); err != nil {
		writeError(w, err)
		return
	}
	in, err := s.lc.CreateVolume(r.Context(), req.Name, sandbox.VolumeOptions{SizeMB: req.SizeMB})
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, api.VolumeOf(in))
}

func (s *Server) listVolumes(w http.ResponseWriter, r *http.Request, _ *caller) {
	list, err := sandbox.Volumes(r.Context(), s.prov)
	if err != nil {
		writeError(w, err)
		return
	}
	out := make([]api.Volume, 0, len(list))
	for _, in := range list {
		out = append(out, api.VolumeOf(in))
	}
	writeJSON(w, http.StatusOK, api.VolumeList{Volumes: out})
}

func (s *Server) getVolume(w http.ResponseWriter, r *http.Request, _ *caller) {
	in, err := sandbox.InspectVolume(r.Context(), s.prov, r.PathValue("name"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, api.VolumeOf(in))
}

func (s *Server) deleteVolume(w http.ResponseWriter, r *http.Request, _ *caller) {
	if err := sandbox.DeleteVolume(r.Context(), s.prov, r.PathValue("name")); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
