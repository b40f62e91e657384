package docker

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"sync"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/providers/docker/agentbin"
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
//  3. the running program, when it is the tupper command built for Linux on arch;
//  4. the agent for arch embedded at build time (package agentbin: scripts/build.sh embeds
//     one per architecture in the macOS and Windows builds), written once to the user's
//     cache directory under its hash.
//
// Each must be a static Linux ELF executable for arch. A program that uses the SDK but is
// not tupper, and a tupper built without embedded agents, must name one.
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
	path, err := embeddedAgent(embeddedAgents, goarch)
	if err != nil {
		return "", provider.Errorf(provider.CodeUnavailable, "docker: the embedded agent for %s: %v", goarch, err)
	}
	if path != "" {
		if err := checkELF(path, goarch); err != nil {
			return "", provider.Errorf(provider.CodeUnavailable, "docker: the embedded agent %s: %v", path, err)
		}
		return path, nil
	}
	return "", provider.Missingf("docker: no Linux tupper binary for the engine's %s containers: this tupper embeds none (scripts/build.sh makes builds that do); set $%s to one (GOOS=linux GOARCH=%s CGO_ENABLED=0 go build ./cmd/tupper)", arch, agentEnv, goarch)
}

// AgentSource says where the agent of a container for the engine's goarch comes from, for
// tupper doctor: Config.AgentPath is not known here, so it reports $TUPPER_AGENT, this very
// binary (a Linux tupper of that architecture), the embedded copy, or that there is none and
// what to do.
func AgentSource(goarch string) string {
	if p := os.Getenv(agentEnv); p != "" {
		return "$" + agentEnv + " (" + p + ")"
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Path == tupperCommand && runtime.GOOS == "linux" && runtime.GOARCH == goarch {
		return "this tupper binary (linux/" + goarch + ")"
	}
	if _, err := fs.Stat(embeddedAgents, agentbin.Name(goarch)); err == nil {
		return "embedded in this binary (linux/" + goarch + ")"
	}
	return "none for linux/" + goarch + ": this build embeds no agent (scripts/build.sh makes builds that do), and $" + agentEnv + " is not set"
}

// embeddedAgents are the agents this binary carries (package agentbin); a test replaces them.
var embeddedAgents = agentbin.FS

// embeddedAgent writes the agent for goarch from agents to the user's cache directory, once
// per content (the file is named by the hash of what is embedded, written under a temporary
// name and renamed into place, so concurrent processes agree), and returns its path: "" when
// agents has none for goarch.
func embeddedAgent(agents fs.FS, goarch string) (string, error) {
	gz, err := fs.ReadFile(agents, agentbin.Name(goarch))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(gz)
	dir := filepath.Join(cache, "tupper", "agent", hex.EncodeToString(sum[:]))
	path := filepath.Join(dir, "tupper-linux-"+goarch)
	if fi, err := os.Stat(path); err == nil && fi.Mode().IsRegular() {
		return path, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		return "", err
	}
	tmp, err := os.CreateTemp(dir, ".tupper-*")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name()) // after the rename, a name that no longer exists
	_, err = io.Copy(tmp, zr)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o755)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return "", err
	}
	return path, nil
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
