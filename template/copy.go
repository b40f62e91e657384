package template

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/bzip2"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strconv"
	"strings"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/template/dockerfile"
)

// copySource is one source of a COPY or ADD: a path of the build context, or of another
// stage's (or template's) root with --from.
type copySource struct {
	rel string // context-relative, slash-separated, cleaned; or an absolute path with --from
}

// copyStep runs COPY and ADD: the sources go into a tar, which is added to a sandbox of the
// stage's layers at the destination; what that changed is the next layer.
func (bc *buildCtx) copyStep(ctx context.Context, st *stageState, in dockerfile.Instruction, words []string) error {
	if len(words) < 2 {
		return provider.Errorf(provider.CodeInvalidArgument, "%s needs at least one source and a destination", in.Cmd)
	}
	srcs, dest := words[:len(words)-1], words[len(words)-1]
	dirDest := strings.HasSuffix(dest, "/") || strings.HasSuffix(dest, "/.") || dest == "."
	dest = path.Clean(joinDir(st.cfg.WorkingDir, dest))
	if dirDest && dest != "/" {
		dest += "/"
	}
	var chmod *fs.FileMode
	if v := in.Flags["chmod"]; v != "" {
		n, err := strconv.ParseUint(v, 8, 32)
		if err != nil || n > 0o7777 {
			return provider.Errorf(provider.CodeInvalidArgument, "%s --chmod=%s: use an octal mode such as 0644", in.Cmd, v)
		}
		m := fs.FileMode(n)
		chmod = &m
	}
	from := in.Flags["from"]
	var fromLayers []string
	var fromKey string
	if from != "" {
		if prev := bc.stages[strings.ToLower(from)]; prev != nil {
			fromLayers, fromKey = prev.layers, prev.key
		} else {
			t, err := bc.s.Ensure(ctx, from, bc.ensureOptions())
			if err != nil {
				return fmt.Errorf("%s --from=%s: no stage or template of that name", in.Cmd, from)
			}
			fromLayers, fromKey = t.Layers, chainKey(t.Layers...)
		}
	}
	var sources []copySource
	var digest string
	if from == "" {
		if bc.ctxDir == nil {
			return provider.Errorf(provider.CodeInvalidArgument, "%s: this build has no context", in.Cmd)
		}
		for _, src := range srcs {
			if strings.Contains(src, "://") || strings.HasPrefix(src, "git@") {
				return provider.Errorf(provider.CodeInvalidArgument, "%s %s: sources from URLs are not supported; download them in a RUN step", in.Cmd, src)
			}
			matches, err := bc.contextMatches(src)
			if err != nil {
				return err
			}
			sources = append(sources, matches...)
		}
		h := sha256.New()
		for i, src := range sources {
			if err := bc.hashSource(h, i, src.rel); err != nil {
				return err
			}
		}
		digest = hex.EncodeToString(h.Sum(nil))
	} else {
		for _, src := range srcs {
			sources = append(sources, copySource{rel: path.Clean("/" + src)})
		}
		digest = fromKey
	}
	if len(sources) > 1 && !strings.HasSuffix(dest, "/") {
		dest += "/" // several sources go into a directory
	}
	// "v2": layers cached before a directory copied onto a new path filled it (they named
	// each of its entries after the path) are not taken for it.
	inputs := []string{strings.Join(srcs, "\x00"), dest, in.Flags["chown"], in.Flags["chmod"], from, digest, "v2"}
	return bc.layerStep(ctx, st, in, inputs, nil, func(box BuildBox, out io.Writer) error {
		uid, gid, err := resolveOwner(ctx, box, in.Flags["chown"])
		if err != nil {
			return err
		}
		destDir := strings.HasSuffix(dest, "/")
		if !destDir {
			if destDir, err = box.IsDir(ctx, dest); err != nil {
				return err
			}
		}
		var fromBox BuildBox
		if from != "" {
			if fromBox, err = bc.opts.Runner.Start(ctx, BoxSpec{Layers: fromLayers, Network: provider.NetworkNone}); err != nil {
				return err
			}
			defer fromBox.Destroy(context.WithoutCancel(ctx))
		}
		for _, src := range sources {
			base, name := strings.TrimSuffix(dest, "/"), ""
			if base == "" {
				base = "/"
			}
			if !destDir {
				// A file onto a path that is not a directory takes that name; a directory's
				// contents go into the path, made if need be, as docker build does.
				srcDir, err := bc.sourceIsDir(ctx, fromBox, src)
				if err != nil {
					return err
				}
				if !srcDir {
					base, name = path.Dir(dest), path.Base(dest)
				}
			}
			pr, pw := io.Pipe()
			go func() {
				tw := &ownedTar{tw: tar.NewWriter(pw), uid: uid, gid: gid, chowned: in.Flags["chown"] != "", chmod: chmod, rename: name}
				var err error
				switch {
				case fromBox != nil:
					err = tw.copyFrom(ctx, fromBox, src.rel)
				case in.Cmd == "ADD":
					err = bc.addSource(tw, src.rel)
				default:
					err = bc.writeContext(tw, src.rel)
				}
				if err == nil {
					err = tw.tw.Close()
				}
				pw.CloseWithError(err)
			}()
			err := box.AddTar(ctx, base, pr)
			pr.CloseWithError(err)
			if err != nil {
				return fmt.Errorf("%s %s: %w", in.Cmd, src.rel, err)
			}
		}
		return nil
	})
}

// sourceIsDir reports whether a COPY or ADD source is a directory: of another stage's root
// (fromBox), or of the context, a symlink to a directory of the context included.
func (bc *buildCtx) sourceIsDir(ctx context.Context, fromBox BuildBox, src copySource) (bool, error) {
	if fromBox != nil {
		return fromBox.IsDir(ctx, src.rel)
	}
	fi, err := bc.ctxDir.Stat(src.rel)
	return err == nil && fi.IsDir(), nil
}

func joinDir(wd, p string) string {
	if path.IsAbs(p) {
		return p
	}
	if wd == "" {
		wd = "/"
	}
	return path.Join(wd, p)
}

// contextMatches resolves a COPY source against the context: a path or a path.Match
// pattern, never outside the context, never what .dockerignore excludes.
func (bc *buildCtx) contextMatches(src string) ([]copySource, error) {
	rel := strings.TrimPrefix(path.Clean("/"+src), "/")
	if rel == "" {
		rel = "."
	}
	var names []string
	if strings.ContainsAny(rel, "*?[") {
		m, err := fs.Glob(bc.ctxDir.FS(), rel)
		if err != nil {
			return nil, provider.Errorf(provider.CodeInvalidArgument, "source %q: %v", src, err)
		}
		names = m
	} else if _, err := bc.ctxDir.Lstat(rel); err == nil {
		names = []string{rel}
	}
	var out []copySource
	for _, n := range names {
		if rel != "." && bc.ignore.Excluded(n) {
			continue
		}
		out = append(out, copySource{rel: n})
	}
	if len(out) == 0 {
		return nil, provider.Errorf(provider.CodeNotFound, "source %q: not in the build context (or excluded by .dockerignore)", src)
	}
	return out, nil
}

// walkContext calls fn for rel and, when it is a directory, everything below it that
// .dockerignore does not exclude, in lexical order. name is the path relative to rel ("."
// for rel itself). A top-level symlink is followed when its target is in the context, as
// docker build does; one whose target is not (absolute, say, or dangling) is an entry, as
// symlinks below it are: a link's target is data, never resolved on the host, and the
// unpacker in the step's sandbox writes the link without following it.
func (bc *buildCtx) walkContext(rel string, fn func(name, p string, fi fs.FileInfo) error) error {
	fi, err := bc.ctxDir.Stat(rel)
	if err != nil {
		if li, lerr := bc.ctxDir.Lstat(rel); lerr == nil && li.Mode()&fs.ModeSymlink != 0 {
			return fn(".", rel, li)
		}
		return provider.Errorf(provider.CodeNotFound, "source %q: %v", rel, err)
	}
	if !fi.IsDir() {
		return fn(".", rel, fi)
	}
	return fs.WalkDir(bc.ctxDir.FS(), rel, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != rel && bc.ignore.Excluded(p) {
			if d.IsDir() && !bc.ignore.MayHaveExceptions() {
				return fs.SkipDir
			}
			return nil
		}
		info, err := bc.ctxDir.Lstat(p)
		if err != nil {
			return err
		}
		name := "."
		if p != rel {
			name = strings.TrimPrefix(p, rel+"/")
			if rel == "." {
				name = p
			}
		}
		return fn(name, p, info)
	})
}

// hashSource feeds what COPY would read from rel into h: names, types, modes, link targets
// and contents (not times or owners, which COPY does not keep or sets itself).
func (bc *buildCtx) hashSource(h io.Writer, i int, rel string) error {
	return bc.walkContext(rel, func(name, p string, fi fs.FileInfo) error {
		fmt.Fprintf(h, "%d\x00%s\x00%o\x00", i, name, fi.Mode())
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			t, err := bc.ctxDir.Readlink(p)
			if err != nil {
				return err
			}
			fmt.Fprintf(h, "%s\x00", t)
		case fi.Mode().IsRegular():
			f, err := bc.ctxDir.Open(p)
			if err != nil {
				return err
			}
			n, err := io.Copy(h, f)
			f.Close()
			if err != nil {
				return err
			}
			fmt.Fprintf(h, "\x00%d\x00", n)
		}
		return nil
	})
}

// writeContext writes rel (a file, or a directory's contents) into tw.
func (bc *buildCtx) writeContext(tw *ownedTar, rel string) error {
	return bc.walkContext(rel, func(name, p string, fi fs.FileInfo) error {
		hdr, err := tar.FileInfoHeader(fi, "")
		if err != nil {
			return nil // sockets and the like: not copied, as docker build
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			if hdr.Linkname, err = bc.ctxDir.Readlink(p); err != nil {
				return err
			}
		}
		if fi.IsDir() && name == "." {
			return nil // the source directory itself: its contents go into the destination
		}
		if name == "." {
			name = path.Base(p)
		}
		hdr.Name = name
		var body io.Reader
		if fi.Mode().IsRegular() {
			f, err := bc.ctxDir.Open(p)
			if err != nil {
				return err
			}
			defer f.Close()
			body = f
		}
		return tw.write(hdr, body)
	})
}

// addSource is ADD's source: a local tar archive (plain, gzip or bzip2) is unpacked into the
// destination; anything else is copied as COPY does.
func (bc *buildCtx) addSource(tw *ownedTar, rel string) error {
	fi, err := bc.ctxDir.Stat(rel)
	if err != nil || !fi.Mode().IsRegular() {
		return bc.writeContext(tw, rel)
	}
	f, err := bc.ctxDir.Open(rel)
	if err != nil {
		return err
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 1<<16)
	head, _ := br.Peek(512)
	var r io.Reader
	switch {
	case bytes.HasPrefix(head, []byte{0x1f, 0x8b}):
		zr, err := gzip.NewReader(br)
		if err != nil {
			return err
		}
		defer zr.Close()
		r = zr
	case bytes.HasPrefix(head, []byte("BZh")):
		r = bzip2.NewReader(br)
	case bytes.HasPrefix(head, []byte{0xfd, '7', 'z', 'X', 'Z', 0}):
		return provider.Errorf(provider.CodeUnsupported, "ADD %s: xz archives are not supported; use gzip or bzip2, or unpack it in a RUN step", rel)
	case len(head) >= 262 && string(head[257:262]) == "ustar":
		r = br
	default:
		return bc.writeContext(tw, rel)
	}
	tw.rename = "" // an archive's entries keep their names under the destination
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("ADD %s: %w", rel, err)
		}
		// ADD keeps an archive's owners unless --chown says otherwise.
		if !tw.chowned {
			if err := tw.tw.WriteHeader(hdr); err != nil {
				return err
			}
			if _, err := io.Copy(tw.tw, tr); err != nil {
				return err
			}
			continue
		}
		if err := tw.write(hdr, tr); err != nil {
			return err
		}
	}
}

// ownedTar writes tar entries with COPY's owner and mode rules: --chown's owner (root when
// not given), --chmod's mode.
type ownedTar struct {
	tw       *tar.Writer
	uid, gid int
	chowned  bool // --chown was given (else ADD keeps an archive's owners)
	chmod    *fs.FileMode
	rename   string // a single file copied to a file destination: its new name
}

func (t *ownedTar) write(hdr *tar.Header, body io.Reader) error {
	if t.rename != "" && !strings.Contains(hdr.Name, "/") {
		hdr.Name = t.rename
	}
	hdr.Uid, hdr.Gid = t.uid, t.gid
	hdr.Uname, hdr.Gname = "", ""
	if t.chmod != nil && hdr.Typeflag != tar.TypeSymlink {
		hdr.Mode = int64(*t.chmod)
	}
	if err := t.tw.WriteHeader(hdr); err != nil {
		return err
	}
	if body != nil && hdr.Typeflag == tar.TypeReg {
		if _, err := io.Copy(t.tw, body); err != nil {
			return err
		}
	}
	return nil
}

// copyFrom copies p of another stage's root (COPY --from) into t: a file, or a
// directory's contents.
func (t *ownedTar) copyFrom(ctx context.Context, box BuildBox, p string) error {
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(box.TarFrom(ctx, p, pw)) }()
	defer pr.Close()
	tr := tar.NewReader(pr)
	base := path.Base(p)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		name := strings.TrimPrefix(path.Clean(hdr.Name), "./")
		switch {
		case name == base && hdr.Typeflag == tar.TypeDir:
			continue // the directory itself: its contents go into the destination
		case strings.HasPrefix(name, base+"/") && p != "/":
			name = strings.TrimPrefix(name, base+"/")
		case p == "/":
		}
		hdr.Name = name
		if hdr.Typeflag == tar.TypeLink {
			hdr.Linkname = strings.TrimPrefix(strings.TrimPrefix(path.Clean(hdr.Linkname), "./"), base+"/")
		}
		if err := t.write(hdr, tr); err != nil {
			return err
		}
	}
}

// resolveOwner turns --chown's "user[:group]" into ids, names looked up in the sandbox's own
// /etc/passwd and /etc/group. Without --chown the owner is root.
func resolveOwner(ctx context.Context, box BuildBox, chown string) (int, int, error) {
	if chown == "" {
		return 0, 0, nil
	}
	user, group, hasGroup := strings.Cut(chown, ":")
	uid, ugid, err := lookupID(ctx, box, "/etc/passwd", user, true)
	if err != nil {
		return 0, 0, err
	}
	gid := ugid
	if hasGroup {
		if gid, _, err = lookupID(ctx, box, "/etc/group", group, false); err != nil {
			return 0, 0, err
		}
	} else if _, err := strconv.Atoi(user); err == nil {
		gid = uid // a bare uid: the group of the same number, as docker build
	}
	return uid, gid, nil
}

func lookupID(ctx context.Context, box BuildBox, file, name string, passwd bool) (id, gid int, err error) {
	if n, err := strconv.Atoi(name); err == nil {
		if n < 0 || n > 65535 {
			return 0, 0, provider.Errorf(provider.CodeInvalidArgument, "--chown: id %d is outside 0..65535", n)
		}
		return n, n, nil
	}
	b, err := box.ReadFile(ctx, file)
	if err != nil {
		return 0, 0, provider.Errorf(provider.CodeInvalidArgument, "--chown=%s: cannot read %s: %v", name, file, err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Split(line, ":")
		if len(f) < 3 || f[0] != name {
			continue
		}
		id, err := strconv.Atoi(f[2])
		if err != nil {
			break
		}
		gid = id
		if passwd && len(f) > 3 {
			if g, err := strconv.Atoi(f[3]); err == nil {
				gid = g
			}
		}
		if id < 0 || id > 65535 || gid < 0 || gid > 65535 {
			break
		}
		return id, gid, nil
	}
	return 0, 0, provider.Errorf(provider.CodeInvalidArgument, "--chown: no %q in the image's %s", name, file)
}
