package template

import (
	"strings"
	"testing"
)

// A code-interpreter template made by another tupper (another server or Dockerfile) is not
// current, so Ensure rebuilds it; one made by this one is.
func TestCodeInterpreterCurrent(t *testing.T) {
	df := codeInterpreterDockerfile()
	for _, group := range CodeInterpreterPackages {
		if !strings.Contains(df, strings.Join(group, " ")) {
			t.Errorf("the Dockerfile lacks the group %v:\n%s", group, df)
		}
	}
	if !strings.Contains(df, "COPY server.py kernel.js ") {
		t.Errorf("the Dockerfile does not copy the server:\n%s", df)
	}
	label := df[strings.LastIndex(df, "=")+1 : len(df)-1]
	if len(label) != 16 {
		t.Fatalf("label %q", label)
	}
	cur := &Template{Config: Config{Labels: map[string]string{codeInterpreterLabel: label}}}
	if !codeInterpreterCurrent(cur) {
		t.Error("a template of this Dockerfile is not current")
	}
	for _, old := range []map[string]string{nil, {codeInterpreterLabel: "0123456789abcdef"}} {
		if codeInterpreterCurrent(&Template{Config: Config{Labels: old}}) {
			t.Errorf("a template labelled %v is current", old)
		}
	}
}
