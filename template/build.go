package template

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/tupper-dev/tupper/internal/flock"
	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/sandbox"
	"github.com/tupper-dev/tupper/template/dockerfile"
)

// A Runner makes the sandboxes a build's steps run in: each step in a new sandbox whose root
// file system is exactly a stack of layers from the store, with nothing of the provider's
// added to its writable layer, so that what the step changed is the layer Diff returns.
type Runner interface {
	// Start makes a sandbox for one build step.
	Start(ctx context.Context, box BoxSpec) (BuildBox, error)
}

// BoxSpec is the sandbox of one build step.
type BoxSpec struct {
	// Layers are its root (diff IDs, lowest first).
	Layers []string
	// Network is "all" or "none".
	Network provider.NetworkMode
	// Mirror is the package mirror of the template the stage started from (Template.Mirror),
	// or nil: the step's sandbox may reach it as that template's sandboxes may.
	Mirror *Mirror
	// Size is the step sandbox's machine size (zero: the provider's default). A step's new
	// files stay in its sandbox's memory until it ends, so a step that installs a lot needs
	// more than the default.
	Size provider.Size
}

// A BuildBox is a sandbox a build step runs in.
type BuildBox interface {
	// Exec runs a command as provider.Instance.Exec does.
	Exec(ctx context.Context, req provider.ExecRequest) (provider.ExecResult, error)
	// ReadFile reads a file of the sandbox's root (resolved inside it).
	ReadFile(ctx context.Context, p string) ([]byte, error)
	// IsDir reports whether p is a directory in the sandbox's root (symlinks resolved inside it).
	IsDir(ctx context.Context, p string) (bool, error)
	// AddTar unpacks a tar stream into the sandbox's root at dir (made when missing), paths
	// and symlinks resolved inside the root, owners as the tar says.
	AddTar(ctx context.Context, dir string, r io.Reader) error
	// TarFrom writes p of the sandbox's root (a file, or a directory and all below it) as a
	// tar whose names are relative to p's parent.
	TarFrom(ctx context.Context, p string, w io.Writer) error
	// Diff writes what the sandbox changed in its root as an OCI layer tar (whiteouts for
	// what it removed). The provider's own mount points and bound files are not in it.
	Diff(ctx context.Context, w io.Writer) error
	// Destroy removes the sandbox.
	Destroy(ctx context.Context) error
}

// BuildOptions configure Build.
type BuildOptions struct {
	Name string   // the template to make (or replace)
	Tags []string // other names for it
	// ID names this build in the template it writes (Template.Build); "" makes one up.
	ID string
	// Context is the build context directory: what COPY and ADD read. Dockerfile is the
	// Dockerfile's path, relative to Context unless absolute ("" is Context/Dockerfile), or
	// DockerfileText the file itself.
	Context        string
	Dockerfile     string
	DockerfileText string
	BuildArgs      map[string]string
	Target         string               // build up to this stage; "" the last
	Network        provider.NetworkMode // of RUN steps; "" is all
	NoCache        bool                 // run every step even when the cache has it
	Runner         Runner
	// Pull imports an image that a FROM names and the store does not have (nil: such a FROM is
	// an error).
	Pull func(ctx context.Context, ref string) (*Template, error)
	// Progress receives the build's events, in order (nil: none).
	Progress func(BuildEvent)
	// Size is the machine size of the RUN steps' sandboxes (zero: the provider's default).
	Size provider.Size
	// StartCmd and ReadyCmd, when set, are the template's start and ready commands (Config),
	// which a Dockerfile has no instruction for (E2B's setStartCmd and setReadyCmd).
	StartCmd, ReadyCmd string
}

// BuildEvent is one event of a build (provider.TemplateBuilder's, this package's type).
type BuildEvent = provider.BuildEvent

// BuildError is a failed build step.
type BuildError = provider.BuildError

// stageState is a stage's file system and configuration as the build goes.
type stageState struct {
	name   string
	layers []string
	cfg    Config
	shell  []string
	args   map[string]string // ARGs declared in this stage, with their values
	key    string            // the cache key of the state: parent key and every step so far
	mirror *Mirror           // the FROM template's (Template.Mirror), kept by its descendants
}

func (st *stageState) lookup(k string) (string, bool) {
	if v, ok := st.args[k]; ok {
		return v, true
	}
	for i := len(st.cfg.Env) - 1; i >= 0; i-- {
		if name, v, _ := strings.Cut(st.cfg.Env[i], "="); name == k {
			return v, true
		}
	}
	return "", false
}

func (st *stageState) setEnv(k, v string) {
	out := st.cfg.Env[:0:0]
	for _, e := range st.cfg.Env {
		if name, _, _ := strings.Cut(e, "="); name != k {
			out = append(out, e)
		}
	}
	st.cfg.Env = append(out, k+"="+v)
}

func chainKey(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		fmt.Fprintf(h, "%d:%s\n", len(p), p)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Build builds a template from a Dockerfile: each FROM starts from an image (pulled through
// opts.Pull when the store lacks it), another template, an earlier stage or scratch; each RUN
// runs in a sandbox of opts.Runner and what it changed becomes a layer; COPY and ADD add the
// context's files the same way; the other instructions set the template's defaults. A step
// whose parent, instruction and inputs are unchanged is taken from the cache.
func (s *Store) Build(ctx context.Context, opts BuildOptions) (*Template, error) {
	if err := ValidName(opts.Name); err != nil {
		return nil, err
	}
	if opts.Runner == nil {
		return nil, provider.Errorf(provider.CodeInvalidArgument, "build: no runner")
	}
	bc := &buildCtx{s: s, opts: opts}
	if opts.Context != "" {
		var err error
		if bc.ctxDir, err = os.OpenRoot(opts.Context); err != nil {
			return nil, provider.Errorf(provider.CodeInvalidArgument, "build context: %v", err)
		}
		defer bc.ctxDir.Close()
	}
	text := opts.DockerfileText
	if text == "" {
		p := opts.Dockerfile
		if p == "" {
			p = "Dockerfile"
		}
		var b []byte
		var err error
		switch {
		case filepath.IsAbs(p):
			b, err = os.ReadFile(p)
		case bc.ctxDir != nil:
			// Inside the context, through its root: a symbolic link there never leads out.
			b, err = readRootFile(bc.ctxDir, p)
		default:
			b, err = os.ReadFile(p)
		}
		if err != nil {
			return nil, provider.Errorf(provider.CodeInvalidArgument, "build: %v", err)
		}
		text = string(b)
	}
	df, err := dockerfile.Parse(text)
	if err != nil {
		return nil, provider.Errorf(provider.CodeInvalidArgument, "%w", err)
	}
	if bc.ctxDir != nil {
		if b, err := bc.ctxDir.ReadFile(".dockerignore"); err == nil {
			if bc.ignore, err = dockerfile.ParseIgnore(string(b)); err != nil {
				return nil, provider.Errorf(provider.CodeInvalidArgument, "%w", err)
			}
		}
	}
	// Shared with imports, exclusive with Prune: a layer a step has just added names no
	// template until the build writes its own, and Prune must not take it meanwhile.
	lock, err := flock.AcquireShared(ctx, s.storeLock())
	if err != nil {
		return nil, fmt.Errorf("template store: %w", err)
	}
	defer lock.Unlock()
	return bc.run(ctx, df)
}

type buildCtx struct {
	s      *Store
	opts   BuildOptions
	ctxDir *os.Root
	ignore *dockerfile.Ignore
	step   int
	steps  int
	stages map[string]*stageState
	byIdx  []*stageState
}

// ensureOptions are what a step that names a template (FROM, COPY --from) resolves it with:
// a built-in template it makes is built by this build's runner, its progress shown as the
// step's output.
func (bc *buildCtx) ensureOptions() EnsureOptions {
	return EnsureOptions{Runner: bc.opts.Runner, Output: writerFunc(func(p []byte) (int, error) {
		bc.emit(BuildEvent{Kind: "output", Output: string(p)})
		return len(p), nil
	})}
}

// writerFunc is an io.Writer of a function.
type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func (bc *buildCtx) emit(ev BuildEvent) {
	if bc.opts.Progress != nil {
		ev.Step, ev.Steps = bc.step, bc.steps
		bc.opts.Progress(ev)
	}
}

func (bc *buildCtx) run(ctx context.Context, df *dockerfile.File) (*Template, error) {
	// Global ARGs: usable in FROM, and redeclared by name inside a stage.
	global := map[string]string{}
	for _, in := range df.Args {
		words, err := in.Expand(func(k string) (string, bool) { v, ok := global[k]; return v, ok })
		if err != nil {
			return nil, provider.Errorf(provider.CodeInvalidArgument, "%w", err)
		}
		for _, w := range words {
			name, def, hasDef := strings.Cut(w, "=")
			if v, ok := bc.opts.BuildArgs[name]; ok {
				global[name] = v
			} else if hasDef {
				global[name] = def
			}
		}
	}
	last := len(df.Stages) - 1
	if bc.opts.Target != "" {
		last = -1
		for i, st := range df.Stages {
			if st.Name == strings.ToLower(bc.opts.Target) {
				last = i
			}
		}
		if last < 0 {
			return nil, provider.Errorf(provider.CodeInvalidArgument, "build: no stage named %q", bc.opts.Target)
		}
	}
	stages := df.Stages[:last+1]
	for _, st := range stages {
		bc.steps += 1 + len(st.Body)
	}
	bc.stages = map[string]*stageState{}
	var cur *stageState
	for i, st := range stages {
		bc.step++
		bc.emit(BuildEvent{Kind: "step", Line: st.From.Line, Instruction: st.From.Original})
		var err error
		if cur, err = bc.from(ctx, st, global); err != nil {
			return nil, bc.fail(st.From, 0, "", err)
		}
		bc.emit(BuildEvent{Kind: "done", Line: st.From.Line, Instruction: st.From.Original})
		for _, in := range st.Body {
			bc.step++
			if err := bc.instruction(ctx, cur, in, global); err != nil {
				var be *BuildError
				if errors.As(err, &be) {
					bc.emit(BuildEvent{Kind: "error", Line: in.Line, Instruction: in.Original, Output: be.Error()})
					return nil, buildErr(be)
				}
				return nil, bc.fail(in, 0, "", err)
			}
		}
		if st.Name != "" {
			bc.stages[st.Name] = cur
		}
		bc.stages[strconv.Itoa(i)] = cur
	}
	t := &Template{
		Name:   bc.opts.Name,
		Tags:   bc.opts.Tags,
		Layers: cur.layers,
		Config: cur.cfg,
		Source: "Dockerfile",
		Build:  bc.opts.ID,
		Mirror: cur.mirror,
	}
	if t.Build == "" {
		var b [8]byte
		rand.Read(b[:])
		t.Build = "bld_" + hex.EncodeToString(b[:])
	}
	if bc.opts.StartCmd != "" {
		t.Config.StartCmd = bc.opts.StartCmd
	}
	if bc.opts.ReadyCmd != "" {
		t.Config.ReadyCmd = bc.opts.ReadyCmd
	}
	if bc.opts.Context != "" {
		t.Source = "Dockerfile in " + bc.opts.Context
	}
	if err := bc.s.Put(t); err != nil {
		return nil, err
	}
	return t, nil
}

func (bc *buildCtx) fail(in dockerfile.Instruction, code int, output string, err error) error {
	be := &BuildError{Line: in.Line, Instruction: in.Original, ExitCode: code, Output: output, Err: err}
	bc.emit(BuildEvent{Kind: "error", Line: in.Line, Instruction: in.Original, Output: be.Error()})
	return buildErr(be)
}

// buildErr gives a failed step the code of its cause; a command that failed, or a mistake in
// the Dockerfile, is the input's fault (invalid_argument).
func buildErr(be *BuildError) error {
	c := provider.CodeOf(be.Err)
	if be.Err == nil || c == provider.CodeInternal {
		c = provider.CodeInvalidArgument
	}
	return provider.Errorf(c, "%w", be)
}

func (bc *buildCtx) from(ctx context.Context, st dockerfile.Stage, global map[string]string) (*stageState, error) {
	words, err := st.From.Expand(func(k string) (string, bool) { v, ok := global[k]; return v, ok })
	if err != nil {
		return nil, err
	}
	base := words[0]
	state := &stageState{name: st.Name, args: map[string]string{}}
	switch {
	case base == "scratch":
		state.key = chainKey("scratch")
		return state, nil
	case bc.stages[strings.ToLower(base)] != nil:
		prev := bc.stages[strings.ToLower(base)]
		state.layers = append([]string(nil), prev.layers...)
		state.cfg = cloneConfig(prev.cfg)
		state.shell = prev.shell
		state.key = prev.key
		state.mirror = prev.mirror
		return state, nil
	}
	// A template's name or tag ("python:3.12"), or a built-in one, made now if need be.
	t, err := bc.s.Ensure(ctx, base, bc.ensureOptions())
	if provider.CodeOf(err) == provider.CodeNotFound {
		if bc.opts.Pull == nil {
			return nil, provider.Errorf(provider.CodeNotFound, "FROM %s: no template or stage of that name, and this build cannot pull images", base)
		}
		t, err = bc.opts.Pull(ctx, base)
	}
	if err != nil {
		return nil, err
	}
	state.layers = append([]string(nil), t.Layers...)
	state.cfg = cloneConfig(t.Config)
	state.mirror = t.Mirror
	cfgJSON, _ := json.Marshal(t.Config)
	state.key = chainKey(append([]string{"from"}, append(t.Layers, string(cfgJSON))...)...)
	return state, nil
}

func cloneConfig(c Config) Config {
	c.Env = append([]string(nil), c.Env...)
	c.Entrypoint = append([]string(nil), c.Entrypoint...)
	c.Cmd = append([]string(nil), c.Cmd...)
	c.ExposedPorts = append([]string(nil), c.ExposedPorts...)
	if c.Labels != nil {
		l := make(map[string]string, len(c.Labels))
		for k, v := range c.Labels {
			l[k] = v
		}
		c.Labels = l
	}
	return c
}

func (bc *buildCtx) instruction(ctx context.Context, st *stageState, in dockerfile.Instruction, global map[string]string) error {
	words, err := in.Expand(st.lookup)
	if err != nil {
		return err
	}
	configStep := func() {
		st.key = chainKey(st.key, in.Cmd, strings.Join(words, "\x00"), fmt.Sprint(in.JSON))
		bc.emit(BuildEvent{Kind: "step", Line: in.Line, Instruction: in.Original})
		bc.emit(BuildEvent{Kind: "done", Line: in.Line, Instruction: in.Original})
	}
	switch in.Cmd {
	case "ARG":
		for _, w := range words {
			name, def, hasDef := strings.Cut(w, "=")
			if v, ok := bc.opts.BuildArgs[name]; ok {
				st.args[name] = v
			} else if v, ok := global[name]; ok && !hasDef {
				st.args[name] = v
			} else if hasDef {
				st.args[name] = def
			}
		}
		// The values, not only the names, decide what later steps are.
		var vals []string
		for _, w := range words {
			name, _, _ := strings.Cut(w, "=")
			vals = append(vals, name+"="+st.args[name])
		}
		words = vals
		configStep()
	case "ENV":
		for _, w := range words {
			k, v, _ := strings.Cut(w, "=")
			st.setEnv(k, v)
		}
		configStep()
	case "LABEL":
		if st.cfg.Labels == nil {
			st.cfg.Labels = map[string]string{}
		}
		for _, w := range words {
			k, v, _ := strings.Cut(w, "=")
			st.cfg.Labels[k] = v
		}
		configStep()
	case "EXPOSE":
		for _, w := range words {
			port, proto, _ := strings.Cut(w, "/")
			if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 || proto != "" && proto != "tcp" && proto != "udp" {
				return provider.Errorf(provider.CodeInvalidArgument, "EXPOSE %q: use PORT or PORT/tcp or PORT/udp", w)
			}
			if proto == "" {
				w += "/tcp"
			}
			st.cfg.ExposedPorts = append(st.cfg.ExposedPorts, w)
		}
		configStep()
	case "USER":
		st.cfg.User = words[0]
		configStep()
	case "CMD", "ENTRYPOINT":
		argv := words
		if !in.JSON {
			argv = append(append([]string(nil), st.shellOrDefault()...), words[0])
		}
		if in.Cmd == "CMD" {
			st.cfg.Cmd = argv
		} else {
			st.cfg.Entrypoint = argv
			st.cfg.Cmd = nil // as Docker: ENTRYPOINT resets a CMD inherited from the base
		}
		configStep()
	case "SHELL":
		st.shell = words
		configStep()
	case "WORKDIR":
		dir := words[0]
		if !path.IsAbs(dir) {
			dir = path.Join("/", st.cfg.WorkingDir, dir)
		}
		st.cfg.WorkingDir = path.Clean(dir)
		// The directory is made (root's) when missing, as docker build does; an image without
		// a shell needs no mkdir of its own for it.
		return bc.layerStep(ctx, st, in, []string{st.cfg.WorkingDir}, nil, func(box BuildBox, out io.Writer) error {
			return box.AddTar(ctx, st.cfg.WorkingDir, bytes.NewReader(emptyTar))
		})
	case "RUN":
		return bc.runStep(ctx, st, in, words)
	case "COPY", "ADD":
		return bc.copyStep(ctx, st, in, words)
	default:
		return provider.Errorf(provider.CodeInvalidArgument, "%s is not supported", in.Cmd)
	}
	return nil
}

func (st *stageState) shellOrDefault() []string {
	if len(st.shell) > 0 {
		return st.shell
	}
	return []string{"/bin/sh", "-c"}
}

// execEnv is a RUN's environment: the stage's ENV and its ARG values.
func (st *stageState) execEnv() map[string]string {
	env := map[string]string{}
	for _, e := range st.cfg.Env {
		k, v, _ := strings.Cut(e, "=")
		env[k] = v
	}
	for k, v := range st.args {
		if _, ok := env[k]; !ok {
			env[k] = v
		}
	}
	return env
}

func (bc *buildCtx) runStep(ctx context.Context, st *stageState, in dockerfile.Instruction, words []string) error {
	var command string
	switch {
	case in.JSON:
		command = "exec " + shellJoin(words)
	case len(st.shell) > 0:
		command = "exec " + shellJoin(append(append([]string(nil), st.shell...), words[0]))
	default:
		command = words[0]
	}
	env := st.execEnv()
	envKeys := make([]string, 0, len(env))
	for k, v := range env {
		envKeys = append(envKeys, k+"="+v)
	}
	sort.Strings(envKeys)
	cwd := st.cfg.WorkingDir
	if cwd == "" {
		cwd = "/"
	}
	inputs := []string{command, cwd, st.cfg.User, string(bc.network()), strings.Join(envKeys, "\x00")}
	var tail tailBuffer
	err := bc.layerStep(ctx, st, in, inputs, &tail, func(box BuildBox, out io.Writer) error {
		res, err := box.Exec(ctx, provider.ExecRequest{Command: command, Cwd: cwd, Env: env, User: st.cfg.User, Stdout: out, Stderr: out})
		if err != nil {
			return err
		}
		if res.ExitCode != 0 {
			return &BuildError{Line: in.Line, Instruction: in.Original, ExitCode: res.ExitCode, Output: tail.String()}
		}
		return nil
	})
	return err
}

func (bc *buildCtx) network() provider.NetworkMode {
	if bc.opts.Network == "" {
		return provider.NetworkAll
	}
	return bc.opts.Network
}

// layerStep runs one step that changes the file system: from the cache when its key is
// there, else in a new sandbox of the stage's layers, whose changes become the stage's next
// layer (none when it changed nothing).
func (bc *buildCtx) layerStep(ctx context.Context, st *stageState, in dockerfile.Instruction, inputs []string, tail *tailBuffer, do func(BuildBox, io.Writer) error) error {
	key := chainKey(append([]string{st.key, in.Cmd}, inputs...)...)
	bc.emit(BuildEvent{Kind: "step", Line: in.Line, Instruction: in.Original})
	if !bc.opts.NoCache {
		if diffID, ok := bc.s.cached(key); ok {
			st.key = key
			if diffID != "" {
				st.layers = append(st.layers, diffID)
			}
			bc.emit(BuildEvent{Kind: "cached", Line: in.Line, Instruction: in.Original, Layer: diffID})
			return nil
		}
	}
	box, err := bc.opts.Runner.Start(ctx, BoxSpec{Layers: st.layers, Network: bc.network(), Mirror: st.mirror, Size: bc.opts.Size})
	if err != nil {
		return err
	}
	defer box.Destroy(context.WithoutCancel(ctx))
	out := io.Writer(&progressWriter{bc: bc, in: in})
	if tail != nil {
		out = io.MultiWriter(out, tail)
	}
	if err := do(box, out); err != nil {
		return err
	}
	diffID, err := bc.s.addDiff(ctx, box)
	if err != nil {
		return err
	}
	if err := bc.s.cache(key, diffID); err != nil {
		return err
	}
	st.key = key
	if diffID != "" {
		st.layers = append(st.layers, diffID)
	}
	bc.emit(BuildEvent{Kind: "done", Line: in.Line, Instruction: in.Original, Layer: diffID})
	return nil
}

// addDiff stores box's changes as a layer, returning its diff ID, or "" when it changed
// nothing.
func (s *Store) addDiff(ctx context.Context, box BuildBox) (string, error) {
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(box.Diff(ctx, pw)) }()
	l, err := s.AddLayer(ctx, pr, Limits{})
	pr.CloseWithError(err)
	if err != nil {
		return "", err
	}
	if l.Files == 0 {
		return "", nil
	}
	return l.DiffID, nil
}

// The build cache: store/cache/<key> holds the diff ID the step with that key made ("" for
// none).
func (s *Store) cachePath(key string) string { return filepath.Join(s.root, "cache", key) }

func (s *Store) cached(key string) (string, bool) {
	b, err := os.ReadFile(s.cachePath(key))
	if err != nil {
		return "", false
	}
	diffID := strings.TrimSpace(string(b))
	if diffID != "" && !s.HasLayer(diffID) {
		return "", false // pruned since
	}
	return diffID, true
}

func (s *Store) cache(key, diffID string) error {
	if err := os.MkdirAll(filepath.Join(s.root, "cache"), 0o711); err != nil {
		return err
	}
	return writeFileAtomic(s.cachePath(key), []byte(diffID+"\n"))
}

// MaxDockerfile is the largest Dockerfile a build reads.
const MaxDockerfile = 1 << 20

// readRootFile reads the file p of root, at most MaxDockerfile bytes.
func readRootFile(root *os.Root, p string) ([]byte, error) {
	f, err := root.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxDockerfile+1))
	if err == nil && len(b) > MaxDockerfile {
		err = fmt.Errorf("%s is larger than %d bytes", p, MaxDockerfile)
	}
	return b, err
}

// emptyTar is a tar stream with no entries: its two zero blocks.
var emptyTar = make([]byte, 1024)

// progressWriter turns a step's output into "output" events.
type progressWriter struct {
	bc *buildCtx
	in dockerfile.Instruction
}

func (w *progressWriter) Write(p []byte) (int, error) {
	w.bc.emit(BuildEvent{Kind: "output", Line: w.in.Line, Instruction: w.in.Original, Output: string(p)})
	return len(p), nil
}

// tailBuffer keeps the last 4 KiB written to it: a failed step's last output.
type tailBuffer struct{ b []byte }

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > 4096 {
		t.b = t.b[len(t.b)-4096:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string { return string(bytes.ToValidUTF8(t.b, nil)) }

func shellJoin(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = sandbox.Quote(a)
	}
	return strings.Join(q, " ")
}
