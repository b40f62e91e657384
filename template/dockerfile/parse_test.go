package dockerfile

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

const sample = `# syntax=docker/dockerfile:1
# escape=\
ARG BASE=debian
ARG TAG

FROM ${BASE}:${TAG:-bookworm} AS build
# a comment
RUN apt-get update && \
    # comments inside a continuation are dropped
    apt-get install -y \
      python3
RUN ["/bin/sh", "-c", "echo exec form"]
ENV A=1 B="two words" C=$A
ENV LEGACY value with spaces
COPY --chown=1000:1000 --chmod=0644 src/ "dir with space/" /app/
WORKDIR /app
USER user

FROM scratch
COPY --from=build /app /app
LABEL org.example.v="1" other=x
EXPOSE 8080/tcp 9000
SHELL ["/bin/bash", "-c"]
CMD python3 -m http.server
ENTRYPOINT ["tini", "--"]
`

func TestParse(t *testing.T) {
	f, err := Parse(sample)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Args) != 2 || len(f.Stages) != 2 {
		t.Fatalf("args %d stages %d", len(f.Args), len(f.Stages))
	}
	b := f.Stages[0]
	if b.Name != "build" || b.Base != "${BASE}:${TAG:-bookworm}" || b.From.Line != 6 {
		t.Fatalf("stage 0 = %+v", b)
	}
	run := b.Body[0]
	if run.Cmd != "RUN" || run.Line != 8 || run.JSON || len(run.Args) != 1 ||
		strings.Join(strings.Fields(run.Args[0]), " ") != "apt-get update && apt-get install -y python3" {
		t.Fatalf("RUN = %#v", run)
	}
	if exec := b.Body[1]; !exec.JSON || !reflect.DeepEqual(exec.Args, []string{"/bin/sh", "-c", "echo exec form"}) {
		t.Fatalf("exec RUN = %#v", exec)
	}
	env := map[string]string{}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	env["A"] = "1"
	got, err := b.Body[2].Expand(lookup)
	if err != nil || !reflect.DeepEqual(got, []string{"A=1", "B=two words", "C=1"}) {
		t.Fatalf("ENV = %q, %v", got, err)
	}
	if got, _ := b.Body[3].Expand(lookup); !reflect.DeepEqual(got, []string{"LEGACY=value with spaces"}) {
		t.Fatalf("legacy ENV = %q", got)
	}
	cp := b.Body[4]
	got, err = cp.Expand(lookup)
	if err != nil || cp.Flags["chown"] != "1000:1000" || cp.Flags["chmod"] != "0644" ||
		!reflect.DeepEqual(got, []string{"src/", "dir with space/", "/app/"}) {
		t.Fatalf("COPY = %q %v, %v", got, cp.Flags, err)
	}
	s := f.Stages[1]
	if s.Name != "" || s.Base != "scratch" || s.Body[0].Flags["from"] != "build" {
		t.Fatalf("stage 1 = %+v", s)
	}
	if got, _ := s.Body[1].Expand(lookup); !reflect.DeepEqual(got, []string{"org.example.v=1", "other=x"}) {
		t.Fatalf("LABEL = %q", got)
	}
	if sh := s.Body[3]; !sh.JSON || sh.Args[0] != "/bin/bash" {
		t.Fatalf("SHELL = %#v", sh)
	}
	if cmd := s.Body[4]; cmd.JSON || cmd.Args[0] != "python3 -m http.server" {
		t.Fatalf("CMD = %#v", cmd)
	}
}

func TestExpand(t *testing.T) {
	vars := map[string]string{"A": "x", "EMPTY": "", "P": "/usr/bin"}
	lookup := func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
	cases := map[string][]string{
		`$A`:                 {"x"},
		`${A}y`:              {"xy"},
		`${UNSET:-dflt}`:     {"dflt"},
		`${EMPTY:-dflt}`:     {"dflt"},
		`${A:+alt}`:          {"alt"},
		`${UNSET:+alt}`:      nil,
		`'$A'`:               {"$A"},
		`"$A b"`:             {"x b"},
		`\$A`:                {"$A"},
		`$P:/opt`:            {"/usr/bin:/opt"},
		`a$UNSET b`:          {"a", "b"},
		`$ 5`:                {"$", "5"},
		`"a \"q\" \n"`:       {`a "q" \n`},
		`${A:-"two words"}z`: {"xz"},
	}
	for in, want := range cases {
		got, err := lex(in, '\\', lookup)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("lex(%s) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{`${A`, `${A:?x}`, `${1x}`, `"open`} {
		if _, err := lex(bad, '\\', lookup); err == nil {
			t.Errorf("lex(%s) accepted", bad)
		}
	}
}

func TestParseErrorsNameTheLine(t *testing.T) {
	cases := map[string]int{
		"FROM a\nHEALTHCHECK CMD true":                2,
		"FROM a\nRUN --mount=type=cache true":         2,
		"RUN true":                                    1,
		"FROM a\n\nCOPY onlyone":                      3,
		"FROM a\nUSER a b":                            2,
		"FROM a\nSHELL /bin/sh":                       2,
		"FROM a\nENV 1BAD=x":                          2,
		"FROM a AS x\nFROM b AS x":                    2,
		"FROM a\nCOPY --chown 1 a b":                  2,
		"# escape=x\nFROM a":                          1,
		"FROM a\nVOLUME /data":                        2,
		"FROM a b c d":                                1,
		"FROM a\nENV KEYONLY":                         2,
		"FROM a\nADD --from=x a b":                    2,
		"FROM a\nARG 9x":                              2,
		"FROM a\nRUN":                                 2,
		"FROM a\nCOPY [\"a\", \"b\"":                  2,
		"# directive=x\nFROM a":                       1,
		"FROM a\nLABEL =x":                            2,
		"FROM a\nSTOPSIGNAL SIGTERM":                  2,
		"FROM a\nEXPOSE 80\nONBUILD RUN x":            3,
		"FROM a\nWORKDIR /x\nMAINTAINER me":           3,
		"FROM a\nRUN echo \\\n  x\nCOPY a":            4,
		"FROM a\nUSER":                                2,
		"FROM a AS 1bad":                              1,
		"FROM a\nRUN true\n\n\nCMD [\"unterminated\"": 0, // not JSON: shell form, accepted
	}
	for src, line := range cases {
		_, err := Parse(src)
		if line == 0 {
			if err != nil {
				t.Errorf("Parse(%q): %v", src, err)
			}
			continue
		}
		var e *Error
		if !errors.As(err, &e) || e.Line != line {
			t.Errorf("Parse(%q) = %v; want an error at line %d", src, err, line)
		}
	}
	if _, err := Parse("# only a comment\n"); err == nil || !strings.Contains(err.Error(), "no FROM") {
		t.Errorf("empty Dockerfile: %v", err)
	}
}

func TestIgnore(t *testing.T) {
	ig, err := ParseIgnore("# comment\n*.log\n/build\n**/node_modules\ndocs\n!docs/README.md\n")
	if err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]bool{
		"a.log": true, "sub/a.log": false, "build": true, "build/x/y": true, "src/build": false,
		"node_modules/x": true, "a/b/node_modules/c": true, "docs/guide.md": true,
		"docs/README.md": false, "main.go": false, "./a.log": true,
	} {
		if got := ig.Excluded(p); got != want {
			t.Errorf("Excluded(%q) = %v, want %v", p, got, want)
		}
	}
	if _, err := ParseIgnore("[\n"); err == nil {
		t.Error("malformed pattern accepted")
	}
}
