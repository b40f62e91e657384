package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/bmatcuk/doublestar/v4"

	"github.com/tupper-dev/tupper/provider"
)

// Files is a sandbox's file API. Relative paths resolve against the sandbox's Workdir.
type Files struct{ b *Sandbox }

// FileInfo describes a file in the sandbox.
type FileInfo struct {
	Path       string            // absolute
	Type       provider.FileType // "file", "dir", "symlink" or "other"
	Size       int64
	Mode       uint32 // permission bits
	ModifiedAt time.Time
}

// WriteOptions configures Write.
type WriteOptions struct {
	// Mode sets the permission bits of every file written, 0 to 0o7777; nil keeps the
	// provider's default (0o644 for new files). Use Mode(0o600).
	Mode *int
}

// Mode returns a pointer to m for WriteOptions.Mode.
func Mode(m int) *int { return &m }

func (o WriteOptions) mode(op string) (*uint32, error) {
	if o.Mode == nil {
		return nil, nil
	}
	m := *o.Mode
	if m < 0 || m > 0o7777 {
		return nil, errorf(CodeInvalidArgument, op, "mode %#o is not an integer from 0 to 0o7777", m)
	}
	u := uint32(m)
	return &u, nil
}

// ListOptions configures Files.List.
type FileListOptions struct {
	Recursive bool
	// Glob keeps entries whose path relative to the listed directory matches, e.g. "*.go" or
	// "**/*.go" (doublestar syntax). A pattern without a slash matches the base name.
	Glob string
}

// RemoveOptions configures Files.Remove.
type RemoveOptions struct {
	Recursive bool // remove a directory and everything in it
}

// UploadOptions configures Files.Upload.
type UploadOptions struct {
	// Ignore skips local paths that match any pattern (doublestar syntax, relative to the
	// local directory); a pattern without a slash matches any path component, so
	// "node_modules" skips every node_modules directory.
	Ignore []string
}

// SearchOptions configures Files.Search.
type SearchOptions struct {
	Path       string // directory to search; "" is the sandbox's Workdir
	Glob       string // base-name pattern of files to search, e.g. "*.go"
	MaxMatches int    // 0: 1000
}

// Match is one line that contains a search query.
type Match = provider.SearchMatch

// abs validates p and makes it absolute against the sandbox's working directory.
func (f *Files) abs(op, p string) (string, error) {
	if p == "" {
		return "", errorf(CodeInvalidArgument, op, "path is empty")
	}
	if containsNUL(p) {
		return "", errorf(CodeInvalidArgument, op, "path contains a NUL byte")
	}
	if len(p) > 4096 {
		return "", errorf(CodeInvalidArgument, op, "path is longer than 4096 bytes")
	}
	return f.b.resolvePath(p), nil
}

func (f *Files) prep(ctx context.Context, op, p string) (string, error) {
	if err := f.b.ensureSecrets(ctx); err != nil {
		return "", err
	}
	return f.abs(op, p)
}

func (f *Files) err(err error, op string) error {
	return f.b.red.Err(wrapProvider(err, op))
}

// Read returns the contents of the file at p.
func (f *Files) Read(ctx context.Context, p string) ([]byte, error) {
	const op = "files.read"
	p, err := f.prep(ctx, op, p)
	if err != nil {
		return nil, err
	}
	rc, err := f.b.inst.ReadFile(ctx, p)
	if err != nil {
		return nil, f.err(err, op)
	}
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		return nil, f.err(err, op)
	}
	return data, nil
}

// ReadText returns the contents of the file at p as a string.
func (f *Files) ReadText(ctx context.Context, p string) (string, error) {
	data, err := f.Read(ctx, p)
	return string(data), err
}

// Open returns a reader of the file at p, for large files. The caller closes it.
func (f *Files) Open(ctx context.Context, p string) (io.ReadCloser, error) {
	const op = "files.open"
	p, err := f.prep(ctx, op, p)
	if err != nil {
		return nil, err
	}
	rc, err := f.b.inst.ReadFile(ctx, p)
	return rc, f.err(err, op)
}

// OpenRange opens p for reading length bytes from offset off (length < 0: to the end): by
// the provider's provider.RangeReader when it has one, else by reading and discarding the
// first off bytes of the whole file.
func (f *Files) OpenRange(ctx context.Context, p string, off, length int64) (io.ReadCloser, error) {
	const op = "files.open"
	if off < 0 {
		return nil, errorf(CodeInvalidArgument, op, "offset must not be negative")
	}
	p, err := f.prep(ctx, op, p)
	if err != nil {
		return nil, err
	}
	return f.b.openRange(ctx, op, p, off, length)
}

// openRange is OpenRange of the absolute path p, for Files and the process logs.
func (b *Sandbox) openRange(ctx context.Context, op, p string, off, length int64) (io.ReadCloser, error) {
	if rr, ok := b.inst.(provider.RangeReader); ok && (off > 0 || length >= 0) {
		rc, err := rr.ReadFileRange(ctx, p, off, length)
		return rc, b.red.Err(wrapProvider(err, op))
	}
	rc, err := b.inst.ReadFile(ctx, p)
	if err != nil {
		return nil, b.red.Err(wrapProvider(err, op))
	}
	if off > 0 {
		if _, err := io.CopyN(io.Discard, rc, off); err != nil && !errors.Is(err, io.EOF) {
			rc.Close()
			return nil, b.red.Err(wrapProvider(err, op))
		}
	}
	if length >= 0 {
		return struct {
			io.Reader
			io.Closer
		}{io.LimitReader(rc, length), rc}, nil
	}
	return rc, nil
}

// Write writes data to p, creating parent directories.
func (f *Files) Write(ctx context.Context, p string, data []byte, opts WriteOptions) error {
	return f.WriteFrom(ctx, p, bytes.NewReader(data), opts)
}

// WriteFrom streams r to p, creating parent directories.
func (f *Files) WriteFrom(ctx context.Context, p string, r io.Reader, opts WriteOptions) error {
	const op = "files.write"
	mode, err := opts.mode(op)
	if err != nil {
		return err
	}
	p, err = f.prep(ctx, op, p)
	if err != nil {
		return err
	}
	return f.err(f.b.inst.WriteFile(ctx, p, r, mode), op)
}

// WriteMany writes several files (path → contents), creating parent directories. Paths are
// written in sorted order; the first failure stops it.
func (f *Files) WriteMany(ctx context.Context, files map[string][]byte, opts WriteOptions) error {
	const op = "files.write"
	mode, err := opts.mode(op)
	if err != nil {
		return err
	}
	paths := make([]string, 0, len(files))
	for p := range files {
		if _, err := f.abs(op, p); err != nil {
			return err
		}
		paths = append(paths, p)
	}
	slices.Sort(paths)
	if err := f.b.ensureSecrets(ctx); err != nil {
		return err
	}
	for _, p := range paths {
		ap, _ := f.abs(op, p)
		if err := f.b.inst.WriteFile(ctx, ap, bytes.NewReader(files[p]), mode); err != nil {
			return f.err(err, op)
		}
	}
	return nil
}

// Edit replaces the one occurrence of find in the file at p with replace. It fails with
// CodeEditNotFound when find does not occur and CodeEditNotUnique when it occurs more than
// once; the file is then unchanged. The file keeps its permission bits.
func (f *Files) Edit(ctx context.Context, p, find, replace string) error {
	const op = "files.edit"
	if find == "" {
		return errorf(CodeInvalidArgument, op, "find is empty")
	}
	data, err := f.Read(ctx, p)
	if err != nil {
		return err
	}
	switch n := bytes.Count(data, []byte(find)); {
	case n == 0:
		return errorf(CodeEditNotFound, op, "the text to find does not occur in %s", f.b.red.String(p))
	case n > 1:
		return errorf(CodeEditNotUnique, op, "the text to find occurs %d times in %s; give more context", n, f.b.red.String(p))
	}
	st, err := f.Stat(ctx, p)
	if err != nil {
		return err
	}
	m := int(st.Mode & 0o7777)
	out := bytes.Replace(data, []byte(find), []byte(replace), 1)
	return f.Write(ctx, p, out, WriteOptions{Mode: &m})
}

// Stat describes p without following a final symlink. CodeNotFound when it does not exist.
func (f *Files) Stat(ctx context.Context, p string) (FileInfo, error) {
	const op = "files.stat"
	p, err := f.prep(ctx, op, p)
	if err != nil {
		return FileInfo{}, err
	}
	if fsys, ok := f.b.inst.(provider.FileSystem); ok {
		fi, err := fsys.Stat(ctx, p)
		if err != nil {
			return FileInfo{}, f.err(err, op)
		}
		return fromProvider(fi), nil
	}
	infos, err := f.findList(ctx, op, p, false, true)
	if err != nil {
		return FileInfo{}, err
	}
	if len(infos) != 1 {
		return FileInfo{}, errorf(CodeProvider, op, "stat of %s returned %d entries", p, len(infos))
	}
	return infos[0], nil
}

// Exists reports whether p exists (a dangling symlink exists).
func (f *Files) Exists(ctx context.Context, p string) (bool, error) {
	_, err := f.Stat(ctx, p)
	if errors.Is(err, CodeNotFound) {
		return false, nil
	}
	return err == nil, err
}

// List lists the directory p ("" is the sandbox's Workdir), sorted by path.
func (f *Files) List(ctx context.Context, p string, opts FileListOptions) ([]FileInfo, error) {
	const op = "files.list"
	if p == "" {
		p = f.b.Workdir
	}
	if opts.Glob != "" && !doublestar.ValidatePattern(opts.Glob) {
		return nil, errorf(CodeInvalidArgument, op, "glob %q is not a valid pattern", opts.Glob)
	}
	p, err := f.prep(ctx, op, p)
	if err != nil {
		return nil, err
	}
	var infos []FileInfo
	if fsys, ok := f.b.inst.(provider.FileSystem); ok {
		list, err := fsys.ListDir(ctx, p, opts.Recursive)
		if err != nil {
			return nil, f.err(err, op)
		}
		for _, fi := range list {
			infos = append(infos, fromProvider(fi))
		}
	} else {
		infos, err = f.findList(ctx, op, p, opts.Recursive, false)
		if err != nil {
			return nil, err
		}
	}
	if opts.Glob != "" {
		infos = slices.DeleteFunc(infos, func(fi FileInfo) bool {
			rel := strings.TrimPrefix(strings.TrimPrefix(fi.Path, p), "/")
			return !globMatch(opts.Glob, rel)
		})
	}
	slices.SortFunc(infos, func(a, b FileInfo) int { return strings.Compare(a.Path, b.Path) })
	return infos, nil
}

// globMatch matches rel against pattern; a pattern without "/" matches the base name.
func globMatch(pattern, rel string) bool {
	if !strings.Contains(pattern, "/") {
		ok, _ := doublestar.Match(pattern, path.Base(rel))
		return ok
	}
	ok, _ := doublestar.Match(pattern, rel)
	return ok
}

// Remove removes p; a non-empty directory needs Recursive. CodeNotFound when p is missing.
func (f *Files) Remove(ctx context.Context, p string, opts RemoveOptions) error {
	const op = "files.remove"
	p, err := f.prep(ctx, op, p)
	if err != nil {
		return err
	}
	if p == "/" {
		return errorf(CodeInvalidArgument, op, "refusing to remove /")
	}
	if fsys, ok := f.b.inst.(provider.FileSystem); ok {
		return f.err(fsys.Remove(ctx, p, opts.Recursive), op)
	}
	flag := ""
	if opts.Recursive {
		flag = "-r "
	}
	script := fmt.Sprintf(`[ -e %[1]s ] || [ -L %[1]s ] || { echo "no such file or directory" >&2; exit 44; }
if [ -d %[1]s ] && [ ! -L %[1]s ] && [ -z "%[2]s" ]; then rmdir -- %[1]s; else rm -f %[2]s-- %[1]s; fi`, Quote(p), flag)
	return f.shell(ctx, op, script)
}

// MakeDir creates the directory p and its parents.
func (f *Files) MakeDir(ctx context.Context, p string) error {
	const op = "files.mkdir"
	p, err := f.prep(ctx, op, p)
	if err != nil {
		return err
	}
	if fsys, ok := f.b.inst.(provider.FileSystem); ok {
		return f.err(fsys.MakeDir(ctx, p), op)
	}
	return f.shell(ctx, op, "mkdir -p -- "+Quote(p))
}

// Rename moves from to to, replacing a file there.
func (f *Files) Rename(ctx context.Context, from, to string) error {
	const op = "files.rename"
	from, err := f.prep(ctx, op, from)
	if err != nil {
		return err
	}
	to, err = f.abs(op, to)
	if err != nil {
		return err
	}
	if fsys, ok := f.b.inst.(provider.FileSystem); ok {
		return f.err(fsys.Rename(ctx, from, to), op)
	}
	return f.shell(ctx, op, fmt.Sprintf(`[ -e %[1]s ] || [ -L %[1]s ] || { echo "no such file or directory" >&2; exit 44; }
mv -f -- %[1]s %[2]s`, Quote(from), Quote(to)))
}

// shell runs an internal command; exit 44 means not found.
func (f *Files) shell(ctx context.Context, op, script string) error {
	if !f.b.Capabilities.Has(provider.CapShell) {
		return errorf(CodeUnsupported, op, "provider %s has no native file API and no shell", f.b.Provider)
	}
	var stderr limitedBuffer
	stderr.limit = 4096
	res, err := f.b.inst.Exec(ctx, provider.ExecRequest{Command: script, Cwd: "/", Stderr: &stderr})
	if err != nil {
		return f.err(err, op)
	}
	switch res.ExitCode {
	case 0:
		return nil
	case 44:
		return errorf(CodeNotFound, op, "no such file or directory")
	}
	msg := strings.TrimSpace(stderr.String())
	code := CodeProvider
	if strings.Contains(msg, "Directory not empty") {
		code = CodeInvalidArgument
	}
	return f.b.red.Err(errorf(code, op, "%s", msg))
}

// findList lists with find(1): the fallback when the provider has no FileSystem.
func (f *Files) findList(ctx context.Context, op, p string, recursive, self bool) ([]FileInfo, error) {
	if !f.b.Capabilities.Has(provider.CapShell) {
		return nil, errorf(CodeUnsupported, op, "provider %s has no native file API and no shell", f.b.Provider)
	}
	depth := "-mindepth 1 -maxdepth 1"
	switch {
	case self:
		depth = "-maxdepth 0"
	case recursive:
		depth = "-mindepth 1"
	}
	check := ""
	if !self {
		check = fmt.Sprintf(`[ -d %[1]s ] || { echo "not a directory" >&2; exit 45; }; `, Quote(p))
	}
	// The existence check runs again when find fails: the directory can go
	// between the first check and find's start, and that is not-found too.
	script := fmt.Sprintf(`[ -e %[1]s ] || [ -L %[1]s ] || exit 44; %[3]sfind %[1]s %[2]s -printf '%%y\t%%s\t%%m\t%%T@\t%%p\0'; rc=$?; [ $rc = 0 ] || [ -e %[1]s ] || [ -L %[1]s ] || exit 44; exit $rc`, Quote(p), depth, check)
	var out limitedBuffer
	out.limit = 64 << 20
	var stderr limitedBuffer
	stderr.limit = 4096
	res, err := f.b.inst.Exec(ctx, provider.ExecRequest{Command: script, Cwd: "/", Stdout: &out, Stderr: &stderr})
	if err != nil {
		return nil, f.err(err, op)
	}
	switch res.ExitCode {
	case 0:
	case 44:
		return nil, errorf(CodeNotFound, op, "no such file or directory: %s", f.b.red.String(p))
	case 45:
		return nil, errorf(CodeInvalidArgument, op, "not a directory: %s", f.b.red.String(p))
	default:
		if out.buf.Len() == 0 {
			return nil, f.b.red.Err(errorf(CodeProvider, op, "find: %s", strings.TrimSpace(stderr.String())))
		}
		// find exits 1 when an entry vanished meanwhile; keep what it listed.
	}
	if out.dropped > 0 {
		return nil, errorf(CodeResourceExhausted, op, "listing is larger than %d bytes", out.limit)
	}
	var infos []FileInfo
	for rec := range strings.SplitSeq(out.String(), "\x00") {
		if rec == "" {
			continue
		}
		fields := strings.SplitN(rec, "\t", 5)
		if len(fields) != 5 {
			continue
		}
		size, _ := strconv.ParseInt(fields[1], 10, 64)
		mode, _ := strconv.ParseUint(fields[2], 8, 32)
		secs, _ := strconv.ParseFloat(fields[3], 64)
		t := provider.TypeOther
		switch fields[0] {
		case "f":
			t = provider.TypeFile
		case "d":
			t = provider.TypeDir
		case "l":
			t = provider.TypeSymlink
		}
		infos = append(infos, FileInfo{
			Path: path.Clean(fields[4]), Type: t, Size: size, Mode: uint32(mode),
			ModifiedAt: time.Unix(0, int64(secs*1e9)),
		})
	}
	return infos, nil
}

func fromProvider(fi provider.FileInfo) FileInfo {
	return FileInfo{Path: fi.Path, Type: fi.Type, Size: fi.Size, Mode: fi.Mode, ModifiedAt: fi.ModifiedAt}
}

// Upload copies the local directory localDir into remoteDir, creating it. Symbolic links in
// localDir are skipped, never followed, so an upload sends only what is inside localDir.
func (f *Files) Upload(ctx context.Context, localDir, remoteDir string, opts UploadOptions) error {
	const op = "files.upload"
	for _, pat := range opts.Ignore {
		if !doublestar.ValidatePattern(pat) {
			return errorf(CodeInvalidArgument, op, "ignore pattern %q is not valid", pat)
		}
	}
	remote, err := f.prep(ctx, op, remoteDir)
	if err != nil {
		return err
	}
	root, err := os.OpenRoot(localDir)
	if err != nil {
		return errorf(CodeInvalidArgument, op, "local directory: %v", err)
	}
	defer root.Close()
	if err := f.MakeDir(ctx, remote); err != nil {
		return err
	}
	return fs.WalkDir(root.FS(), ".", func(rel string, d fs.DirEntry, err error) error {
		if err != nil {
			return errorf(CodeInvalidArgument, op, "local directory: %v", err)
		}
		if rel == "." {
			return nil
		}
		if ignored(opts.Ignore, rel) {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		target := path.Join(remote, filepath.ToSlash(rel))
		switch {
		case d.IsDir():
			return f.MakeDir(ctx, target)
		case d.Type().IsRegular():
			fh, err := root.Open(rel)
			if err != nil {
				return errorf(CodeInvalidArgument, op, "local file: %v", err)
			}
			defer fh.Close()
			st, err := fh.Stat()
			if err != nil {
				return errorf(CodeInvalidArgument, op, "local file: %v", err)
			}
			m := int(st.Mode().Perm())
			return f.WriteFrom(ctx, target, fh, WriteOptions{Mode: &m})
		}
		return nil // symlinks, devices, sockets: skipped
	})
}

func ignored(patterns []string, rel string) bool {
	rel = filepath.ToSlash(rel)
	for _, pat := range patterns {
		if strings.Contains(pat, "/") {
			if ok, _ := doublestar.Match(pat, rel); ok {
				return true
			}
			continue
		}
		for part := range strings.SplitSeq(rel, "/") {
			if ok, _ := doublestar.Match(pat, part); ok {
				return true
			}
		}
	}
	return false
}

// Download copies the sandbox directory remoteDir into localDir, creating it. Every name from
// the sandbox is untrusted: a file can never be placed outside localDir (not through "..",
// not through a symbolic link already in localDir). Symbolic links in the sandbox are skipped.
func (f *Files) Download(ctx context.Context, remoteDir, localDir string) error {
	const op = "files.download"
	remote, err := f.prep(ctx, op, remoteDir)
	if err != nil {
		return err
	}
	entries, err := f.List(ctx, remote, FileListOptions{Recursive: true})
	if err != nil {
		return err
	}
	if err := os.MkdirAll(localDir, 0o755); err != nil {
		return errorf(CodeInvalidArgument, op, "local directory: %v", err)
	}
	root, err := os.OpenRoot(localDir)
	if err != nil {
		return errorf(CodeInvalidArgument, op, "local directory: %v", err)
	}
	defer root.Close()
	for _, e := range entries {
		rel, ok := strings.CutPrefix(e.Path, remote+"/")
		if remote == "/" {
			rel, ok = strings.CutPrefix(e.Path, "/")
		}
		if !ok || !filepath.IsLocal(filepath.FromSlash(rel)) {
			return errorf(CodeProvider, op, "sandbox listed %q outside %s", f.b.red.String(e.Path), remote)
		}
		local := filepath.FromSlash(rel)
		switch e.Type {
		case provider.TypeDir:
			if err := root.MkdirAll(local, 0o755); err != nil {
				return errorf(CodeInvalidArgument, op, "local directory: %v", err)
			}
		case provider.TypeFile:
			if dir := filepath.Dir(local); dir != "." {
				if err := root.MkdirAll(dir, 0o755); err != nil {
					return errorf(CodeInvalidArgument, op, "local directory: %v", err)
				}
			}
			if err := f.downloadFile(ctx, root, e, local); err != nil {
				return err
			}
		}
	}
	return nil
}

func (f *Files) downloadFile(ctx context.Context, root *os.Root, e FileInfo, local string) error {
	const op = "files.download"
	rc, err := f.b.inst.ReadFile(ctx, e.Path)
	if err != nil {
		return f.err(err, op)
	}
	defer rc.Close()
	perm := fs.FileMode(e.Mode & 0o777)
	if perm == 0 {
		perm = 0o644
	}
	_ = root.Remove(local) // never write through a symlink that was there
	out, err := root.OpenFile(local, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return errorf(CodeInvalidArgument, op, "local file: %v", err)
	}
	if _, err := io.Copy(out, rc); err != nil {
		out.Close()
		return f.err(err, op)
	}
	return out.Close()
}

// Search finds lines containing query (a literal string) in files below opts.Path.
func (f *Files) Search(ctx context.Context, query string, opts SearchOptions) ([]Match, error) {
	const op = "files.search"
	if query == "" {
		return nil, errorf(CodeInvalidArgument, op, "query is empty")
	}
	if containsNUL(query) || strings.Contains(query, "\n") {
		return nil, errorf(CodeInvalidArgument, op, "query must be one line without NUL bytes")
	}
	if opts.MaxMatches < 0 {
		return nil, errorf(CodeInvalidArgument, op, "maxMatches must not be negative")
	}
	if opts.Glob != "" && !doublestar.ValidatePattern(opts.Glob) {
		return nil, errorf(CodeInvalidArgument, op, "glob %q is not a valid pattern", opts.Glob)
	}
	max := opts.MaxMatches
	if max == 0 {
		max = DefaultSearchMatches
	}
	dir := opts.Path
	if dir == "" {
		dir = f.b.Workdir
	}
	dir, err := f.prep(ctx, op, dir)
	if err != nil {
		return nil, err
	}
	var matches []Match
	if s, ok := f.b.inst.(provider.Searcher); ok {
		matches, err = s.Search(ctx, query, dir, opts.Glob, max)
		if err != nil {
			return nil, f.err(err, op)
		}
	} else {
		matches, err = f.grep(ctx, query, dir, opts.Glob, max)
		if err != nil {
			return nil, err
		}
	}
	if len(matches) > max {
		matches = matches[:max]
	}
	for i := range matches {
		matches[i].Text = f.b.red.String(matches[i].Text)
	}
	return matches, nil
}

func (f *Files) grep(ctx context.Context, query, dir, glob string, max int) ([]Match, error) {
	const op = "files.search"
	if !f.b.Capabilities.Has(provider.CapShell) {
		return nil, errorf(CodeUnsupported, op, "provider %s has no native search and no shell", f.b.Provider)
	}
	include := ""
	if glob != "" {
		include = "--include=" + Quote(glob) + " "
	}
	script := fmt.Sprintf("[ -e %[1]s ] || exit 44; grep -rnIF -Z %[2]s-m %[3]d -e %[4]s -- %[1]s", Quote(dir), include, max, Quote(query))
	var out limitedBuffer
	out.limit = 16 << 20
	res, err := f.b.inst.Exec(ctx, provider.ExecRequest{Command: script, Cwd: "/", Stdout: &out})
	if err != nil {
		return nil, f.err(err, op)
	}
	switch res.ExitCode {
	case 0, 1:
	case 44:
		return nil, errorf(CodeNotFound, op, "no such directory: %s", f.b.red.String(dir))
	default:
		if out.buf.Len() == 0 {
			return nil, errorf(CodeProvider, op, "grep exited %d", res.ExitCode)
		}
	}
	var matches []Match
	for line := range strings.SplitSeq(out.String(), "\n") {
		file, rest, ok := strings.Cut(line, "\x00")
		if !ok {
			continue
		}
		num, text, ok := strings.Cut(rest, ":")
		if !ok {
			continue
		}
		n, err := strconv.Atoi(num)
		if err != nil {
			continue
		}
		matches = append(matches, Match{Path: path.Clean(file), Line: n, Text: text})
		if len(matches) >= max {
			break
		}
	}
	slices.SortStableFunc(matches, func(a, b Match) int { return strings.Compare(a.Path, b.Path) })
	return matches, nil
}
