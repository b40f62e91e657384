package dockerfile

import (
	"bufio"
	"fmt"
	"path"
	"strings"

	"github.com/bmatcuk/doublestar/v4"
)

// Ignore is a parsed .dockerignore: which paths of a build context the build never sees.
type Ignore struct{ rules []rule }

type rule struct {
	pattern string
	negate  bool
}

// ParseIgnore parses a .dockerignore: one pattern per line (path.Match syntax plus "**" for
// any number of directories), relative to the context's root, "#" comment lines, and
// "!pattern" exceptions. The last pattern that matches a path decides.
func ParseIgnore(src string) (*Ignore, error) {
	ig := &Ignore{}
	sc := bufio.NewScanner(strings.NewReader(src))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		r := rule{}
		if strings.HasPrefix(line, "!") {
			r.negate = true
			line = strings.TrimSpace(line[1:])
		}
		line = strings.TrimPrefix(path.Clean("/"+line), "/")
		if line == "" {
			line = "."
		}
		if !doublestar.ValidatePattern(line) {
			return nil, &Error{Msg: fmt.Sprintf(".dockerignore line %d: malformed pattern %q", n, line)}
		}
		r.pattern = line
		ig.rules = append(ig.rules, r)
	}
	return ig, sc.Err()
}

// Excluded reports whether the context path p (slash-separated, relative to the context's
// root) is excluded: a pattern matches p or one of its parent directories.
func (ig *Ignore) Excluded(p string) bool {
	if ig == nil {
		return false
	}
	p = strings.TrimPrefix(path.Clean("/"+p), "/")
	excluded := false
	for _, r := range ig.rules {
		if r.matches(p) {
			excluded = !r.negate
		}
	}
	return excluded
}

// MayHaveExceptions reports whether some "!" rule could re-include a path below the
// excluded directory dir, so a walk must still look inside it.
func (ig *Ignore) MayHaveExceptions() bool {
	if ig == nil {
		return false
	}
	for _, r := range ig.rules {
		if r.negate {
			return true
		}
	}
	return false
}

func (r rule) matches(p string) bool {
	if r.pattern == "." {
		return true
	}
	for q := p; q != "." && q != "/" && q != ""; q = path.Dir(q) {
		if ok, _ := doublestar.Match(r.pattern, q); ok {
			return true
		}
	}
	return false
}
