// Package api holds the JSON of the native REST API (/v1) that both of its ends use: the
// server decodes requests into these types and encodes answers from them, and its Go client
// (providers/remote) does the reverse, so a field added for one is there for the other.
// server/openapi.json documents the same shapes.
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
	Mode  string   `json:"mode,omitempty"`
	Allow []string `json:"allow,omitempty"`
	Deny  []string `json:"deny,omitempty"`
	Learn bool     `json:"learn,omitempty"`
}

// NetworkOf is n on the wire.
func NetworkOf(n provider.Network) *Network {
	return &Network{Mode: string(n.Mode), Allow: n.Allow, Deny: n.Deny, Learn: n.Learn}
}

// Provider is n as the provider contract's.
func (n *Network) Provider() provider.Network {
	return provider.Network{Mode: provider.NetworkMode(n.Mode), Allow: n.Allow, Deny: n.Deny, Learn: n.Learn}
}

// UnmarshalJSON reads any of the forms; an unknown field of the object form is an error.
func (n *Network) UnmarshalJSON(data []byte) error {
	var mode string
	if json.Unmarshal(data, &mode) == nil {
		*n = Network{Mode: mode} // the SDK checks the mode
		return nil
	}
	const forms = `"network" is "all", "none", {"allow": [...], "deny": [...]} or {"mode": ..., "allow": [...], "deny": [...]}`
	if !bytes.HasPrefix(bytes.TrimSpace(data), []byte("{")) {
		return errors.New(forms)
	}
	var obj struct {
		Mode  string    `json:"mode"`
		Allow *[]string `json:"allow"`
		Deny  *[]string `json:"deny"`
		Learn bool      `json:"learn"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&obj); err != nil {
		return fmt.Errorf("%s: %s", forms, strings.TrimPrefix(err.Error(), "json: "))
	}
	*n = Network{Mode: obj.Mode, Learn: obj.Learn}
	if obj.Allow != nil {
		n.Allow = *obj.Allow
	}
	if obj.Deny != nil {
		n.Deny = *obj.Deny
	}
	if n.Mode == "" && (obj.Allow != nil || obj.Deny != nil || obj.Learn) {
		n.Mode = string(provider.NetworkAllow)
	}
	return nil
}

// CreateRequest is the body of POST /v1/sandboxes.
type CreateRequest struct {
	Key           string            `json:"key,omitempty"`
	KeyMode       string            `json:"keyMode,omitempty"`
	Labels        map[string]string `json:"labels,omitempty"`
	Env           map[string]string `json:"env,omitempty"`
	Secrets       map[string]string `json:"secrets,omitempty"`
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
	// OnTimeout is "kill" (the default) or "pause"; AutoResume resumes a paused sandbox when
	// it is used.
	OnTimeout  string `json:"onTimeout,omitempty"`
	AutoResume bool   `json:"autoResume,omitempty"`
	// LabelsExact records Labels exactly as given. Without it the server adds
	// sandbox-sdk=true, the label of sandboxes made through the SDK (which the server always
	// uses); providers/remote sets it so a raw provider.Create stays without that label.
	LabelsExact bool `json:"labelsExact,omitempty"`
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
	Capabilities []string          `json:"capabilities,omitempty"`
	OnTimeout    string            `json:"onTimeout,omitempty"`
	AutoResume   bool              `json:"autoResume,omitempty"`
}
