package tools

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/tupper-dev/tupper/sandbox"
)

// Tools of the code interpreter (docs/code-interpreter.md).

func codeTools() []Tool {
	return []Tool{
		define(Tool{
			Name: "run_code",
			Description: "Run a cell of Python (or JavaScript) in the sandbox's code interpreter, as in a Jupyter " +
				"notebook: variables, imports and definitions stay for the next call. Returns what it printed, " +
				"the value of its last expression, and charts and images as images (plt.show() a matplotlib " +
				"figure to see it); an exception is reported as an error with its traceback. numpy, pandas, " +
				"matplotlib, scipy, scikit-learn and seaborn are installed. It needs a sandbox made from the " +
				"code-interpreter template (create_sandbox with template code-interpreter); for shell commands " +
				"use run_command.",
			Destructive: true,
		}, runCode),
	}
}

type runCodeArgs struct {
	Code      string `json:"code" jsonschema:"The cell's code, e.g. import pandas as pd; pd.read_csv('data.csv').describe()" minLength:"1"`
	Language  string `json:"language,omitempty" jsonschema:"python (the default) or javascript." enum:"python,javascript"`
	TimeoutMS int64  `json:"timeout_ms,omitempty" jsonschema:"Interrupt the cell after this many milliseconds; its variables stay. Default: 120000 (2 minutes)." minimum:"1" maximum:"600000"`
	inSandbox
}

// Image is an image a call returned (MCP image content): its MIME type and base64 data.
type Image struct {
	MIME string `json:"mime_type"`
	Data string `json:"data"`
}

func runCode(ctx context.Context, s *Session, a runCodeArgs) (Result, error) {
	b, err := s.Sandbox(ctx, a.SandboxID)
	if err != nil {
		return Result{}, err
	}
	timeout := sandbox.DefaultRunTimeout
	if a.TimeoutMS > 0 {
		timeout = ms(a.TimeoutMS)
	}
	lang := a.Language
	if lang == "python" {
		lang = ""
	}
	ex, err := b.RunCode(ctx, a.Code, sandbox.CodeOptions{Language: lang, Timeout: timeout})
	if errors.Is(err, sandbox.CodeUnavailable) || errors.Is(err, sandbox.CodeUnsupported) {
		return Result{Text: fmt.Sprintf("sandbox %s has no code interpreter: create one with create_sandbox and template code-interpreter, "+
			"then pass its sandbox_id (or use run_command with python3 here). (%v)", b.ID, err), IsError: true}, nil
	}
	if err != nil {
		return Result{}, err
	}
	return codeResult(ex), nil
}

// codeResult is an execution for a model: output, the final value's text, the cell's
// error, and its images (PNG, JPEG) as images.
func codeResult(ex *sandbox.Execution) Result {
	var b strings.Builder
	stdout, cutOut := clip(strings.Join(ex.Stdout, ""), MaxStreamBytes)
	stderr, cutErr := clip(strings.Join(ex.Stderr, ""), MaxStreamBytes)
	if stdout != "" {
		block(&b, "stdout", stdout)
	}
	if stderr != "" {
		block(&b, "stderr", stderr)
	}
	var images []Image
	var texts []string
	for _, r := range ex.Results {
		switch {
		case r.PNG != "":
			images = append(images, Image{MIME: "image/png", Data: r.PNG})
		case r.JPEG != "":
			images = append(images, Image{MIME: "image/jpeg", Data: r.JPEG})
		}
		if r.Text != "" {
			t, _ := clip(r.Text, MaxStreamBytes)
			texts = append(texts, t)
			if r.IsMain {
				block(&b, "result", t)
			} else {
				block(&b, "display", t)
			}
		}
	}
	if len(images) > 0 {
		fmt.Fprintf(&b, "%d image(s) attached\n", len(images))
	}
	if ex.Error != nil {
		tb, _ := clip(ex.Error.Traceback, MaxStreamBytes)
		fmt.Fprintf(&b, "error: %s: %s\n", ex.Error.Name, ex.Error.Value)
		if tb != "" {
			block(&b, "traceback", tb)
		}
	}
	if b.Len() == 0 {
		b.WriteString("(no output)\n")
	}
	if cutOut || cutErr {
		b.WriteString("note: long output was shortened; write it to a file and read parts of it\n")
	}
	data := map[string]any{"stdout": stdout, "stderr": stderr, "results": texts, "execution_count": ex.ExecutionCount}
	if ex.Error != nil {
		data["error"] = map[string]string{"name": ex.Error.Name, "value": ex.Error.Value}
	}
	return Result{Text: b.String(), IsError: ex.Error != nil, Data: data, Images: images}
}
