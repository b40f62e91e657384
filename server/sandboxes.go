package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/sandbox"
	"github.com/tupper-dev/tupper/store"
)

// Event types. Every lifecycle transition the server sees or makes is one of these.
const (
	EventCreated         = "sandbox.created"
	EventDestroyed       = "sandbox.destroyed"
	EventExpired         = "sandbox.expired" // the provider no longer has it (deadline, idle, crash)
	EventTimedOut        = "sandbox.timeout" // the server destroyed it at its deadline
	EventPaused          = "sandbox.paused"
	EventResumed         = "sandbox.resumed"
	EventSnapshotCreated = "sandbox.snapshot_created"
	EventTimeoutSet      = "sandbox.timeout_set"
	EventProcessStarted  = "process.started"
	EventProcessStopped  = "process.stopped"
	EventProcessExited   = "process.exited"
	EventPortExposed     = "port.exposed"
	EventPortClosed      = "port.unexposed"
)

// EventTypes lists every event type, for webhook filters.
var EventTypes = []string{
	EventCreated, EventDestroyed, EventExpired, EventTimedOut, EventPaused, EventResumed,
	EventSnapshotCreated, EventTimeoutSet, EventProcessStarted, EventProcessStopped,
	EventProcessExited, EventPortExposed, EventPortClosed,
}

func (s *Server) health(w http.ResponseWriter, r *http.Request, _ *caller) {
	writeJSON(w, http.StatusOK, map[string]any{"ok": true})
}

type infoJSON struct {
	Provider     string   `json:"provider"`
	Capabilities []string `json:"capabilities"`
	EventTypes   []string `json:"eventTypes"`
}

func (s *Server) info(w http.ResponseWriter, r *http.Request, _ *caller) {
	writeJSON(w, http.StatusOK, infoJSON{Provider: s.prov.Name(), Capabilities: capList(s.Capabilities()), EventTypes: EventTypes})
}

func capList(c provider.Capabilities) []string {
	out := []string{}
	for _, x := range c.List() {
		out = append(out, string(x))
	}
	return out
}

type sizeJSON struct {
	Name     string  `json:"name,omitempty"`
	CPU      float64 `json:"cpu,omitempty"`
	MemoryMB int     `json:"memoryMb,omitempty"`
	DiskGB   int     `json:"diskGb,omitempty"`
}

// networkJSON is a create request's network in any of its forms: the SDK's own, "all",
// "none" or {"allow": [...]}, and the object form {"mode": "all"|"none"|"allow", "allow":
// [...]}. An object with "allow" and no mode is an allow list, even an empty one (which the
// SDK then refuses): it never widens to all.
type networkJSON struct {
	Mode  string   `json:"mode,omitempty"`
	Allow []string `json:"allow,omitempty"`
}

func (n *networkJSON) UnmarshalJSON(data []byte) error {
	var mode string
	if json.Unmarshal(data, &mode) == nil {
		*n = networkJSON{Mode: mode} // the SDK checks the mode
		return nil
	}
	const forms = `"network" is "all", "none", {"allow": [...]} or {"mode": ..., "allow": [...]}`
	if !bytes.HasPrefix(bytes.TrimSpace(data), []byte("{")) {
		return errors.New(forms)
	}
	var obj struct {
		Mode  string    `json:"mode"`
		Allow *[]string `json:"allow"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&obj); err != nil {
		return fmt.Errorf("%s: %s", forms, strings.TrimPrefix(err.Error(), "json: "))
	}
	*n = networkJSON{Mode: obj.Mode}
	if obj.Allow != nil {
		n.Allow = *obj.Allow
		if n.Mode == "" {
			n.Mode = string(provider.NetworkAllow)
		}
	}
	return nil
}

type createRequest struct {
	Key           string            `json:"key,omitempty"`
	KeyMode       string            `json:"keyMode,omitempty"`
	Labels        map[string]string `json:"labels,omitempty"`
	Env           map[string]string `json:"env,omitempty"`
	Secrets       map[string]string `json:"secrets,omitempty"`
	Size          *sizeJSON         `json:"size,omitempty"`
	Network       *networkJSON      `json:"network,omitempty"`
	Ports         []int             `json:"ports,omitempty"`
	TimeoutMS     int64             `json:"timeoutMs,omitempty"`
	IdleTimeoutMS int64             `json:"idleTimeoutMs,omitempty"`
	From          string            `json:"from,omitempty"`
	Template      string            `json:"template,omitempty"`
	Runtime       string            `json:"runtime,omitempty"`
	TrackChanges  bool              `json:"trackChanges,omitempty"`
	// LabelsExact records Labels exactly as given. Without it the server adds
	// sandbox-sdk=true, the label of sandboxes made through the SDK (which the server always
	// uses); providers/remote sets it so a raw provider.Create stays without that label.
	LabelsExact bool `json:"labelsExact,omitempty"`
}

// recordLabels are the labels the server records and reports for a new sandbox.
func (req createRequest) recordLabels() map[string]string {
	l := maps.Clone(req.Labels)
	if l == nil {
		l = map[string]string{}
	}
	if !req.LabelsExact {
		l[sandbox.SDKLabel] = "true"
	}
	return l
}

func (req createRequest) options() (sandbox.CreateOptions, error) {
	opts := sandbox.CreateOptions{
		Key: req.Key, KeyMode: sandbox.KeyMode(req.KeyMode), Labels: req.Labels, Env: req.Env,
		Secrets: req.Secrets, Ports: req.Ports, From: req.From, Template: req.Template,
		Runtime: req.Runtime, TrackChanges: req.TrackChanges,
	}
	if req.Size != nil {
		opts.Size = sandbox.Size{Name: req.Size.Name, CPU: req.Size.CPU, MemoryMB: req.Size.MemoryMB, DiskGB: req.Size.DiskGB}
	}
	if req.Network != nil {
		opts.Network = sandbox.Network{Mode: provider.NetworkMode(req.Network.Mode), Allow: req.Network.Allow}
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

// sandboxJSON is a sandbox on the wire.
type sandboxJSON struct {
	ID           string            `json:"id"`
	Token        string            `json:"token,omitempty"`
	Created      *bool             `json:"created,omitempty"`
	Provider     string            `json:"provider"`
	Key          string            `json:"key,omitempty"`
	Labels       map[string]string `json:"labels"`
	State        string            `json:"state"`
	CreatedAt    time.Time         `json:"createdAt"`
	Deadline     time.Time         `json:"deadline,omitzero"`
	Template     string            `json:"template,omitempty"`
	Runtime      string            `json:"runtime,omitempty"`
	Capabilities []string          `json:"capabilities,omitempty"`
}

// toJSON describes a sandbox: its state from the provider, its key and labels from the
// server's record (which holds them exactly as the client gave them).
func (s *Server) toJSON(in provider.Info, rec store.Sandbox) sandboxJSON {
	labels := maps.Clone(rec.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	key := rec.Key
	if key == "" {
		key = in.Key
	}
	return sandboxJSON{
		ID: in.ID, Provider: s.prov.Name(), Key: key, Labels: labels, State: string(in.State),
		CreatedAt: in.CreatedAt.UTC(), Deadline: in.Deadline.UTC(), Template: in.Template, Runtime: in.Runtime,
	}
}

// keyLocator makes the server's store the authority for get-or-create keys and serializes
// them, so a key maps to exactly one sandbox on any provider.
type keyLocator struct {
	s     *Server
	keyID string
}

func (l keyLocator) Get(ctx context.Context, key string) (string, error) {
	sb, err := l.s.st.SandboxByKey(ctx, key)
	if errors.Is(err, provider.CodeNotFound) {
		return "", nil
	}
	return sb.ID, err
}

func (l keyLocator) Set(ctx context.Context, key, id string) error {
	return l.s.st.PutSandbox(ctx, store.Sandbox{ID: id, Provider: l.s.prov.Name(), APIKeyID: l.keyID, Key: key, CreatedAt: time.Now()}, nil)
}

func (l keyLocator) Delete(ctx context.Context, key string) error {
	sb, err := l.s.st.SandboxByKey(ctx, key)
	if err != nil {
		return nil
	}
	l.s.gone(ctx, sb.ID, EventExpired, nil)
	return nil
}

func (l keyLocator) WithLock(ctx context.Context, key string, fn func(context.Context) error) error {
	unlock := l.s.lockKey(key)
	defer unlock()
	return fn(ctx)
}

func (s *Server) createSandbox(w http.ResponseWriter, r *http.Request, c *caller) {
	var req createRequest
	if err := decode(w, r, &req, true); err != nil {
		writeError(w, err)
		return
	}
	opts, err := req.options()
	if err != nil {
		writeError(w, err)
		return
	}
	if opts.Key != "" {
		opts.KeyMode = sandbox.KeyExact
		opts.Locator = keyLocator{s: s, keyID: c.KeyID}
	}
	opts.PreviewURL = s.previewPath
	ctx := r.Context()
	b, err := sandbox.Create(ctx, s.prov, opts)
	if err != nil {
		writeError(w, err)
		return
	}
	info, err := b.Native.Info(ctx)
	if err != nil {
		if b.Created {
			_ = b.Destroy(context.WithoutCancel(ctx))
		}
		writeError(w, err)
		return
	}
	token := store.NewToken()
	var rec store.Sandbox
	if b.Created {
		rec = store.Sandbox{
			ID: b.ID, Provider: s.prov.Name(), APIKeyID: c.KeyID, Key: opts.Key, Labels: req.recordLabels(),
			CreatedAt: info.CreatedAt, Deadline: info.Deadline, State: info.State,
		}
		err = s.st.PutSandbox(context.WithoutCancel(ctx), rec, store.Hash(token))
	} else if rec, err = s.st.Sandbox(ctx, b.ID); err == nil {
		err = s.st.AddToken(context.WithoutCancel(ctx), b.ID, store.Hash(token))
	}
	if err != nil {
		if b.Created {
			_ = b.Destroy(context.WithoutCancel(ctx))
		}
		writeError(w, err)
		return
	}
	s.remember(b)
	status := http.StatusOK
	if b.Created {
		status = http.StatusCreated
		s.emit(ctx, EventCreated, b.ID, map[string]any{"key": rec.Key, "labels": rec.Labels, "template": info.Template})
	}
	out := s.toJSON(info, rec)
	out.Token = token
	out.Created = &b.Created
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
	key := q.Get("key")
	ctx := r.Context()
	// The store first: a record is written only after the provider made the sandbox, so a
	// sandbox in both lists is live and one made meanwhile is simply not listed yet.
	recs, err := s.st.Sandboxes(ctx)
	if err != nil {
		writeError(w, err)
		return
	}
	infos, err := s.prov.List(ctx, provider.ListFilter{})
	if err != nil {
		writeError(w, err)
		return
	}
	live := make(map[string]provider.Info, len(infos))
	for _, in := range infos {
		live[in.ID] = in
	}
	out := []sandboxJSON{}
	for _, rec := range recs {
		in, ok := live[rec.ID]
		if !ok || !(provider.ListFilter{Labels: filter}).Matches(rec.Labels) || (key != "" && rec.Key != key) {
			continue
		}
		out = append(out, s.toJSON(in, rec))
	}
	slices.SortFunc(out, func(a, b sandboxJSON) int { return a.CreatedAt.Compare(b.CreatedAt) })
	writeJSON(w, http.StatusOK, map[string]any{"sandboxes": out})
}

// withBox runs fn with the live sandbox named by {id}.
func (s *Server) withBox(w http.ResponseWriter, r *http.Request, fn func(b *sandbox.Sandbox) error) {
	b, err := s.box(r.Context(), r.PathValue("id"))
	if err == nil {
		err = fn(b)
	}
	if err != nil {
		if errors.Is(err, provider.CodeNotFound) {
			s.checkGone(r.Context(), r.PathValue("id"))
		}
		writeError(w, err)
	}
}

// checkGone records a sandbox the provider no longer has, after an operation said not found
// (which may also mean a missing file).
func (s *Server) checkGone(ctx context.Context, id string) {
	inst, err := s.prov.Connect(ctx, id)
	if errors.Is(err, provider.CodeNotFound) {
		s.gone(ctx, id, EventExpired, nil)
		return
	}
	if err == nil {
		inst.Close()
	}
}

func (s *Server) getSandbox(w http.ResponseWriter, r *http.Request, _ *caller) {
	s.withBox(w, r, func(b *sandbox.Sandbox) error {
		info, err := b.Native.Info(r.Context())
		if err != nil {
			return err
		}
		rec, err := s.st.Sandbox(r.Context(), b.ID)
		if err != nil {
			return err
		}
		out := s.toJSON(info, rec)
		out.Capabilities = capList(s.Capabilities())
		writeJSON(w, http.StatusOK, out)
		return nil
	})
}

func (s *Server) deleteSandbox(w http.ResponseWriter, r *http.Request, _ *caller) {
	id := r.PathValue("id")
	ctx := r.Context()
	if _, err := s.st.Sandbox(ctx, id); err != nil {
		writeError(w, err)
		return
	}
	defer s.destroyingNow(id)()
	err := s.prov.Destroy(ctx, id)
	if err != nil && !errors.Is(err, provider.CodeNotFound) {
		writeError(w, err)
		return
	}
	s.gone(ctx, id, EventDestroyed, nil)
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) pause(w http.ResponseWriter, r *http.Request, _ *caller) {
	s.withBox(w, r, func(b *sandbox.Sandbox) error {
		if err := b.Pause(r.Context()); err != nil {
			return err
		}
		_ = s.st.SetState(r.Context(), b.ID, provider.StatePaused)
		s.emit(r.Context(), EventPaused, b.ID, nil)
		w.WriteHeader(http.StatusNoContent)
		return nil
	})
}

func (s *Server) resume(w http.ResponseWriter, r *http.Request, _ *caller) {
	s.withBox(w, r, func(b *sandbox.Sandbox) error {
		if err := b.Resume(r.Context()); err != nil {
			return err
		}
		_ = s.st.SetState(r.Context(), b.ID, provider.StateRunning)
		s.emit(r.Context(), EventResumed, b.ID, nil)
		w.WriteHeader(http.StatusNoContent)
		return nil
	})
}

func (s *Server) snapshot(w http.ResponseWriter, r *http.Request, c *caller) {
	var req struct {
		ExpiresInMS int64 `json:"expiresInMs,omitempty"`
	}
	if err := decode(w, r, &req, true); err != nil {
		writeError(w, err)
		return
	}
	exp, err := durMS("expiresInMs", req.ExpiresInMS)
	if err != nil {
		writeError(w, err)
		return
	}
	s.withBox(w, r, func(b *sandbox.Sandbox) error {
		id, err := s.takeSnapshot(r.Context(), b, c.KeyID, exp)
		if err != nil {
			return err
		}
		s.emit(r.Context(), EventSnapshotCreated, b.ID, map[string]string{"snapshotId": id})
		writeJSON(w, http.StatusCreated, map[string]string{"id": id})
		return nil
	})
}

type timeoutRequest struct {
	TimeoutMS int64 `json:"timeoutMs"`
}

func (s *Server) setTimeout(w http.ResponseWriter, r *http.Request, _ *caller) {
	var req timeoutRequest
	if err := decode(w, r, &req, false); err != nil {
		writeError(w, err)
		return
	}
	s.applyTimeout(w, r, req.TimeoutMS)
}

// DefaultKeepAlive is how far keep-alive moves the deadline when the request names no time.
const DefaultKeepAlive = 5 * time.Minute

func (s *Server) keepAlive(w http.ResponseWriter, r *http.Request, _ *caller) {
	var req struct {
		TimeoutMS int64 `json:"timeoutMs,omitempty"`
	}
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
	s.withBox(w, r, func(b *sandbox.Sandbox) error {
		if err := b.SetTimeout(r.Context(), d); err != nil {
			return err
		}
		deadline := time.Now().Add(d)
		if info, err := b.Native.Info(r.Context()); err == nil && !info.Deadline.IsZero() {
			deadline = info.Deadline
		}
		_ = s.st.SetDeadline(r.Context(), b.ID, deadline)
		s.emit(r.Context(), EventTimeoutSet, b.ID, map[string]any{"deadline": deadline.UTC()})
		writeJSON(w, http.StatusOK, map[string]any{"deadline": deadline.UTC()})
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
		writeJSON(w, http.StatusOK, map[string]bool{"busy": busy})
		return nil
	})
}
