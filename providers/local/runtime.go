//go:build linux

package local

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Runtime names. runc and crun make containers with the host kernel (crun is a C runtime,
// CLI-compatible with runc for what the provider calls, and faster to start); runsc is
// gVisor's user-space kernel.
const (
	RuntimeRunc  = "runc"
	RuntimeRunsc = "runsc"
	RuntimeCrun  = "crun"
)

// ociRuntime drives one OCI runtime binary with its state under root.
type ociRuntime struct {
	name string // RuntimeRunc, RuntimeRunsc or RuntimeCrun
	path string // the binary
	root string // --root, under Home
}

// globalArgs are the flags before the subcommand. runsc takes sandbox-wide options there;
// network is "none" or "host" for runsc and ignored for runc and crun.
func (r ociRuntime) globalArgs(network string) []string {
	args := []string{"--root", r.root}
	if r.name == RuntimeRunsc {
		if network == "" {
			network = "none"
		}
		args = append(args,
			"--network="+network,
			// The agent creates its socket in a bind-mounted host directory; gVisor only
			// makes that a real host socket with host-uds=create.
			"--host-uds=create",
			// Writes go to our overlay's upper layer (a bounded tmpfs), not to sentry memory.
			"--overlay2=none",
			// Apply the spec's seccomp profile inside the sandbox too.
			"--oci-seccomp",
		)
	}
	return args
}

// run executes the runtime and returns its combined output in the error on failure.
func (r ociRuntime) run(ctx context.Context, network string, args ...string) error {
	_, err := r.output(ctx, network, args...)
	return err
}

// output runs the runtime and returns what it printed. Its standard output and error are
// memory files, not pipes: exec's Wait would wait for every process holding a pipe's write
// end to close it, and on a loaded machine one did longer than its WaitDelay (CI: `runsc kill
// ID USR2` of a ten-child runsc fork failed with "WaitDelay expired before I/O complete"
// after runsc had done its work). A file is read once the runtime has exited, whoever else
// holds it.
func (r ociRuntime) output(ctx context.Context, network string, args ...string) ([]byte, error) {
	full := append(r.globalArgs(network), args...)
	cmd := exec.CommandContext(ctx, r.path, full...)
	stdout, err := memFile(r.name + "-stdout")
	if err != nil {
		return nil, err
	}
	defer stdout.Close()
	stderr, err := memFile(r.name + "-stderr")
	if err != nil {
		return nil, err
	}
	defer stderr.Close()
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.WaitDelay = time.Second
	runErr := cmd.Run()
	out, err := readAll(stdout)
	if err != nil {
		return nil, err
	}
	if runErr != nil {
		msg, _ := readAll(stderr)
		if len(bytes.TrimSpace(msg)) == 0 {
			msg = out
		}
		return nil, fmt.Errorf("%s %s: %w: %s", r.name, strings.Join(args, " "), runErr, lastLines(strings.TrimSpace(string(msg)), 3))
	}
	return out, nil
}

// memFile is an anonymous file in memory (memfd), closed on exec but for the descriptor a
// child gets it as.
func memFile(name string) (*os.File, error) {
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("memfd: %w", err)
	}
	return os.NewFile(uintptr(fd), name), nil
}

// readAll reads a file a child wrote, from its start, at most 1 MiB.
func readAll(f *os.File) ([]byte, error) {
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	return io.ReadAll(io.LimitReader(f, 1<<20))
}

// start launches the container detached. With createOnly it stops after `create` (the init
// waits; call resume with `start`), so the caller can plumb the network namespace first.
// The container's stdio goes to logPath; its init inherits files too, from descriptor 3 on
// (--preserve-fds).
func (r ociRuntime) start(ctx context.Context, network, id, bundle, pidFile, logPath string, createOnly bool, files ...*os.File) error {
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	args := []string{"run", "--detach"}
	if createOnly {
		args = []string{"create"}
	}
	args = append(args, "--bundle", bundle, "--pid-file", pidFile)
	if len(files) > 0 {
		args = append(args, "--preserve-fds", strconv.Itoa(len(files)))
	}
	args = append(args, id)
	full := append(r.globalArgs(network), args...)
	cmd := exec.CommandContext(ctx, r.path, full...)
	cmd.ExtraFiles = files
	// The container inherits these: it must not hold a pipe of ours open, or Wait would
	// block until the sandbox ends.
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return err
	}
	defer devnull.Close()
	cmd.Stdin, cmd.Stdout, cmd.Stderr = devnull, logf, logf
	cmd.WaitDelay = time.Second
	if err := cmd.Run(); err != nil {
		b, _ := os.ReadFile(logPath)
		return fmt.Errorf("%s %s: %w: %s", r.name, args[0], err, lastLines(strings.TrimSpace(string(b)), 3))
	}
	return nil
}

// restore starts the container from a checkpoint image (runsc only) instead of booting
// it, detached, as start does.
func (r ociRuntime) restore(ctx context.Context, network, id, bundle, pidFile, logPath, image string) error {
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	args := []string{"restore", "--image-path", image, "--detach", "--bundle", bundle, "--pid-file", pidFile, id}
	cmd := exec.CommandContext(ctx, r.path, append(r.globalArgs(network), args...)...)
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return err
	}
	defer devnull.Close()
	// As with start: the sandbox inherits these and must not hold a pipe of ours.
	cmd.Stdin, cmd.Stdout, cmd.Stderr = devnull, logf, logf
	cmd.WaitDelay = time.Second
	if err := cmd.Run(); err != nil {
		b, _ := os.ReadFile(logPath)
		return fmt.Errorf("%s restore: %w: %s", r.name, err, lastLines(strings.TrimSpace(string(b)), 3))
	}
	return nil
}

// kill sends sig to the container's init.
func (r ociRuntime) kill(ctx context.Context, network, id, sig string) error {
	return r.run(ctx, network, "kill", id, sig)
}

// remove force-deletes the container (killing what is left) and forgets it. A container the
// runtime does not know is not an error.
func (r ociRuntime) remove(ctx context.Context, network, id string) error {
	err := r.run(ctx, network, "delete", "--force", id)
	if err != nil && isNotExist(err) {
		return nil
	}
	return err
}

type runtimeState struct {
	ID     string `json:"id"`
	Pid    int    `json:"pid"`
	Status string `json:"status"` // creating, created, running, paused, stopped
}

func (r ociRuntime) state(ctx context.Context, network, id string) (runtimeState, error) {
	out, err := r.output(ctx, network, "state", id)
	if err != nil {
		return runtimeState{}, err
	}
	var s runtimeState
	if err := json.Unmarshal(out, &s); err != nil {
		return runtimeState{}, fmt.Errorf("%s state %s: %w", r.name, id, err)
	}
	return s, nil
}

// isNotExist reports whether err says the runtime does not know the container: runc says
// "container does not exist", runsc "...not found", crun "error opening file
// `ROOT/ID/status`: No such file or directory".
func isNotExist(err error) bool {
	s := strings.ToLower(err.Error())
	return strings.Contains(s, "does not exist") || strings.Contains(s, "not found") ||
		strings.Contains(s, "no such file")
}

func lastLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// installRuntimes is what installs the runtimes: the provider's Install hint.
const installRuntimes = "scripts/setup.sh (apt-get install runc crun; gVisor's runsc built from its Go module)"
