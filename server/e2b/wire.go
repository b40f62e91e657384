package e2b

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/sandbox"
	"github.com/tupper-dev/tupper/store"
)

// maxBody bounds a control-plane request body.
const maxBody = 1 << 20

// newSandbox is the body of POST /sandboxes (NewSandbox) and POST /v2/sandboxes
// (NewSandboxV2); unknown fields are ignored, as E2B's API does.
type newSandbox struct {
	TemplateID          string            `json:"templateID"`
	Timeout             *int64            `json:"timeout"`
	Metadata            map[string]string `json:"metadata"`
	EnvVars             map[string]string `json:"envVars"`
	Secure              *bool             `json:"secure"`
	AllowInternetAccess *bool             `json:"allow_internet_access"`
	Network             *networkConfig    `json:"network"`
	AutoPause           *bool             `json:"autoPause"`
	AutoPauseMemory     *bool             `json:"autoPauseMemory"`
	AutoResume          json.RawMessage   `json:"autoResume"`
	MCP                 json.RawMessage   `json:"mcp"`
	IAM                 json.RawMessage   `json:"iam"`
	VolumeMounts        []volumeMount     `json:"volumeMounts"`
}

// volumeMount is E2B's SandboxVolumeMount: a volume (its name) at a path.
type volumeMount struct {
	Name string `json:"name"`
	Path string `json:"path"`
}

// networkConfig is E2B's SandboxNetworkConfig.
type networkConfig struct {
	AllowOut           []string        `json:"allowOut"`
	DenyOut            []string        `json:"denyOut"`
	AllowPublicTraffic *bool           `json:"allowPublicTraffic"`
	MaskRequestHost    *string         `json:"maskRequestHost"`
	Rules              json.RawMessage `json:"rules"`
	EgressProxy        json.RawMessage `json:"egressProxy"`
}

// sandboxJSON is E2B's Sandbox: the answer of create and connect.
type sandboxJSON struct {
	SandboxID          string  `json:"sandboxID"`
	TemplateID         string  `json:"templateID"`
	ClientID           string  `json:"clientID"`
	EnvdVersion        string  `json:"envdVersion"`
	EnvdAccessToken    string  `json:"envdAccessToken"`
	TrafficAccessToken *string `json:"trafficAccessToken"`
	Domain             *string `json:"domain"`
}

// listedSandbox is E2B's ListedSandbox.
type listedSandbox struct {
	TemplateID   string            `json:"templateID"`
	SandboxID    string            `json:"sandboxID"`
	ClientID     string            `json:"clientID"`
	StartedAt    time.Time         `json:"startedAt"`
	EndAt        time.Time         `json:"endAt"`
	CPUCount     int               `json:"cpuCount"`
	MemoryMB     int               `json:"memoryMB"`
	DiskSizeMB   int               `json:"diskSizeMB"`
	State        string            `json:"state"`
	EnvdVersion  string            `json:"envdVersion"`
	Metadata     map[string]string `json:"metadata"`
	VolumeMounts []struct{}        `json:"volumeMounts"`

	started time.Time // StartedAt before it is rounded to the millisecond
}

// sandboxDetail is E2B's SandboxDetail.
type sandboxDetail struct {
	listedSandbox
	EnvdAccessToken string            `json:"envdAccessToken"`
	Domain          *string           `json:"domain"`
	Network         *networkDetail    `json:"network,omitempty"`
	Lifecycle       *sandboxLifecycle `json:"lifecycle"`
}

// networkDetail is the part of E2B's SandboxNetworkConfig a detail reports.
type networkDetail struct {
	AllowPublicTraffic bool   `json:"allowPublicTraffic"`
	MaskRequestHost    string `json:"maskRequestHost,omitempty"`
	// EgressProxy is E2B's SandboxEgressProxyInfo: the address and username, never the
	// password.
	EgressProxy *provider.EgressProxy `json:"egressProxy,omitempty"`
}

type sandboxLifecycle struct {
	OnTimeout  string `json:"onTimeout"`
	AutoResume bool   `json:"autoResume"`
}

// sandboxMetric is E2B's SandboxMetric.
type sandboxMetric struct {
	Timestamp     time.Time `json:"timestamp"`
	TimestampUnix int64     `json:"timestampUnix"`
	CPUCount      int       `json:"cpuCount"`
	CPUUsedPct    float64   `json:"cpuUsedPct"`
	MemUsed       int64     `json:"memUsed"`
	MemTotal      int64     `json:"memTotal"`
	MemCache      int64     `json:"memCache"`
	DiskUsed      int64     `json:"diskUsed"`
	DiskTotal     int64     `json:"diskTotal"`
}

// noEnd is the endAt of a sandbox without a deadline (E2B's always have one).
var noEnd = time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)

// baseTemplate is E2B's default template, mapped to the provider's default.
const baseTemplate = "base"

// codeInterpreterDefault is the template @e2b/code-interpreter's Sandbox.create asks for by
// default; it names the provider's built-in code-interpreter template
// (codeInterpreterTemplate), made on first use (docs/code-interpreter.md).
const (
	codeInterpreterDefault  = "code-interpreter-v1"
	codeInterpreterTemplate = "code-interpreter"
)

// templateID is the E2B template id of a sandbox of provider template t.
func templateID(t string) string {
	if t == "" {
		return baseTemplate
	}
	return t
}

// The record of a sandbox made through E2B's API holds its metadata as labels, and the
// server's own labels under reservedPrefix, which metadata may not use. E2B's API shows the
// metadata only, exactly as the client set them.
const (
	reservedPrefix = "tupper.e2b/"
	// labelSDKAdded, "true", says the server added sandbox-sdk=true, the label of sandboxes
	// made through the SDK (as every sandbox of the server is), by which `tupper ls` lists
	// them; the client did not set it, so E2B's API does not show it.
	labelSDKAdded = reservedPrefix + "sdk-label-added"
	// labelPublicTraffic records network.allowPublicTraffic as the client set it: "false",
	// the sandbox's ports take requests only with its traffic access token; "true", they take
	// them from anyone, as E2B's; absent, the server's preview rules (PublicTraffic).
	labelPublicTraffic = reservedPrefix + "allow-public-traffic"
	// labelMaskHost records network.maskRequestHost: the Host header the sandbox's ports see
	// (MaskedHost).
	labelMaskHost = reservedPrefix + "mask-request-host"
)

// metadata is what E2B reports as a sandbox's metadata: its labels without the server's.
func metadata(labels map[string]string) map[string]string {
	m := make(map[string]string, len(labels))
	for k, v := range labels {
		if strings.HasPrefix(k, reservedPrefix) || (k == sandbox.SDKLabel && labels[labelSDKAdded] == "true") {
			continue
		}
		m[k] = v
	}
	return m
}

// private reports whether the sandbox of a record takes public traffic only with its
// traffic access token.
func private(labels map[string]string) bool { return labels[labelPublicTraffic] == "false" }

// public reports whether the sandbox of a record was created with network.allowPublicTraffic
// true: its ports take requests from anyone.
func public(labels map[string]string) bool { return labels[labelPublicTraffic] == "true" }

func (s *Server) size() provider.Size { return provider.Sizes["small"] }

func (s *Server) domain() *string {
	if s.cfg.Domain == "" {
		return nil
	}
	d := s.cfg.Domain
	return &d
}

func (s *Server) listed(rec store.Sandbox, in sandbox.Info) listedSandbox {
	end := in.Deadline
	if end.IsZero() {
		end = rec.Deadline
	}
	if end.IsZero() {
		end = noEnd
	}
	started := in.CreatedAt
	if started.IsZero() {
		started = rec.CreatedAt
	}
	state := "running"
	if in.State == provider.StatePaused {
		state = "paused"
	}
	sz := s.size()
	return listedSandbox{
		TemplateID: templateID(in.Template), SandboxID: rec.ID, ClientID: ClientID,
		StartedAt: started.UTC().Truncate(time.Millisecond), EndAt: end.UTC().Truncate(time.Millisecond),
		CPUCount: max(1, int(sz.CPU)), MemoryMB: sz.MemoryMB, DiskSizeMB: sz.DiskGB * 1024,
		State: state, EnvdVersion: EnvdVersion, Metadata: metadata(rec.Labels), VolumeMounts: []struct{}{},
		started: started,
	}
}

// sandboxJSON is the answer of create and connect for a sandbox with the record's labels.
func (s *Server) sandboxJSON(id, template string, labels map[string]string) sandboxJSON {
	out := sandboxJSON{
		SandboxID: id, TemplateID: templateID(template), ClientID: ClientID, EnvdVersion: EnvdVersion,
		EnvdAccessToken: s.envdToken(id), Domain: s.domain(),
	}
	if private(labels) {
		tok := s.trafficToken(id)
		out.TrafficAccessToken = &tok
	}
	return out
}

// decodeBody reads a JSON body into v, ignoring unknown fields. An empty body leaves v as is.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) error {
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		return provider.Errorf(provider.CodeInvalidArgument, "reading the request body: %v", err)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil
	}
	if err := json.Unmarshal(data, v); err != nil {
		return provider.Errorf(provider.CodeInvalidArgument, "malformed JSON body: %v", err)
	}
	return nil
}
