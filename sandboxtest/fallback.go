package sandboxtest

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/sandbox"
)

// The Fallback group compares each fast path the provider has with the core's fallback for
// it, on the same sandbox: one handle made as usual, one connected through Bare. A provider
// without the fast path skips the comparison (the rest of the suite already ran its
// fallback), and so does one whose fallback needs a capability it lacks.
func fallbackCases() []testCase {
	return []testCase{
		{"FileSystem", fallbackFileSystem},
		{"Search", fallbackSearch},
		{"Changes", fallbackChanges},
		{"Busy", fallbackBusy},
		{"LogRange", fallbackLogRange},
		{"DialPort", fallbackDialPort},
	}
}

// fallbackDialPort reaches a port in the sandbox through provider.PortDialer and through the
// core's fallback (a connection to the host and port of the provider's PreviewURL), and
// reads the same answer both ways.
func fallbackDialPort(c *C) {
	fast, slow := c.bare(is[provider.PortDialer], "provider.PortDialer", provider.CapPreview)
	bin := c.helper(fast)
	start(c, fast, bin+" -port 3000", sandbox.StartOptions{Name: "web", Ready: sandbox.ReadyPort(3000)})
	for _, b := range []struct {
		name string
		box  *sandbox.Sandbox
	}{{"fast path", fast}, {"fallback", slow}} {
		conn, err := b.box.DialPort(c.Ctx, 3000)
		c.NoErr("DialPort ("+b.name+")", err)
		_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
		_, err = io.WriteString(conn, "GET /x HTTP/1.0\r\nHost: localhost\r\n\r\n")
		c.NoErr("write ("+b.name+")", err)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		c.NoErr("read the answer ("+b.name+")", err)
		body, _ := io.ReadAll(resp.Body)
		conn.Close()
		Eq(c, "body through DialPort ("+b.name+")", string(body), "ok /x\n")
	}
	_, err := fast.DialPort(c.Ctx, 0)
	c.WantCode("DialPort port 0", err, sandbox.CodeInvalidArgument)
	// PortTarget: through the tunnel (""), else the provider's own preview URL.
	target, err := fast.PortTarget(c.Ctx, 3000)
	c.NoErr("PortTarget (fast path)", err)
	Eq(c, "PortTarget with provider.PortDialer", target, "")
	target, err = slow.PortTarget(c.Ctx, 3000)
	c.NoErr("PortTarget (fallback)", err)
	want, err := slow.Native.PreviewURL(c.Ctx, 3000)
	c.NoErr("the provider's PreviewURL", err)
	if target == "" || target != want {
		c.Errorf("PortTarget without provider.PortDialer is %q, want the provider's preview URL %q", target, want)
	}
	_, err = fast.PortTarget(c.Ctx, 65536)
	c.WantCode("PortTarget port 65536", err, sandbox.CodeInvalidArgument)
}

// bare returns a box with the fast paths and a handle on the same sandbox without them, after
// checking the provider has the fast path iface (named what) and the fallback's capability.
func (c *C) bare(has func(provider.Instance) bool, what string, need provider.Capability) (fast, slow *sandbox.Sandbox) {
	c.Helper()
	c.Need(need)
	fast = c.Box()
	if !has(fast.Native) {
		c.Skipf("provider %s has no %s: every other case runs its fallback", c.P().Name(), what)
	}
	slow, err := sandbox.Connect(c.Ctx, Bare(c.P()), fast.ID, sandbox.ConnectOptions{})
	c.NoErr("Connect through Bare", err)
	c.Cleanup(func() { slow.Close() })
	if has(slow.Native) {
		c.Fatalf("Bare left %s on the instance", what)
	}
	return fast, slow
}

func is[I any](in provider.Instance) bool { _, ok := in.(I); return ok }

// fallbackTree is made in dir by the fallback comparisons: every file type a listing
// reports, modes, an empty file, and names with a space, a tab and a newline.
const fallbackTree = `set -e
mkdir -p %[1]s/d/e && cd %[1]s
printf abc > f && chmod 640 f
: > empty
printf 12345 > d/e/g && chmod 755 d/e/g
ln -s f link && ln -s missing dangling
printf x > 'sp ace' && printf y > "$(printf 'new\nline')" && printf z > "$(printf 'tab\tname')"
mkdir -m 700 priv && mkfifo fifo
`

func fallbackFileSystem(c *C) {
	fast, slow := c.bare(is[provider.FileSystem], "provider.FileSystem", provider.CapShell)
	const dir = "/workspace/fb"
	c.MustRun(fast, fmt.Sprintf(fallbackTree, dir))

	for _, opts := range []sandbox.FileListOptions{{}, {Recursive: true}, {Recursive: true, Glob: "*e*"}} {
		want, err := fast.Files.List(c.Ctx, dir, opts)
		c.NoErr("List (fast)", err)
		got, err := slow.Files.List(c.Ctx, dir, opts)
		c.NoErr("List (fallback)", err)
		sameInfos(c, fmt.Sprintf("List %+v", opts), got, want)
		for _, fi := range want {
			w, err := fast.Files.Stat(c.Ctx, fi.Path)
			c.NoErr("Stat (fast)", err)
			g, err := slow.Files.Stat(c.Ctx, fi.Path)
			c.NoErr("Stat (fallback)", err)
			sameInfos(c, "Stat "+fi.Path, []sandbox.FileInfo{g}, []sandbox.FileInfo{w})
		}
	}

	// Errors carry the same codes both ways.
	sameErr := func(what string, op func(b *sandbox.Sandbox) error) {
		c.Helper()
		w, g := op(fast), op(slow)
		if sandbox.CodeOf(w) != sandbox.CodeOf(g) {
			c.Errorf("%s: fast path gave %v (code %q), fallback %v (code %q)", what, w, sandbox.CodeOf(w), g, sandbox.CodeOf(g))
		}
		if w == nil && g == nil {
			c.Errorf("%s: no error either way", what)
		}
	}
	sameErr("Stat of a missing path", func(b *sandbox.Sandbox) error { _, err := b.Files.Stat(c.Ctx, dir+"/nope"); return err })
	sameErr("List of a missing directory", func(b *sandbox.Sandbox) error {
		_, err := b.Files.List(c.Ctx, dir+"/nope", sandbox.FileListOptions{})
		return err
	})
	sameErr("List of a file", func(b *sandbox.Sandbox) error {
		_, err := b.Files.List(c.Ctx, dir+"/f", sandbox.FileListOptions{})
		return err
	})
	sameErr("Remove of a missing path", func(b *sandbox.Sandbox) error { return b.Files.Remove(c.Ctx, dir+"/nope", sandbox.RemoveOptions{}) })
	sameErr("Remove of a full directory without Recursive", func(b *sandbox.Sandbox) error {
		return b.Files.Remove(c.Ctx, dir+"/d", sandbox.RemoveOptions{})
	})
	sameErr("Rename of a missing path", func(b *sandbox.Sandbox) error { return b.Files.Rename(c.Ctx, dir+"/nope", dir+"/x") })

	// The same changes made each way leave the same tree.
	for i, b := range []*sandbox.Sandbox{fast, slow} {
		root := fmt.Sprintf("%s/m%d", dir, i)
		c.NoErr("MakeDir", b.Files.MakeDir(c.Ctx, root+"/a/b"))
		c.NoErr("MakeDir again", b.Files.MakeDir(c.Ctx, root+"/a/b"))
		c.Write(b, root+"/a/b/x", "x")
		c.Write(b, root+"/y", "y")
		c.NoErr("Rename a file over another", b.Files.Rename(c.Ctx, root+"/a/b/x", root+"/y"))
		c.NoErr("Rename a directory", b.Files.Rename(c.Ctx, root+"/a", root+"/c"))
		c.NoErr("Remove an empty directory", b.Files.Remove(c.Ctx, root+"/c/b", sandbox.RemoveOptions{}))
		c.MustRun(b, "ln -s y "+root+"/l && mkdir -p "+root+"/z/z && touch "+root+"/z/z/z")
		c.NoErr("Remove a symlink", b.Files.Remove(c.Ctx, root+"/l", sandbox.RemoveOptions{}))
		c.NoErr("Remove a tree", b.Files.Remove(c.Ctx, root+"/z", sandbox.RemoveOptions{Recursive: true}))
	}
	m0, err := fast.Files.List(c.Ctx, dir+"/m0", sandbox.FileListOptions{Recursive: true})
	c.NoErr("List m0", err)
	m1, err := fast.Files.List(c.Ctx, dir+"/m1", sandbox.FileListOptions{Recursive: true})
	c.NoErr("List m1", err)
	if got, want := relPaths(m1, dir+"/m1"), relPaths(m0, dir+"/m0"); !slices.Equal(got, want) {
		c.Errorf("after the same changes: fallback left %q, fast path %q", got, want)
	}
	if s := c.Read(fast, dir+"/m1/y"); s != "x" {
		c.Errorf("fallback Rename did not replace the file: %q", s)
	}
}

func relPaths(infos []sandbox.FileInfo, root string) []string {
	var out []string
	for _, fi := range infos {
		out = append(out, strings.TrimPrefix(fi.Path, root)+" "+string(fi.Type))
	}
	return out
}

// sameInfos reports every difference between two listings; times may differ by the
// fallback's precision, directory sizes by what the file system reports for them.
func sameInfos(c *C, what string, got, want []sandbox.FileInfo) {
	c.Helper()
	paths := func(l []sandbox.FileInfo) []string {
		var p []string
		for _, fi := range l {
			p = append(p, fi.Path)
		}
		return p
	}
	if !slices.Equal(paths(got), paths(want)) {
		c.Errorf("%s: fallback listed %q, fast path %q", what, paths(got), paths(want))
		return
	}
	for i, w := range want {
		g := got[i]
		if g.Type != w.Type || g.Mode != w.Mode || (g.Size != w.Size && w.Type != provider.TypeDir) {
			c.Errorf("%s: %q: fallback {type %s mode %o size %d}, fast path {type %s mode %o size %d}",
				what, w.Path, g.Type, g.Mode, g.Size, w.Type, w.Mode, w.Size)
		}
		if d := g.ModifiedAt.Sub(w.ModifiedAt).Abs(); d > time.Millisecond {
			c.Errorf("%s: %q: fallback modified at %v, fast path %v", what, w.Path, g.ModifiedAt, w.ModifiedAt)
		}
	}
}

func fallbackSearch(c *C) {
	fast, slow := c.bare(is[provider.Searcher], "provider.Searcher", provider.CapShell)
	c.MustRun(fast, `set -e; mkdir -p /workspace/s/sub && cd /workspace/s
printf 'one needle\ntwo\nneedle three needle\n' > a.txt
printf 'needle\n' > sub/b.go
printf 'nothing\n' > c.txt
printf 'x\0needle\n' > bin.dat`)
	for _, opts := range []sandbox.SearchOptions{
		{Path: "/workspace/s"},
		{Path: "/workspace/s", Glob: "*.go"},
		{Path: "/workspace/s", MaxMatches: 1},
	} {
		want, err := fast.Files.Search(c.Ctx, "needle", opts)
		c.NoErr("Search (fast)", err)
		got, err := slow.Files.Search(c.Ctx, "needle", opts)
		c.NoErr("Search (fallback)", err)
		key := func(ms []sandbox.Match) []string {
			var out []string
			for _, m := range ms {
				out = append(out, fmt.Sprintf("%s:%d:%s", m.Path, m.Line, m.Text))
			}
			if opts.MaxMatches == 0 {
				slices.Sort(out) // the order of files is the provider's
			}
			return out
		}
		if opts.MaxMatches != 0 {
			if len(got) != len(want) {
				c.Errorf("Search %+v: fallback found %d, fast path %d", opts, len(got), len(want))
			}
			continue
		}
		if g, w := key(got), key(want); !slices.Equal(g, w) {
			c.Errorf("Search %+v: fallback %q, fast path %q", opts, g, w)
		}
	}
}

func fallbackChanges(c *C) {
	fast, slow := c.bare(is[provider.ChangeTracker], "provider.ChangeTracker", provider.CapGit)
	for i, b := range []*sandbox.Sandbox{fast, slow} {
		dir := fmt.Sprintf("/workspace/c%d", i)
		c.MustRun(b, fmt.Sprintf("mkdir -p %[1]s && printf 'a\\n' > %[1]s/keep && printf 'b\\n' > %[1]s/gone", dir))
		_, err := b.Files.Mark(c.Ctx, fmt.Sprintf("m%d", i))
		c.NoErr("Mark", err)
		c.MustRun(b, fmt.Sprintf("printf 'a2\\n' > %[1]s/keep && rm %[1]s/gone && printf 'n\\n' > %[1]s/new", dir))
	}
	want, err := fast.Files.Changes(c.Ctx, sandbox.ChangesOptions{Since: "m0"})
	c.NoErr("Changes (fast)", err)
	got, err := slow.Files.Changes(c.Ctx, sandbox.ChangesOptions{Since: "m1"})
	c.NoErr("Changes (fallback)", err)
	// Each checkpoint saw the other's directory made after it, so compare each one's own.
	own := func(l []string, dir string) []string {
		var out []string
		for _, p := range l {
			if rest, ok := strings.CutPrefix(p, dir+"/"); ok {
				out = append(out, rest)
			}
		}
		slices.Sort(out)
		return out
	}
	for _, k := range []struct {
		name      string
		got, want []string
	}{{"added", got.Added, want.Added}, {"modified", got.Modified, want.Modified}, {"removed", got.Removed, want.Removed}} {
		g, w := own(k.got, "/workspace/c1"), own(k.want, "/workspace/c0")
		if !slices.Equal(g, w) {
			c.Errorf("Changes %s: fallback %q, fast path %q", k.name, g, w)
		}
	}
	_, errF := fast.Files.Changes(c.Ctx, sandbox.ChangesOptions{Since: "never"})
	_, errS := slow.Files.Changes(c.Ctx, sandbox.ChangesOptions{Since: "never"})
	if sandbox.CodeOf(errF) != sandbox.CodeOf(errS) || errF == nil {
		c.Errorf("Changes since an unknown checkpoint: fast path %v, fallback %v", errF, errS)
	}
}

func fallbackBusy(c *C) {
	fast, slow := c.bare(is[provider.ActivityReporter], "provider.ActivityReporter", provider.CapShell)
	check := func(want bool) {
		c.Helper()
		for name, b := range map[string]*sandbox.Sandbox{"fast path": fast, "fallback": slow} {
			got, err := b.Busy(c.Ctx)
			c.NoErr("Busy ("+name+")", err)
			if got != want {
				c.Errorf("Busy (%s) = %v, want %v", name, got, want)
			}
		}
	}
	check(false)
	p, err := fast.Start(c.Ctx, "sleep 600", sandbox.StartOptions{Name: "busy"})
	c.NoErr("Start", err)
	check(true)
	c.NoErr("Stop", p.Stop(c.Ctx, sandbox.StopOptions{Grace: time.Second}))
	ok := c.waitFor(10*time.Second, func() bool {
		a, _ := fast.Busy(c.Ctx)
		b, _ := slow.Busy(c.Ctx)
		return !a && !b
	})
	if !ok {
		check(false)
	}
}

func fallbackLogRange(c *C) {
	fast, slow := c.bare(is[provider.RangeReader], "provider.RangeReader", provider.CapShell)
	p, err := fast.Start(c.Ctx, `i=0; while [ $i -lt 3000 ]; do echo "line $i"; i=$((i+1)); done; echo err >&2`, sandbox.StartOptions{Name: "logs"})
	c.NoErr("Start", err)
	_, err = p.Wait(c.Ctx)
	c.NoErr("Wait", err)
	q, err := slow.Process(c.Ctx, "logs")
	c.NoErr("Process (fallback)", err)
	pages := func(p *sandbox.Process) []string {
		var out []string
		opts := sandbox.LogsOptions{MaxBytes: 1000}
		for range 100 {
			pg, err := p.Logs(c.Ctx, opts)
			c.NoErr("Logs", err)
			out = append(out, pg.Text)
			if !pg.Truncated {
				return out
			}
			opts.After = pg.NextCursor
		}
		c.Fatalf("more than 100 pages of logs")
		return nil
	}
	g, w := pages(q), pages(p)
	if !slices.Equal(g, w) {
		c.Errorf("log pages: fallback gave %d pages, fast path %d, or different text", len(g), len(w))
	}
	if len(w) < 10 {
		c.Errorf("only %d pages of 1000 bytes for 3000 lines", len(w))
	}
}
