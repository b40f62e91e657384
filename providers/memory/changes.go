package memory

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/tupper-dev/tupper/provider"
)

// Change tracking keeps a copy of the whole file system per checkpoint (file contents are
// shared copy-on-write, so a checkpoint costs little until files change) and compares the
// tree below a directory in the copy against the live one.

// Mark records a checkpoint of the file system under name.
func (in *Instance) Mark(ctx context.Context, dir, name string) error {
	if err := in.sb.use(); err != nil {
		return err
	}
	if err := checkAbs("files.mark", dir); err != nil {
		return err
	}
	if name == "" {
		return provider.Errorf(provider.CodeInvalidArgument, "empty checkpoint name")
	}
	snap := in.sb.fs.Clone()
	sb := in.sb
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if sb.stopped {
		return notFound(sb.id)
	}
	sb.checkpoints[name] = snap
	return nil
}

// Changes compares dir now with dir at checkpoint name.
func (in *Instance) Changes(ctx context.Context, dir, name string) (provider.Changes, error) {
	if err := in.sb.use(); err != nil {
		return provider.Changes{}, err
	}
	if err := checkAbs("files.changes", dir); err != nil {
		return provider.Changes{}, err
	}
	sb := in.sb
	sb.mu.Lock()
	old := sb.checkpoints[name]
	sb.mu.Unlock()
	if old == nil {
		return provider.Changes{}, provider.Errorf(provider.CodeInvalidArgument, "no checkpoint named %q", name)
	}
	before, err := trackedFiles(old, dir)
	if err != nil {
		return provider.Changes{}, err
	}
	after, err := trackedFiles(sb.fs, dir)
	if err != nil {
		return provider.Changes{}, err
	}
	return compareTrees(cleanAbs(dir), before, after), nil
}

// tracked is one file as change tracking sees it: content and git's notion of its mode.
type tracked struct {
	data []byte
	mode string // "100644", "100755" or "120000"
}

// trackedFiles lists the regular files and symbolic links below dir, by path relative to
// dir. A missing dir has no files. Directories named .git or .sandbox-sdk are skipped, as a
// git index would skip nested repositories and the SDK's own records.
func trackedFiles(f *memFS, dir string) (map[string]tracked, error) {
	out := map[string]tracked{}
	entries, err := f.Walk(dir, true)
	if err != nil {
		if isNotExist(err) {
			return out, nil
		}
		return nil, fsError("files.changes", err)
	}
	var skip []string
	for _, e := range entries {
		if e.rel == "" {
			continue
		}
		if slices.ContainsFunc(skip, func(p string) bool { return strings.HasPrefix(e.rel, p) }) {
			continue
		}
		switch e.info.kind {
		case kindDir:
			if e.info.name == ".git" || e.info.name == ".sandbox-sdk" {
				skip = append(skip, e.rel+"/")
			}
		case kindSymlink:
			out[e.rel] = tracked{data: []byte(e.info.target), mode: "120000"}
		case kindFile:
			data, err := f.ReadFile(e.path)
			if err != nil {
				continue // removed meanwhile
			}
			mode := "100644"
			if e.info.perm()&0o111 != 0 {
				mode = "100755"
			}
			out[e.rel] = tracked{data: data, mode: mode}
		}
	}
	return out, nil
}

func compareTrees(dir string, before, after map[string]tracked) provider.Changes {
	abs := func(rel string) string {
		if dir == "/" {
			return "/" + rel
		}
		return dir + "/" + rel
	}
	var ch provider.Changes
	var rels []string
	for rel := range before {
		rels = append(rels, rel)
	}
	for rel := range after {
		if _, ok := before[rel]; !ok {
			rels = append(rels, rel)
		}
	}
	slices.Sort(rels)
	var patch strings.Builder
	for _, rel := range rels {
		b, hadB := before[rel]
		a, hasA := after[rel]
		switch {
		case !hadB:
			ch.Added = append(ch.Added, abs(rel))
			writeFilePatch(&patch, rel, nil, &a)
		case !hasA:
			ch.Removed = append(ch.Removed, abs(rel))
			writeFilePatch(&patch, rel, &b, nil)
		case b.mode != a.mode || !bytes.Equal(b.data, a.data):
			ch.Modified = append(ch.Modified, abs(rel))
			writeFilePatch(&patch, rel, &b, &a)
		}
	}
	ch.Patch = patch.String()
	return ch
}

// writeFilePatch writes one file's part of a git-style unified diff.
func writeFilePatch(w *strings.Builder, rel string, old, cur *tracked) {
	fmt.Fprintf(w, "diff --git a/%s b/%s\n", rel, rel)
	oldName, newName := "a/"+rel, "b/"+rel
	switch {
	case old == nil:
		fmt.Fprintf(w, "new file mode %s\n", cur.mode)
		oldName = "/dev/null"
	case cur == nil:
		fmt.Fprintf(w, "deleted file mode %s\n", old.mode)
		newName = "/dev/null"
	case old.mode != cur.mode:
		fmt.Fprintf(w, "old mode %s\nnew mode %s\n", old.mode, cur.mode)
	}
	var a, b []byte
	if old != nil {
		a = old.data
	}
	if cur != nil {
		b = cur.data
	}
	if old != nil && cur != nil && bytes.Equal(a, b) {
		return // a mode change alone
	}
	if bytes.IndexByte(a, 0) >= 0 || bytes.IndexByte(b, 0) >= 0 {
		fmt.Fprintf(w, "Binary files %s and %s differ\n", oldName, newName)
		return
	}
	if len(a) == 0 && len(b) == 0 {
		return // an empty file added or removed: headers only, as git prints
	}
	fmt.Fprintf(w, "--- %s\n+++ %s\n", oldName, newName)
	w.WriteString(unifiedHunks(splitKeepNL(a), splitKeepNL(b), 3))
}

// splitKeepNL splits s into lines that keep their "\n"; the last may lack one.
func splitKeepNL(s []byte) []string {
	var out []string
	for len(s) > 0 {
		i := bytes.IndexByte(s, '\n')
		if i < 0 {
			out = append(out, string(s))
			break
		}
		out = append(out, string(s[:i+1]))
		s = s[i+1:]
	}
	return out
}

// edit is one line of an edit script: ' ' kept, '-' deleted from a, '+' inserted from b.
type edit struct {
	op   byte
	a, b int // indexes into a and b (the one that applies)
}

// diffLines returns a shortest edit script from a to b (Myers' O(ND) algorithm, after
// trimming the common prefix and suffix).
func diffLines(a, b []string) []edit {
	pre := 0
	for pre < len(a) && pre < len(b) && a[pre] == b[pre] {
		pre++
	}
	suf := 0
	for suf < len(a)-pre && suf < len(b)-pre && a[len(a)-1-suf] == b[len(b)-1-suf] {
		suf++
	}
	var out []edit
	for i := range pre {
		out = append(out, edit{' ', i, i})
	}
	out = append(out, myers(a[pre:len(a)-suf], b[pre:len(b)-suf], pre, pre)...)
	for i := range suf {
		out = append(out, edit{' ', len(a) - suf + i, len(b) - suf + i})
	}
	return out
}

func myers(a, b []string, offA, offB int) []edit {
	n, m := len(a), len(b)
	if n == 0 && m == 0 {
		return nil
	}
	maxD := n + m
	off := maxD
	v := make([]int, 2*maxD+2)
	var trace [][]int
	var d int
search:
	for d = 0; d <= maxD; d++ {
		trace = append(trace, slices.Clone(v))
		for k := -d; k <= d; k += 2 {
			var x int
			if k == -d || (k != d && v[off+k-1] < v[off+k+1]) {
				x = v[off+k+1] // down: insertion
			} else {
				x = v[off+k-1] + 1 // right: deletion
			}
			y := x - k
			for x < n && y < m && a[x] == b[y] {
				x++
				y++
			}
			v[off+k] = x
			if x >= n && y >= m {
				break search
			}
		}
	}
	// Backtrack from (n, m) through the saved frontiers.
	var rev []edit
	x, y := n, m
	for ; d > 0; d-- {
		vp := trace[d]
		k := x - y
		var prevK int
		if k == -d || (k != d && vp[off+k-1] < vp[off+k+1]) {
			prevK = k + 1
		} else {
			prevK = k - 1
		}
		prevX := vp[off+prevK]
		prevY := prevX - prevK
		for x > prevX && y > prevY {
			x--
			y--
			rev = append(rev, edit{' ', offA + x, offB + y})
		}
		if x == prevX {
			y--
			rev = append(rev, edit{'+', offA + x, offB + y})
		} else {
			x--
			rev = append(rev, edit{'-', offA + x, offB + y})
		}
	}
	for x > 0 && y > 0 {
		x--
		y--
		rev = append(rev, edit{' ', offA + x, offB + y})
	}
	slices.Reverse(rev)
	return rev
}

// unifiedHunks formats the differences between a and b as unified-diff hunks with ctx lines
// of context.
func unifiedHunks(a, b []string, ctx int) string {
	script := diffLines(a, b)
	var out strings.Builder
	i := 0
	for i < len(script) {
		// find the next change
		for i < len(script) && script[i].op == ' ' {
			i++
		}
		if i == len(script) {
			break
		}
		start := max(i-ctx, 0)
		// extend while changes are within 2*ctx of each other
		end := i
		for {
			for end < len(script) && script[end].op != ' ' {
				end++
			}
			next := end
			for next < len(script) && script[next].op == ' ' {
				next++
			}
			if next < len(script) && next-end <= 2*ctx {
				end = next
				continue
			}
			end = min(end+ctx, len(script))
			break
		}
		writeHunk(&out, a, b, script[start:end])
		i = end
	}
	return out.String()
}

func writeHunk(w *strings.Builder, a, b []string, h []edit) {
	aStart, bStart := -1, -1
	aCount, bCount := 0, 0
	for _, e := range h {
		if e.op != '+' {
			if aStart < 0 {
				aStart = e.a
			}
			aCount++
		}
		if e.op != '-' {
			if bStart < 0 {
				bStart = e.b
			}
			bCount++
		}
	}
	if aStart < 0 { // no old lines: the position is where the first insertion lands
		aStart = h[0].a
	}
	if bStart < 0 {
		bStart = h[0].b
	}
	fmt.Fprintf(w, "@@ -%s +%s @@\n", hunkRange(aStart, aCount), hunkRange(bStart, bCount))
	for _, e := range h {
		line := ""
		switch e.op {
		case '-':
			line = a[e.a]
		default:
			line = b[e.b]
		}
		w.WriteByte(e.op)
		w.WriteString(line)
		if !strings.HasSuffix(line, "\n") {
			w.WriteString("\n\\ No newline at end of file\n")
		}
	}
}

// hunkRange formats a 0-based start and a count as a unified-diff range.
func hunkRange(start, count int) string {
	switch count {
	case 0:
		return fmt.Sprintf("%d,0", start)
	case 1:
		return fmt.Sprintf("%d", start+1)
	}
	return fmt.Sprintf("%d,%d", start+1, count)
}
