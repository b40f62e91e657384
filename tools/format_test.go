package tools

import (
	"strings"
	"testing"
	"time"

	"github.com/tupper-dev/tupper/sandbox"
)

// A command the OOM killer ended tells the model so, in the text and the data; any other 137
// does not.
func TestRunResultOOMKilled(t *testing.T) {
	r := runResult(&sandbox.RunResult{ExitCode: 137, Signal: "SIGKILL", OOMKilled: true}, time.Minute)
	if !r.IsError || !strings.Contains(r.Text, "OOM killer") || r.Data.(map[string]any)["oom_killed"] != true {
		t.Errorf("OOM-killed: %+v", r)
	}
	r = runResult(&sandbox.RunResult{ExitCode: 137, Signal: "SIGKILL"}, time.Minute)
	if strings.Contains(r.Text, "OOM") || r.Data.(map[string]any)["oom_killed"] != nil {
		t.Errorf("killed: %+v", r)
	}
}
