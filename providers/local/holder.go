//go:build linux

package local

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/providers/local/internal/hostbin"
)

// The holder keeps a sandbox's mount namespace (nsworker.go), and so its disk and root file
// system, after Create: a process of the host's sleep, forked from the namespace's thread,
// that does nothing until teardown kills it. The container does not: it pivots into the
// overlay and detaches everything else, so its own namespace no longer shows the disk.
//
// The host reaches the sandbox's files at /proc/<holder>/root/<Home>/sandboxes/<id>/…:
// /proc/PID/root resolves paths in that process's mount namespace, with no setns, and only
// for processes that may ptrace it (root; never another host user, the same as the
// sandbox's directory itself). Snapshots read the writable layer there, and the host reads
// the agent's log there.
//
// It is started through sh, which forks it in the background and exits: it is then the
// child of init (or of the nearest subreaper), which reaps it when it dies, never a zombie
// of the process that made it, whichever process later kills it. Its own session (no
// terminal's signals reach it), "/" as its working directory, no environment, stdio on
// /dev/null, oom_score_adj -1000 (a sandbox filling its memory must not lose its disk), and
// the sandbox's own cgroups once the runtime made them, so that it is accounted with the
// sandbox (one of its pids) and a service manager stopping the cgroup of the process that
// created it does not take the sandbox's disk along.
//
// Its pid and /proc start time are in the record. A sandbox whose holder died keeps
// running (its container has its own copy of the mounts) and is not dead to the reaper; only
// its files are out of the host's reach, and a snapshot of it fails saying so. Teardown
// kills the holder first: every runtime's delete removes the sandbox's cgroups and finds
// them busy while it lives.

// holderExitTimeout bounds how long teardown waits for a killed holder to be gone.
const holderExitTimeout = 5 * time.Second

// holderSeconds is how long the holder sleeps: about 68 years, a number every sleep takes.
const holderSeconds = "2147483647"

// startHolder starts the holder. Call it on the namespace's thread (nsWorker.do).
//
// The holder waits, before it becomes sleep, for hold to be called: until then a pipe whose
// only writer is this process is its standard input, and it exits on reading anything but
// the word hold — end of file included, which is what it reads when this process dies first.
// Call hold once the record names the holder, so that a Create killed in between leaves no
// holder (and so no namespace, no mounts) that nothing records. Whether or not hold is
// called, call done (it closes the pipe).
func startHolder(ctx context.Context) (pid int, start uint64, hold func() error, done func(), err error) {
	sleep, err := hostbin.Find("sleep")
	if err != nil {
		return 0, 0, nil, nil, err
	}
	// The background subshell is the holder: it reads the word from fd 3 (an asynchronous
	// list's own stdin is /dev/null) and execs sleep in its place, keeping its pid. $0 is
	// sleep's path: nothing is quoted into the script.
	const script = `( read -r word <&3 && [ "$word" = hold ] && exec "$0" ` + holderSeconds + ` 3<&- ) </dev/null >/dev/null 2>&1 & echo $!`
	pid, start, gate, err := startDetached(ctx, "the holder", script, []string{sleep}, nil, "")
	if err != nil {
		return 0, 0, nil, nil, err
	}
	done = func() { gate.Close() }
	// It must be in this thread's namespace, whatever happened to the pid meanwhile.
	ours, err := os.Readlink("/proc/thread-self/ns/mnt")
	if err != nil {
		done()
		return 0, 0, nil, nil, err
	}
	if theirs, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/ns/mnt"); err != nil || theirs != ours || procStart(pid) != start {
		done()
		return 0, 0, nil, nil, fmt.Errorf("the holder (pid %d) is not in the sandbox's mount namespace", pid)
	}
	return pid, start, openGate(gate, "hold", "the holder", pid), done, nil
}

// startDetached starts a process that outlives this one (the holder, an egress proxy):
// sh runs script with args ($0, $1, …), which starts it in the background and prints its
// pid; the process is then the child of init (or of the nearest subreaper), which reaps it
// whenever it dies. It gets its own session, "/" as its working directory, no environment,
// files as fds 3, 4, …, and after them the read end of a gate: a pipe whose only writer is
// this process (the returned file). The process is expected to wait on the gate for a word
// (openGate) and to exit on anything else, end of file included — what it reads when this
// process dies first — so a creator that dies before recording it leaves nothing behind.
// what names it in errors; errFile, when set, is a file whose last line explains an exit at
// once. Whether or not the gate is opened, the caller closes it.
func startDetached(ctx context.Context, what, script string, args []string, files []*os.File, errFile string) (pid int, start uint64, gate *os.File, err error) {
	sh, err := hostbin.Find("sh")
	if err != nil {
		return 0, 0, nil, err
	}
	r, wr, err := os.Pipe()
	if err != nil {
		return 0, 0, nil, err
	}
	defer r.Close()
	defer func() {
		if err != nil {
			wr.Close()
		}
	}()
	cmd := exec.CommandContext(ctx, sh, append([]string{"-c", script}, args...)...)
	cmd.ExtraFiles = append(slices.Clone(files), r)
	cmd.Env = []string{}
	cmd.Dir = "/"
	cmd.SysProcAttr = &unix.SysProcAttr{Setsid: true}
	out, err := firstLine(cmd)
	if err != nil {
		return 0, 0, nil, fmt.Errorf("start %s: %w", what, err)
	}
	pid, err = strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil || pid <= 0 {
		return 0, 0, nil, fmt.Errorf("start %s: sh printed %q", what, out)
	}
	if start = procStart(pid); start == 0 {
		why := ""
		if errFile != "" {
			why = ": " + readTail(errFile)
		}
		return 0, 0, nil, fmt.Errorf("%s (pid %d) exited at once%s", what, pid, why)
	}
	return pid, start, wr, nil
}

// firstLine runs cmd and returns the first line it printed, read once it has exited. Its
// standard output and error are pipes handed to it as they are, not copied by goroutines as
// with cmd.Output: the background process a script starts holds them from its fork until its
// own redirections apply, which on a loaded machine can come after the script has exited, and
// exec's Wait then waited for it (and failed the start when its WaitDelay ran out). What the
// script itself wrote is in the pipe when it exits; on failure its standard error, read for
// up to 100 ms, says why.
func firstLine(cmd *exec.Cmd) ([]byte, error) {
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer outR.Close()
	errR, errW, err := os.Pipe()
	if err != nil {
		outW.Close()
		return nil, err
	}
	defer errR.Close()
	cmd.Stdout, cmd.Stderr = outW, errW
	err = cmd.Run()
	outW.Close()
	errW.Close()
	if err != nil {
		errR.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		msg, _ := io.ReadAll(io.LimitReader(errR, 4096))
		return nil, fmt.Errorf("%w: %s", err, bytes.TrimSpace(msg))
	}
	// Up to a newline; the deadline only guards a script that printed none and left a
	// child holding the pipe.
	outR.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(io.LimitReader(outR, 4096)).ReadBytes('\n')
	if err != nil && len(line) == 0 {
		return nil, fmt.Errorf("reading what it printed: %w", err)
	}
	return line, nil
}

// openGate returns the function that tells a process of startDetached to go on: it writes
// word and closes the gate.
func openGate(gate *os.File, word, what string, pid int) func() error {
	return func() error {
		_, err := gate.Write([]byte(word + "\n"))
		gate.Close()
		if err != nil {
			return fmt.Errorf("tell %s (pid %d) to go on: %w", what, pid, err)
		}
		return nil
	}
}

// holderAlive reports whether the sandbox's holder is still the process recorded.
func holderAlive(r *record) bool {
	return r.HolderPID > 0 && procStart(r.HolderPID) == r.HolderStart
}

// stopHolder sends SIGKILL to the sandbox's holder if it is still the process recorded (a
// pidfd pins it between the check and the signal, so a reused pid is never hit). The
// returned function waits, up to timeout, for it to be gone.
func stopHolder(r *record) (wait func(timeout time.Duration)) {
	fd, ok := signalDetached(r.HolderPID, r.HolderStart, unix.SIGKILL)
	if !ok {
		return func(time.Duration) {} // gone, or its pid another process's
	}
	return func(timeout time.Duration) { waitGone(fd, timeout) }
}

// signalDetached sends sig to a process of startDetached if it is still the one started
// (pid and /proc start time; a pidfd pins it between the check and the signal, so a reused
// pid is never hit). It returns the pidfd, for waitGone, and whether the process was there.
func signalDetached(pid int, start uint64, sig unix.Signal) (fd int, ok bool) {
	if pid <= 0 {
		return -1, false
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return -1, false
	}
	if procStart(pid) != start || unix.PidfdSendSignal(fd, sig, nil, 0) != nil {
		unix.Close(fd)
		return -1, false
	}
	return fd, true
}

// waitGone waits, up to timeout, for the process of pidfd fd to exit, and closes fd.
func waitGone(fd int, timeout time.Duration) {
	defer unix.Close(fd)
	// A pidfd becomes readable when its process has exited.
	deadline := time.Now().Add(timeout)
	for {
		ms := int(time.Until(deadline).Milliseconds())
		if ms <= 0 {
			return
		}
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, ms)
		if n > 0 || (err != nil && !errors.Is(err, unix.EINTR)) {
			return
		}
	}
}

// gone reports whether the process of pidfd fd has exited (its pidfd is readable), without
// waiting.
func gone(fd int) bool {
	n, _ := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 0)
	return n > 0
}

// joinCgroups moves pid into the sandbox's cgroups, each that the runtime made.
func joinCgroups(id string, pid int) error {
	n := 0
	for _, d := range cgroupDirs(id) {
		err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("move pid %d into %s: %w", pid, d, err)
		}
		n++
	}
	if n == 0 {
		return errors.New("the runtime made no cgroup for the sandbox")
	}
	return nil
}

// nsPath returns where the host reaches path, a path under the sandbox's directory, as the
// sandbox's mount namespace shows it: below /proc/<holder>/root. For a sandbox from before
// holders, whose mounts are the host's, it is path itself. The holder may die at any time
// after; a caller that must know the path led into the sandbox's namespace checks
// holderAlive again once it has opened or read what it needed (a pid is not reused while its
// process lives, so the holder was there throughout).
func (p *Provider) nsPath(rec *record, path string) (string, error) {
	if rec.HolderPID == 0 {
		return path, nil
	}
	dir := p.lay.dir(rec.ID)
	rel, ok := strings.CutPrefix(path, dir)
	if !ok || (rel != "" && rel[0] != '/') {
		return "", fmt.Errorf("%s is not under sandbox %s's directory", path, rec.ID)
	}
	if !holderAlive(rec) {
		return "", provider.Errorf(provider.CodeUnavailable,
			"sandbox %s's disk is out of the host's reach: the process holding its mounts (pid %d) is gone; the sandbox runs on, but its files cannot be snapshotted",
			rec.ID, rec.HolderPID)
	}
	// A symlink on the way to Home would resolve from the host's root, not the holder's:
	// resolve them here (the directories above the sandbox's are the same in both).
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", err
	}
	return "/proc/" + strconv.Itoa(rec.HolderPID) + "/root" + real + rel, nil
}

// diskDir returns where the host reaches the sandbox's disk (its tmpfs; see nsPath), after
// checking that it is the tmpfs there.
func (p *Provider) diskDir(rec *record) (string, error) {
	d, err := p.nsPath(rec, p.lay.disk(rec.ID))
	if err != nil {
		return "", err
	}
	var st unix.Statfs_t
	if err := unix.Statfs(d, &st); err != nil || st.Type != unix.TMPFS_MAGIC {
		if rec.HolderPID != 0 && !holderAlive(rec) {
			return p.nsPath(rec, p.lay.disk(rec.ID)) // says the holder is gone
		}
		return "", provider.Errorf(provider.CodeUnavailable, "sandbox %s's disk is not mounted", rec.ID)
	}
	return d, nil
}
