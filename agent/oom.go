//go:build linux

package agent

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/tupper-dev/tupper/agent/spec/process"
)

// A command killed by SIGKILL (or a shell that exited 137 because its child was) while the
// sandbox's memory cgroup counted an OOM kill was killed by the kernel's OOM killer: nothing
// else tells the parent of a SIGKILLed process who sent it. The agent reads the count when each command starts and when it ends. Under
// runc and crun the sandbox's own memory cgroup is mounted read-only at /sys/fs/cgroup
// (memory.oom_control's oom_kill on cgroup v1, memory.events' on v2). Under runsc the
// host's OOM killer ends the whole sandbox instead, which the provider reports (a command
// there never ends with this). Two commands that end by SIGKILL at the moment one of them
// is OOM-killed are both reported OOM-killed: the count is the sandbox's, not the command's.

// oomFile is the file with the sandbox's oom_kill count, or "" when there is none.
var oomFile = sync.OnceValue(func() string {
	var cands []string
	// The agent's own cgroup first (a host or a container whose cgroups show their paths),
	// then the root of the mount (a container whose own cgroup is mounted there).
	if b, err := os.ReadFile("/proc/self/cgroup"); err == nil {
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			f := strings.SplitN(line, ":", 3)
			if len(f) != 3 {
				continue
			}
			switch {
			case f[0] == "0" && f[1] == "":
				cands = append(cands, filepath.Join("/sys/fs/cgroup", f[2], "memory.events"))
			case strings.Contains(","+f[1]+",", ",memory,"):
				cands = append(cands, filepath.Join("/sys/fs/cgroup/memory", f[2], "memory.oom_control"))
			}
		}
	}
	cands = append(cands, "/sys/fs/cgroup/memory/memory.oom_control", "/sys/fs/cgroup/memory.events")
	for _, c := range cands {
		if _, ok := readOOMKills(c); ok {
			return c
		}
	}
	return ""
})

// oomKills is the sandbox's OOM kill count so far (0 when it cannot be read).
func oomKills() int64 {
	f := oomFile()
	if f == "" {
		return 0
	}
	n, _ := readOOMKills(f)
	return n
}

// readOOMKills reads the oom_kill line of a cgroup file.
func readOOMKills(path string) (int64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, " "); ok && k == "oom_kill" {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// killed reports whether a process ended by SIGKILL, or exited with 137 as a shell does
// whose command SIGKILL ended (sh -c 'a | b', the usual command).
func killed(ws unix.WaitStatus) bool {
	return ws.Signaled() && ws.Signal() == unix.SIGKILL || ws.Exited() && ws.ExitStatus() == 128+int(unix.SIGKILL)
}

// markOOMKilled says in end that the OOM killer ended the process: its status stays envd's
// ("signal: killed"), its error begins with OOMKilledError.
func markOOMKilled(end *process.ProcessEvent_EndEvent) {
	msg := OOMKilledError + ": the kernel's OOM killer ended it: the sandbox reached its memory limit"
	end.Error = &msg
}
