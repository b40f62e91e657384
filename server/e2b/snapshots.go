package e2b

import (
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/tupper-dev/tupper/internal/httpdeadline"
	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/sandbox"
	"github.com/tupper-dev/tupper/server/lifecycle"
)

// E2B's snapshots and forks, over the server's lifecycle (the same quotas, expiry and events
// as the native API's). E2B's snapshot keeps a sandbox's memory: a snapshot taken here is
// the fullest kind the sandbox can take (full under runsc with network none, its files
// elsewhere), as a fork is. Its id is what Sandbox.create takes as a template.

// snapshotJSON is E2B's SnapshotInfo.
type snapshotJSON struct {
	SnapshotID string   `json:"snapshotID"`
	Names      []string `json:"names"`
}

func snapshotNames(name string) []string {
	if name == "" {
		return []string{}
	}
	return []string{name}
}

// snapshot is POST /sandboxes/{id}/snapshots {"name"?}: 201 {snapshotID, names}.
func (s *Server) snapshot(w http.ResponseWriter, r *http.Request, keyID string) {
	httpdeadline.Lift(w) // a copy of the sandbox's disk (and memory)
	var req struct {
		Name string `json:"name"`
	}
	if err := decodeBody(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	id := r.PathValue("sandboxID")
	snap, err := s.lc.Snapshot(r.Context(), id, lifecycle.SnapshotOptions{KeyID: keyID, Fullest: true, Name: req.Name})
	if err != nil {
		writeError(w, e2bError(id, err))
		return
	}
	writeJSON(w, http.StatusCreated, snapshotJSON{SnapshotID: snap, Names: snapshotNames(req.Name)})
}

// listSnapshots is GET /snapshots?sandboxID=&name=&limit=&nextToken=: newest first, paged
// with X-Next-Token.
func (s *Server) listSnapshots(w http.ResponseWriter, r *http.Request, _ string) {
	q := r.URL.Query()
	limit, cursor, err := pageOf(q)
	if err != nil {
		writeError(w, err)
		return
	}
	all, err := s.lc.Snapshots(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	source, name := q.Get("sandboxID"), q.Get("name")
	var sel []sandbox.SnapshotInfo
	for _, in := range all {
		if (source != "" && in.Source != source) || (name != "" && !snapshotNamed(in, name)) {
			continue
		}
		sel = append(sel, in)
	}
	key := func(in sandbox.SnapshotInfo) pageKey { return pageKey{in.CreatedAt.UnixNano(), in.ID} }
	slices.SortFunc(sel, func(a, b sandbox.SnapshotInfo) int { return -key(a).compare(key(b)) })
	if cursor != nil {
		i := 0
		for i < len(sel) && key(sel[i]).compare(*cursor) >= 0 {
			i++
		}
		sel = sel[i:]
	}
	if len(sel) > limit {
		sel = sel[:limit]
		w.Header().Set("X-Next-Token", key(sel[limit-1]).String())
	}
	out := make([]snapshotJSON, 0, len(sel))
	for _, in := range sel {
		out = append(out, snapshotJSON{SnapshotID: in.ID, Names: snapshotNames(in.Name)})
	}
	writeJSON(w, http.StatusOK, out)
}

// snapshotNamed reports whether q names the snapshot: its id, or its name with or without
// a tag (E2B's "name:tag").
func snapshotNamed(in sandbox.SnapshotInfo, q string) bool {
	if q == in.ID || (in.Name != "" && q == in.Name) {
		return true
	}
	base, _, tagged := strings.Cut(q, ":")
	return tagged && in.Name != "" && (base == in.Name || base == in.ID)
}

// deleteTemplate is DELETE /templates/{templateID}, which E2B's SDK also calls to delete a
// snapshot: a snapshot is deleted (204; 404 when there is none). Deleting a template of the
// provider this way is not served.
func (s *Server) deleteTemplate(w http.ResponseWriter, r *http.Request, _ string) {
	id := r.PathValue("templateID")
	if _, err := sandbox.InspectTemplate(r.Context(), s.prov, id); err == nil {
		writeError(w, unsupported("%s is not supported by tupper%s", r.Pattern, whyTemplates))
		return
	}
	if err := s.lc.DeleteSnapshot(r.Context(), id); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// forkResult is one element of E2B's fork answer.
type forkResult struct {
	Sandbox *sandboxJSON `json:"sandbox,omitempty"`
	Error   *apiError    `json:"error,omitempty"`
}

// fork is POST /sandboxes/{id}/fork {"timeout"?, "count"?}: the children (memory and
// processes included where the sandbox has "snapshot-full"), each with the parent's
// metadata, as E2B's array of {sandbox}. The children are made together: a failure makes
// none and is the request's error.
func (s *Server) fork(w http.ResponseWriter, r *http.Request, keyID string) {
	httpdeadline.Lift(w)
	var req struct {
		Timeout *int64 `json:"timeout"`
		Count   *int   `json:"count"`
	}
	if err := decodeBody(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	timeout := int64(defaultTimeoutV2)
	if req.Timeout != nil && *req.Timeout != 0 {
		timeout = *req.Timeout
	}
	if timeout < 0 || timeout > maxTimeout {
		writeError(w, provider.Errorf(provider.CodeInvalidArgument, "timeout must be between 0 and %d seconds", maxTimeout))
		return
	}
	n := 1
	if req.Count != nil {
		if n = *req.Count; n < 1 {
			writeError(w, provider.Errorf(provider.CodeInvalidArgument, "count must be at least 1"))
			return
		}
	}
	id := r.PathValue("sandboxID")
	parent, err := s.lookup(r.Context(), id)
	if err != nil {
		writeError(w, err)
		return
	}
	labels := parent.Record.Labels
	opts := sandbox.ForkOptions{N: n, Timeout: time.Duration(timeout) * time.Second, Labels: map[string]string{}}
	for k, v := range labels {
		if k != sandbox.SDKLabel {
			opts.Labels[k] = v
		}
	}
	kids, err := s.lc.Fork(r.Context(), id, lifecycle.ForkOptions{Sandbox: opts, KeyID: keyID, Labels: labels})
	if err != nil {
		writeError(w, e2bError(id, err))
		return
	}
	out := make([]forkResult, 0, len(kids))
	for _, k := range kids {
		j := s.sandboxJSON(k.Record.ID, k.Info.Template, k.Record.Labels)
		out = append(out, forkResult{Sandbox: &j})
	}
	writeJSON(w, http.StatusCreated, out)
}
