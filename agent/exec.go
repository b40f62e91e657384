package agent

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// ExecMain implements "tupper agent-exec". The agent starts it, in a new
// mount namespace (CLONE_NEWNS) and its own session, when Config.HidePaths
// is set. args are what follows "agent-exec":
//
//	[--uid N] [--gid N] [--groups N,N,...] [--hide PATH]... -- PROGRAM ARGV0 [ARG]...
//
// It makes every mount private (so nothing propagates back to the agent's
// namespace), covers each existing hidden path with an empty read-only
// tmpfs (directories) or a read-only bind mount of /dev/null (other files),
// switches to the given groups, gid and uid, and execve's PROGRAM with the
// rest as argv and its own environment. It drops nothing else. It returns
// only on failure, with the exit status to use (127, as a shell would).
func ExecMain(args []string) int {
	fail := func(format string, a ...any) int {
		fmt.Fprintf(os.Stderr, "tupper agent-exec: "+format+"\n", a...)
		return 127
	}
	var (
		hide        []string
		uid, gid    = -1, -1
		groups      []int
		groupsGiven bool
		prog        string
		argv        []string
	)
	for i := 0; i < len(args); i++ {
		flag := args[i]
		if flag == "--" {
			if i+1 >= len(args) {
				return fail("%v", errUsage)
			}
			prog, argv = args[i+1], args[i+2:]
			break
		}
		if i+1 >= len(args) {
			return fail("%v", errUsage)
		}
		val := args[i+1]
		i++
		switch flag {
		case "--hide":
			hide = append(hide, val)
		case "--uid", "--gid":
			n, err := strconv.Atoi(val)
			if err != nil || n < 0 {
				return fail("bad %s %q", flag, val)
			}
			if flag == "--uid" {
				uid = n
			} else {
				gid = n
			}
		case "--groups":
			groupsGiven = true
			for _, g := range strings.Split(val, ",") {
				if g == "" {
					continue
				}
				n, err := strconv.Atoi(g)
				if err != nil || n < 0 {
					return fail("bad group %q", g)
				}
				groups = append(groups, n)
			}
		default:
			return fail("%v", errUsage)
		}
	}
	if prog == "" || len(argv) == 0 {
		return fail("%v", errUsage)
	}
	if len(hide) > 0 {
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			return fail("make mounts private: %v", err)
		}
		for _, p := range hide {
			if err := hidePath(p); err != nil {
				return fail("hide %s: %v", p, err)
			}
		}
	}
	if groupsGiven {
		if err := syscall.Setgroups(groups); err != nil {
			return fail("setgroups: %v", err)
		}
	}
	if gid >= 0 {
		if err := syscall.Setgid(gid); err != nil {
			return fail("setgid: %v", err)
		}
	}
	if uid >= 0 {
		if err := syscall.Setuid(uid); err != nil {
			return fail("setuid: %v", err)
		}
	}
	err := unix.Exec(prog, argv, os.Environ())
	return fail("exec %s: %v", prog, err)
}

func hidePath(p string) error {
	fi, err := os.Lstat(p)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.IsDir() {
		return unix.Mount("tmpfs", p, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=4k,nr_inodes=1,mode=0555")
	}
	if err := unix.Mount("/dev/null", p, "", unix.MS_BIND, ""); err != nil {
		return err
	}
	return unix.Mount("", p, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NOEXEC, "")
}
