// Package dockerfile parses Dockerfiles into stages of instructions, expands build
// variables the way a Dockerfile does, and matches .dockerignore patterns. It runs nothing:
// package template's builder executes what it returns.
//
// Supported instructions: FROM (with --platform and AS), RUN, COPY and ADD (with --from,
// --chown, --chmod), ENV, ARG, WORKDIR, USER, LABEL, EXPOSE, CMD, ENTRYPOINT and SHELL.
// Parse refuses any other instruction, and flags it does not know (RUN --mount, COPY --link
// …), with an error naming the line, rather than building something other than what the
// file says.
package dockerfile

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"unicode"
)

// Instruction is one instruction of a Dockerfile.
type Instruction struct {
	Line  int               // line where it starts, from 1
	Cmd   string            // upper case: RUN, COPY, …
	Flags map[string]string // --name=value before the arguments
	// Args are the arguments: for the exec (JSON) form the array's elements; for the shell
	// form of RUN, CMD and ENTRYPOINT one string, the rest of the line; for the others the
	// words as written, quotes and variables unprocessed (Expand processes them).
	Args     []string
	JSON     bool   // Args came from the exec form
	Original string // the instruction as written, continuation lines joined

	raw    []string // the words as written (quotes, escapes and variables unprocessed)
	legacy bool     // ENV or LABEL in the "KEY value…" form
	escape rune
}

func (in Instruction) String() string { return fmt.Sprintf("line %d: %s", in.Line, in.Original) }

// Stage is a FROM and the instructions up to the next FROM.
type Stage struct {
	Name     string // from "AS name", lower case; "" when unnamed
	Base     string // the FROM argument (variables unexpanded)
	Platform string
	From     Instruction
	Body     []Instruction
}

// File is a parsed Dockerfile.
type File struct {
	// Args are the ARG instructions before the first FROM: their values can be used in FROM.
	Args   []Instruction
	Stages []Stage
	Escape rune
}

// Error is a Dockerfile error at a line.
type Error struct {
	Line int
	Msg  string
}

func (e *Error) Error() string {
	if e.Line == 0 {
		return "Dockerfile: " + e.Msg
	}
	return fmt.Sprintf("Dockerfile line %d: %s", e.Line, e.Msg)
}

func errf(line int, format string, args ...any) error {
	return &Error{Line: line, Msg: fmt.Sprintf(format, args...)}
}

// flagsAllowed lists the flags each instruction takes.
var flagsAllowed = map[string][]string{
	"FROM":       {"platform"},
	"RUN":        nil,
	"COPY":       {"from", "chown", "chmod"},
	"ADD":        {"chown", "chmod"},
	"ENV":        nil,
	"ARG":        nil,
	"WORKDIR":    nil,
	"USER":       nil,
	"LABEL":      nil,
	"EXPOSE":     nil,
	"CMD":        nil,
	"ENTRYPOINT": nil,
	"SHELL":      nil,
}

// execForm are the instructions with an exec (JSON array) form.
var execForm = map[string]bool{"RUN": true, "CMD": true, "ENTRYPOINT": true, "SHELL": true}

// Parse parses a Dockerfile.
func Parse(src string) (*File, error) {
	f := &File{Escape: '\\'}
	lines := strings.Split(strings.ReplaceAll(src, "\r\n", "\n"), "\n")
	i := 0
	// Parser directives: comment lines of the form "# key=value" before anything else.
	for ; i < len(lines); i++ {
		t := strings.TrimSpace(lines[i])
		if !strings.HasPrefix(t, "#") {
			break
		}
		k, v, ok := strings.Cut(strings.TrimSpace(t[1:]), "=")
		if !ok || strings.ContainsAny(strings.TrimSpace(k), " \t") {
			break
		}
		switch strings.ToLower(strings.TrimSpace(k)) {
		case "escape":
			switch v = strings.TrimSpace(v); v {
			case "\\", "`":
				f.Escape = rune(v[0])
			default:
				return nil, errf(i+1, "escape directive %q: use \\ or `", v)
			}
		case "syntax", "check":
			// Frontend selection and lint settings: nothing to do for this builder.
		default:
			return nil, errf(i+1, "unknown parser directive %q", k)
		}
	}
	esc := string(f.Escape)
	for i < len(lines) {
		start := i
		t := strings.TrimSpace(lines[i])
		i++
		if t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		// Join continuation lines; comment and empty lines inside are dropped.
		logical := t
		for strings.HasSuffix(logical, esc) {
			logical = strings.TrimSuffix(logical, esc)
			for i < len(lines) {
				next := strings.TrimSpace(lines[i])
				if next == "" || strings.HasPrefix(next, "#") {
					i++
					continue
				}
				break
			}
			if i >= len(lines) {
				break
			}
			logical += " " + strings.TrimSpace(lines[i])
			i++
		}
		in, err := parseInstruction(start+1, logical, f.Escape)
		if err != nil {
			return nil, err
		}
		switch {
		case in.Cmd == "FROM":
			st, err := parseFrom(in)
			if err != nil {
				return nil, err
			}
			f.Stages = append(f.Stages, st)
		case len(f.Stages) == 0 && in.Cmd == "ARG":
			f.Args = append(f.Args, in)
		case len(f.Stages) == 0:
			return nil, errf(in.Line, "%s before the first FROM (only ARG may come before it)", in.Cmd)
		default:
			s := &f.Stages[len(f.Stages)-1]
			s.Body = append(s.Body, in)
		}
	}
	if len(f.Stages) == 0 {
		return nil, errf(0, "no FROM instruction")
	}
	seen := map[string]int{}
	for _, s := range f.Stages {
		if s.Name == "" {
			continue
		}
		if l, ok := seen[s.Name]; ok {
			return nil, errf(s.From.Line, "stage name %q is already used on line %d", s.Name, l)
		}
		seen[s.Name] = s.From.Line
	}
	return f, nil
}

func parseInstruction(line int, s string, escape rune) (Instruction, error) {
	cmd, rest, _ := strings.Cut(s, " ")
	if j := strings.IndexFunc(cmd, unicode.IsSpace); j >= 0 {
		cmd, rest = cmd[:j], cmd[j:]+" "+rest
	}
	in := Instruction{Line: line, Cmd: strings.ToUpper(cmd), Original: s, Flags: map[string]string{}}
	allowed, ok := flagsAllowed[in.Cmd]
	if !ok {
		return in, errf(line, "%s is not supported by this builder (supported: FROM, RUN, COPY, ADD, ENV, ARG, WORKDIR, USER, LABEL, EXPOSE, CMD, ENTRYPOINT, SHELL)", in.Cmd)
	}
	rest = strings.TrimSpace(rest)
	// Flags: --name=value words at the start.
	for strings.HasPrefix(rest, "--") {
		word, after, _ := strings.Cut(rest, " ")
		name, value, hasValue := strings.Cut(word[2:], "=")
		if !slices.Contains(allowed, name) {
			return in, errf(line, "%s --%s is not supported by this builder", in.Cmd, name)
		}
		if !hasValue || value == "" {
			return in, errf(line, "%s --%s needs a value (--%s=VALUE)", in.Cmd, name, name)
		}
		in.Flags[name] = value
		rest = strings.TrimSpace(after)
	}
	if rest == "" {
		return in, errf(line, "%s needs arguments", in.Cmd)
	}
	if execForm[in.Cmd] && strings.HasPrefix(rest, "[") {
		var arr []string
		if err := json.Unmarshal([]byte(rest), &arr); err == nil {
			if len(arr) == 0 {
				return in, errf(line, "%s [] is empty", in.Cmd)
			}
			in.Args, in.JSON = arr, true
			return in, nil
		}
		if in.Cmd == "SHELL" {
			return in, errf(line, `SHELL takes a JSON array, e.g. SHELL ["/bin/bash", "-c"]`)
		}
		// Not valid JSON: Docker runs it as a shell-form command, and so do we.
	}
	in.escape = escape
	switch in.Cmd {
	case "RUN", "CMD", "ENTRYPOINT":
		in.Args = []string{rest}
		return in, nil
	case "SHELL":
		return in, errf(line, `SHELL takes a JSON array, e.g. SHELL ["/bin/bash", "-c"]`)
	case "COPY", "ADD":
		if strings.HasPrefix(rest, "[") {
			var arr []string
			if err := json.Unmarshal([]byte(rest), &arr); err != nil {
				return in, errf(line, "%s: malformed JSON array: %v", in.Cmd, err)
			}
			in.Args, in.JSON = arr, true
			if len(arr) < 2 {
				return in, errf(line, "%s needs at least one source and a destination", in.Cmd)
			}
			return in, nil
		}
	}
	raw, err := lex(rest, escape, nil)
	if err != nil {
		return in, errf(line, "%s: %v", in.Cmd, err)
	}
	in.raw, in.Args = raw, raw
	switch in.Cmd {
	case "COPY", "ADD":
		if len(raw) < 2 {
			return in, errf(line, "%s needs at least one source and a destination", in.Cmd)
		}
	case "ENV", "LABEL":
		if !strings.Contains(raw[0], "=") {
			// The legacy form: KEY value, the value the rest of the line.
			if len(raw) < 2 {
				return in, errf(line, "%s %s needs a value: %s KEY=VALUE", in.Cmd, raw[0], in.Cmd)
			}
			in.legacy = true
			in.Args = []string{raw[0] + "=" + strings.TrimSpace(strings.TrimPrefix(rest, raw[0]))}
		}
		for _, p := range in.Args {
			k, _, ok := strings.Cut(p, "=")
			if !ok || k == "" {
				return in, errf(line, "%s %q: use KEY=VALUE", in.Cmd, p)
			}
			if in.Cmd == "ENV" && !validName(k) {
				return in, errf(line, "ENV %q: not a variable name", k)
			}
		}
	case "USER":
		if len(raw) != 1 {
			return in, errf(line, "USER takes one argument: USER name[:group]")
		}
	case "ARG":
		for _, a := range raw {
			if name, _, _ := strings.Cut(a, "="); !validName(name) {
				return in, errf(line, "ARG %q: not a variable name", name)
			}
		}
	case "FROM":
		if len(raw) != 1 && len(raw) != 3 {
			return in, errf(line, "FROM takes an image and an optional AS name: FROM image [AS name]")
		}
	}
	return in, nil
}

func parseFrom(in Instruction) (Stage, error) {
	st := Stage{From: in, Platform: in.Flags["platform"]}
	switch {
	case len(in.Args) == 1:
	case len(in.Args) == 3 && strings.EqualFold(in.Args[1], "AS"):
		st.Name = strings.ToLower(in.Args[2])
		if !validStageName(st.Name) {
			return st, errf(in.Line, "stage name %q: use letters, digits, '-', '_' and '.', starting with a letter", in.Args[2])
		}
	default:
		return st, errf(in.Line, "FROM takes an image and an optional AS name: FROM image [AS name]")
	}
	st.Base = in.Args[0]
	return st, nil
}

func validStageName(s string) bool {
	if s == "" || !unicode.IsLetter(rune(s[0])) {
		return false
	}
	for _, r := range s {
		if !(r < 128 && (unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_' || r == '.')) {
			return false
		}
	}
	return true
}

func validName(s string) bool {
	if s == "" || unicode.IsDigit(rune(s[0])) {
		return false
	}
	for _, r := range s {
		if !(r < 128 && (unicode.IsLetter(r) || unicode.IsDigit(r) || r == '_')) {
			return false
		}
	}
	return true
}

// lex splits s at unquoted white space, removing quotes; escape before a character takes
// it literally (in double quotes only before ", $, escape and `). With lookup, variables
// ($name, ${name}, ${name:-default}, ${name:+alternative}) outside single quotes are
// replaced by their values (an unset one by nothing); without, they stay as written.
func lex(s string, escape rune, lookup func(string) (string, bool)) ([]string, error) {
	var out []string
	var cur strings.Builder
	inWord := false
	var quote rune
	rs := []rune(s)
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		switch {
		case quote == 0 && unicode.IsSpace(r):
			if inWord {
				out = append(out, cur.String())
				cur.Reset()
				inWord = false
			}
		case r == escape && quote != '\'' && i+1 < len(rs):
			inWord = true
			i++
			if lookup == nil || quote == '"' && !strings.ContainsRune(`"$`+"`"+string(escape), rs[i]) {
				cur.WriteRune(r)
			}
			cur.WriteRune(rs[i])
		case quote == 0 && (r == '"' || r == '\''):
			quote, inWord = r, true
			if lookup == nil {
				cur.WriteRune(r)
			}
		case quote != 0 && r == quote:
			quote = 0
			if lookup == nil {
				cur.WriteRune(r)
			}
		case r == '$' && quote != '\'' && lookup != nil:
			v, n, err := expandAt(rs[i:], escape, lookup)
			if err != nil {
				return nil, err
			}
			inWord = inWord || v != ""
			cur.WriteString(v)
			i += n - 1
		default:
			inWord = true
			cur.WriteRune(r)
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("unterminated %c quote", quote)
	}
	if inWord {
		out = append(out, cur.String())
	}
	return out, nil
}

// expandAt expands the variable reference at the start of rs (rs[0] is '$') and returns its
// value and how many runes it took. A '$' not followed by a name is itself.
func expandAt(rs []rune, escape rune, lookup func(string) (string, bool)) (string, int, error) {
	if len(rs) < 2 {
		return "$", 1, nil
	}
	if rs[1] != '{' {
		j := 1
		for j < len(rs) && (rs[j] == '_' || rs[j] < 128 && (unicode.IsLetter(rs[j]) || j > 1 && unicode.IsDigit(rs[j]))) {
			j++
		}
		if j == 1 {
			return "$", 1, nil
		}
		v, _ := lookup(string(rs[1:j]))
		return v, j, nil
	}
	end := -1
	for j := 2; j < len(rs); j++ {
		if rs[j] == '}' {
			end = j
			break
		}
	}
	if end < 0 {
		return "", 0, fmt.Errorf("missing } in %q", string(rs))
	}
	body := string(rs[2:end])
	name, op, word := body, "", ""
	if k := strings.Index(body, ":"); k >= 0 {
		name, op, word = body[:k], body[k:min(k+2, len(body))], body[min(k+2, len(body)):]
	}
	if !validName(name) || op != "" && op != ":-" && op != ":+" {
		return "", 0, fmt.Errorf("bad substitution ${%s} (supported: ${name}, ${name:-default}, ${name:+alternative})", body)
	}
	v, set := lookup(name)
	switch op {
	case ":-":
		if !set || v == "" {
			w, err := lex(word, escape, lookup)
			if err != nil {
				return "", 0, err
			}
			v = strings.Join(w, " ")
		}
	case ":+":
		v = ""
		if set {
			w, err := lex(word, escape, lookup)
			if err != nil {
				return "", 0, err
			}
			v = strings.Join(w, " ")
		}
	}
	return v, end + 1, nil
}

// Expand returns in's arguments with the build's variables (lookup) substituted, for the
// instructions that substitute them (FROM, COPY, ADD, ENV, ARG, WORKDIR, USER, LABEL,
// EXPOSE). RUN, CMD and ENTRYPOINT are returned as they are: their shell expands them.
func (in Instruction) Expand(lookup func(string) (string, bool)) ([]string, error) {
	if in.JSON || in.Cmd == "RUN" || in.Cmd == "CMD" || in.Cmd == "ENTRYPOINT" || in.Cmd == "SHELL" {
		return in.Args, nil
	}
	var out []string
	if in.Cmd == "ENV" || in.Cmd == "LABEL" {
		if in.legacy {
			key, value, _ := strings.Cut(in.Args[0], "=")
			if k, err := lex(key, in.escape, lookup); err == nil && len(k) == 1 {
				key = k[0]
			}
			w, err := lex(value, in.escape, lookup)
			if err != nil {
				return nil, errf(in.Line, "%s: %v", in.Cmd, err)
			}
			return []string{key + "=" + strings.Join(w, " ")}, nil
		}
		for _, p := range in.raw {
			w, err := lex(p, in.escape, lookup)
			if err != nil {
				return nil, errf(in.Line, "%s: %v", in.Cmd, err)
			}
			out = append(out, strings.Join(w, ""))
		}
		return out, nil
	}
	if in.Cmd == "WORKDIR" && len(in.raw) > 1 {
		w, err := lex(strings.Join(in.raw, " "), in.escape, lookup)
		if err != nil {
			return nil, errf(in.Line, "%s: %v", in.Cmd, err)
		}
		return []string{strings.Join(w, " ")}, nil
	}
	for _, p := range in.raw {
		w, err := lex(p, in.escape, lookup)
		if err != nil {
			return nil, errf(in.Line, "%s: %v", in.Cmd, err)
		}
		out = append(out, w...)
	}
	return out, nil
}
