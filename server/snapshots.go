package server

import (
	"context"
	"errors"
	"maps"
	"net/http"
	"time"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/sandbox"
	"github.com/tupper-dev/tupper/server/api"
	"github.com/tupper-dev/tupper/server/lifecycle"
)

// reapSnapshots deletes the snapshots made through the server that have expired: from the
// provider when it can delete them (otherwise it removes them itself after their expiry:
// sandbox.DeleteSnapshot is unsupported), then from the store.
func (s *Server) reapSnapshots(ctx context.Context) error {
	expired, err := s.st.ExpiredSnapshots(ctx, time.Now())
	if err != nil {
		return err
	}
	for _, sn := range expired {
		err := sandbox.DeleteSnapshot(ctx, s.prov, sn.ID)
		if err != nil && !errors.Is(err, provider.CodeNotFound) && !errors.Is(err, provider.CodeUnsupported) {
			s.log.Warn("deleting an expired snapshot", "snapshot", sn.ID, "err", err)
			continue
		}
		if err := s.st.DeleteSnapshot(ctx, sn.ID); err != nil {
			return err
		}
	}
	return nil
}

func (s *Server) listSnapshots(w http.ResponseWriter, r *http.Request, _ *caller) {
	list, err := s.lc.Snapshots(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	out := make([]api.Snapshot, 0, len(list))
	for _, in := range list {
		out = append(out, api.SnapshotOf(in))
	}
	writeJSON(w, http.StatusOK, api.SnapshotList{Snapshots: out})
}

func (s *Server) getSnapshot(w http.ResponseWriter, r *http.Request, _ *caller) {
	in, err := sandbox.InspectSnapshot(r.Context(), s.prov, r.PathValue("snapshot"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, api.SnapshotOf(in))
}

func (s *Server) deleteSnapshot(w http.ResponseWriter, r *http.Request, _ *caller) {
	if err := s.lc.DeleteSnapshot(r.Context(), r.PathValue("snapshot")); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// fork makes children of a sandbox: memory and processes included where the sandbox has
// "snapshot-full", its files elsewhere. Each child comes with its own token.
func (s *Server) fork(w http.ResponseWriter, r *http.Request, c *caller) {
	var req api.ForkRequest
	if err := decode(w, r, &req, true); err != nil {
		writeError(w, err)
		return
	}
	timeout, err := durMS("timeoutMs", req.TimeoutMS)
	if err != nil {
		writeError(w, err)
		return
	}
	opts := sandbox.ForkOptions{N: req.N, Labels: maps.Clone(req.Labels), Timeout: timeout}
	if req.Network != nil {
		opts.Network = req.Network.Provider()
	}
	labels := recordLabels(api.CreateRequest{Labels: req.Labels})
	delete(opts.Labels, sandbox.SDKLabel)
	kids, err := s.lc.Fork(r.Context(), r.PathValue("id"), lifecycle.ForkOptions{Sandbox: opts, KeyID: c.KeyID, Labels: labels, Token: true})
	if err != nil {
		writeError(w, err)
		return
	}
	out := make([]api.Sandbox, 0, len(kids))
	for _, k := range kids {
		j := s.toJSON(k.Info, k.Record)
		j.Token = k.Token
		j.Capabilities = capList(s.Capabilities())
		out = append(out, j)
	}
	writeJSON(w, http.StatusCreated, api.SandboxList{Sandboxes: out})
}
