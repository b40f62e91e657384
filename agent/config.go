package agent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/tupper-dev/tupper/agent/spec"
)

// Config is the agent's configuration. The zero value is valid: no extra
// environment, the user the agent runs as, the user's home as working
// directory, no deadlines, no access token and no hiding.
//
// On disk it is a JSON object (see LoadConfig); unknown fields are an error:
//
//	{
//	  "env": {"LANG": "C.UTF-8"},        // applied to every process, before the request's envs
//	  "defaultUser": "root",             // user when a request names none (no Basic auth header)
//	  "defaultWorkdir": "/workspace",    // cwd / path when a request gives an empty one
//	  "deadlineUnix": 1767225600,        // absolute lifetime deadline, unix seconds; 0 = none
//	  "idleTimeoutSeconds": 600,         // exit after this long idle; 0 = never
//	  "accessToken": "",                 // when set, requests need X-Access-Token (E2B rules)
//	  "hidePaths": ["/.tupper/run", "/.tupper/bin/tupper"], // hidden from commands
//	  "bootIDFile": "/.tupper/run/boot_id", // a boot id of the sandbox's own, at each start
//	  "endFile": "/.tupper/run/ended",    // why the deadline or idle timeout ended it
//	  "protocol": 2                      // the host's agent protocol (spec.Version); 0 = unchecked
//	}
type Config struct {
	// Env is set in every process the agent starts, after HOME, USER,
	// LOGNAME and PATH and before the request's own envs.
	Env map[string]string `json:"env,omitempty"`
	// DefaultUser is the OS user for requests that do not name one. Empty
	// means the user the agent runs as.
	DefaultUser string `json:"defaultUser,omitempty"`
	// DefaultWorkdir is used when a process has no cwd or a filesystem
	// request has an empty path. Empty means the user's home directory.
	DefaultWorkdir string `json:"defaultWorkdir,omitempty"`
	// DeadlineUnix is the absolute lifetime deadline in unix seconds; 0 means
	// none. At the deadline the agent kills every process and Serve returns.
	// POST /tupper/deadline changes it at run time.
	DeadlineUnix int64 `json:"deadlineUnix,omitempty"`
	// IdleTimeoutSeconds ends the agent like the deadline once no process it
	// started is running and no request has been in flight for that long;
	// 0 means never. POST /tupper/deadline can change it at run time.
	IdleTimeoutSeconds int64 `json:"idleTimeoutSeconds,omitempty"`
	// AccessToken, when set, is required in X-Access-Token on every request
	// except GET /health; GET and POST /files also accept a signed URL.
	AccessToken string `json:"accessToken,omitempty"`
	// HidePaths are covered, in the mount namespace commands start in, by an
	// empty read-only tmpfs (directories) or a read-only bind of /dev/null
	// (other files), and commands run without CAP_SYS_ADMIN. Non-empty
	// HidePaths need root with CAP_SYS_ADMIN and CAP_SETPCAP; see the package
	// documentation, "Hiding", for how each runtime behaves.
	HidePaths []string `json:"hidePaths,omitempty"`
	// HideFromAgent covers HidePaths in the agent's own mount namespace too, once it is
	// serving (its socket is bound and its binary running, so it needs neither path again).
	// Then the file API cannot reach them either, not even through a symlink a command
	// planted. Set it only where the agent's mount namespace is the sandbox's own (PID 1 of a
	// container, as providers/local runs it), never on a host.
	HideFromAgent bool `json:"hideFromAgent,omitempty"`
	// BootIDFile gives the sandbox a boot id of its own, new at each start of the agent: the
	// agent writes a random one (a version 4 UUID, as the kernel's) to this file at start,
	// replacing what it held, and binds it read-only over /proc/sys/kernel/random/boot_id
	// in its own mount namespace before it starts anything, so every command reads it there
	// (without it, a container reads the host's, which never changes). The agent runs as
	// PID 1, so each boot of the sandbox (a resume without memory among them) is a new id.
	// Set it only where the agent's mount namespace is the sandbox's own, never on a host;
	// it needs root with CAP_SYS_ADMIN.
	BootIDFile string `json:"bootIDFile,omitempty"`
	// EndFile is a file the agent empties at start and writes the reason to when its
	// deadline or idle timeout ends it (ErrDeadline, ErrIdle), so that the host can tell
	// such an end from a crash. It is opened at start, before anything is hidden.
	EndFile string `json:"endFile,omitempty"`
	// Protocol is the agent protocol version the host speaks (spec.Version of the host's
	// build). An agent of another version refuses to start, saying both, rather than
	// misread the host's requests; 0 skips the check (a config written by hand).
	Protocol int `json:"protocol,omitempty"`
	// CommandCgroup, when set, is an open, writable "tasks" file of a cgroup v1 pids
	// cgroup, below the sandbox's own, that every command starts in (with whatever it
	// starts): the agent puts the one thread it starts commands from there. The commands
	// then share that cgroup's pids.max, and the agent's own threads the rest of the
	// sandbox's, so a command that fills its limit (a fork bomb) cannot leave the agent
	// without the thread the Go runtime then needs, which would end the agent and the
	// sandbox with it. The agent closes the file before any command starts. The host opens
	// it (as root: the kernel checks the opener's credentials) and hands it over as an
	// inherited descriptor (tupper agent --command-cgroup-fd).
	CommandCgroup *os.File `json:"-"`
	// ExecPath is ignored. It named the binary the agent re-executed as
	// "agent-exec" for each command when hiding; it is still accepted so
	// that existing config files parse.
	ExecPath string `json:"execPath,omitempty"`
}

// LoadConfig reads a JSON config file. Unknown fields and trailing data are errors.
func LoadConfig(path string) (Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("agent config: %w", err)
	}
	return ParseConfig(b)
}

// ParseConfig decodes a JSON config. Unknown fields and trailing data are errors.
func ParseConfig(b []byte) (Config, error) {
	var c Config
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return Config{}, fmt.Errorf("agent config: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return Config{}, errors.New("agent config: trailing data after the JSON object")
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// Validate reports a config the agent cannot run with.
func (c Config) Validate() error {
	if c.Protocol != 0 && c.Protocol != spec.Version {
		return fmt.Errorf("agent config: the host speaks agent protocol %d and this agent protocol %d: run the tupper binary of the host program's release as the agent", c.Protocol, spec.Version)
	}
	if c.DeadlineUnix < 0 {
		return errors.New("agent config: deadlineUnix must not be negative")
	}
	if c.IdleTimeoutSeconds < 0 {
		return errors.New("agent config: idleTimeoutSeconds must not be negative")
	}
	if c.DefaultWorkdir != "" && !filepath.IsAbs(c.DefaultWorkdir) {
		return fmt.Errorf("agent config: defaultWorkdir %q is not absolute", c.DefaultWorkdir)
	}
	if c.BootIDFile != "" && !filepath.IsAbs(c.BootIDFile) {
		return fmt.Errorf("agent config: bootIDFile %q is not absolute", c.BootIDFile)
	}
	if c.EndFile != "" && !filepath.IsAbs(c.EndFile) {
		return fmt.Errorf("agent config: endFile %q is not absolute", c.EndFile)
	}
	for _, p := range c.HidePaths {
		if !filepath.IsAbs(p) || filepath.Clean(p) == "/" {
			return fmt.Errorf("agent config: hidePaths entry %q must be an absolute path other than /", p)
		}
	}
	for k := range c.Env {
		if k == "" || bytes.ContainsAny([]byte(k), "=\x00") {
			return fmt.Errorf("agent config: invalid env name %q", k)
		}
	}
	return nil
}
