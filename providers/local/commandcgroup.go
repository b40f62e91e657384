//go:build linux

package local

import (
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
)

// Commands under runc and crun run in a pids cgroup of their own, "commands", below the
// sandbox's: the agent moves the one thread it starts commands from into it (cgroup v1
// places threads one by one, and a child is charged to its parent thread's cgroup), so
// every command and everything it starts is counted there, against Config.PidsLimit, and the
// agent's own threads (and the holder's) against the sandbox's cgroup, which has
// agentPidsReserve more. Without it a command that fills the limit (a fork bomb, or just
// many processes) leaves the agent unable to make the thread the Go runtime asks for at
// some point, and the runtime ends the agent, and with it the sandbox and everything in it.
//
// The host makes the cgroup before the runtime starts the container and hands the agent its
// tasks file, opened here as root, as an inherited descriptor (--preserve-fds): the kernel
// checks the credentials of whoever opened it, and nothing of the cgroup file system is
// mounted in the sandbox. runsc is left out: there the limit counts the sentry's host
// threads, not the sandbox's processes (docs/security.md, finding 7). So are hosts whose
// pids controller is on cgroup v2 only, which places threads only in threaded cgroups; their
// commands share the sandbox's limit with the agent, as before.

// commandCgroupName is the commands' cgroup below a sandbox's pids cgroup.
const commandCgroupName = "commands"

// agentPidsReserve is how many processes and threads the sandbox's pids cgroup allows
// beyond its commands' limit: the agent's threads (about ten when idle, more with many
// blocking file operations at once) and the holder.
const agentPidsReserve = 64

// commandCgroupFD is the descriptor the agent finds the commands' tasks file at: the first
// after standard input, output and error (runc and crun's --preserve-fds 1, with no
// LISTEN_FDS).
const commandCgroupFD = 3

// pidsV1Root is the cgroup v1 pids hierarchy, where there is one.
const pidsV1Root = "/sys/fs/cgroup/pids"

var pidsV1 = sync.OnceValue(func() bool {
	var st unix.Statfs_t
	return unix.Statfs(pidsV1Root, &st) == nil && st.Type == unix.CGROUP_SUPER_MAGIC
})

// commandCgroup reports whether a sandbox of runtime rt has its commands in a pids cgroup
// of their own.
func commandCgroup(rt string) bool {
	return (rt == RuntimeRunc || rt == RuntimeCrun) && pidsV1()
}

// commandCgroupDir is the commands' pids cgroup of sandbox id.
func commandCgroupDir(id string) string {
	return filepath.Join(pidsV1Root, "tupper", id, commandCgroupName)
}

// withCommandCgroup is a sandbox's cgroup directory d in the order they are removed in: the
// commands' cgroup below it first, since a cgroup with one below cannot be removed.
func withCommandCgroup(d string) []string {
	return []string{filepath.Join(d, commandCgroupName), d}
}

// openCommandCgroup makes the commands' cgroup of sandbox id (and the sandbox's own, which
// the runtime then uses as it finds it), limits it to pids and returns its tasks file, open
// for writing, for the agent.
func openCommandCgroup(id string, pids int64) (*os.File, error) {
	dir := commandCgroupDir(id)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	limit := "max" // no limit, as the runtimes read 0 in the spec
	if pids > 0 {
		limit = strconv.FormatInt(pids, 10)
	}
	if err := os.WriteFile(filepath.Join(dir, "pids.max"), []byte(limit), 0); err != nil {
		return nil, err
	}
	return os.OpenFile(filepath.Join(dir, "tasks"), os.O_WRONLY, 0)
}
