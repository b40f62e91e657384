package tools

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tupper-dev/tupper/sandbox"
)

// Bounds on what goes back to a model.
const (
	// MaxStreamBytes bounds each of a command's stdout and stderr in a result: the first
	// and last half of it are kept.
	MaxStreamBytes = 16 << 10
	// MaxFileBytes bounds the text read_file returns.
	MaxFileBytes = 64 << 10
	// MaxListEntries bounds list_files and list_sandboxes.
	MaxListEntries = 500
	// maxRunOutput is what the core keeps of each stream before clipping; past it the tail
	// shown is the tail of the first maxRunOutput bytes.
	maxRunOutput = 4 << 20
	// maxLineChars bounds one line of search results.
	maxLineChars = 300
)

// clip returns s cut to at most max bytes, keeping the first and last half on UTF-8
// boundaries (and on line boundaries when one is near), with a note in the middle saying how
// much was left out. It reports whether it cut anything.
func clip(s string, max int) (string, bool) {
	if len(s) <= max {
		return s, false
	}
	half := max / 2
	head := s[:half]
	for len(head) > 0 && !utf8.RuneStart(s[len(head)]) {
		head = head[:len(head)-1]
	}
	if i := strings.LastIndexByte(head, '\n'); i >= half*3/4 {
		head = head[:i+1]
	}
	tailStart := len(s) - half
	for tailStart < len(s) && !utf8.RuneStart(s[tailStart]) {
		tailStart++
	}
	if i := strings.IndexByte(s[tailStart:], '\n'); i >= 0 && i < half/4 {
		tailStart += i + 1
	}
	omitted := tailStart - len(head)
	note := fmt.Sprintf("\n[… %d bytes omitted: showing the first %d and last %d of %d bytes …]\n", omitted, len(head), len(s)-tailStart, len(s))
	return head + note + s[tailStart:], true
}

// block appends a titled block of text to b, ending in a newline.
func block(b *strings.Builder, title, text string) {
	b.WriteString(title)
	b.WriteString(":\n")
	b.WriteString(text)
	if !strings.HasSuffix(text, "\n") {
		b.WriteString("\n")
	}
}

// runResult turns a command's result into a tool result: non-zero exit and timeouts are
// errors the model reads.
func runResult(res *sandbox.RunResult, timeout time.Duration) Result {
	var b strings.Builder
	switch {
	case res.TimedOut:
		fmt.Fprintf(&b, "timed out after %v; the command and its child processes were killed\n", timeout)
	case res.Aborted:
		b.WriteString("aborted: the request was cancelled and the command was killed\n")
	case res.OOMKilled:
		fmt.Fprintf(&b, "exit code: %d: the kernel's OOM killer ended it, the sandbox reached its memory limit; use less memory at once\n", res.ExitCode)
	default:
		fmt.Fprintf(&b, "exit code: %d\n", res.ExitCode)
	}
	stdout, cutOut := clip(res.Stdout, MaxStreamBytes)
	stderr, cutErr := clip(res.Stderr, MaxStreamBytes)
	if stdout != "" {
		block(&b, "stdout", stdout)
	}
	if stderr != "" {
		block(&b, "stderr", stderr)
	}
	if stdout == "" && stderr == "" {
		b.WriteString("(no output)\n")
	}
	if res.Truncated {
		fmt.Fprintf(&b, "note: output past %d MiB per stream was discarded; redirect it to a file and read parts of it\n", maxRunOutput>>20)
	} else if cutOut || cutErr {
		b.WriteString("note: long output was shortened; redirect it to a file and search or read parts of it\n")
	}
	data := map[string]any{
		"exit_code": res.ExitCode,
		"stdout":    stdout,
		"stderr":    stderr,
		"timed_out": res.TimedOut,
		"truncated": res.Truncated || cutOut || cutErr,
	}
	if res.OOMKilled {
		data["oom_killed"] = true
	}
	return Result{Text: b.String(), IsError: !res.OK, Data: data}
}
