// Package api holds the JSON of the native REST API (/v1) that both of its ends use: the
// server decodes requests into these types and encodes answers from them, and its Go client
// (providers/remote) does the reverse, so a field added for one is there for the other.
// The request, answer and stream bodies of the sandbox, file, process, volume, snapshot and
// webhook routes live here; neither end declares its own copy. (The template build request
// and the plain list wrappers of events, snapshots and templates are still the server's.)
//
// server/openapi.json documents the same shapes, and server's TestOpenAPIMatchesWireTypes
// holds each type here to its schema; @tupper/sdk's TypeScript types are generated from that
// document (js/packages/sdk/src/openapi.ts, npm run gen:types), so the three cannot drift.
package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tupper-dev/tupper/provider"
)

// Size is a sandbox's machine size: a named size, or the amounts.
type Size struct {
	Name     string  `json:"name,omitempty"`
	CPU      float64 `json:"cpu,omitempty"`
	MemoryMB int     `json:"memoryMb,omitempty"`
	DiskGB   int     `json:"diskGb,omitempty"`
}

// Network is a create request's network in any of its forms: the SDK's own, "all", "none"
// or {"allow": [...], "deny": [...]}, and the object form {"mode": "all"|"none"|"allow",
// "allow": [...], "deny": [...]}. An object with "allow" or "deny" and no mode is a policy,
// even with empty lists (which the SDK then refuses): it never widens to all.
type Network struct {
	Mode  string                `json:"mode,omitempty"`
	Allow []string              `json:"allow,omitempty"`
	Deny  []string              `json:"deny,omitempty"`
	Learn bool                  `json:"learn,omitempty"`
	Proxy *provider.EgressProxy `json:"proxy,omitempty"` // SOCKS5 egress proxy
}

// NetworkOf is n on the wire.
func NetworkOf(n provider.Network) *Network {
	return &Network{Mode: string(n.Mode), Allow: n.Allow, Deny: n.Deny, Learn: n.Learn, Proxy: n.Proxy}
}

// Provider is n as the provider contract's.
func (n *Network) Provider() provider.Network {
	return provider.Network{Mode: provider.NetworkMode(n.Mode), Allow: n.Allow, Deny: n.Deny, Learn: n.Learn, Proxy: n.Proxy}
}

// UnmarshalJSON reads any of the forms; an unknown field of the object form is an error.
func (n *Network) UnmarshalJSON(data []byte) error {
	var mode string
	if json.Unmarshal(data, &mode) == nil {
		*n = Network{Mode: mode} // the SDK checks the mode
		return nil
	}
	const forms = `"network" is "all", "none", {"allow": [...], "deny": [...], "proxy": {...}} or {"mode": ..., "allow": [...], "deny": [...]}`
	if !bytes.HasPrefix(bytes.TrimSpace(data), []byte("{")) {
		return errors.New(forms)
	}
	var obj struct {
		Mode  string                `json:"mode"`
		Allow *[]string             `json:"allow"`
		Deny  *[]string             `json:"deny"`
		Learn bool                  `json:"learn"`
		Proxy *provider.EgressProxy `json:"proxy"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&obj); err != nil {
		return fmt.Errorf("%s: %s", forms, strings.TrimPrefix(err.Error(), "json: "))
	}
	*n = Network{Mode: obj.Mode, Learn: obj.Learn, Proxy: obj.Proxy}
	if obj.Allow != nil {
		n.Allow = *obj.Allow
	}
	if obj.Deny != nil {
		n.Deny = *obj.Deny
	}
	if n.Mode == "" && (obj.Allow != nil || obj.Deny != nil || obj.Learn || obj.Proxy != nil) {
		n.Mode = string(provider.NetworkAllow)
	}
	return nil
}

// Secrets are a create request's secrets, one object whose values are either a string (a
// secret set in the sandbox's environment, readable there, redacted from output) or
// {"value": "...", "hosts": ["api.example.com", "*.example.com"]} (a bound secret: the
// sandbox holds a placeholder, replaced with the value outside it in HTTP requests to the
// hosts; see docs/network.md).
type Secrets struct {
	Plain map[string]string
	Bound map[string]provider.BoundSecret
}

// IsZero reports whether there are no secrets.
func (s Secrets) IsZero() bool { return len(s.Plain) == 0 && len(s.Bound) == 0 }

// MarshalJSON writes both kinds in one object.
func (s Secrets) MarshalJSON() ([]byte, error) {
	m := make(map[string]any, len(s.Plain)+len(s.Bound))
	for k, v := range s.Plain {
		m[k] = v
	}
	for k, v := range s.Bound {
		m[k] = v
	}
	return json.Marshal(m)
}

// UnmarshalJSON reads the object; a bound secret's unknown field is an error.
func (s *Secrets) UnmarshalJSON(data []byte) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return errors.New(`"secrets" is an object of names to a string or {"value": "...", "hosts": [...]}`)
	}
	*s = Secrets{}
	for k, v := range raw {
		var str string
		if json.Unmarshal(v, &str) == nil {
			if s.Plain == nil {
				s.Plain = map[string]string{}
			}
			s.Plain[k] = str
			continue
		}
		var b provider.BoundSecret
		dec := json.NewDecoder(bytes.NewReader(v))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&b); err != nil {
			return fmt.Errorf(`secret %s is a string or {"value": "...", "hosts": [...]}: %s`, k, strings.TrimPrefix(err.Error(), "json: "))
		}
		if s.Bound == nil {
			s.Bound = map[string]provider.BoundSecret{}
		}
		s.Bound[k] = b
	}
	return nil
}

// CreateRequest is the body of POST /v1/sandboxes.
type CreateRequest struct {
	Key           string            `json:"key,omitempty"`
	KeyMode       string            `json:"keyMode,omitempty"`
	Labels        map[string]string `json:"labels,omitempty"`
	Env           map[string]string `json:"env,omitempty"`
	Secrets       Secrets           `json:"secrets,omitzero"`
	Size          *Size             `json:"size,omitempty"`
	Network       *Network          `json:"network,omitempty"`
	Ports         []int             `json:"ports,omitempty"`
	TimeoutMS     int64             `json:"timeoutMs,omitempty"`
	IdleTimeoutMS int64             `json:"idleTimeoutMs,omitempty"`
	From          string            `json:"from,omitempty"`
	Template      string            `json:"template,omitempty"`
	Runtime       string            `json:"runtime,omitempty"`
	TrackChanges  bool              `json:"trackChanges,omitempty"`
	// Volumes are named volumes (/v1/volumes) mounted at their paths.
	Volumes []provider.VolumeMount `json:"volumes,omitempty"`
	// OnTimeout is "kill" (the default), "pause" or "pause-cold" (a pause that keeps the
	// files but not the memory: a resume boots the sandbox again); AutoResume resumes a
	// paused sandbox when it is used (not with pause-cold).
	OnTimeout  string `json:"onTimeout,omitempty"`
	AutoResume bool   `json:"autoResume,omitempty"`
	// LabelsExact records Labels exactly as given. Without it the server adds
	// sandbox-sdk=true, the label of sandboxes made through the SDK (which the server always
	// uses); providers/remote sets it so a raw provider.Create stays without that label.
	LabelsExact bool `json:"labelsExact,omitempty"`
}

// PauseRequest is the body of POST /v1/sandboxes/{id}/pause (optional).
type PauseRequest struct {
	// KeepMemory false pauses without the memory: the files are kept, the processes end,
	// and a resume boots the sandbox again (the "pause-cold" capability). Absent: true.
	KeepMemory *bool `json:"keepMemory,omitempty"`
}

// Sandbox is a sandbox on the wire: the answer of a create, a get, and each of a list's.
type Sandbox struct {
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
	Workdir      string            `json:"workdir,omitempty"` // the template's working directory; "" when it names none
	Capabilities []string          `json:"capabilities,omitempty"`
	OnTimeout    string            `json:"onTimeout,omitempty"`
	AutoResume   bool              `json:"autoResume,omitempty"`
	// Restarts are the times the provider found the sandbox stopped by one of its limits
	// and booted it again on its files, with why, oldest first (provider.Info.Restarts).
	Restarts []Restart `json:"restarts,omitempty"`
	// EndedAt and End are set on a sandbox that ended (listed with ?all=true): when, and why.
	EndedAt time.Time `json:"endedAt,omitzero"`
	End     *End      `json:"end,omitempty"`
}

// End is why a sandbox ended: Reason is destroyed (By: the API key id that destroyed it),
// timeout, idle, oom_killed, node_lost or error (Message says more). docs/sandboxes.md.
type End struct {
	Reason  string `json:"reason"`
	By      string `json:"by,omitempty"`
	Message string `json:"message,omitempty"`
}

// RestartsOf is a provider's restarts of a sandbox on the wire (times in UTC); nil for none.
func RestartsOf(restarts []provider.Restart) []Restart {
	var out []Restart
	for _, r := range restarts {
		out = append(out, Restart{At: r.At.UTC(), Reason: r.Reason})
	}
	return out
}

// Restart is one time a sandbox was found stopped by a limit and booted again.
type Restart struct {
	At     time.Time `json:"at"`
	Reason string    `json:"reason"`
}

// Snapshot is a snapshot on the wire (GET /v1/snapshots, /v1/snapshots/{id}).
type Snapshot struct {
	ID   string `json:"id"`
	Name string `json:"name,omitempty"` // for people; need not be unique
	Kind string `json:"kind"`           // filesystem or full (memory and processes too)
	// Template, Runtime and Network are those of the sandbox it was taken of, SandboxID.
	Template  string    `json:"template,omitempty"`
	Runtime   string    `json:"runtime,omitempty"` // a full snapshot restores only on it
	Network   string    `json:"network,omitempty"`
	SandboxID string    `json:"sandboxId,omitempty"`
	CreatedAt time.Time `json:"createdAt"`
	ExpiresAt time.Time `json:"expiresAt,omitzero"`
	Size      int64     `json:"size"` // bytes
	// Volumes are the volumes the sandbox mounted, mounted again by a sandbox from it.
	Volumes []provider.VolumeMount `json:"volumes,omitempty"`
}

// SnapshotOf is in on the wire.
func SnapshotOf(in provider.SnapshotInfo) Snapshot {
	return Snapshot{
		ID: in.ID, Name: in.Name, Kind: string(in.Kind), Template: in.Template, Runtime: in.Runtime,
		Network: string(in.Network), SandboxID: in.Source, CreatedAt: in.CreatedAt.UTC(),
		ExpiresAt: in.ExpiresAt.UTC(), Size: in.Size, Volumes: in.Volumes,
	}
}

// Info is s as the provider contract's.
func (s Snapshot) Info() provider.SnapshotInfo {
	return provider.SnapshotInfo{
		ID: s.ID, Name: s.Name, Kind: provider.SnapshotKind(s.Kind), Template: s.Template, Runtime: s.Runtime,
		Network: provider.NetworkMode(s.Network), Source: s.SandboxID, CreatedAt: s.CreatedAt,
		ExpiresAt: s.ExpiresAt, Size: s.Size, Volumes: s.Volumes,
	}
}

// Template is a template on the wire (GET /v1/templates, /v1/templates/{name}).
type Template struct {
	Name    string     `json:"name"`
	Tags    []string   `json:"tags,omitempty"`
	Builtin bool       `json:"builtin"`
	Source  string     `json:"source,omitempty"`
	Layers  int        `json:"layers"`
	Size    int64      `json:"sizeBytes"`
	Created *time.Time `json:"createdAt,omitempty"`
}

// TemplateOf is t on the wire.
func TemplateOf(t provider.TemplateInfo) Template {
	out := Template{Name: t.Name, Tags: t.Tags, Builtin: t.Builtin, Source: t.Source, Layers: t.Layers, Size: t.Size}
	if !t.Created.IsZero() {
		c := t.Created.UTC()
		out.Created = &c
	}
	return out
}

// Info is t as the provider contract's.
func (t Template) Info() provider.TemplateInfo {
	out := provider.TemplateInfo{Name: t.Name, Tags: t.Tags, Builtin: t.Builtin, Source: t.Source, Layers: t.Layers, Size: t.Size}
	if t.Created != nil {
		out.Created = *t.Created
	}
	return out
}

// Webhook is a webhook on the wire (POST and GET /v1/webhooks). Secret, which signs its
// deliveries, is only in the answer of its create.
type Webhook struct {
	ID        string    `json:"id"`
	URL       string    `json:"url"`
	Events    []string  `json:"events"`
	Secret    string    `json:"secret,omitempty"`
	CreatedAt time.Time `json:"createdAt"`
}

// SandboxList is the answer of GET /v1/sandboxes and of a fork.
type SandboxList struct {
	Sandboxes []Sandbox `json:"sandboxes"`
}

// ForkRequest is the body of POST /v1/sandboxes/{id}/fork (optional).
type ForkRequest struct {
	N         int               `json:"n,omitempty"`
	Labels    map[string]string `json:"labels,omitempty"`
	TimeoutMS int64             `json:"timeoutMs,omitempty"`
	Network   *Network          `json:"network,omitempty"`
}

// SnapshotRequest is the body of POST /v1/sandboxes/{id}/snapshot (optional).
type SnapshotRequest struct {
	ExpiresInMS int64  `json:"expiresInMs,omitempty"`
	Kind        string `json:"kind,omitempty"`
	Name        string `json:"name,omitempty"`
}

// SnapshotTaken is the answer of POST /v1/sandboxes/{id}/snapshot.
type SnapshotTaken struct {
	ID   string `json:"id"`
	Kind string `json:"kind"`
}

// TimeoutRequest is the body of POST /v1/sandboxes/{id}/timeout: the lifetime from now.
type TimeoutRequest struct {
	TimeoutMS int64 `json:"timeoutMs"`
}

// Busy is the answer of GET /v1/sandboxes/{id}/busy.
type Busy struct {
	Busy bool `json:"busy"`
}

// KeepAliveRequest is the body of POST /v1/sandboxes/{id}/keepalive (optional; no time:
// the server's default).
type KeepAliveRequest struct {
	TimeoutMS int64 `json:"timeoutMs,omitempty"`
}

// EgressLearned is the answer of GET /v1/sandboxes/{id}/egress/learned: the allow list that
// permits what the sandbox reached, and the destinations refused, first refused first. The
// lists are never null.
type EgressLearned struct {
	Allow  []string `json:"allow"`
	Denied []string `json:"denied"`
}

// WebhookRequest is the body of POST /v1/webhooks
// (no events: every type).
type WebhookRequest struct {
	URL    string   `json:"url"`
	Events []string `json:"events,omitempty"`
}

// Health is the answer of GET /v1/health and GET /healthz.
type Health struct {
	OK bool `json:"ok"`
}

// Readiness is the answer of GET /readyz: ready when every check passed. Checks holds each
// check's outcome by name ("store", "provider", "pool"): "ok", or what is wrong.
type Readiness struct {
	Ready  bool              `json:"ready"`
	Checks map[string]string `json:"checks"`
}

// Deadline is the answer of POST /v1/sandboxes/{id}/timeout and keepalive: the new deadline.
type Deadline struct {
	Deadline time.Time `json:"deadline"`
}

// AuditEntry is one entry of the audit log (GET /v1/audit): a call that changed something.
// It names who made it and what it touched, never a key, a secret, a request's body or a
// command's output.
type AuditEntry struct {
	ID     int64     `json:"id"`
	Time   time.Time `json:"time"`
	KeyID  string    `json:"keyId,omitempty"`
	Via    string    `json:"via"`
	Source string    `json:"source,omitempty"`
	API    string    `json:"api"`
	Action string    `json:"action"`
	Target string    `json:"target,omitempty"`
	Result string    `json:"result"`
	Status int       `json:"status,omitempty"`
}

// AuditList is the answer of GET /v1/audit, oldest first: page on with after set to the last
// entry's id.
type AuditList struct {
	Entries []AuditEntry `json:"entries"`
}

// UsageReport is the answer of GET /v1/usage: the usage ledger summed by group, over the
// sandboxes that lived during [from, to). A sandbox counts whole (its figures since it
// started) in every window it overlaps; figures are not prorated.
type UsageReport struct {
	From    *time.Time   `json:"from,omitempty"`
	To      *time.Time   `json:"to,omitempty"`
	GroupBy string       `json:"groupBy"` // "" (one group, "total"), key, template, runtime, node, sandbox or label:NAME
	Groups  []UsageGroup `json:"groups"`
}

// UsageGroup is the sum of one group's sandboxes, largest CPU use first.
type UsageGroup struct {
	Group     string `json:"group"` // the key id, template, … or label value; "" for sandboxes without one
	Sandboxes int    `json:"sandboxes"`
	Running   int    `json:"running"` // of them, those not ended yet
	// SandboxSeconds is their lifetimes summed (a running one's up to now).
	SandboxSeconds float64 `json:"sandboxSeconds"`
	CPUSeconds     float64 `json:"cpuSeconds"`
	// MemoryPeakBytes and DiskPeakBytes are the highest of their sandboxes' peaks.
	MemoryPeakBytes int64 `json:"memoryPeakBytes"`
	DiskPeakBytes   int64 `json:"diskPeakBytes"`
	NetRxBytes      int64 `json:"netRxBytes"`
	NetTxBytes      int64 `json:"netTxBytes"`
}

// MetricsSeries is the answer of GET /v1/sandboxes/{id}/metrics: the server's readings of the
// sandbox, oldest first, every --usage-interval, for its last 10 minutes, and for 5 minutes
// after it ended.
type MetricsSeries struct {
	Samples []MetricsSample `json:"samples"`
}

// MetricsSample is one reading of a sandbox's resource use, counted from the host.
type MetricsSample struct {
	Time           time.Time `json:"time"`
	CPUs           float64   `json:"cpus"`       // the CPUs it may use
	CPUUsedPct     float64   `json:"cpuUsedPct"` // of CPUs, since the reading before (0 for the first)
	CPUSeconds     float64   `json:"cpuSeconds"` // used since it started
	MemUsedBytes   int64     `json:"memUsedBytes"`
	MemLimitBytes  int64     `json:"memLimitBytes"`
	MemPeakBytes   int64     `json:"memPeakBytes"`
	DiskUsedBytes  int64     `json:"diskUsedBytes"`
	DiskTotalBytes int64     `json:"diskTotalBytes"`
	NetRxBytes     int64     `json:"netRxBytes"` // received since it started
	NetTxBytes     int64     `json:"netTxBytes"` // sent since it started
}
