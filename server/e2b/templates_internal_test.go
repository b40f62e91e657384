package e2b

import (
	"archive/tar"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tupper-dev/tupper/internal/testenv"
	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/template/dockerfile"
)

const testHash = "bb849a9e2c530fcc0acef303c1c193c6eb443d03597fe7f2005a62a3cfb80513"

func uploadTar(t *testing.T, dir, hash string, names ...string) {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, n := range names {
		tw.WriteHeader(&tar.Header{Name: n, Mode: 0o644, Size: 1, Typeflag: tar.TypeReg})
		tw.Write([]byte("x"))
	}
	tw.Close()
	if err := os.WriteFile(filepath.Join(dir, hash+".tar"), buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestTranslate: E2B's steps become a Dockerfile the builder parses back to exactly the
// values given (quotes, $, backquotes and backslashes in ENV and WORKDIR, a multi-line RUN),
// a RUN's user around it, each line named by its E2B step; and what cannot be built is
// refused with invalid_argument.
func TestTranslate(t *testing.T) {
	testenv.RequireRoot(t) // unpacking keeps the tar's owners
	uploads := t.TempDir()
	uploadTar(t, uploads, testHash, "hello.txt")
	weird := `a "$b" ${c} ` + "`d`" + ` \e 'f'`
	req := buildStart{FromTemplate: "bb", Steps: []templateStep{
		{Type: "ENV", Args: []string{"W", weird, "EMPTY", ""}},
		{Type: "WORKDIR", Args: []string{"/srv/$HOME dir"}},
		{Type: "RUN", Args: []string{"echo one\necho 'two' > /tmp/x && cat <file", "root"}},
		{Type: "COPY", Args: []string{"hello.txt", "/app/", "1000:1000", "0755"}, FilesHash: testHash},
		{Type: "USER", Args: []string{"user"}},
		{Type: "RUN", Args: []string{"true", "user"}, Force: true},
	}}
	ctxDir := filepath.Join(uploads, "context")
	df, steps, noCache, err := translate(context.Background(), req, uploads, ctxDir, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !noCache {
		t.Error("a forced step does not skip the cache")
	}
	f, err := dockerfile.Parse(df)
	if err != nil {
		t.Fatalf("the Dockerfile does not parse: %v\n%s", err, df)
	}
	body := f.Stages[0].Body
	got := map[string][]string{}
	var names []string
	for _, in := range body {
		words, err := in.Expand(func(string) (string, bool) { return "", false })
		if err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		got[in.Cmd] = append(got[in.Cmd], strings.Join(words, "|"))
		names = append(names, steps[in.Line])
	}
	if f.Stages[0].Base != "bb" || steps[f.Stages[0].From.Line] != "base" {
		t.Errorf("FROM: %+v, step %q", f.Stages[0].From, steps[f.Stages[0].From.Line])
	}
	want := map[string][]string{
		"ENV":     {"W=" + weird + "|EMPTY="},
		"WORKDIR": {"/srv/$HOME dir"},
		"RUN":     {"/bin/sh|-c|echo one\necho 'two' > /tmp/x && cat <file", "/bin/sh|-c|true"},
		"COPY":    {testHash + "/hello.txt|/app/"},
		"USER":    {"root", "root", "user"},
	}
	for k, v := range want {
		if !slices.Equal(got[k], v) {
			t.Errorf("%s = %q, want %q\n%s", k, got[k], v, df)
		}
	}
	if !slices.Equal(names, []string{"1", "2", "3", "3", "3", "4", "5", "6"}) {
		t.Errorf("step names of the lines: %q\n%s", names, df)
	}
	if _, err := os.Stat(filepath.Join(ctxDir, testHash, "hello.txt")); err != nil {
		t.Errorf("the upload was not unpacked into the context: %v", err)
	}

	uploadTar(t, uploads, strings.Repeat("e", 64), "../escape.txt")
	for _, c := range []struct {
		name string
		req  buildStart
		msg  string
	}{
		{"no base", buildStart{}, "exactly one of fromImage and fromTemplate"},
		{"two bases", buildStart{FromImage: "x", FromTemplate: "y"}, "exactly one"},
		{"base with a line break", buildStart{FromTemplate: "bb\nRUN evil"}, "not a template name"},
		{"registry credentials", buildStart{FromImage: "x", FromImageRegistry: []byte(`{"type":"registry"}`)}, "credentials are not supported"},
		{"unknown step", buildStart{FromTemplate: "bb", Steps: []templateStep{{Type: "ADD", Args: []string{"a", "b"}}}}, `step type "ADD"`},
		{"copy out of the context", buildStart{FromTemplate: "bb", Steps: []templateStep{{Type: "COPY", Args: []string{"../x", "/x"}, FilesHash: testHash}}}, "without '..'"},
		{"copy an absolute path", buildStart{FromTemplate: "bb", Steps: []templateStep{{Type: "COPY", Args: []string{"/etc/passwd", "/x"}, FilesHash: testHash}}}, "relative"},
		{"copy not uploaded", buildStart{FromTemplate: "bb", Steps: []templateStep{{Type: "COPY", Args: []string{"a", "/x"}, FilesHash: strings.Repeat("0", 64)}}}, "were not uploaded"},
		{"copy without a hash", buildStart{FromTemplate: "bb", Steps: []templateStep{{Type: "COPY", Args: []string{"a", "/x"}, FilesHash: "../../x"}}}, "filesHash"},
		{"an upload with '..'", buildStart{FromTemplate: "bb", Steps: []templateStep{{Type: "COPY", Args: []string{"a", "/x"}, FilesHash: strings.Repeat("e", 64)}}}, "'..' in path"},
		{"bad user", buildStart{FromTemplate: "bb", Steps: []templateStep{{Type: "USER", Args: []string{"a b"}}}}, "USER takes"},
		{"bad run user", buildStart{FromTemplate: "bb", Steps: []templateStep{{Type: "RUN", Args: []string{"true", "x\nRUN y"}}}}, "user"},
		{"bad env name", buildStart{FromTemplate: "bb", Steps: []templateStep{{Type: "ENV", Args: []string{"1X", "v"}}}}, "variable name"},
		{"env with a line break", buildStart{FromTemplate: "bb", Steps: []templateStep{{Type: "ENV", Args: []string{"X", "a\nRUN evil"}}}}, "line break"},
		{"bad mode", buildStart{FromTemplate: "bb", Steps: []templateStep{{Type: "COPY", Args: []string{"hello.txt", "/x", "", "rwx"}, FilesHash: testHash}}}, "not octal"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, _, _, err := translate(context.Background(), c.req, uploads, filepath.Join(t.TempDir(), "ctx"), 0)
			if provider.CodeOf(err) != provider.CodeInvalidArgument || !strings.Contains(err.Error(), c.msg) {
				t.Errorf("translate = %v; want invalid_argument containing %q", err, c.msg)
			}
			if _, err := os.Stat(filepath.Join(uploads, "escape.txt")); err == nil {
				t.Fatal("an upload's entry was written outside the context")
			}
		})
	}
}
