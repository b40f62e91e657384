package memory

import (
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/tupper-dev/tupper/provider"
)

// The expected patches below were produced by `git diff` (index lines removed) for the same
// changes.

func TestChangesPatch(t *testing.T) {
	in := newInstance(t, provider.CreateSpec{})
	sh(t, in, `cd /workspace && printf 'a\nb\nc\nd\ne\nf\ng\nh\ni\nj\n' > keep.txt && printf 'gone\n' > old.txt && printf 'x' > nonl.txt && printf 'same\n' > mode.sh && mkdir -p .git && echo ignored > .git/HEAD`)
	if err := in.Mark(bg, "/workspace", "start"); err != nil {
		t.Fatal(err)
	}
	sh(t, in, `cd /workspace && printf 'a\nB\nc\nd\ne\nf\ng\nh\nI\nj\nk\n' > keep.txt && rm old.txt && printf 'y' > nonl.txt && chmod +x mode.sh && mkdir sub && printf 'new\nfile\n' > sub/new.txt && echo changed > .git/HEAD`)
	ch, err := in.Changes(bg, "/workspace", "start")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ch.Added, []string{"/workspace/sub/new.txt"}) ||
		!slices.Equal(ch.Removed, []string{"/workspace/old.txt"}) ||
		!slices.Equal(ch.Modified, []string{"/workspace/keep.txt", "/workspace/mode.sh", "/workspace/nonl.txt"}) {
		t.Errorf("lists: added %v removed %v modified %v", ch.Added, ch.Removed, ch.Modified)
	}
	want := `diff --git a/keep.txt b/keep.txt
--- a/keep.txt
+++ b/keep.txt
@@ -1,10 +1,11 @@
 a
-b
+B
 c
 d
 e
 f
 g
 h
-i
+I
 j
+k
diff --git a/mode.sh b/mode.sh
old mode 100644
new mode 100755
diff --git a/nonl.txt b/nonl.txt
--- a/nonl.txt
+++ b/nonl.txt
@@ -1 +1 @@
-x
\ No newline at end of file
+y
\ No newline at end of file
diff --git a/old.txt b/old.txt
deleted file mode 100644
--- a/old.txt
+++ /dev/null
@@ -1 +0,0 @@
-gone
diff --git a/sub/new.txt b/sub/new.txt
new file mode 100644
--- /dev/null
+++ b/sub/new.txt
@@ -0,0 +1,2 @@
+new
+file
`
	if ch.Patch != want {
		t.Errorf("patch:\n%s\nwant:\n%s", ch.Patch, want)
	}
	// Mark replaces a checkpoint of the same name; no changes since then.
	if err := in.Mark(bg, "/workspace", "start"); err != nil {
		t.Fatal(err)
	}
	if ch, _ := in.Changes(bg, "/workspace", "start"); len(ch.Added)+len(ch.Modified)+len(ch.Removed) != 0 || ch.Patch != "" {
		t.Errorf("changes right after Mark: %+v", ch)
	}
	if _, err := in.Changes(bg, "/workspace", "nosuch"); !errors.Is(err, provider.CodeInvalidArgument) {
		t.Errorf("unknown checkpoint: %v", err)
	}
}

func TestChangesHunks(t *testing.T) {
	var a, b []string
	for i := 1; i <= 30; i++ {
		a = append(a, itoa(i)+"\n")
		switch i {
		case 5:
			b = append(b, "five\n")
		case 15:
		case 25:
			b = append(b, "twentyfive\n")
		default:
			b = append(b, itoa(i)+"\n")
		}
	}
	want := "@@ -2,7 +2,7 @@\n 2\n 3\n 4\n-5\n+five\n 6\n 7\n 8\n" +
		"@@ -12,7 +12,6 @@\n 12\n 13\n 14\n-15\n 16\n 17\n 18\n" +
		"@@ -22,7 +21,7 @@\n 22\n 23\n 24\n-25\n+twentyfive\n 26\n 27\n 28\n"
	if got := unifiedHunks(a, b, 3); got != want {
		t.Errorf("hunks:\n%s\nwant:\n%s", got, want)
	}
}

// TestDiffApplies checks on random inputs that the edit script turns a into b and is minimal
// enough to keep every common prefix and suffix line.
func TestDiffApplies(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	words := []string{"a\n", "b\n", "c\n", "d\n"}
	for range 500 {
		var a, b []string
		for range r.IntN(12) {
			a = append(a, words[r.IntN(len(words))])
		}
		for range r.IntN(12) {
			b = append(b, words[r.IntN(len(words))])
		}
		var gotA, gotB []string
		for _, e := range diffLines(a, b) {
			switch e.op {
			case ' ':
				if a[e.a] != b[e.b] {
					t.Fatalf("kept lines differ: %q %q", a[e.a], b[e.b])
				}
				gotA, gotB = append(gotA, a[e.a]), append(gotB, b[e.b])
			case '-':
				gotA = append(gotA, a[e.a])
			case '+':
				gotB = append(gotB, b[e.b])
			}
		}
		if !slices.Equal(gotA, a) || !slices.Equal(gotB, b) {
			t.Fatalf("script does not rebuild the inputs:\na %q\nb %q", a, b)
		}
		if lcs := lcsLen(a, b); countKept(diffLines(a, b)) != lcs {
			t.Fatalf("script keeps %d lines, the longest common subsequence has %d: %q %q", countKept(diffLines(a, b)), lcs, a, b)
		}
	}
}

func countKept(es []edit) int {
	n := 0
	for _, e := range es {
		if e.op == ' ' {
			n++
		}
	}
	return n
}

func lcsLen(a, b []string) int {
	dp := make([][]int, len(a)+1)
	for i := range dp {
		dp[i] = make([]int, len(b)+1)
	}
	for i := len(a) - 1; i >= 0; i-- {
		for j := len(b) - 1; j >= 0; j-- {
			if a[i] == b[j] {
				dp[i][j] = dp[i+1][j+1] + 1
			} else {
				dp[i][j] = max(dp[i+1][j], dp[i][j+1])
			}
		}
	}
	return dp[0][0]
}

func TestChangesBinaryAndLinks(t *testing.T) {
	in := newInstance(t, provider.CreateSpec{})
	if err := in.Mark(bg, "/workspace", "m"); err != nil {
		t.Fatal(err)
	}
	sh(t, in, `printf 'a\000b' > bin; ln -s target link`)
	ch, err := in.Changes(bg, "/workspace", "m")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(ch.Patch, "Binary files /dev/null and b/bin differ\n") {
		t.Errorf("binary file patch:\n%s", ch.Patch)
	}
	if !strings.Contains(ch.Patch, "new file mode 120000\n--- /dev/null\n+++ b/link\n@@ -0,0 +1 @@\n+target\n\\ No newline at end of file\n") {
		t.Errorf("symlink patch:\n%s", ch.Patch)
	}
}
