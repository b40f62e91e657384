package sandboxtest

import (
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/tupper-dev/tupper/sandbox"
)

func watchCases() []testCase {
	return []testCase{
		{"AddedModifiedRemoved", watchEvents},
		{"Recursive", watchRecursive},
		{"NotRecursive", watchNotRecursive},
		{"StopStopsCallbacks", watchStop},
		{"OnError", watchOnError},
		{"Errors", watchErrors},
	}
}

// eventLog collects watch events; next waits for one that matches.
type eventLog struct {
	mu     sync.Mutex
	events []sandbox.WatchEvent
	ch     chan struct{}
	inCall int32
}

func newEventLog() *eventLog { return &eventLog{ch: make(chan struct{}, 1)} }

func (l *eventLog) add(ev sandbox.WatchEvent) {
	l.mu.Lock()
	l.events = append(l.events, ev)
	l.mu.Unlock()
	select {
	case l.ch <- struct{}{}:
	default:
	}
}

func (l *eventLog) all() []sandbox.WatchEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]sandbox.WatchEvent(nil), l.events...)
}

// waitFor waits up to d for an event of type typ on path.
func (l *eventLog) waitFor(c *C, typ sandbox.WatchEventType, path string, d time.Duration) bool {
	c.Helper()
	deadline := time.After(d)
	for {
		for _, ev := range l.all() {
			if ev.Type == typ && ev.Path == path {
				return true
			}
		}
		select {
		case <-l.ch:
		case <-deadline:
			c.Errorf("no %s event for %s within %v; events: %+v", typ, path, d, l.all())
			return false
		case <-c.Ctx.Done():
			return false
		}
	}
}

func watch(c *C, b *sandbox.Sandbox, dir string, opts sandbox.WatchOptions) (*eventLog, func()) {
	c.Helper()
	l := newEventLog()
	if opts.Interval == 0 {
		opts.Interval = 50 * time.Millisecond
	}
	stop, err := b.Files.Watch(c.Ctx, dir, l.add, opts)
	c.NoErr("Watch", err)
	c.Cleanup(stop)
	return l, stop
}

func watchEvents(c *C) {
	b := c.Box()
	c.MustRun(b, "mkdir -p w && echo old > w/existing.txt")
	l, _ := watch(c, b, "w", sandbox.WatchOptions{})
	c.Write(b, "w/new.txt", "1")
	l.waitFor(c, sandbox.WatchAdded, "/workspace/w/new.txt", 10*time.Second)
	c.Write(b, "w/existing.txt", "changed and longer\n")
	l.waitFor(c, sandbox.WatchModified, "/workspace/w/existing.txt", 10*time.Second)
	c.NoErr("Remove", b.Files.Remove(c.Ctx, "w/new.txt", sandbox.RemoveOptions{}))
	l.waitFor(c, sandbox.WatchRemoved, "/workspace/w/new.txt", 10*time.Second)
	for _, ev := range l.all() {
		if !strings.HasPrefix(ev.Path, "/workspace/w/") {
			c.Errorf("event outside the watched dir: %+v", ev)
		}
	}
}

func watchRecursive(c *C) {
	b := c.Box()
	c.MustRun(b, "mkdir -p w/sub")
	l, _ := watch(c, b, "w", sandbox.WatchOptions{Recursive: true})
	c.Write(b, "w/sub/deep.txt", "x")
	l.waitFor(c, sandbox.WatchAdded, "/workspace/w/sub/deep.txt", 10*time.Second)
}

func watchNotRecursive(c *C) {
	b := c.Box()
	c.MustRun(b, "mkdir -p w/sub")
	l, _ := watch(c, b, "w", sandbox.WatchOptions{})
	c.Write(b, "w/sub/deep.txt", "x")
	c.Write(b, "w/marker.txt", "x") // written after: once it is seen, deep.txt would have been too
	l.waitFor(c, sandbox.WatchAdded, "/workspace/w/marker.txt", 10*time.Second)
	for _, ev := range l.all() {
		if ev.Path == "/workspace/w/sub/deep.txt" {
			c.Errorf("a non-recursive watch reported %+v", ev)
		}
	}
}

func watchStop(c *C) {
	b := c.Box()
	c.MustRun(b, "mkdir -p w")
	l, stop := watch(c, b, "w", sandbox.WatchOptions{})
	c.Write(b, "w/before.txt", "x")
	l.waitFor(c, sandbox.WatchAdded, "/workspace/w/before.txt", 10*time.Second)
	stop()
	n := len(l.all())
	stop() // idempotent
	c.Write(b, "w/after.txt", "x")
	// A second watch proves the change is visible; the stopped one must stay silent.
	l2, _ := watch(c, b, "w", sandbox.WatchOptions{})
	c.Write(b, "w/after2.txt", "x")
	l2.waitFor(c, sandbox.WatchAdded, "/workspace/w/after2.txt", 10*time.Second)
	time.Sleep(150 * time.Millisecond) // three intervals of the stopped watch
	if got := l.all(); len(got) != n {
		c.Errorf("callbacks after stop: %+v", got[n:])
	}
}

func watchOnError(c *C) {
	b := c.Box()
	c.MustRun(b, "mkdir -p w")
	var mu sync.Mutex
	var errs []error
	got := make(chan struct{}, 1)
	l, _ := watch(c, b, "w", sandbox.WatchOptions{OnError: func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
		select {
		case got <- struct{}{}:
		default:
		}
	}})
	c.Write(b, "w/f.txt", "x")
	l.waitFor(c, sandbox.WatchAdded, "/workspace/w/f.txt", 10*time.Second)
	c.MustRun(b, "rm -rf w")
	select {
	case <-got:
	case <-time.After(10 * time.Second):
		c.Fatalf("OnError was not called within 10 s of the watched dir being removed")
	}
	mu.Lock()
	first := errs[0]
	mu.Unlock()
	c.WantCode("OnError", first, sandbox.CodeNotFound)
	l.waitFor(c, sandbox.WatchRemoved, "/workspace/w/f.txt", 10*time.Second)
}

func watchErrors(c *C) {
	b := c.Box()
	c.Write(b, "file.txt", "x")
	_, err := b.Files.Watch(c.Ctx, "nodir", func(sandbox.WatchEvent) {}, sandbox.WatchOptions{})
	c.WantCode("Watch of a missing dir", err, sandbox.CodeNotFound)
	_, err = b.Files.Watch(c.Ctx, "file.txt", func(sandbox.WatchEvent) {}, sandbox.WatchOptions{})
	c.WantCode("Watch of a file", err, sandbox.CodeInvalidArgument)
	_, err = b.Files.Watch(c.Ctx, "/workspace", nil, sandbox.WatchOptions{})
	c.WantCode("Watch without a callback", err, sandbox.CodeInvalidArgument)
	_, err = b.Files.Watch(c.Ctx, "/workspace", func(sandbox.WatchEvent) {}, sandbox.WatchOptions{Interval: -time.Second})
	c.WantCode("Watch with a negative interval", err, sandbox.CodeInvalidArgument)
	_ = errors.New
}

func changesCases() []testCase {
	return []testCase{
		{"WithoutStartCheckpoint", changesNoStart},
		{"AddedModifiedRemoved", changesAll},
		{"Patch", changesPatch},
		{"MarkNamed", changesMarkNamed},
		{"InvalidNames", changesInvalid},
	}
}

func changesNoStart(c *C) {
	b := c.Box()
	needChanges(c, b)
	_, err := b.Files.Changes(c.Ctx, sandbox.ChangesOptions{})
	c.WantCode("Changes without a start checkpoint", err, sandbox.CodeInvalidArgument)
	_, err = b.Files.Changes(c.Ctx, sandbox.ChangesOptions{Since: "unknown"})
	c.WantCode("Changes since an unknown checkpoint", err, sandbox.CodeInvalidArgument)
}

func changesAll(c *C) {
	b := c.Box()
	needChanges(c, b)
	c.NoErr("WriteMany", b.Files.WriteMany(c.Ctx, map[string][]byte{
		"keep.txt": []byte("same\n"), "mod.txt": []byte("old\n"), "del.txt": []byte("bye\n"), "dir/mod2.txt": []byte("a\n"),
	}, sandbox.WriteOptions{}))
	name, err := b.Files.Mark(c.Ctx, "")
	c.NoErr("Mark", err)
	Eq(c, "Mark(\"\")", name, "start")
	c.Write(b, "mod.txt", "new\n")
	c.Write(b, "dir/mod2.txt", "b\n")
	c.Write(b, "added/new.txt", "hello\n")
	c.NoErr("Remove", b.Files.Remove(c.Ctx, "del.txt", sandbox.RemoveOptions{}))
	ch, err := b.Files.Changes(c.Ctx, sandbox.ChangesOptions{})
	c.NoErr("Changes", err)
	Eq(c, "Added", strings.Join(ch.Added, ","), "/workspace/added/new.txt")
	Eq(c, "Modified", strings.Join(ch.Modified, ","), "/workspace/dir/mod2.txt,/workspace/mod.txt")
	Eq(c, "Removed", strings.Join(ch.Removed, ","), "/workspace/del.txt")
}

func changesPatch(c *C) {
	b := c.Box()
	needChanges(c, b)
	c.Write(b, "p.txt", "line1\nold line\nline3\n")
	_, err := b.Files.Mark(c.Ctx, "start")
	c.NoErr("Mark", err)
	c.Write(b, "p.txt", "line1\nnew line\nline3\n")
	ch, err := b.Files.Changes(c.Ctx, sandbox.ChangesOptions{Since: "start"})
	c.NoErr("Changes", err)
	for _, want := range []string{"--- a/p.txt", "+++ b/p.txt", "@@", "-old line", "+new line", " line1"} {
		if !strings.Contains(ch.Patch, want) {
			c.Errorf("patch lacks %q:\n%s", want, ch.Patch)
		}
	}
	if strings.Contains(ch.Patch, "-line1") || strings.Contains(ch.Patch, "+line3") {
		c.Errorf("patch marks unchanged lines as changed:\n%s", ch.Patch)
	}
}

func changesMarkNamed(c *C) {
	b := c.Box()
	needChanges(c, b)
	_, err := b.Files.Mark(c.Ctx, "start")
	c.NoErr("Mark start", err)
	c.Write(b, "one.txt", "1")
	name, err := b.Files.Mark(c.Ctx, "cp-1")
	c.NoErr("Mark cp-1", err)
	Eq(c, "name", name, "cp-1")
	c.Write(b, "two.txt", "2")
	ch, err := b.Files.Changes(c.Ctx, sandbox.ChangesOptions{Since: "cp-1"})
	c.NoErr("Changes since cp-1", err)
	Eq(c, "added since cp-1", strings.Join(ch.Added, ","), "/workspace/two.txt")
	ch, err = b.Files.Changes(c.Ctx, sandbox.ChangesOptions{Since: "start"})
	c.NoErr("Changes since start", err)
	Eq(c, "added since start", strings.Join(ch.Added, ","), "/workspace/one.txt,/workspace/two.txt")
	// Marking a name again replaces it.
	_, err = b.Files.Mark(c.Ctx, "cp-1")
	c.NoErr("Mark cp-1 again", err)
	ch, err = b.Files.Changes(c.Ctx, sandbox.ChangesOptions{Since: "cp-1"})
	c.NoErr("Changes", err)
	Eq(c, "changes since the new cp-1", len(ch.Added)+len(ch.Modified)+len(ch.Removed), 0)
	// Another handle sees the checkpoints: they live in the sandbox.
	b2, err := sandbox.Connect(c.Ctx, c.P(), b.ID, sandbox.ConnectOptions{})
	c.NoErr("Connect", err)
	defer b2.Close()
	ch, err = b2.Files.Changes(c.Ctx, sandbox.ChangesOptions{Since: "start"})
	c.NoErr("Changes from another handle", err)
	Eq(c, "added since start (other handle)", strings.Join(ch.Added, ","), "/workspace/one.txt,/workspace/two.txt")
}

func changesInvalid(c *C) {
	b := c.Box()
	for _, n := range []string{"has space", "../x", "-lead", strings.Repeat("n", 65)} {
		_, err := b.Files.Mark(c.Ctx, n)
		c.WantCode("Mark "+n, err, sandbox.CodeInvalidArgument)
		_, err = b.Files.Changes(c.Ctx, sandbox.ChangesOptions{Since: n})
		c.WantCode("Changes since "+n, err, sandbox.CodeInvalidArgument)
	}
}
