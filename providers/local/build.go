//go:build linux

package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/template"
)

// Builds (template.Store.Build): every step that changes files runs in a sandbox of this
// provider whose root is exactly the stage's layers so far (a template marked build:
// nothing of the provider's in its upper layer but /etc's hosts, hostname and resolv.conf,
// root's passwd entry when the image lacks one, and mount points), and its upper layer,
// less what was there when the sandbox started, is the step's layer. The sandbox is as
// isolated as any other: same namespaces, user-namespace range, seccomp, cgroups and
// network policy. COPY's files are unpacked from the host into the sandbox's root through
// its overlay (template.UnpackInto: no path through a symlink, owners shifted into the
// sandbox's range); Diff reads the upper layer by descriptors, after freezing the sandbox.

// BuildRunner returns the runner that makes a build's step sandboxes with this provider.
func (p *Provider) BuildRunner() template.Runner { return buildRunner{p} }

var _ provider.TemplateBuilder = (*Provider)(nil)

// BuildTemplate builds req into the store under Home: its steps on BuildRunner, the images
// a FROM names imported into the store, their lines to req.Log.
func (p *Provider) BuildTemplate(ctx context.Context, req provider.BuildRequest) (provider.BuiltTemplate, error) {
	st, err := p.templateStore()
	if err != nil {
		return provider.BuiltTemplate{}, err
	}
	t, err := st.Build(ctx, template.BuildOptions{
		Name: req.Name, Tags: req.Tags, ID: req.ID,
		Context: req.Context, Dockerfile: req.Dockerfile, DockerfileText: req.DockerfileText,
		BuildArgs: req.BuildArgs, Target: req.Target, Network: req.Network, NoCache: req.NoCache,
		StartCmd: req.StartCmd, ReadyCmd: req.ReadyCmd, Progress: req.Progress,
		Runner: p.BuildRunner(),
		Pull: func(ctx context.Context, ref string) (*template.Template, error) {
			return st.PullBase(ctx, ref, req.Log)
		},
	})
	if err != nil {
		return provider.BuiltTemplate{}, err
	}
	size, err := layersSize(st, t)
	if err != nil {
		return provider.BuiltTemplate{}, err
	}
	return provider.BuiltTemplate{TemplateInfo: templateInfo(t, size), LayerIDs: t.Layers}, nil
}

// BuildDir makes a directory for a build's context in the store's root, root's alone. The
// first call of a provider removes those a process that died left.
func (p *Provider) BuildDir() (string, error) {
	st, err := p.templateStore()
	if err != nil {
		return "", err
	}
	p.staleBuildDirs.Do(func() {
		old, _ := filepath.Glob(filepath.Join(st.Root(), "build-*"))
		for _, d := range old {
			os.RemoveAll(d)
		}
	})
	return os.MkdirTemp(st.Root(), "build-*")
}

// RetagTemplate changes the tags of a template of the store (template.Store.Retag).
func (p *Provider) RetagTemplate(ctx context.Context, name string, change func(provider.TemplateInfo) ([]string, error)) (provider.TemplateInfo, error) {
	st, err := p.templateStore()
	if err != nil {
		return provider.TemplateInfo{}, err
	}
	t, err := st.Retag(ctx, name, func(t *template.Template) ([]string, error) { return change(templateInfo(t, 0)) })
	if err != nil {
		return provider.TemplateInfo{}, err
	}
	size, err := layersSize(st, t)
	return templateInfo(t, size), err
}

type buildRunner struct{ p *Provider }

// buildOmit are the paths of a step sandbox's root that are never part of a layer, as in
// docker build: the agent's mount points and the files the provider writes per sandbox.
var buildOmit = map[string]bool{".tupper": true, "etc/hosts": true, "etc/hostname": true, "etc/resolv.conf": true}

func (r buildRunner) Start(ctx context.Context, spec template.BoxSpec) (template.BuildBox, error) {
	layers := spec.Layers
	p := r.p
	p.probed()
	if p.unavail != nil {
		return nil, p.unavail
	}
	st, err := p.templateStore()
	if err != nil {
		return nil, err
	}
	tp := &sandboxTemplate{name: "build", image: &template.Template{Name: "build", Layers: layers, Mirror: spec.Mirror}, build: true}
	for i := len(layers) - 1; i >= 0; i-- {
		if !st.HasLayer(layers[i]) {
			return nil, provider.Errorf(provider.CodeNotFound, "build: layer %s is missing from the store", layers[i])
		}
		tp.lowers = append(tp.lowers, st.LayerFS(layers[i]))
	}
	if len(tp.lowers) == 0 {
		// FROM scratch: an overlay needs a lower layer; an empty one.
		empty := filepath.Join(p.lay.templates(), "empty")
		if err := os.MkdirAll(empty, 0o755); err != nil {
			return nil, err
		}
		tp.lowers = []string{empty}
	}
	inst, err := p.createFrom(ctx, provider.CreateSpec{Network: provider.Network{Mode: spec.Network}, Size: spec.Size, Labels: map[string]string{"tupper.build": "1"}}, false, tp)
	if err != nil {
		return nil, err
	}
	box := &buildBox{inst: inst.(*Instance), p: p}
	ok := false
	defer func() {
		if !ok {
			box.Destroy(context.WithoutCancel(ctx))
		}
	}()
	rec, err := p.lay.readRecord(box.inst.id)
	if err != nil {
		return nil, err
	}
	box.rec = rec
	if box.root, err = p.nsPath(rec, p.lay.rootfs(rec.ID)); err != nil {
		return nil, err
	}
	if box.upper, err = p.nsPath(rec, filepath.Join(p.lay.disk(rec.ID), "upper")); err != nil {
		return nil, err
	}
	// What the upper layer holds before the step: the provider's, not the step's.
	box.before = map[string]unix.Stat_t{}
	err = filepath.WalkDir(box.upper, func(q string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var s unix.Stat_t
		if err := unix.Lstat(q, &s); err != nil {
			return err
		}
		rel, _ := filepath.Rel(box.upper, q)
		box.before[filepath.ToSlash(rel)] = s
		return nil
	})
	if err != nil {
		return nil, err
	}
	ok = true
	return box, nil
}

type buildBox struct {
	inst   *Instance
	p      *Provider
	rec    *record
	root   string // the sandbox's root file system, seen from the host
	upper  string // its upper layer, seen from the host
	before map[string]unix.Stat_t
}

func (b *buildBox) Exec(ctx context.Context, req provider.ExecRequest) (provider.ExecResult, error) {
	return b.inst.Exec(ctx, req)
}

// open opens p of the sandbox's root, symlinks resolved inside it.
func (b *buildBox) open(p string, flags int) (*os.File, error) {
	rfd, err := unix.Open(b.root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(rfd)
	fd, err := unix.Openat2(rfd, strings.TrimPrefix(path.Clean("/"+p), "/")+"/.", &unix.OpenHow{
		Flags: uint64(flags | unix.O_CLOEXEC), Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
	})
	if errors.Is(err, unix.ENOTDIR) && flags&unix.O_DIRECTORY == 0 {
		fd, err = unix.Openat2(rfd, strings.TrimPrefix(path.Clean("/"+p), "/"), &unix.OpenHow{
			Flags: uint64(flags | unix.O_CLOEXEC), Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
		})
	}
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), p), nil
}

func (b *buildBox) ReadFile(ctx context.Context, p string) ([]byte, error) {
	f, err := b.open(p, unix.O_RDONLY)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil, provider.Errorf(provider.CodeNotFound, "%s: no such file", p)
		}
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, 16<<20))
}

func (b *buildBox) IsDir(ctx context.Context, p string) (bool, error) {
	f, err := b.open(p, unix.O_PATH|unix.O_DIRECTORY)
	if err == nil {
		f.Close()
		return true, nil
	}
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
		return false, nil
	}
	return false, err
}

// AddTar makes dir (from the host, each component made in its parent as opened with
// symlinks resolved inside the root, as the sandbox would resolve them; made directories are
// root's inside) and unpacks r into it.
func (b *buildBox) AddTar(ctx context.Context, dir string, r io.Reader) error {
	if err := b.mkdirs(dir); err != nil {
		return err
	}
	f, err := b.open(dir, unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return fmt.Errorf("%s: %w", dir, err)
	}
	defer f.Close()
	return template.UnpackInto(ctx, fmt.Sprintf("/proc/self/fd/%d", f.Fd()), r, b.shift(), template.Limits{})
}

func (b *buildBox) mkdirs(dir string) error {
	cur := "/"
	for _, c := range strings.Split(strings.Trim(path.Clean("/"+dir), "/"), "/") {
		if c == "" {
			continue
		}
		f, err := b.open(cur, unix.O_PATH|unix.O_DIRECTORY)
		if err != nil {
			return err
		}
		err = unix.Mkdirat(int(f.Fd()), c, 0o755)
		if err == nil && b.shift() != 0 {
			err = unix.Fchownat(int(f.Fd()), c, b.shift(), b.shift(), unix.AT_SYMLINK_NOFOLLOW)
		}
		f.Close()
		if err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("mkdir %s: %w", path.Join(cur, c), err)
		}
		cur = path.Join(cur, c)
	}
	return nil
}

func (b *buildBox) shift() int {
	if b.rec.UIDIndex >= 0 {
		return int(b.rec.UIDBase)
	}
	return 0
}

// TarFrom writes p (a file, or a directory and what is below it) as a tar named from p's
// base name.
func (b *buildBox) TarFrom(ctx context.Context, p string, w io.Writer) error {
	clean := path.Clean("/" + p)
	parent := path.Dir(clean)
	f, err := b.open(parent, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return provider.Errorf(provider.CodeNotFound, "%s: %v", p, err)
	}
	defer f.Close()
	fd := int(f.Fd())
	if clean == "/" {
		return template.WriteTreeFD(ctx, w, fd, template.TreeOptions{IDShift: b.shift(), Skip: func(rel string) bool {
			return buildOmit[rel] || rel == "proc" || rel == "sys" || rel == "dev"
		}})
	}
	base := path.Base(clean)
	var st unix.Stat_t
	if err := unix.Fstatat(fd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return provider.Errorf(provider.CodeNotFound, "%s: not in the stage's files", p)
	}
	return template.WriteTreeFD(ctx, w, fd, template.TreeOptions{IDShift: b.shift(), Skip: func(rel string) bool {
		return rel != base && !strings.HasPrefix(rel, base+"/")
	}})
}

// Diff freezes the sandbox and writes its upper layer, less what the provider put there
// and what was there before the step, as a layer.
func (b *buildBox) Diff(ctx context.Context, w io.Writer) error {
	if err := b.inst.Pause(ctx); err != nil {
		return err
	}
	return template.WriteTree(ctx, w, b.upper, template.TreeOptions{
		IDShift:   b.shift(),
		Whiteouts: true,
		Skip:      func(rel string) bool { return buildOmit[rel] },
		Unchanged: func(rel string, st *unix.Stat_t) bool {
			was, ok := b.before[rel]
			return ok && was.Ino == st.Ino && was.Mode == st.Mode && was.Uid == st.Uid && was.Gid == st.Gid &&
				was.Size == st.Size && was.Mtim == st.Mtim && was.Ctim == st.Ctim
		},
	})
}

func (b *buildBox) Destroy(ctx context.Context) error {
	return b.p.Destroy(ctx, b.inst.id)
}
