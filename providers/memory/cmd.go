package memory

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"
	"time"

	"mvdan.cc/sh/v3/expand"
	"mvdan.cc/sh/v3/interp"
	"mvdan.cc/sh/v3/syntax"

	"github.com/tupper-dev/tupper/providers/memory/internal/coreutils"
)

// cmd is one running command of the shell's: a utility (package coreutils, or one of the
// shell's own) or a builtin the call handler took over. Its Cmd's FS is the sandbox's.
type cmd struct {
	coreutils.Cmd
	sh  *shell
	env expand.Environ
}

// utilFunc is one of the shell's own utilities or builtins: it gets the arguments after the
// name and returns the exit status.
type utilFunc func(c *cmd, args []string) int

// utilities are the shell's own utilities (utilities.go); the others are package
// coreutils'. Filled in init, since they start commands of the shell.
var utilities map[string]utilFunc

// externalBuiltins are interpreter builtins that also exist as programs on a Linux system,
// so which and command -v find them and env can run them.
var externalBuiltins = []string{"echo", "printf", "test", "[", "true", "false", "pwd", "kill"}

func isExternal(name string) bool {
	return utilities[name] != nil || coreutils.Has(name) || slices.Contains(externalBuiltins, name)
}

func (c *cmd) fs() *memFS { return c.sh.sb.fs }

func (c *cmd) getenv(name string) string { return c.env.Get(name).String() }

// Signals, by number and name.
const (
	sigKILL = 9
	sigTERM = 15
)

var signals = []struct {
	num  int
	name string
}{
	{1, "HUP"}, {2, "INT"}, {3, "QUIT"}, {4, "ILL"}, {5, "TRAP"}, {6, "ABRT"}, {7, "BUS"},
	{8, "FPE"}, {9, "KILL"}, {10, "USR1"}, {11, "SEGV"}, {12, "USR2"}, {13, "PIPE"},
	{14, "ALRM"}, {15, "TERM"}, {17, "CHLD"}, {18, "CONT"}, {19, "STOP"}, {20, "TSTP"},
	{21, "TTIN"}, {22, "TTOU"}, {23, "URG"}, {28, "WINCH"},
}

func signalName(n int) string {
	for _, s := range signals {
		if s.num == n {
			return "SIG" + s.name
		}
	}
	return "SIG" + strconv.Itoa(n)
}

func parseSignal(s string) (int, bool) {
	if n, err := strconv.Atoi(s); err == nil {
		if n == 0 {
			return 0, true
		}
		for _, sg := range signals {
			if sg.num == n {
				return n, true
			}
		}
		return 0, false
	}
	s = strings.TrimPrefix(strings.ToUpper(s), "SIG")
	for _, sg := range signals {
		if sg.name == s {
			return sg.num, true
		}
	}
	return 0, false
}

// ignoredSignal reports whether a signal's default action does not end a process.
func ignoredSignal(n int) bool {
	switch n {
	case 17, 18, 19, 20, 21, 22, 23, 28:
		return true
	}
	return false
}

// builtinOverrides implement the builtins the call handler takes over.
var builtinOverrides = map[string]utilFunc{
	"kill":    utilKill,
	"type":    utilType,
	"which":   utilWhich,
	"command": utilCommandV,
	"pwd":     utilPwdP,
	"fail": func(c *cmd, args []string) int {
		c.Name = "sh"
		c.Errorf("%s", strings.Join(args, " "))
		return 1
	},
}

// utilKill sends signals to jobs of the sandbox's process table. Every signal that ends a
// process stops the whole job (a negative pid names the same job as its group).
func utilKill(c *cmd, args []string) int {
	sig := sigTERM
	if len(args) == 0 {
		return c.Usage(2, "usage: kill [-s sigspec | -n signum | -sigspec] pid ... or kill -l [sigspec]")
	}
	switch a := args[0]; {
	case a == "-l" || a == "-L":
		if len(args) > 1 {
			for _, s := range args[1:] {
				if n, err := strconv.Atoi(s); err == nil {
					if n > 128 {
						n -= 128
					}
					fmt.Fprintln(c.Out(), strings.TrimPrefix(signalName(n), "SIG"))
				} else if n, ok := parseSignal(s); ok {
					fmt.Fprintln(c.Out(), n)
				} else {
					return c.Usage(1, "%s: invalid signal specification", s)
				}
			}
			return 0
		}
		var names []string
		for _, s := range signals {
			names = append(names, s.name)
		}
		fmt.Fprintln(c.Out(), strings.Join(names, " "))
		return 0
	case a == "-s" || a == "-n":
		if len(args) < 2 {
			return c.Usage(2, "%s: option requires an argument", a)
		}
		n, ok := parseSignal(args[1])
		if !ok {
			return c.Usage(1, "%s: invalid signal specification", args[1])
		}
		sig, args = n, args[2:]
	case a == "--":
		args = args[1:]
	case strings.HasPrefix(a, "-") && len(a) > 1:
		n, ok := parseSignal(a[1:])
		if !ok {
			return c.Usage(1, "%s: invalid signal specification", a[1:])
		}
		sig, args = n, args[1:]
	}
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	if len(args) == 0 {
		return c.Usage(2, "usage: kill [-s sigspec | -n signum | -sigspec] pid ...")
	}
	status := 0
	for _, a := range args {
		pid, err := strconv.Atoi(a)
		if err != nil {
			c.Errorf("%s: arguments must be process or job IDs", a)
			status = 1
			continue
		}
		if pid < 0 {
			pid = -pid
		}
		j := c.sh.sb.lookupJob(pid)
		if j == nil || pid == 0 {
			c.Errorf("(%s) - No such process", a)
			status = 1
			continue
		}
		if sig == 0 || ignoredSignal(sig) {
			continue
		}
		j.signal(sig)
	}
	return status
}

// resolveCommand says what running name would run: a keyword, a function, a builtin or a
// file, and for the last its path.
func (c *cmd) resolveCommand(name string) (kind, path string) {
	switch {
	case syntax.IsKeyword(name):
		return "keyword", ""
	case c.sh.isFunc(name):
		return "function", ""
	case strings.Contains(name, "/"):
		p := c.Abs(name)
		if fi, err := c.fs().Stat(p, true); err == nil && fi.kind == kindFile && fi.mode.Perm()&0o111 != 0 {
			return "file", name
		}
		return "", ""
	case interp.IsBuiltin(name):
		return "builtin", ""
	}
	if p, _ := c.lookPath(name); p != "" {
		return "file", p
	}
	if isExternal(name) {
		return "file", "/usr/bin/" + name
	}
	return "", ""
}

func (c *cmd) externalPath(name string) string {
	if strings.Contains(name, "/") {
		_, p := c.resolveCommand(name)
		return p
	}
	if p, _ := c.lookPath(name); p != "" {
		return p
	}
	if isExternal(name) {
		return "/usr/bin/" + name
	}
	return ""
}

func utilType(c *cmd, args []string) int {
	mode := ""
	for len(args) > 0 && strings.HasPrefix(args[0], "-") {
		switch args[0] {
		case "-t", "-p", "-P":
			mode = args[0]
		case "--":
			args = args[1:]
			goto names
		default:
			return c.Usage(2, "%s: invalid option", args[0])
		}
		args = args[1:]
	}
names:
	status := 0
	for _, name := range args {
		kind, p := c.resolveCommand(name)
		if mode == "-p" || mode == "-P" {
			if mode == "-P" && kind != "" && kind != "file" {
				p = c.externalPath(name)
			}
			if p == "" {
				status = 1
			} else if kind == "file" || mode == "-P" {
				fmt.Fprintln(c.Out(), p)
			}
			continue
		}
		switch kind {
		case "":
			if mode != "-t" {
				c.Errorf("%s: not found", name)
			}
			status = 1
		case "keyword":
			c.typeLine(mode, name, "keyword", name+" is a shell keyword")
		case "function":
			c.typeLine(mode, name, "function", name+" is a function")
		case "builtin":
			c.typeLine(mode, name, "builtin", name+" is a shell builtin")
		case "file":
			c.typeLine(mode, name, "file", name+" is "+p)
		}
	}
	return status
}

func (c *cmd) typeLine(mode, name, kind, long string) {
	if mode == "-t" {
		fmt.Fprintln(c.Out(), kind)
		return
	}
	fmt.Fprintln(c.Out(), long)
}

func utilCommandV(c *cmd, args []string) int {
	verbose := false
	for len(args) > 0 && strings.HasPrefix(args[0], "-") && args[0] != "-" {
		switch args[0] {
		case "-v":
		case "-V":
			verbose = true
		case "-p":
		case "--":
			args = args[1:]
			goto names
		default:
			return c.Usage(2, "%s: invalid option", args[0])
		}
		args = args[1:]
	}
names:
	if verbose {
		c.Name = "command"
		return utilType(c, args)
	}
	status := 0
	for _, name := range args {
		switch kind, p := c.resolveCommand(name); kind {
		case "":
			status = 1
		case "file":
			fmt.Fprintln(c.Out(), p)
		default:
			fmt.Fprintln(c.Out(), name)
		}
	}
	return status
}

func utilWhich(c *cmd, args []string) int {
	all := false
	var names []string
	for _, a := range args {
		if a == "-a" {
			all = true
			continue
		}
		names = append(names, a)
	}
	if len(names) == 0 {
		return 1
	}
	status := 0
	for _, name := range names {
		var found []string
		if strings.Contains(name, "/") {
			if p := c.externalPath(name); p != "" {
				found = append(found, p)
			}
		} else {
			for _, dir := range strings.Split(c.getenv("PATH"), ":") {
				if dir == "" {
					continue
				}
				p := c.Abs(dir + "/" + name)
				if fi, err := c.fs().Stat(p, true); err == nil && fi.kind == kindFile && fi.mode.Perm()&0o111 != 0 {
					found = append(found, dir+"/"+name)
				}
			}
			if isExternal(name) && !slices.Contains(found, "/usr/bin/"+name) {
				found = append(found, "/usr/bin/"+name)
			}
		}
		if len(found) == 0 {
			status = 1
			continue
		}
		if !all {
			found = found[:1]
		}
		for _, p := range found {
			fmt.Fprintln(c.Out(), p)
		}
	}
	return status
}

func utilPwdP(c *cmd, args []string) int {
	p, err := c.fs().RealPath(c.Dir, true)
	if err != nil {
		return c.FSFail(c.Dir, err)
	}
	fmt.Fprintln(c.Out(), p)
	return 0
}

// cryptoRead fills p from the system's random source (for /dev/random and /dev/urandom).
func cryptoRead(p []byte) (int, error) { return rand.Read(p) }

func isNotExist(err error) bool { return errors.Is(err, fs.ErrNotExist) }

func nowTime() time.Time { return time.Now() }
