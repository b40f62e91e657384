package api

import "github.com/tupper-dev/tupper/provider"

// ExecHeader is the first line of a POST /v1/sandboxes/{id}/exec body: one raw provider
// command. When Stdin is true, the rest of the body is the command's standard input,
// streamed (the server reads it while it streams the output: full duplex).
type ExecHeader struct {
	Command   string            `json:"command"`
	Cwd       string            `json:"cwd"`
	Env       map[string]string `json:"env,omitempty"`
	User      string            `json:"user,omitempty"`
	Stdin     bool              `json:"stdin,omitempty"`
	Detach    bool              `json:"detach,omitempty"`
	TimeoutMS int64             `json:"timeoutMs,omitempty"`
}

// ExecFrame is one NDJSON line of an exec response: output ("stdout"/"stderr" with Data,
// base64 on the wire), the end ("exit"), or a failure ("error", with Code and Message).
type ExecFrame struct {
	Type     string `json:"type"`
	Data     []byte `json:"data,omitempty"`
	ExitCode int    `json:"exitCode,omitempty"`
	Signal   string `json:"signal,omitempty"`
	// OOMKilled: the kernel's OOM killer ended the command (exitCode 137, signal SIGKILL).
	OOMKilled bool          `json:"oomKilled,omitempty"`
	PID       int           `json:"pid,omitempty"`
	Code      provider.Code `json:"code,omitempty"`
	Message   string        `json:"message,omitempty"`
}

// TerminalControl is a text message on a terminal's WebSocket
// (GET /v1/sandboxes/{id}/terminal): from the client {"type":"resize","cols":…,"rows":…};
// from the server {"type":"exit","exitCode":…,"signal":…} before it closes, or
// {"type":"error","code":…,"message":…} for a control message it refused (the terminal goes
// on). Binary messages carry the terminal's bytes.
type TerminalControl struct {
	Type     string        `json:"type"`
	Cols     int           `json:"cols,omitempty"`
	Rows     int           `json:"rows,omitempty"`
	ExitCode *int          `json:"exitCode,omitempty"`
	Signal   string        `json:"signal,omitempty"`
	Code     provider.Code `json:"code,omitempty"`
	Message  string        `json:"message,omitempty"`
}

// Error is the body of every error response, and the fields of an "error" event of a
// stream. Message holds no code of its own: clients print "code: message".
type Error struct {
	Code    provider.Code `json:"code"`
	Message string        `json:"message"`
}

// Err is e as the provider contract's error; a code the client does not know is
// CodeProvider.
func (e Error) Err() *provider.Error {
	code := e.Code
	if !code.Valid() {
		code = provider.CodeProvider
	}
	return &provider.Error{Code: code, Message: e.Message}
}

// Info is the answer of GET /v1/info: the server's provider and what it can do.
type Info struct {
	Provider     string   `json:"provider"`
	Capabilities []string `json:"capabilities"`
	EventTypes   []string `json:"eventTypes"`
}
