package server

import (
	"errors"
	"maps"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/sandbox"
	"github.com/tupper-dev/tupper/server/api"
	"github.com/tupper-dev/tupper/server/builds"
	"github.com/tupper-dev/tupper/server/lifecycle"
	"github.com/tupper-dev/tupper/store"
)

// Event types. Every lifecycle transition the server sees or makes is one of these (the
// sandbox's own are package lifecycle's).
const (
	EventCreated         = lifecycle.EventCreated
	EventDestroyed       = lifecycle.EventDestroyed
	EventExpired         = lifecycle.EventExpired
	EventTimedOut        = lifecycle.EventTimedOut
	EventPaused          = lifecycle.EventPaused
	EventResumed         = lifecycle.EventResumed
	EventSnapshotCreated = lifecycle.EventSnapshotCreated
	EventSnapshotDeleted = lifecycle.EventSnapshotDeleted
	EventForked          = lifecycle.EventForked
	EventTimeoutSet      = lifecycle.EventTimeoutSet
	EventProcessStarted  = "process.started"
	EventProcessStopped  = "process.stopped"
	EventProcessExited   = "process.exited"
	EventPortExposed     = "port.exposed"
	EventPortClosed      = "port.unexposed"
	EventEgressDenied    = "sandbox.egress_denied" // a sandbox's network policy refused a name or a connection
)

// EventTypes lists every event type, for webhook filters.
var EventTypes = []string{
	EventCreated, EventDestroyed, EventExpired, EventTimedOut, EventPaused, EventResumed,
	EventSnapshotCreated, EventSnapshotDeleted, EventForked, EventTimeoutSet, EventProcessStarted, EventProcessStopped,
	EventProcessExited, EventPortExposed, EventPortClosed, EventEgressDenied,
	builds.EventQueued, builds.EventStarted, builds.EventReady, builds.EventFailed,
}

func (s *Server) health(w http.ResponseWriter, r *http.Request, _ *caller) {
	writeJSON(w, http.StatusOK, api.Health{OK: true})
}

func (s *Server) info(w http.ResponseWriter, r *http.Request, _ *caller) {
	writeJSON(w, http.StatusOK, api.Info{Provider: s.prov.Name(), Capabilities: capList(s.Capabilities()), EventTypes: EventTypes})
}

func capList(c provider.Capabilities) []string {
	out := []string{}
	for _, x := range c.List() {
		out = append(out, string(x))
	}
	return out
}

// recordLabels are the labels the server records and reports for a new sandbox.
func recordLabels(req api.CreateRequest) map[string]string {
	l := maps.Clone(req.Labels)
	if l == nil {
		l = map[string]string{}
	}
	if !req.LabelsExact {
		l[sandbox.SDKLabel] = "true"
	}
	return l
}

// createOptions are the SDK's options for a create request.
func createOptions(req api.CreateRequest) (sandbox.CreateOptions, error) {
	opts := sandbox.CreateOptions{
		Key: req.Key, KeyMode: sandbox.KeyMode(req.KeyMode), Labels: req.Labels, Env: req.Env,
		Secrets: req.Secrets.Plain, BoundSecrets: req.Secrets.Bound, Ports: req.Ports, From: req.From, Template: req.Template,
		Runtime: req.Runtime, TrackChanges: req.TrackChanges, Volumes: req.Volumes,
	}
	if req.Size != nil {
		opts.Size = sandbox.Size{Name: req.Size.Name, CPU: req.Size.CPU, MemoryMB: req.Size.MemoryMB, DiskGB: req.Size.DiskGB}
	}
	if req.Network != nil {
		opts.Network = req.Network.Provider()
	}
	var err error
	if opts.Timeout, err = durMS("timeoutMs", req.TimeoutMS); err != nil {
		return opts, err
	}
	if opts.IdleTimeout, err = durMS("idleTimeoutMs", req.IdleTimeoutMS); err != nil {
		return opts, err
	}
	if _, ok := opts.Labels[sandbox.SDKLabel]; ok {
		// The SDK on the server sets its own label on the provider's sandbox.
		opts.Labels = maps.Clone(opts.Labels)
		delete(opts.Labels, sandbox.SDKLabel)
	}
	return opts, opts.Validate()
}

// toJSON describes a sandbox: its state from the provider, its key and labels from the
// server's record (which holds them exactly as the client gave them).
func (s *Server) toJSON(in sandbox.Info, rec store.Sandbox) api.Sandbox {
	labels := maps.Clone(rec.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	key := rec.Key
	if key == "" {
		key = in.Key
	}
	deadline := in.Deadline
	if store.PausesAtTimeout(rec.OnTimeout) || deadline.IsZero() {
		// The server's: it pauses the sandbox then, or destroys it when the provider has no
		// deadline of its own.
		deadline = rec.Deadline
	}
	return api.Sandbox{
		ID: in.ID, Provider: s.prov.Name(), Key: key, Labels: labels, State: string(in.State),
		CreatedAt: in.CreatedAt.UTC(), Deadline: deadline.UTC(), Template: in.Template, Runtime: in.Runtime,
		Workdir: in.Workdir, OnTimeout: rec.OnTimeout, AutoResume: rec.AutoResume,
		Restarts: api.RestartsOf(in.Restarts),
	}
}

func (s *Server) createSandbox(w http.ResponseWriter, r *http.Request, c *caller) {
	var req api.CreateRequest
	if err := decode(w, r, &req, true); err != nil {
		writeError(w, err)
		return
	}
	opts, err := createOptions(req)
	if err != nil {
		writeError(w, err)
		return
	}
	cr, err := s.lc.Create(r.Context(), lifecycle.CreateOptions{
		Sandbox: opts, KeyID: c.KeyID, Labels: recordLabels(req), Token: true,
		OnTimeout: req.OnTimeout, AutoResume: req.AutoResume,
	})
	if err != nil {
		writeError(w, err)
		return
	}
	status := http.StatusOK
	if cr.Created {
		status = http.StatusCreated
	}
	out := s.toJSON(cr.Info, cr.Record)
	out.Token = cr.Token
	out.Created = &cr.Created
	out.Capabilities = capList(s.Capabilities())
	writeJSON(w, status, out)
}

func (s *Server) listSandboxes(w http.ResponseWriter, r *http.Request, _ *caller) {
	q := r.URL.Query()
	filter := map[string]string{}
	for _, l := range q["label"] {
		k, v, ok := strings.Cut(l, "=")
		if !ok || k == "" {
			writeError(w, badRequest("label filter %q: want label=KEY=VALUE", l))
			return
		}
		filter[k] = v
	}
	list, err := s.lc.List(r.Context(), lifecycle.ListOptions{Labels: filter, Key: q.Get("key")})
	if err != nil {
		writeError(w, err)
		return
	}
	out := []api.Sandbox{}
	for _, l := range list {
		out = append(out, s.toJSON(l.Info, l.Record))
	}
	if all, _ := strconv.ParseBool(q.Get("all")); all {
		ended, err := s.st.EndedSandboxes(r.Context(), maxEndedListed)
		if err != nil {
			writeError(w, err)
			return
		}
		for _, rec := range ended {
			if (q.Get("key") == "" || rec.Key == q.Get("key")) && (provider.ListFilter{Labels: filter}).Matches(rec.Labels) {
				out = append(out, endedJSON(s.prov.Name(), rec))
			}
		}
	}
	writeJSON(w, http.StatusOK, api.SandboxList{Sandboxes: out})
}

// maxEndedListed is how many ended sandboxes GET /v1/sandboxes?all=true lists at most, the
// latest to end.
const maxEndedListed = 100

// endedJSON is the record of a sandbox that ended, on the wire.
func endedJSON(prov string, rec store.Sandbox) api.Sandbox {
	labels := rec.Labels
	if labels == nil {
		labels = map[string]string{}
	}
	return api.Sandbox{
		ID: rec.ID, Provider: prov, Key: rec.Key, Labels: labels, State: string(provider.StateStopped),
		CreatedAt: rec.CreatedAt.UTC(), Deadline: rec.Deadline.UTC(), OnTimeout: rec.OnTimeout, AutoResume: rec.AutoResume,
		EndedAt: rec.DestroyedAt.UTC(), End: &api.End{Reason: rec.End.Reason, By: rec.End.By, Message: rec.End.Message},
	}
}

// withBox runs fn with the live sandbox named by {id}.
func (s *Server) withBox(w http.ResponseWriter, r *http.Request, fn func(b *sandbox.Sandbox) error) {
	b, err := s.box(r.Context(), r.PathValue("id"))
	if err == nil {
		err = fn(b)
	}
	if err != nil {
		if errors.Is(err, provider.CodeNotFound) {
			s.lc.CheckGone(r.Context(), r.PathValue("id"))
		}
		writeError(w, err)
	}
}

func (s *Server) getSandbox(w http.ResponseWriter, r *http.Request, _ *caller) {
	box, err := s.lc.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	out := s.toJSON(box.Info, box.Record)
	out.Capabilities = capList(s.Capabilities())
	writeJSON(w, http.StatusOK, out)
}

// deleteSandbox destroys a sandbox; one the provider had already lost is recorded expired,
// and the delete succeeds all the same.
func (s *Server) deleteSandbox(w http.ResponseWriter, r *http.Request, c *caller) {
	if err := s.lc.Destroy(r.Context(), r.PathValue("id"), c.KeyID); err != nil && !errors.Is(err, lifecycle.ErrExpired) {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// pause pauses a sandbox, keeping its memory unless the body says {"keepMemory": false}
// (its files are kept, its processes end, and a resume boots it again).
func (s *Server) pause(w http.ResponseWriter, r *http.Request, _ *caller) {
	var req api.PauseRequest
	if err := decode(w, r, &req, true); err != nil {
		writeError(w, err)
		return
	}
	opts := sandbox.PauseOptions{DropMemory: req.KeepMemory != nil && !*req.KeepMemory}
	if err := s.lc.Pause(r.Context(), r.PathValue("id"), opts); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) resume(w http.ResponseWriter, r *http.Request, _ *caller) {
	if err := s.lc.Resume(r.Context(), r.PathValue("id")); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) snapshot(w http.ResponseWriter, r *http.Request, c *caller) {
	var req api.SnapshotRequest
	if err := decode(w, r, &req, true); err != nil {
		writeError(w, err)
		return
	}
	exp, err := durMS("expiresInMs", req.ExpiresInMS)
	if err != nil {
		writeError(w, err)
		return
	}
	id, err := s.lc.Snapshot(r.Context(), r.PathValue("id"), lifecycle.SnapshotOptions{
		KeyID: c.KeyID, ExpiresIn: exp, Kind: provider.SnapshotKind(req.Kind), Name: req.Name,
	})
	if err != nil {
		writeError(w, err)
		return
	}
	kind := req.Kind
	if kind == "" {
		kind = string(provider.SnapshotFilesystem)
	}
	writeJSON(w, http.StatusCreated, api.SnapshotTaken{ID: id, Kind: kind})
}

func (s *Server) setTimeout(w http.ResponseWriter, r *http.Request, _ *caller) {
	var req api.TimeoutRequest
	if err := decode(w, r, &req, false); err != nil {
		writeError(w, err)
		return
	}
	s.applyTimeout(w, r, req.TimeoutMS)
}

// DefaultKeepAlive is how far keep-alive moves the deadline when the request names no time.
const DefaultKeepAlive = 5 * time.Minute

func (s *Server) keepAlive(w http.ResponseWriter, r *http.Request, _ *caller) {
	var req api.KeepAliveRequest
	if err := decode(w, r, &req, true); err != nil {
		writeError(w, err)
		return
	}
	if req.TimeoutMS == 0 {
		req.TimeoutMS = DefaultKeepAlive.Milliseconds()
	}
	s.applyTimeout(w, r, req.TimeoutMS)
}

func (s *Server) applyTimeout(w http.ResponseWriter, r *http.Request, ms int64) {
	d, err := durMS("timeoutMs", ms)
	if err != nil {
		writeError(w, err)
		return
	}
	deadline, err := s.lc.SetTimeout(r.Context(), r.PathValue("id"), d)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, api.Deadline{Deadline: deadline.UTC()})
}

// setNetwork replaces a running sandbox's network policy; the body is create's "network".
func (s *Server) setNetwork(w http.ResponseWriter, r *http.Request, _ *caller) {
	var n api.Network
	if err := decode(w, r, &n, false); err != nil {
		writeError(w, err)
		return
	}
	s.withBox(w, r, func(b *sandbox.Sandbox) error {
		if err := b.SetNetwork(r.Context(), n.Provider()); err != nil {
			return err
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	})
}

// getNetwork answers the sandbox's network policy now (sandbox.Network): the form PUT takes,
// its egress proxy without the password.
func (s *Server) getNetwork(w http.ResponseWriter, r *http.Request, _ *caller) {
	s.withBox(w, r, func(b *sandbox.Sandbox) error {
		n, err := b.Network(r.Context())
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, api.NetworkOf(n))
		return nil
	})
}

// egressLog returns a page of the sandbox's egress record (sandbox.Egress); ?after= is the
// cursor of the previous page.
func (s *Server) egressLog(w http.ResponseWriter, r *http.Request, _ *caller) {
	s.withBox(w, r, func(b *sandbox.Sandbox) error {
		l, err := b.Egress(r.Context(), r.URL.Query().Get("after"))
		if err != nil {
			return err
		}
		if l.Entries == nil {
			l.Entries = []sandbox.EgressEntry{}
		}
		writeJSON(w, http.StatusOK, l)
		return nil
	})
}

// egressLearned sums up the sandbox's whole egress record as learn mode's output
// (sandbox.LearnAllowList: the allow list that permits what it reached) and the
// destinations its policy refused (sandbox.Denied), so that clients in any language get the
// one reading of the record instead of each writing its own.
func (s *Server) egressLearned(w http.ResponseWriter, r *http.Request, _ *caller) {
	s.withBox(w, r, func(b *sandbox.Sandbox) error {
		entries, _, err := b.EgressSince(r.Context(), "", 0)
		if err != nil {
			return err
		}
		out := api.EgressLearned{Allow: sandbox.LearnAllowList(entries), Denied: sandbox.Denied(entries)}
		if out.Allow == nil {
			out.Allow = []string{}
		}
		if out.Denied == nil {
			out.Denied = []string{}
		}
		writeJSON(w, http.StatusOK, out)
		return nil
	})
}

// busy reports whether a command or background process is running in the sandbox (for
// idle-only reaping).
func (s *Server) busy(w http.ResponseWriter, r *http.Request, _ *caller) {
	s.withBox(w, r, func(b *sandbox.Sandbox) error {
		busy, err := b.Busy(r.Context())
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, api.Busy{Busy: busy})
		return nil
	})
}
