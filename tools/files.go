package tools

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/sandbox"
)

// Tools that read, write, list and search files.

func fileTools() []Tool {
	return []Tool{
		define(Tool{
			Name: "read_file",
			Description: "Read a text file from the sandbox. Long files are cut at 64 KiB; read a range of lines with " +
				"start_line and end_line. Line numbers start at 1.",
			ReadOnly: true,
		}, readFile),
		define(Tool{
			Name:        "write_file",
			Description: "Create or replace a file in the sandbox with the given content, creating parent directories. To change part of an existing file, edit_file is safer.",
			Destructive: true,
		}, writeFile),
		define(Tool{
			Name: "edit_file",
			Description: "Replace one exact occurrence of find with replace in a file. find must occur exactly once, " +
				"whitespace included: if it does not occur, or occurs more than once, nothing changes and " +
				"the error says which; then read the file again, or include more surrounding lines.",
			Destructive: true,
		}, editFile),
		define(Tool{
			Name:        "list_files",
			Description: "List a directory in the sandbox: one entry per line with its type, size and path. Directories end in /.",
			ReadOnly:    true,
		}, listFiles),
		define(Tool{
			Name:        "search_files",
			Description: "Search the text files below a directory for lines containing a literal string (not a regular expression). Returns path:line: text for each match.",
			ReadOnly:    true,
		}, searchFiles),
		define(Tool{
			Name: "file_changes",
			Description: "Show what changed under /workspace since the sandbox was created: files added, modified " +
				"and removed, and a unified diff. Useful to review your own work before reporting it.",
			ReadOnly: true,
		}, fileChanges),
	}
}

// filePath is the path of the file a tool reads or changes.
type filePath struct {
	Path string `json:"path" jsonschema:"File path, absolute or relative to the working directory (/workspace unless the sandbox's template sets one)." minLength:"1"`
	inSandbox
}

type readFileArgs struct {
	filePath
	StartLine int `json:"start_line,omitempty" jsonschema:"First line to return. Default: 1." minimum:"1" maximum:"2147483647"`
	EndLine   int `json:"end_line,omitempty" jsonschema:"Last line to return, inclusive. Default: the end of the file." minimum:"1" maximum:"2147483647"`
}

// maxReadBytes is how much of a file read_file loads to pick lines from.
const maxReadBytes = 8 << 20

func readFile(ctx context.Context, s *Session, a readFileArgs) (Result, error) {
	if a.EndLine != 0 && a.StartLine > a.EndLine {
		return Result{}, &ArgumentError{Tool: "read_file", Message: "start_line is after end_line"}
	}
	b, err := s.Sandbox(ctx, a.SandboxID)
	if err != nil {
		return Result{}, err
	}
	rc, err := b.Files.Open(ctx, a.Path)
	if err != nil {
		return Result{}, err
	}
	data, err := io.ReadAll(io.LimitReader(rc, maxReadBytes+1))
	rc.Close()
	if err != nil {
		return Result{}, err
	}
	partial := len(data) > maxReadBytes
	if partial {
		data = data[:maxReadBytes]
	}
	if bytes.IndexByte(data, 0) >= 0 || !utf8.Valid(trimPartialRune(data)) {
		return Result{
			Text:    fmt.Sprintf("%s is a binary file; read_file shows text only (try run_command with `file` or `xxd | head`)", a.Path),
			IsError: true,
		}, nil
	}
	text := string(data)
	var notes []string
	if a.StartLine > 0 || a.EndLine > 0 {
		lines := strings.SplitAfter(text, "\n")
		if lines[len(lines)-1] == "" {
			lines = lines[:len(lines)-1]
		}
		start := max(a.StartLine, 1)
		end := a.EndLine
		if end == 0 || end > len(lines) {
			end = len(lines)
		}
		if start > len(lines) {
			return Result{Text: fmt.Sprintf("%s has only %d lines", a.Path, len(lines)), IsError: true}, nil
		}
		text = strings.Join(lines[start-1:end], "")
		notes = append(notes, fmt.Sprintf("lines %d-%d of %d", start, end, len(lines)))
	}
	if len(text) > MaxFileBytes {
		cut := text[:MaxFileBytes]
		if i := strings.LastIndexByte(cut, '\n'); i > 0 {
			cut = cut[:i+1]
		}
		for len(cut) > 0 && !utf8.ValidString(cut) {
			cut = cut[:len(cut)-1]
		}
		shown := strings.Count(cut, "\n")
		notes = append(notes, fmt.Sprintf("cut at %d bytes (%d lines shown): pass start_line to read further", len(cut), shown))
		text = cut
	} else if partial {
		notes = append(notes, fmt.Sprintf("only the first %d MiB of the file were read", maxReadBytes>>20))
	}
	out := text
	if len(notes) > 0 {
		out += "\n[" + strings.Join(notes, "; ") + "]"
	}
	return Result{Text: out, Data: map[string]any{"path": a.Path, "content": text}}, nil
}

// trimPartialRune drops an incomplete UTF-8 sequence at the end of data (cut by a limit).
func trimPartialRune(data []byte) []byte {
	for i := 0; i < utf8.UTFMax && len(data) > 0; i++ {
		r, size := utf8.DecodeLastRune(data)
		if r != utf8.RuneError || size != 1 {
			break
		}
		data = data[:len(data)-1]
	}
	return data
}

type writeFileArgs struct {
	filePath
	Content string `json:"content" jsonschema:"The complete new content of the file."`
}

func writeFile(ctx context.Context, s *Session, a writeFileArgs) (Result, error) {
	b, err := s.Sandbox(ctx, a.SandboxID)
	if err != nil {
		return Result{}, err
	}
	if err := b.Files.Write(ctx, a.Path, []byte(a.Content), sandbox.WriteOptions{}); err != nil {
		return Result{}, err
	}
	return Result{Text: fmt.Sprintf("wrote %d bytes to %s", len(a.Content), a.Path), Data: map[string]any{"path": a.Path, "bytes": len(a.Content)}}, nil
}

type editFileArgs struct {
	filePath
	Find    string `json:"find" jsonschema:"The exact text to replace, as it appears in the file." minLength:"1"`
	Replace string `json:"replace" jsonschema:"The text to put in its place (empty to delete it)."`
}

func editFile(ctx context.Context, s *Session, a editFileArgs) (Result, error) {
	b, err := s.Sandbox(ctx, a.SandboxID)
	if err != nil {
		return Result{}, err
	}
	if err := b.Files.Edit(ctx, a.Path, a.Find, a.Replace); err != nil {
		return Result{}, err
	}
	return Result{Text: "edited " + a.Path, Data: map[string]any{"path": a.Path}}, nil
}

type listFilesArgs struct {
	Path      string `json:"path,omitempty" jsonschema:"Directory, absolute or relative to the working directory. Default: the working directory (/workspace unless the sandbox's template sets one)."`
	Recursive bool   `json:"recursive,omitempty" jsonschema:"List everything below the directory, not just its entries. Default: false."`
	Glob      string `json:"glob,omitempty" jsonschema:"Only entries whose name matches this pattern, e.g. *.go (with a /, the pattern matches the path relative to the directory; ** matches any depth)."`
	inSandbox
}

func listFiles(ctx context.Context, s *Session, a listFilesArgs) (Result, error) {
	b, err := s.Sandbox(ctx, a.SandboxID)
	if err != nil {
		return Result{}, err
	}
	infos, err := b.Files.List(ctx, a.Path, sandbox.FileListOptions{Recursive: a.Recursive, Glob: a.Glob})
	if err != nil {
		return Result{}, err
	}
	var t strings.Builder
	items := []map[string]any{}
	for i, fi := range infos {
		if i == MaxListEntries {
			fmt.Fprintf(&t, "[… %d more entries not shown: list a subdirectory or use glob]\n", len(infos)-i)
			break
		}
		p := fi.Path
		if fi.Type == provider.TypeDir {
			p += "/"
		}
		fmt.Fprintf(&t, "%-7s %10d  %s\n", fi.Type, fi.Size, p)
		items = append(items, map[string]any{"path": fi.Path, "type": string(fi.Type), "size": fi.Size})
	}
	if len(infos) == 0 {
		t.WriteString("(empty)\n")
	}
	return Result{Text: t.String(), Data: map[string]any{"entries": items}}, nil
}

type searchFilesArgs struct {
	Query      string `json:"query" jsonschema:"The text to look for, on one line." minLength:"1"`
	Path       string `json:"path,omitempty" jsonschema:"Directory to search, absolute or relative to the working directory. Default: the working directory (/workspace unless the sandbox's template sets one)."`
	Glob       string `json:"glob,omitempty" jsonschema:"Only files whose name matches this pattern, e.g. *.go."`
	MaxMatches int    `json:"max_matches,omitempty" jsonschema:"Most matches to return. Default: 100." minimum:"1" maximum:"1000"`
	inSandbox
}

func searchFiles(ctx context.Context, s *Session, a searchFilesArgs) (Result, error) {
	if strings.ContainsAny(a.Query, "\n\x00") {
		return Result{}, &ArgumentError{Tool: "search_files", Message: "query must be one line"}
	}
	maxMatches := a.MaxMatches
	if maxMatches == 0 {
		maxMatches = 100
	}
	b, err := s.Sandbox(ctx, a.SandboxID)
	if err != nil {
		return Result{}, err
	}
	matches, err := b.Files.Search(ctx, a.Query, sandbox.SearchOptions{Path: a.Path, Glob: a.Glob, MaxMatches: maxMatches + 1})
	if err != nil {
		return Result{}, err
	}
	more := len(matches) > maxMatches
	if more {
		matches = matches[:maxMatches]
	}
	var t strings.Builder
	items := []map[string]any{}
	for _, m := range matches {
		line := m.Text
		if len(line) > maxLineChars {
			line = line[:maxLineChars]
			for len(line) > 0 && !utf8.ValidString(line) {
				line = line[:len(line)-1]
			}
			line += "…"
		}
		fmt.Fprintf(&t, "%s:%d: %s\n", m.Path, m.Line, line)
		items = append(items, map[string]any{"path": m.Path, "line": m.Line, "text": line})
	}
	text, cut := clip(t.String(), MaxStreamBytes)
	switch {
	case len(matches) == 0:
		text = "no matches\n"
	case more || cut:
		text += fmt.Sprintf("[more matches exist: narrow path or glob, or raise max_matches (now %d)]\n", maxMatches)
	}
	return Result{Text: text, Data: map[string]any{"matches": items, "more": more}}, nil
}

func fileChanges(ctx context.Context, s *Session, a inSandbox) (Result, error) {
	b, err := s.Sandbox(ctx, a.SandboxID)
	if err != nil {
		return Result{}, err
	}
	ch, err := b.Files.Changes(ctx, sandbox.ChangesOptions{})
	if err != nil {
		if terr := s.trackErr(b.ID); terr != nil {
			return Result{Text: "file_changes is unavailable in this sandbox: recording its starting point failed: " + terr.Error(), IsError: true}, nil
		}
		return Result{}, err
	}
	var t strings.Builder
	for _, g := range []struct {
		label string
		paths []string
	}{{"added", ch.Added}, {"modified", ch.Modified}, {"removed", ch.Removed}} {
		for i, p := range g.paths {
			if i == MaxListEntries {
				fmt.Fprintf(&t, "[… %d more %s]\n", len(g.paths)-i, g.label)
				break
			}
			fmt.Fprintf(&t, "%s %s\n", g.label, p)
		}
	}
	patch, _ := clip(ch.Patch, MaxStreamBytes)
	if t.Len() == 0 {
		t.WriteString("no changes under /workspace since the sandbox was created\n")
	} else if patch != "" {
		block(&t, "diff", patch)
	}
	data := map[string]any{"added": nonNil(ch.Added), "modified": nonNil(ch.Modified), "removed": nonNil(ch.Removed), "patch": patch}
	return Result{Text: t.String(), Data: data}, nil
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
