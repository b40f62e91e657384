package api

import "time"

// RunRequest is the body of POST /v1/sandboxes/{id}/run: one shell command through the SDK
// (fresh shell, timeout, output caps, redaction).
type RunRequest struct {
	Command        string            `json:"command"`
	Cwd            string            `json:"cwd,omitempty"`
	Env            map[string]string `json:"env,omitempty"`
	TimeoutMS      int64             `json:"timeoutMs,omitempty"`
	Stdin          *string           `json:"stdin,omitempty"`
	MaxOutputBytes int               `json:"maxOutputBytes,omitempty"`
}

// RunResult is sandbox.RunResult on the wire: the answer of run, or its stream's "result".
type RunResult struct {
	OK         bool   `json:"ok"`
	ExitCode   int    `json:"exitCode"`
	Stdout     string `json:"stdout"`
	Stderr     string `json:"stderr"`
	Output     string `json:"output"`
	DurationMS int64  `json:"durationMs"`
	Truncated  bool   `json:"truncated"`
	TimedOut   bool   `json:"timedOut"`
	Aborted    bool   `json:"aborted,omitempty"`
	Signal     string `json:"signal,omitempty"`
	OOMKilled  bool   `json:"oomKilled,omitempty"` // the kernel's OOM killer ended it
	Cwd        string `json:"cwd"`
	Command    string `json:"command"`
}

// Ready is when a started process counts as ready: its port accepts connections (or
// answers HTTP at Path), or a line of its output matches Log (RE2).
type Ready struct {
	Port int    `json:"port,omitempty"`
	Path string `json:"path,omitempty"`
	HTTP bool   `json:"http,omitempty"`
	Log  string `json:"log,omitempty"`
}

// StartProcess is the body of POST /v1/sandboxes/{id}/processes.
type StartProcess struct {
	Command        string            `json:"command"`
	Name           string            `json:"name,omitempty"`
	Cwd            string            `json:"cwd,omitempty"`
	Env            map[string]string `json:"env,omitempty"`
	Ready          *Ready            `json:"ready,omitempty"`
	ReadyTimeoutMS int64             `json:"readyTimeoutMs,omitempty"`
}

// Process is a background process on the wire.
type Process struct {
	Name      string    `json:"name"`
	Command   string    `json:"command"`
	Status    string    `json:"status"`
	PID       int       `json:"pid,omitempty"`
	Ready     bool      `json:"ready"`
	URL       string    `json:"url,omitempty"`
	StartedAt time.Time `json:"startedAt,omitzero"`
}

// LogPage is a page of a process's output (GET processes/{name}/logs); pass NextCursor
// back as after to read on.
type LogPage struct {
	NextCursor string `json:"nextCursor"`
	Text       string `json:"text"`
	Truncated  bool   `json:"truncated"`
}

// StopProcess is the body of POST processes/{name}/stop (optional).
type StopProcess struct {
	GraceMS int64 `json:"graceMs,omitempty"`
}

// WaitProcess is the body of POST processes/{name}/wait (optional).
type WaitProcess struct {
	TimeoutMS int64 `json:"timeoutMs,omitempty"`
}

// ExposeRequest is the body of POST /v1/sandboxes/{id}/ports/{port}/expose (optional).
type ExposeRequest struct {
	Public      bool  `json:"public,omitempty"`
	ExpiresInMS int64 `json:"expiresInMs,omitempty"`
}

// Port is an exposed port: URL is the path form, which needs a credential unless the port
// is public; HostURL ({port}-{id}.{domain}) is there when the server has a domain; SignedURL
// works without a credential until ExpiresAt.
type Port struct {
	Port      int       `json:"port"`
	Public    bool      `json:"public"`
	URL       string    `json:"url"`
	HostURL   string    `json:"hostUrl,omitempty"`
	SignedURL string    `json:"signedUrl"`
	ExpiresAt time.Time `json:"expiresAt"`
}

// ProcessList is the answer of GET /v1/sandboxes/{id}/processes.
type ProcessList struct {
	Processes []Process `json:"processes"`
}

// WaitResult is the answer of POST processes/{name}/wait: Status "running" when the wait
// timed out, else "exited" with ExitCode and Signal (both set, even when 0 and "").
type WaitResult struct {
	ExitCode  *int    `json:"exitCode,omitempty"`
	Signal    *string `json:"signal,omitempty"`
	OOMKilled bool    `json:"oomKilled,omitempty"` // the kernel's OOM killer ended it
	Status    string  `json:"status"`
}

// PortList is the answer of GET /v1/sandboxes/{id}/ports.
type PortList struct {
	Ports []Port `json:"ports"`
}

// GitRequest is the body of every git route (/v1/sandboxes/{id}/git/…); each uses the
// fields it needs. Dir "" is /workspace/app. Token is used for the call only: it goes to a
// credential helper in the sandbox, never into argv, history or output.
type GitRequest struct {
	URL     string `json:"url,omitempty"`     // clone
	Dir     string `json:"dir,omitempty"`     // the repository
	Branch  string `json:"branch,omitempty"`  // clone, push, checkout
	Depth   int    `json:"depth,omitempty"`   // clone
	Token   string `json:"token,omitempty"`   // clone, push
	Message string `json:"message,omitempty"` // commit
	All     bool   `json:"all,omitempty"`     // commit
	Author  string `json:"author,omitempty"`  // commit
	Remote  string `json:"remote,omitempty"`  // push
	Create  bool   `json:"create,omitempty"`  // checkout
}

// Output is an event of a streamed run ("stdout" or "stderr"): a piece of its output.
type Output struct {
	Text string `json:"text"`
}

// Line is a "line" event of GET processes/{name}/lines: one line of output, its stream and
// the cursor that reads on after it.
type Line struct {
	Cursor string `json:"cursor"`
	Stream string `json:"stream"`
	Text   string `json:"text"`
}
