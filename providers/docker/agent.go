package docker

import (
	"debug/elf"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"sync"

	"github.com/tupper-dev/tupper/provider"
)

// agentEnv names the agent binary when Config.AgentPath is empty (as for the local provider).
const agentEnv = "TUPPER_AGENT"

const tupperCommand = "github.com/tupper-dev/tupper/cmd/tupper"

// agentState is the agent binary chosen, found on first need.
type agentState struct {
	mu   sync.Mutex
	arch string
	path string
	err  error
}

// agentBinary returns the Linux tupper binary for an engine of architecture arch (as the
// engine names it: x86_64, aarch64, ...), in this order:
//
//  1. Config.AgentPath;
//  2. $TUPPER_AGENT;
//  3. the running program, when it is the tupper command built for Linux on arch.
//
// 1 and 2 must be static Linux ELF executables for arch. A program that uses the SDK but is
// not tupper must name one (a macOS or Windows tupper too, until a Linux agent is embedded at
// build time; see docs/docker.md).
func (p *Provider) agentBinary(arch string) (string, error) {
	a := &p.agent
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.path != "" || a.err != nil {
		if a.arch == arch {
			return a.path, a.err
		}
	}
	a.arch = arch
	a.path, a.err = findAgent(p.cfg.AgentPath, arch)
	return a.path, a.err
}

func findAgent(configured, arch string) (string, error) {
	goarch := goArch(arch)
	for _, c := range []struct{ path, where string }{{configured, "Config.AgentPath"}, {os.Getenv(agentEnv), "$" + agentEnv}} {
		if c.path == "" {
			continue
		}
		if err := checkELF(c.path, goarch); err != nil {
			return "", provider.Errorf(provider.CodeUnavailable, "docker: the agent %s (%s): %v", c.path, c.where, err)
		}
		return c.path, nil
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Path == tupperCommand && runtime.GOOS == "linux" && runtime.GOARCH == goarch {
		exe, err := os.Executable()
		if err == nil {
			return exe, nil
		}
	}
	return "", provider.Missingf("docker: no Linux tupper binary for the engine's %s containers: set $%s to one (GOOS=linux GOARCH=%s CGO_ENABLED=0 go build ./cmd/tupper)", arch, agentEnv, goarch)
}

// goArch is Go's name for the engine's architecture.
func goArch(arch string) string {
	switch arch {
	case "x86_64", "amd64":
		return "amd64"
	case "aarch64", "arm64":
		return "arm64"
	case "":
		return runtime.GOARCH
	}
	return arch
}

// checkELF reports whether path is a Linux ELF executable for goarch.
func checkELF(path, goarch string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("not a Linux executable: %v", err)
	}
	defer f.Close()
	want := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[goarch]
	if want != 0 && f.Machine != want {
		return fmt.Errorf("built for %v, the engine runs %s", f.Machine, goarch)
	}
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			return fmt.Errorf("dynamically linked; build it with CGO_ENABLED=0")
		}
	}
	return nil
}
