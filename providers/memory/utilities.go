package memory

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/tupper-dev/tupper/providers/memory/internal/coreutils"
)

// The shell's own utilities, which start scripts and commands of the shell; every other
// utility is package coreutils'.
func init() {
	utilities = map[string]utilFunc{"sh": utilSh, "bash": utilSh, "env": utilEnv, "printenv": utilPrintenv}
}

// utilSh is sh: `sh -c SCRIPT [NAME [ARGS...]]`, `sh FILE [ARGS...]`, or a script on stdin.
// Options -e, -u, -x, -f, -v, -n and -o NAME are passed to the interpreter; -l, -i and -s
// are accepted.
func utilSh(c *cmd, args []string) int {
	var command *string
	var opts []string
	fromStdin := false
	i := 0
loop:
	for ; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--" || a == "-":
			i++
			break loop
		case a == "-o" || a == "+o":
			if i+1 >= len(args) {
				return c.Usage(2, "%s: option requires an argument", a)
			}
			opts = append(opts, a, args[i+1])
			i++
		case a == "--login" || a == "--norc" || a == "--noprofile" || a == "--posix":
		case len(a) > 1 && (a[0] == '-' || a[0] == '+'):
			for _, f := range a[1:] {
				switch f {
				case 'c':
					command = new(string)
				case 'l', 'i', 'p':
				case 's':
					fromStdin = true
				case 'e', 'u', 'x', 'f', 'v', 'n', 'a', 'C':
					opts = append(opts, string(a[0])+string(f))
				default:
					return c.Usage(2, "-%c: invalid option", f)
				}
			}
		default:
			break loop
		}
	}
	rest := args[i:]
	s := c.script()
	s.opts = opts
	switch {
	case command != nil:
		if len(rest) == 0 {
			return c.Usage(2, "-c: option requires an argument")
		}
		s.src, rest = rest[0], rest[1:]
		if len(rest) > 0 {
			s.name, s.params = rest[0], rest[1:]
		}
	case len(rest) > 0 && !fromStdin:
		data, err := c.fs().ReadFile(c.Abs(rest[0]))
		if err != nil {
			c.Errorf("%s: %s", rest[0], coreutils.ErrText(err))
			return 127
		}
		s.src, s.name, s.params = string(data), rest[0], rest[1:]
	default:
		data, err := io.ReadAll(c.StdinReader())
		if err != nil {
			return 1
		}
		s.src, s.params = string(data), rest
		s.stdin = nil
	}
	return c.sh.run(c.Ctx, s)
}

// commandArgs starts a command as env does.
func (c *cmd) runCommand(argv []string, env map[string]string) int {
	s := c.script()
	if env != nil {
		s.env = env
	}
	return c.sh.runArgv(c.Ctx, argv, s)
}

// utilEnv is env: [-i] [-u NAME] [NAME=VALUE...] [COMMAND [ARG...]].
func utilEnv(c *cmd, args []string) int {
	env := exported(c.env)
	i := 0
	for ; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-i" || a == "-" || a == "--ignore-environment":
			env = map[string]string{}
		case a == "-u" || a == "--unset":
			if i+1 >= len(args) {
				return c.Usage(125, "option requires an argument -- 'u'")
			}
			delete(env, args[i+1])
			i++
		case strings.HasPrefix(a, "--unset="):
			delete(env, strings.TrimPrefix(a, "--unset="))
		case a == "--":
			i++
			goto assignments
		case strings.HasPrefix(a, "-") && len(a) > 1:
			return c.Usage(125, "invalid option -- '%s'", strings.TrimLeft(a, "-"))
		default:
			goto assignments
		}
	}
assignments:
	for ; i < len(args); i++ {
		name, val, ok := strings.Cut(args[i], "=")
		if !ok || name == "" {
			break
		}
		env[name] = val
	}
	if i == len(args) {
		w := c.Out()
		for _, k := range slices.Sorted(maps.Keys(env)) {
			fmt.Fprintf(w, "%s=%s\n", k, env[k])
		}
		return 0
	}
	return c.runCommand(args[i:], env)
}

func utilPrintenv(c *cmd, args []string) int {
	env := exported(c.env)
	if len(args) == 0 {
		for _, k := range slices.Sorted(maps.Keys(env)) {
			fmt.Fprintf(c.Out(), "%s=%s\n", k, env[k])
		}
		return 0
	}
	status := 0
	for _, name := range args {
		if v, ok := env[name]; ok {
			fmt.Fprintln(c.Out(), v)
		} else {
			status = 1
		}
	}
	return status
}

// utilFS is the sandbox's file system as package coreutils sees it.
type utilFS struct{ *memFS }

func (f utilFS) Stat(p string, follow bool) (*coreutils.FileInfo, error) {
	fi, err := f.memFS.Stat(p, follow)
	if err != nil {
		return nil, err
	}
	return fi.util(), nil
}

func (f utilFS) ReadDir(p string) ([]*coreutils.FileInfo, error) {
	list, err := f.memFS.ReadDir(p)
	if err != nil {
		return nil, err
	}
	out := make([]*coreutils.FileInfo, len(list))
	for i, fi := range list {
		out[i] = fi.util()
	}
	return out, nil
}

func (f utilFS) Walk(root string, followRoot bool) ([]coreutils.WalkEntry, error) {
	list, err := f.memFS.Walk(root, followRoot)
	if err != nil {
		return nil, err
	}
	out := make([]coreutils.WalkEntry, len(list))
	for i, e := range list {
		out[i] = coreutils.WalkEntry{Path: e.path, Rel: e.rel, Depth: e.depth, Info: e.info.util()}
	}
	return out, nil
}

func (f utilFS) Open(p string, flag int, perm uint32) (io.ReadWriteCloser, error) {
	h, err := f.memFS.Open(p, flag, perm)
	if err != nil {
		return nil, err
	}
	return h, nil
}

func (fi *fileInfo) util() *coreutils.FileInfo {
	return &coreutils.FileInfo{
		Name: fi.name, Size: fi.size, Mode: fi.mode, Perm: fi.perm(), ModTime: fi.mtime,
		Target: fi.target, Nlink: fi.nlink,
	}
}
