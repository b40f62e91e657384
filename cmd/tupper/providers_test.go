package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/tupper-dev/tupper/internal/testenv"
)

// The product binary leaves the memory provider out (it isolates nothing); the tupper tests
// run has it (-tags tupper_memory). A tupper without it says so when asked for it, and what
// it has instead.
func TestMemoryProviderOnlyInTestBuilds(t *testing.T) {
	deps := func(tags ...string) string {
		args := append([]string{"list", "-deps"}, tags...)
		cmd := exec.Command(testenv.GoTool(), append(args, "github.com/tupper-dev/tupper/cmd/tupper")...)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		out, errOut, code := testenv.Run(t, cmd)
		if code != 0 {
			t.Fatalf("go list: exit %d: %s", code, errOut)
		}
		return out
	}
	const memory = "github.com/tupper-dev/tupper/providers/memory\n"
	if strings.Contains(deps(), memory) {
		t.Error("the tupper binary imports the memory provider")
	}
	if !strings.Contains(deps("-tags", "tupper_memory"), memory) {
		t.Error("tupper built with -tags tupper_memory lacks the memory provider")
	}
	err := missingProvider("memory", false, []string{"docker", "local"})
	if err == nil || err.Error() != "--provider memory: the memory provider (no isolation, for tests) is not built into this tupper "+
		"(`go build -tags tupper_memory ./cmd/tupper` adds it); its providers: docker, local" {
		t.Errorf("--provider memory without the provider: %v", err)
	}
	if err := missingProvider("memory", true, nil); err != nil {
		t.Errorf("--provider memory with the provider: %v", err)
	}
	if err := missingProvider("nosuch", false, nil); err != nil {
		t.Errorf("another name is the registry's to refuse: %v", err)
	}
}
