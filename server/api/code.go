package api

// CodeRequest is the body of POST /v1/sandboxes/{id}/code: a cell of code for the sandbox's
// code-interpreter server (docs/code-interpreter.md). Language picks the default context of
// a language ("" is python), ContextID a context of its own instead; not both.
type CodeRequest struct {
	Code      string            `json:"code"`
	Language  string            `json:"language,omitempty"`
	ContextID string            `json:"contextId,omitempty"`
	Env       map[string]string `json:"env,omitempty"`
	TimeoutMS int64             `json:"timeoutMs,omitempty"`
}

// CodeResult is a value the cell displayed, or its final value (IsMainResult): each format
// it has (images base64), and Chart, a matplotlib figure's data. It is also the streamed
// "result" frame.
type CodeResult struct {
	IsMainResult bool           `json:"isMainResult"`
	Text         string         `json:"text,omitempty"`
	HTML         string         `json:"html,omitempty"`
	Markdown     string         `json:"markdown,omitempty"`
	SVG          string         `json:"svg,omitempty"`
	PNG          string         `json:"png,omitempty"`
	JPEG         string         `json:"jpeg,omitempty"`
	PDF          string         `json:"pdf,omitempty"`
	LaTeX        string         `json:"latex,omitempty"`
	JavaScript   string         `json:"javascript,omitempty"`
	JSON         any            `json:"json,omitempty"`
	Chart        map[string]any `json:"chart,omitempty"`
	Extra        map[string]any `json:"extra,omitempty"`
}

// CodeError is the error the cell raised (name "KernelDied" when its kernel died). It is
// also the streamed "error" frame.
type CodeError struct {
	Name      string `json:"name"`
	Value     string `json:"value"`
	Traceback string `json:"traceback"`
}

// Execution is the answer of POST /v1/sandboxes/{id}/code when the client does not ask for
// a stream.
type Execution struct {
	Results        []CodeResult `json:"results"`
	Stdout         []string     `json:"stdout"`
	Stderr         []string     `json:"stderr"`
	Error          *CodeError   `json:"error,omitempty"`
	ExecutionCount int          `json:"executionCount"`
}

// CodeEnd is the last frame of a streamed run ("end").
type CodeEnd struct {
	ExecutionCount int `json:"executionCount"`
}

// CodeContext is a context code runs in: a kernel with its language and working directory.
type CodeContext struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
}

// CodeContextRequest is the body of POST /v1/sandboxes/{id}/code/contexts (optional).
type CodeContextRequest struct {
	Language string `json:"language,omitempty"`
	Cwd      string `json:"cwd,omitempty"`
}

// CodeContextList is the answer of GET /v1/sandboxes/{id}/code/contexts.
type CodeContextList struct {
	Contexts []CodeContext `json:"contexts"`
}
