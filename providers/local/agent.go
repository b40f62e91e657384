//go:build linux

package local

import (
	"bytes"
	"context"
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	agentspec "github.com/tupper-dev/tupper/agent/spec"
	"github.com/tupper-dev/tupper/provider"
)

// How the provider finds the agent every sandbox runs as its PID 1.
//
// The agent is the tupper command ("tupper agent"). A program that uses the SDK is usually
// not tupper itself, and binding that program into a sandbox as its agent would start the
// program again in there. So the provider looks for tupper, in this order, and takes the
// first that qualifies:
//
//  1. Config.AgentPath;
//  2. $TUPPER_AGENT;
//  3. the running program, when it is the tupper command (its build info, written by the Go
//     linker, names cmd/tupper as its main package);
//  4. "tupper" in the running program's directory;
//  5. "tupper" on PATH.
//
// 1 and 2 are what the user chose: when one is set and is not a working agent, that is the
// error, and nothing else is tried. 4 and 5 are taken only when their build info names
// cmd/tupper (a file merely called tupper is never run); 1, 2, 4 and 5 must answer
// "agent --protocol" with this build's agent protocol version (package agent/spec). The
// running program comes before the files on disk because it is exactly this build.
//
// The binary taken is copied, once per content, to Home/agent/<first 16 hex digits of its
// SHA-256>/tupper: root-owned, mode 0755 in 0711 directories, written to a temporary file,
// checked against the hash, and renamed into place. Sandboxes bind the copy, so where the
// original lives (a `go run` build directory, a 0700 home) never matters, and replacing
// the original does not change the agent of sandboxes started from it.
//
// What was learned about a file (its hash, whether it is tupper, its protocol) is kept in
// Home/agent/seen/, keyed by its device, inode, size and change times, so a process that
// starts many times hashes and probes a binary once, not at every start.

// agentEnv names the agent binary when Config.AgentPath is empty.
const agentEnv = "TUPPER_AGENT"

const (
	tupperModule  = "github.com/tupper-dev/tupper"
	tupperCommand = tupperModule + "/cmd/tupper"
)

// agentKeep is how long a copy of an agent that no sandbox's bundle names is kept after a
// provider last used it; newer copies replace it on upgrades and rebuilds.
const agentKeep = time.Hour

// agentState is the agent chosen by a Provider, found on first need.
type agentState struct {
	mu   sync.Mutex
	path string // the copy under Home/agent
	err  error
}

// agentPath is the host binary bound into every sandbox as its agent: the copy under
// Home/agent of the binary findAgent chose, found once per Provider. Each call marks the
// copy as in use (its directory's time), and a copy removed meanwhile, after the provider
// sat unused for agentKeep, is found and installed again.
func (p *Provider) agentPath() (string, error) {
	a := &p.agent
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.err != nil {
		return "", a.err
	}
	if a.path != "" {
		now := time.Now()
		if os.Chtimes(filepath.Dir(a.path), now, now) == nil {
			return a.path, nil
		}
	}
	a.path, a.err = p.findAgent()
	return a.path, a.err
}

// agentCandidate is a binary that may be the agent.
type agentCandidate struct {
	path     string // the file to read; /proc/self/exe for the running program
	where    string // how it was found, for messages
	explicit bool   // named by the user: its failure is the answer
	self     bool   // the running program, known to be tupper of this build
}

// agentCandidates lists the binaries to try, in order (see the top of this file).
func agentCandidates(configured string) []agentCandidate {
	if configured != "" {
		return []agentCandidate{{path: configured, where: "Config.AgentPath", explicit: true}}
	}
	if env := os.Getenv(agentEnv); env != "" {
		return []agentCandidate{{path: env, where: "$" + agentEnv, explicit: true}}
	}
	var out []agentCandidate
	exe, _ := os.Executable()
	if runningTupper() {
		out = append(out, agentCandidate{path: "/proc/self/exe", where: "this program, " + exe, self: true})
	}
	if exe != "" {
		out = append(out, agentCandidate{path: filepath.Join(filepath.Dir(exe), "tupper"), where: "beside this program"})
	}
	if path, err := exec.LookPath("tupper"); err == nil {
		if abs, err := filepath.Abs(path); err == nil {
			out = append(out, agentCandidate{path: abs, where: "on PATH"})
		}
	}
	return out
}

// runningTupper reports whether the running program is the tupper command.
func runningTupper() bool {
	bi, ok := debug.ReadBuildInfo()
	return ok && bi.Path == tupperCommand
}

// agentFacts is what the provider learned about one binary, cached in Home/agent/seen.
type agentFacts struct {
	Key      string `json:"key"`    // the file's identity and change times (statKey)
	Sum      string `json:"sha256"` // of the content
	Size     int64  `json:"size"`
	Tupper   bool   `json:"tupper"`           // its build info names cmd/tupper
	Protocol int    `json:"protocol"`         // what "agent --protocol" answered; 0: no answer
	Answer   string `json:"answer,omitempty"` // the first line it printed instead
}

// findAgent chooses the agent binary and installs a copy of it under Home/agent.
func (p *Provider) findAgent() (string, error) {
	// Home and Home/agent first, so that nothing below makes them private.
	if err := p.makeAgentDirs(); err != nil {
		return "", provider.Errorf(provider.CodeUnavailable, "local: %v", err)
	}
	var passed []string
	for _, c := range agentCandidates(p.cfg.AgentPath) {
		facts, err := p.agentFacts(c)
		if err == nil {
			err = facts.usable(c)
		}
		if err != nil {
			if errors.Is(err, errNoFile) && !c.explicit {
				continue // noAgentError says where it looked
			}
			if c.explicit {
				return "", provider.Errorf(provider.CodeUnavailable, "local: the agent binary %s (%s): %v", c.path, c.where, err)
			}
			passed = append(passed, fmt.Sprintf("%s %s", c.path, err))
			continue
		}
		path, err := p.installAgent(c.path, facts)
		if err != nil {
			return "", provider.Errorf(provider.CodeUnavailable, "local: installing the agent %s (%s) into %s: %v", c.path, c.where, p.cfg.Home, err)
		}
		return path, nil
	}
	return "", noAgentError(passed)
}

// usable says why a binary cannot be the agent, or nil.
func (f agentFacts) usable(c agentCandidate) error {
	if !c.explicit && !c.self && !f.Tupper {
		return errors.New("is not the tupper command (its build info names another main package)")
	}
	switch {
	case f.Protocol == agentspec.Version:
		return nil
	case f.Protocol == 0:
		msg := "does not answer `agent --protocol`: it is not a tupper agent, or one from before that flag"
		if f.Answer != "" {
			msg += fmt.Sprintf(" (it said %q)", f.Answer)
		}
		return errors.New(msg)
	default:
		return fmt.Errorf("speaks agent protocol %d and this program protocol %d: use the tupper binary of this program's release (%s)", f.Protocol, agentspec.Version, installHint())
	}
}

// noAgentError is the one error of a program that found no agent: what to do about it,
// then where it looked.
func noAgentError(passed []string) error {
	msg := fmt.Sprintf("local: no tupper binary to run as the sandboxes' agent: sandboxes run `tupper agent` as their PID 1, and this program is not tupper. Install it with %s, or name one with Config.AgentPath or %s",
		installHint(), agentEnv)
	if exe, err := os.Executable(); err == nil {
		if _, err := os.Stat(filepath.Join(filepath.Dir(exe), "tupper")); errors.Is(err, fs.ErrNotExist) {
			passed = append(passed, "no tupper beside this program in "+filepath.Dir(exe))
		}
	}
	if _, err := exec.LookPath("tupper"); err != nil {
		passed = append(passed, "none on PATH")
	}
	if len(passed) > 0 {
		msg += " (" + strings.Join(passed, "; ") + ")"
	}
	return provider.Errorf(provider.CodeUnavailable, "%s", msg)
}

// installHint is the command that installs the tupper binary matching this program: the
// release of the tupper module it was built with, or a build from the checkout it uses.
func installHint() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		bi = nil
	}
	return installHintFor(bi)
}

// installHintFor is installHint for a program with build info bi (nil: unknown).
func installHintFor(bi *debug.BuildInfo) string {
	const install = "CGO_ENABLED=0 GOBIN=/usr/local/bin go install "
	if bi == nil {
		return "`" + install + tupperCommand + "@latest`"
	}
	if bi.Main.Path == tupperModule {
		return "`" + install + "./cmd/tupper` in this checkout of " + tupperModule
	}
	for _, m := range bi.Deps {
		if m.Path != tupperModule {
			continue
		}
		if r := m.Replace; r != nil {
			if r.Version == "" || r.Version == "(devel)" { // replaced by a directory
				return "`cd " + r.Path + " && " + install + "./cmd/tupper`"
			}
			return "`" + install + r.Path + "/cmd/tupper@" + r.Version + "`"
		}
		if m.Version != "" && m.Version != "(devel)" {
			return "`" + install + tupperCommand + "@" + m.Version + "`"
		}
	}
	return "`" + install + tupperCommand + "@latest`"
}

// statKey identifies a file's content cheaply: its device and inode, size, and modification
// and change times (a change time cannot be set back by the file's owner).
func statKey(st *unix.Stat_t) string {
	return fmt.Sprintf("%d:%d:%d:%d.%d:%d.%d", st.Dev, st.Ino, st.Size, st.Mtim.Sec, st.Mtim.Nsec, st.Ctim.Sec, st.Ctim.Nsec)
}

// errNoFile is a candidate that is not there.
var errNoFile = errors.New("does not exist")

func (p *Provider) agentDir() string { return filepath.Join(p.cfg.Home, "agent") }

// makeAgentDirs makes Home (when missing) and Home/agent mode 0711: the sandboxes' root, an
// unprivileged host uid, must reach the copies below.
func (p *Provider) makeAgentDirs() error {
	if err := os.MkdirAll(p.cfg.Home, 0o711); err != nil {
		return err
	}
	if err := os.Mkdir(p.agentDir(), 0o711); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return os.Chmod(p.agentDir(), 0o711)
}

// agentFacts returns what is known about candidate c, learning it (hash, build info, the
// protocol probe) when the cache does not have it.
func (p *Provider) agentFacts(c agentCandidate) (agentFacts, error) {
	f, err := os.Open(c.path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return agentFacts{}, errNoFile
		}
		return agentFacts{}, err
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return agentFacts{}, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Mode&0o111 == 0 {
		return agentFacts{}, errors.New("is not an executable file")
	}
	key := statKey(&st)
	cache := filepath.Join(p.agentDir(), "seen", hashString(key)[:32]+".json")
	if b, err := os.ReadFile(cache); err == nil {
		var facts agentFacts
		if json.Unmarshal(b, &facts) == nil && facts.Key == key {
			return facts, nil
		}
	}
	facts := agentFacts{Key: key}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return agentFacts{}, err
	}
	facts.Sum, facts.Size = hex.EncodeToString(h.Sum(nil)), st.Size
	if bi, err := buildinfo.Read(f); err == nil && bi.Path == tupperCommand {
		facts.Tupper = true
	}
	switch {
	case c.self:
		facts.Protocol = agentspec.Version
	case c.explicit || facts.Tupper:
		// Only a binary the user named, or one whose build info says it is tupper, is run.
		facts.Protocol, facts.Answer = probeProtocol(c.path)
	}
	if b, err := json.Marshal(facts); err == nil {
		writeFileAtomic(cache, b) // a failure costs the next process a probe
	}
	return facts, nil
}

// probeProtocol runs "path agent --protocol" and returns the version it printed, or 0 and
// what it said instead.
func probeProtocol(path string) (int, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, "agent", agentspec.ProbeFlag)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	err := cmd.Run()
	first, _, _ := strings.Cut(out.String(), "\n")
	first = strings.TrimSpace(first)
	if err == nil {
		if v, ok := strings.CutPrefix(first, agentspec.ProbeReply+" "); ok {
			if n, err := strconv.Atoi(v); err == nil && n > 0 {
				return n, ""
			}
		}
	}
	if len(first) > 200 {
		first = first[:200]
	}
	if first == "" && err != nil {
		first = err.Error()
	}
	return 0, first
}

// installAgent copies src (with facts) to Home/agent/<hash>/tupper unless it is there, and
// returns the copy's path.
func (p *Provider) installAgent(src string, facts agentFacts) (string, error) {
	dir := filepath.Join(p.agentDir(), facts.Sum[:16])
	dst := filepath.Join(dir, "tupper")
	now := time.Now()
	var st unix.Stat_t
	if unix.Lstat(dst, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG && st.Mode&0o7777 == 0o755 &&
		st.Size == facts.Size && int(st.Uid) == os.Geteuid() {
		os.Chtimes(dir, now, now) // in use: not to be collected
		return dst, nil
	}
	if err := os.Mkdir(dir, 0o711); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", err
	}
	if err := os.Chmod(dir, 0o711); err != nil {
		return "", err
	}
	removeStaleTemps(dir)
	in, err := os.Open(src)
	if err != nil {
		return "", err
	}
	defer in.Close()
	tmp, err := os.CreateTemp(dir, ".tupper-*")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name()) // after the rename, a no-op
	h := sha256.New()
	if _, err := io.Copy(tmp, io.TeeReader(in, h)); err != nil {
		tmp.Close()
		return "", err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != facts.Sum {
		tmp.Close()
		return "", fmt.Errorf("it changed while it was copied (sha256 %s, then %s); try again", facts.Sum[:16], got[:16])
	}
	if err := tmp.Chmod(0o755); err != nil {
		tmp.Close()
		return "", err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return "", err
	}
	if err := tmp.Close(); err != nil {
		return "", err
	}
	// Read back what was written before it takes the final name.
	if got, err := hashFile(tmp.Name()); err != nil || got != facts.Sum {
		return "", fmt.Errorf("the copy %s does not read back as written (%v)", tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return "", err
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	p.collectAgents(facts.Sum[:16])
	return dst, nil
}

// collectAgents removes the copies of other agents that no sandbox's bundle names and that no
// provider used for agentKeep, and cached facts as old.
func (p *Provider) collectAgents(keep string) {
	ents, err := os.ReadDir(p.agentDir())
	if err != nil {
		return
	}
	var bundles [][]byte
	ids, _ := p.lay.ids()
	for _, id := range ids {
		if b, err := os.ReadFile(bundleConfigPath(p.lay.dir(id))); err == nil {
			bundles = append(bundles, b)
		}
	}
	old := time.Now().Add(-agentKeep)
	for _, e := range ents {
		name := e.Name()
		if name == keep || !e.IsDir() || len(name) != 16 || !isHex(name) {
			continue
		}
		fi, err := e.Info()
		if err != nil || fi.ModTime().After(old) {
			continue
		}
		dir := filepath.Join(p.agentDir(), name)
		used := false
		for _, b := range bundles {
			if bytes.Contains(b, []byte(dir+"/")) {
				used = true
				break
			}
		}
		if !used {
			os.RemoveAll(dir)
		}
	}
	seen := filepath.Join(p.agentDir(), "seen")
	if ents, err := os.ReadDir(seen); err == nil {
		for _, e := range ents {
			if fi, err := e.Info(); err == nil && fi.ModTime().Before(old) {
				os.Remove(filepath.Join(seen, e.Name()))
			}
		}
	}
}

// removeStaleTemps removes what copies that died halfway left in dir.
func removeStaleTemps(dir string) {
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if fi, err := e.Info(); err == nil && strings.HasPrefix(e.Name(), ".tupper-") && time.Since(fi.ModTime()) > 10*time.Minute {
			os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}

func hashFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func hashString(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

func isHex(s string) bool {
	_, err := hex.DecodeString(s)
	return err == nil
}

// writeFileAtomic writes b to path, mode 0600, through a temporary file in its directory
// (made 0700 when missing): readers see the old content or the new, never a part.
func writeFileAtomic(path string, b []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after the rename, a no-op
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
