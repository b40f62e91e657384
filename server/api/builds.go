package api

import (
	"time"

	"github.com/tupper-dev/tupper/provider"
)

// BuildRequest is a template build: the body of POST /v1/templates, or its "build" part.
type BuildRequest struct {
	Name string   `json:"name"`
	Tags []string `json:"tags,omitempty"`
	// Dockerfile is the Dockerfile's path in the context ("" is Dockerfile); DockerfileText
	// the Dockerfile itself.
	Dockerfile     string            `json:"dockerfile,omitempty"`
	DockerfileText string            `json:"dockerfileText,omitempty"`
	BuildArgs      map[string]string `json:"buildArgs,omitempty"`
	Target         string            `json:"target,omitempty"`
	Network        string            `json:"network,omitempty"` // of RUN steps: all (default) or none
	NoCache        bool              `json:"noCache,omitempty"`
	StartCmd       string            `json:"startCmd,omitempty"`
	ReadyCmd       string            `json:"readyCmd,omitempty"`
}

// BuildState is where a build is.
type BuildState string

// The states of a build.
const (
	BuildWaiting  BuildState = "waiting"
	BuildQueued   BuildState = "queued"
	BuildBuilding BuildState = "building"
	BuildReady    BuildState = "ready"
	BuildFailed   BuildState = "error"
)

// Done reports whether the state is final.
func (s BuildState) Done() bool { return s == BuildReady || s == BuildFailed }

// Build is a build's state at one moment (GET /v1/builds/{id}, and the answer of a build).
type Build struct {
	ID       string        `json:"id"`
	Template string        `json:"template"`
	Tags     []string      `json:"tags,omitempty"`
	State    BuildState    `json:"state"`
	Created  time.Time     `json:"createdAt"`
	Started  *time.Time    `json:"startedAt,omitempty"`
	Finished *time.Time    `json:"finishedAt,omitempty"`
	Error    *BuildFailure `json:"error,omitempty"`
	Layers   []string      `json:"layers,omitempty"` // the template's, when ready
	Logs     int           `json:"logEntries"`       // entries in the log so far
}

// BuildFailure says why a build failed.
type BuildFailure struct {
	Code    provider.Code `json:"code"`
	Message string        `json:"message"`
	// Line and Instruction are the failing step's, ExitCode a RUN's, Output the end of its
	// output; zero when the failure is not a step's.
	Line        int    `json:"line,omitempty"`
	Instruction string `json:"instruction,omitempty"`
	ExitCode    int    `json:"exitCode,omitempty"`
	Output      string `json:"output,omitempty"`
}

// BuildLogEntry is one entry of a build's log.
type BuildLogEntry struct {
	Time  time.Time `json:"time"`
	Step  int       `json:"step,omitempty"`  // 1-based; 0 for the service's own lines
	Steps int       `json:"steps,omitempty"` // of the build
	Line  int       `json:"line,omitempty"`  // the Dockerfile's line of the step
	// Kind is "step" (a step starts), "cached", "output" (a chunk of its output), "done",
	// "error", or "info" (the service's own).
	Kind  string `json:"kind"`
	Text  string `json:"text"`
	Layer string `json:"layer,omitempty"`
}

// BuildLogPage is a page of a build's log (GET /v1/builds/{id}/logs?offset=N): the entries
// from offset, the offset of the next, and the build's state.
type BuildLogPage struct {
	Entries []BuildLogEntry `json:"entries"`
	Next    int             `json:"next"`
	State   BuildState      `json:"state"`
}

// TemplateList is the answer of GET /v1/templates.
type TemplateList struct {
	Templates []Template `json:"templates"`
}

// SnapshotList is the answer of GET /v1/snapshots.
type SnapshotList struct {
	Snapshots []Snapshot `json:"snapshots"`
}

// WebhookList is the answer of GET /v1/webhooks.
type WebhookList struct {
	Webhooks []Webhook `json:"webhooks"`
}
