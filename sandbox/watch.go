package sandbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/tupper-dev/tupper/provider"
)

// WatchEventType is what happened to a path.
type WatchEventType string

// Watch event types.
const (
	WatchAdded    WatchEventType = "added"
	WatchModified WatchEventType = "modified"
	WatchRemoved  WatchEventType = "removed"
)

// WatchEvent is one change seen by Watch.
type WatchEvent struct {
	Type WatchEventType
	Path string // absolute
}

// WatchOptions configures Watch.
type WatchOptions struct {
	Recursive bool
	Interval  time.Duration // how often to look; 0: 500 ms
	// OnError receives errors while watching (the watch goes on). Without it, errors are
	// dropped. CodeNotFound is reported once when the watched directory disappears.
	OnError func(error)
}

// Watch calls fn for every file added, modified or removed in the directory p until the
// returned stop function is called or ctx ends. Events of one round are delivered in path
// order; fn is never called concurrently and never after stop returns. The directory must
// exist when Watch is called.
func (f *Files) Watch(ctx context.Context, p string, fn func(WatchEvent), opts WatchOptions) (stop func(), err error) {
	const op = "files.watch"
	if fn == nil {
		return nil, errorf(CodeInvalidArgument, op, "callback is nil")
	}
	if opts.Interval < 0 {
		return nil, errorf(CodeInvalidArgument, op, "interval must not be negative")
	}
	interval := opts.Interval
	if interval == 0 {
		interval = DefaultWatchInterval
	}
	if interval < 10*time.Millisecond {
		interval = 10 * time.Millisecond
	}
	st, err := f.Stat(ctx, p)
	if err != nil {
		return nil, err
	}
	if st.Type != provider.TypeDir {
		return nil, errorf(CodeInvalidArgument, op, "%s is not a directory", f.b.red.String(st.Path))
	}
	dir := st.Path
	prev, err := f.watchState(ctx, dir, opts.Recursive)
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(interval)
		defer t.Stop()
		missing := false
		for {
			select {
			case <-wctx.Done():
				return
			case <-t.C:
			}
			cur, err := f.watchState(wctx, dir, opts.Recursive)
			if wctx.Err() != nil {
				return
			}
			if err != nil {
				if errors.Is(err, CodeNotFound) {
					if !missing && opts.OnError != nil {
						opts.OnError(err)
					}
					missing = true
					cur = map[string]FileInfo{}
				} else {
					if opts.OnError != nil {
						opts.OnError(err)
					}
					continue
				}
			} else {
				missing = false
			}
			for _, ev := range diffStates(prev, cur) {
				if wctx.Err() != nil {
					return
				}
				fn(ev)
			}
			prev = cur
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { cancel(); wg.Wait() }) }, nil
}

func (f *Files) watchState(ctx context.Context, dir string, recursive bool) (map[string]FileInfo, error) {
	infos, err := f.List(ctx, dir, FileListOptions{Recursive: recursive})
	if err != nil {
		return nil, err
	}
	m := make(map[string]FileInfo, len(infos))
	for _, fi := range infos {
		if strings.HasPrefix(fi.Path, sdkDir+"/") {
			continue
		}
		m[fi.Path] = fi
	}
	return m, nil
}

func diffStates(prev, cur map[string]FileInfo) []WatchEvent {
	var evs []WatchEvent
	for p, c := range cur {
		old, ok := prev[p]
		switch {
		case !ok:
			evs = append(evs, WatchEvent{Type: WatchAdded, Path: p})
		case c.Type != provider.TypeDir && (old.Size != c.Size || !old.ModifiedAt.Equal(c.ModifiedAt) || old.Type != c.Type || old.Mode != c.Mode):
			evs = append(evs, WatchEvent{Type: WatchModified, Path: p})
		}
	}
	for p := range prev {
		if _, ok := cur[p]; !ok {
			evs = append(evs, WatchEvent{Type: WatchRemoved, Path: p})
		}
	}
	sortEvents(evs)
	return evs
}

func sortEvents(evs []WatchEvent) {
	rank := map[WatchEventType]int{WatchRemoved: 0, WatchAdded: 1, WatchModified: 2}
	for i := 1; i < len(evs); i++ {
		for j := i; j > 0; j-- {
			a, b := evs[j-1], evs[j]
			if a.Path < b.Path || a.Path == b.Path && rank[a.Type] <= rank[b.Type] {
				break
			}
			evs[j-1], evs[j] = b, a
		}
	}
}

// Changes is what changed under /workspace since a checkpoint.
type Changes struct {
	Added    []string // absolute paths, sorted
	Modified []string
	Removed  []string
	Patch    string // unified diff, redacted
}

// ChangesOptions configures Files.Changes.
type ChangesOptions struct {
	// Since is the checkpoint to compare against; "" is "start", which exists only when the
	// sandbox was created with TrackChanges or Mark("start") was called.
	Since string
}

// Mark records a checkpoint of /workspace under name ("" is "start") and returns the name.
// Checkpoints live inside the sandbox (a hidden git index, or the provider's own tracker), so
// another process can compare against them.
func (f *Files) Mark(ctx context.Context, name string) (string, error) {
	const op = "files.mark"
	if name == "" {
		name = "start"
	}
	if !markName.MatchString(name) {
		return "", errorf(CodeInvalidArgument, op, "checkpoint name %q: use letters, digits, . _ -, up to 64", name)
	}
	if err := f.b.ensureSecrets(ctx); err != nil {
		return "", err
	}
	if ct, ok := f.b.inst.(provider.ChangeTracker); ok {
		return name, f.err(ct.Mark(ctx, DefaultCwd, name), op)
	}
	if !f.b.Capabilities.Has(provider.CapGit) {
		return "", errorf(CodeUnsupported, op, "provider %s has no change tracker and no git", f.b.Provider)
	}
	script := gitIndexPrelude + fmt.Sprintf(`tree=$(snap) || exit 1
printf '%%s\n' "$tree" > "$GIT_DIR/marks/%s"`, name)
	if _, err := f.gitScript(ctx, op, script); err != nil {
		return "", err
	}
	return name, nil
}

// gitIndexPrelude sets up the hidden repository that holds change checkpoints and defines
// snap, which prints the tree id of /workspace now. Nested repositories (a clone under
// /workspace) are tracked file by file: their .git directories are left out and their files
// are added to the index directly, so they do not collapse into one gitlink entry. A file
// that find listed and that is gone by the time git reads it (an editor's temporary file,
// renamed meanwhile) is left out (--remove), not an error.
const gitIndexPrelude = `set -e
export GIT_DIR=` + sdkDir + `/changes.git GIT_WORK_TREE=` + DefaultCwd + `
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
[ -d "$GIT_DIR/marks" ] || { mkdir -p "$GIT_DIR" && git init -q >/dev/null && mkdir -p "$GIT_DIR/marks"; }
mkdir -p ` + DefaultCwd + `
snap() {
	export GIT_INDEX_FILE="$GIT_DIR/index.$$"
	rm -f "$GIT_INDEX_FILE"
	cd ` + DefaultCwd + `
	find . -name .git -prune -o \( -type f -o -type l \) -print0 | sed -z 's|^\./||' |
		git -c core.safecrlf=false update-index --add --remove -z --stdin >/dev/null
	git write-tree
	rm -f "$GIT_INDEX_FILE"
}
`

// Changes returns what was added, modified and removed under /workspace since a checkpoint,
// with a unified patch. An unknown checkpoint is CodeInvalidArgument.
func (f *Files) Changes(ctx context.Context, opts ChangesOptions) (Changes, error) {
	const op = "files.changes"
	name := opts.Since
	if name == "" {
		name = "start"
	}
	if !markName.MatchString(name) {
		return Changes{}, errorf(CodeInvalidArgument, op, "checkpoint name %q is not valid", name)
	}
	if err := f.b.ensureSecrets(ctx); err != nil {
		return Changes{}, err
	}
	if ct, ok := f.b.inst.(provider.ChangeTracker); ok {
		c, err := ct.Changes(ctx, DefaultCwd, name)
		if err != nil {
			return Changes{}, f.err(err, op)
		}
		return Changes{Added: c.Added, Modified: c.Modified, Removed: c.Removed, Patch: f.b.red.String(c.Patch)}, nil
	}
	if !f.b.Capabilities.Has(provider.CapGit) {
		return Changes{}, errorf(CodeUnsupported, op, "provider %s has no change tracker and no git", f.b.Provider)
	}
	script := gitIndexPrelude + fmt.Sprintf(`[ -f "$GIT_DIR/marks/%[1]s" ] || exit 44
old=$(cat "$GIT_DIR/marks/%[1]s")
new=$(snap)
git diff-tree -r --no-renames --name-status -z "$old" "$new"
printf '\0\0PATCH\0\0'
git diff-tree -r --no-renames -p --binary "$old" "$new"`, name)
	out, err := f.gitScript(ctx, op, script)
	if err != nil {
		if errors.Is(err, CodeNotFound) {
			return Changes{}, errorf(CodeInvalidArgument, op, "no checkpoint %q: create the sandbox with TrackChanges or call Mark first", name)
		}
		return Changes{}, err
	}
	status, patch, _ := strings.Cut(out, "\x00\x00PATCH\x00\x00")
	var c Changes
	fields := strings.Split(status, "\x00")
	for i := 0; i+1 < len(fields); i += 2 {
		p := DefaultCwd + "/" + fields[i+1]
		switch fields[i] {
		case "A":
			c.Added = append(c.Added, p)
		case "D":
			c.Removed = append(c.Removed, p)
		default:
			c.Modified = append(c.Modified, p)
		}
	}
	c.Patch = f.b.red.String(patch)
	return c, nil
}

func (f *Files) gitScript(ctx context.Context, op, script string) (string, error) {
	var out, stderr limitedBuffer
	out.limit = 64 << 20
	stderr.limit = 4096
	res, err := f.b.inst.Exec(ctx, provider.ExecRequest{Command: script, Cwd: "/", Stdout: &out, Stderr: &stderr})
	if err != nil {
		return "", f.err(err, op)
	}
	switch res.ExitCode {
	case 0:
	case 44:
		return "", errorf(CodeNotFound, op, "checkpoint not found")
	default:
		return "", f.b.red.Err(errorf(CodeProvider, op, "change tracking failed (exit %d): %s", res.ExitCode, strings.TrimSpace(stderr.String())))
	}
	if out.dropped > 0 {
		return "", errorf(CodeResourceExhausted, op, "changes are larger than %d bytes", out.limit)
	}
	return out.String(), nil
}
