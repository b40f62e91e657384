//go:build linux

package local

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/template"
)

// Image templates: a template of the store (package template) named by CreateSpec.Template.
// Its layers, unpacked once under Home/store/layers, are the lower layers of the sandbox's
// overlay, top first, each an idmapped read-only view (idmap.go). The upper layer starts
// with what the sandbox needs and the image may lack (imageSkeleton): /etc/hosts,
// /etc/hostname and /etc/resolv.conf written by the provider, the image's /etc/passwd and
// /etc/group with root and user (uid 1000, home /home/user) added when absent, /tmp,
// /workspace and the mount points of /proc, /sys, /dev and /.tupper. The agent, a static
// binary, needs nothing else from the image.

// sandboxTemplate is a template resolved for a create.
type sandboxTemplate struct {
	name string
	// image is the store's record; nil for template host.
	image *template.Template
	// lowers are an image's layer directories, top first.
	lowers []string
	// build: a build step's sandbox (build.go), whose writable layer becomes the next layer,
	// so nothing is added to it but what the sandbox cannot run without (no user account,
	// no /workspace, /tmp or homes).
	build bool
}

// resolveTemplate finds the template called name ("" or "host": the host template).
// "debian" and "base", when the store lacks them, are made first (template.Store.Ensure: a
// few minutes, once). An unknown name is CodeNotFound.
func (p *Provider) resolveTemplate(ctx context.Context, name string) (*sandboxTemplate, error) {
	if name == "" || name == TemplateHost {
		return &sandboxTemplate{name: TemplateHost}, nil
	}
	st, err := p.templateStore()
	if err != nil {
		return nil, err
	}
	// The store's one resolver: the built-in debian and base templates are made on first use
	// from the machine's own mirror, as a build's FROM makes them.
	t, err := st.Ensure(ctx, name, template.EnsureOptions{Runner: p.BuildRunner()})
	if err != nil {
		if provider.CodeOf(err) == provider.CodeNotFound {
			return nil, provider.Errorf(provider.CodeNotFound, "template %q not found (the local provider has %q and the templates of %s)", name, TemplateHost, st.Root())
		}
		return nil, err
	}
	if len(t.Layers) == 0 {
		return nil, provider.Errorf(provider.CodeInvalidArgument, "template %q has no layers", name)
	}
	out := &sandboxTemplate{name: name, image: t}
	for i := len(t.Layers) - 1; i >= 0; i-- {
		if !st.HasLayer(t.Layers[i]) {
			return nil, provider.Errorf(provider.CodeNotFound, "template %q: layer %s is missing from the store", name, t.Layers[i])
		}
		out.lowers = append(out.lowers, st.LayerFS(t.Layers[i]))
	}
	return out, nil
}

// has reports whether the template's file system has rel (a path without a leading /),
// for capabilities: the host's own for template host.
func (t *sandboxTemplate) has(rel string) bool {
	if t.image == nil {
		return fileExists("/" + rel)
	}
	_, _, ok := lowerLookup(t.lowers, rel)
	return ok
}

// isWhiteout reports whether fi is an overlay whiteout: a 0/0 character device.
func isWhiteout(fi fs.FileInfo) bool {
	if fi.Mode()&fs.ModeCharDevice == 0 {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && st.Rdev == 0
}

// isOpaque reports whether the directory p is an opaque overlay directory (what is below it
// in lower layers is hidden).
func isOpaque(p string) bool {
	buf := make([]byte, 1)
	n, err := unix.Lgetxattr(p, "trusted.overlay.opaque", buf)
	return err == nil && n == 1 && buf[0] == 'y'
}

// lowerLookup finds rel in a stack of layers (top first) as overlayfs would merge them:
// the topmost layer that has it wins; a whiteout, a non-directory in its way or an opaque
// directory above it hides it in the layers below. It never follows a symlink: one in the
// way hides rel. It returns the layer's path of rel and its Lstat.
func lowerLookup(lowers []string, rel string) (string, fs.FileInfo, bool) {
	parts := strings.Split(filepath.Clean(rel), "/")
	for _, l := range lowers {
		p, opaque := l, false
		for i, c := range parts {
			p = filepath.Join(p, c)
			fi, err := os.Lstat(p)
			if err != nil {
				break // not in this layer: look below, unless an opaque directory hides it
			}
			if isWhiteout(fi) {
				return "", nil, false
			}
			if i == len(parts)-1 {
				return p, fi, true
			}
			if !fi.IsDir() {
				return "", nil, false
			}
			if isOpaque(p) {
				opaque = true
			}
		}
		if opaque {
			return "", nil, false
		}
	}
	return "", nil, false
}

// maxEtcFile bounds the image files the host reads (passwd, group).
const maxEtcFile = 1 << 20

// readLowerFile returns the content of the regular file rel of the layers, or nil.
func readLowerFile(lowers []string, rel string) ([]byte, error) {
	p, fi, ok := lowerLookup(lowers, rel)
	if !ok || !fi.Mode().IsRegular() {
		return nil, nil
	}
	f, err := os.OpenFile(p, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxEtcFile+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxEtcFile {
		return nil, fmt.Errorf("the image's /%s is larger than %d bytes", rel, maxEtcFile)
	}
	return b, nil
}

// imageEtc returns the /etc files of a sandbox of an image template: the image's passwd and
// group, with root (and with addUser, user) added when they lack them, and hosts, hostname
// and resolv.conf.
func imageEtc(lowers []string, hostname string, nameservers []netip.Addr, addUser bool) (map[string]string, error) {
	etc := etcFiles(hostname, nameservers)
	out := map[string]string{"hosts": etc["hosts"], "hostname": etc["hostname"], "resolv.conf": etc["resolv.conf"]}
	for _, f := range []struct{ name, root, user string }{
		{"passwd", "root:x:0:0:root:/root:/bin/sh\n", "user:x:1000:1000:user:/home/user:/bin/sh\n"},
		{"group", "root:x:0:\n", "user:x:1000:\n"},
	} {
		b, err := readLowerFile(lowers, "etc/"+f.name)
		if err != nil {
			return nil, err
		}
		if len(b) > 0 && !bytes.HasSuffix(b, []byte("\n")) {
			b = append(b, '\n')
		}
		if !hasEntry(b, "root") {
			b = append([]byte(f.root), b...)
		}
		if addUser && !hasEntry(b, "user") {
			b = append(b, f.user...)
		}
		out[f.name] = string(b)
	}
	return out, nil
}

// hasEntry reports whether a passwd or group file has an entry called name.
func hasEntry(b []byte, name string) bool {
	for _, line := range strings.Split(string(b), "\n") {
		if n, _, ok := strings.Cut(line, ":"); ok && n == name {
			return true
		}
	}
	return false
}

// userName turns an image's USER ("name", "uid", "name:group", "uid:gid") into the name
// the agent looks up in passwd: a uid is the name of the first entry with it.
func userName(user, passwd string) (string, error) {
	u, _, _ := strings.Cut(user, ":")
	if _, err := strconv.ParseUint(u, 10, 32); err != nil {
		return u, nil
	}
	for _, line := range strings.Split(passwd, "\n") {
		f := strings.Split(line, ":")
		if len(f) >= 3 && f[2] == u {
			return f[0], nil
		}
	}
	return "", provider.Errorf(provider.CodeInvalidArgument, "the template's user %q has no entry in its /etc/passwd", user)
}

// imageSkeleton makes, in a fresh upper layer, what a sandbox needs on an image's layers:
// /etc (to hold the files the provider writes), and where the image lacks them /tmp
// (1777), /root, /home/user (user's), /workspace, the mount points /proc, /sys and /dev,
// and /.tupper with the agent's mount points. A directory the image has is made in the
// upper layer with the image's mode and owner, so that it looks the same.
func imageSkeleton(upper string, lowers []string, uidBase uint32, workdir string, build bool) error {
	shift := func(id uint32) uint32 {
		if id < idMapSize {
			return uidBase + id
		}
		return uidBase + 65534
	}
	// ensure makes rel (and its parents) in upper unless the image has it and it need not
	// be in the upper layer.
	var ensure func(rel string, mode os.FileMode, uid uint32, always bool) error
	ensure = func(rel string, mode os.FileMode, uid uint32, always bool) error {
		if _, err := os.Lstat(filepath.Join(upper, rel)); err == nil {
			return nil
		}
		if rel == ".tupper" || strings.HasPrefix(rel, ".tupper/") {
			// The agent's mount points are the provider's, whatever the image has there.
			if dir := filepath.Dir(rel); dir != "." {
				if err := ensure(dir, 0, 0, true); err != nil {
					return err
				}
			}
			return mkdirOwned(filepath.Join(upper, rel), 0, uidBase)
		}
		_, fi, inImage := lowerLookup(lowers, rel)
		if inImage && (!always || !fi.IsDir()) {
			// Never a directory over an image's file or symlink (a /lib -> usr/lib).
			return nil
		}
		for a := filepath.Dir(rel); a != "."; a = filepath.Dir(a) {
			if _, afi, ok := lowerLookup(lowers, a); ok && !afi.IsDir() {
				return nil
			}
		}
		if dir := filepath.Dir(rel); dir != "." {
			if err := ensure(dir, 0, 0, true); err != nil {
				return err
			}
		}
		if inImage && fi.IsDir() {
			st := fi.Sys().(*syscall.Stat_t)
			if err := os.Mkdir(filepath.Join(upper, rel), fi.Mode().Perm()); err != nil {
				return err
			}
			if err := os.Chmod(filepath.Join(upper, rel), fi.Mode()&(fs.ModePerm|fs.ModeSticky|fs.ModeSetgid|fs.ModeSetuid)); err != nil {
				return err
			}
			return os.Lchown(filepath.Join(upper, rel), int(shift(st.Uid)), int(shift(st.Gid)))
		}
		return mkdirOwned(filepath.Join(upper, rel), mode, uidBase+uid)
	}
	for _, d := range []struct {
		path   string
		mode   os.FileMode
		uid    uint32
		always bool
	}{
		{"etc", 0, 0, true}, {"tmp", 0o1777 | os.ModeSticky, 0, false}, {"root", 0o700, 0, false},
		{"home/user", 0, 1000, false}, {"workspace", 0, 0, false}, {"proc", 0, 0, false},
		{"sys", 0, 0, false}, {"dev", 0, 0, false}, {".tupper/run", 0, 0, true}, {".tupper/bin", 0, 0, true},
	} {
		if build && !d.always && d.path != "proc" && d.path != "sys" && d.path != "dev" {
			continue // a build step's layer holds only what its step made
		}
		if err := ensure(d.path, d.mode, d.uid, d.always); err != nil {
			return err
		}
	}
	if workdir != "" && workdir != "/" && !build {
		if err := ensure(strings.TrimPrefix(filepath.Clean(workdir), "/"), 0, 0, false); err != nil {
			return err
		}
	}
	if fi, err := os.Lstat(filepath.Join(upper, "etc")); err != nil || !fi.IsDir() {
		return provider.Errorf(provider.CodeInvalidArgument, "the template's /etc is not a directory")
	}
	// The agent binary is bound onto this empty file.
	p := filepath.Join(upper, ".tupper/bin/tupper")
	if err := os.WriteFile(p, nil, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return os.Chown(p, int(uidBase), int(uidBase))
}

// TemplateUsers names what uses the template called name: the sandboxes recorded in Home
// ("sandbox ID"; one that died counts until it is reaped) and its snapshots ("snapshot ID").
// It reads records only, so it works where the provider cannot create. `tupper template
// rm` refuses to remove a template in use.
func (p *Provider) TemplateUsers(ctx context.Context, name string) ([]string, error) {
	var out []string
	ids, err := p.lay.ids()
	if err != nil {
		return nil, err
	}
	for _, id := range ids {
		if rec, err := p.lay.readRecord(id); err == nil && rec.Template == name {
			out = append(out, "sandbox "+rec.ID)
		}
	}
	ents, err := os.ReadDir(p.lay.snapshots())
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	for _, e := range ents {
		if m, err := p.readSnapshot(e.Name()); err == nil && m.Template == name {
			out = append(out, "snapshot "+m.ID)
		}
	}
	return out, nil
}

var _ provider.Templater = (*Provider)(nil)

// hostTemplate is the built-in template host, which the provider makes from the host and
// the store does not hold.
var hostTemplate = provider.TemplateInfo{Name: TemplateHost, Builtin: true, Source: "built in: the host's /usr as read-only lower layers"}

// templateInfo describes t of the store, whose layers' files take size bytes.
func templateInfo(t *template.Template, size int64) provider.TemplateInfo {
	_, builtin := template.BuiltinNamed(t.Name)
	return provider.TemplateInfo{
		Name: t.Name, Tags: t.Tags, Builtin: builtin, Source: t.Source,
		Layers: len(t.Layers), Size: size, Created: t.Created, Build: t.Build,
	}
}

// Templates lists the built-in templates (host, and debian and base until they are made) and
// those of the store.
func (p *Provider) Templates(ctx context.Context) ([]provider.TemplateInfo, error) {
	st, err := p.templateStore()
	if err != nil {
		return nil, err
	}
	all, err := st.List()
	if err != nil {
		return nil, err
	}
	u, err := st.Usage()
	if err != nil {
		return nil, err
	}
	out := []provider.TemplateInfo{hostTemplate}
	made := map[string]bool{}
	for _, t := range all {
		made[t.Name] = true
		out = append(out, templateInfo(t, u.Templates[t.Name]))
	}
	for _, b := range template.Builtins {
		if !made[b.Name] {
			out = append(out, provider.TemplateInfo{Name: b.Name, Builtin: true, Source: b.About})
		}
	}
	return out, nil
}

// Template finds a template by name or tag: it reads that template's record and its own
// layers' sizes, nothing of the others'.
func (p *Provider) Template(ctx context.Context, name string) (provider.TemplateInfo, error) {
	if name == TemplateHost {
		return hostTemplate, nil
	}
	st, err := p.templateStore()
	if err != nil {
		return provider.TemplateInfo{}, err
	}
	t, err := st.Get(name)
	if provider.CodeOf(err) == provider.CodeNotFound {
		if b, ok := template.BuiltinNamed(name); ok {
			return provider.TemplateInfo{Name: b.Name, Builtin: true, Source: b.About}, nil
		}
	}
	if err != nil {
		return provider.TemplateInfo{}, err
	}
	size, err := layersSize(st, t)
	if err != nil {
		return provider.TemplateInfo{}, err
	}
	return templateInfo(t, size), nil
}

// layersSize is the bytes of t's layers' files, reading those layers' records only.
func layersSize(st *template.Store, t *template.Template) (int64, error) {
	var size int64
	for _, d := range t.Layers {
		l, err := st.Layer(d)
		if provider.CodeOf(err) == provider.CodeNotFound {
			continue // as Usage counts a missing layer
		}
		if err != nil {
			return 0, err
		}
		size += l.Size
	}
	return size, nil
}

// DeleteTemplate removes a template of the store and the layers no other template uses.
// host cannot be deleted; debian and base can (they are made again on next use).
func (p *Provider) DeleteTemplate(ctx context.Context, name string, force bool) error {
	if name == TemplateHost {
		return provider.Errorf(provider.CodeInvalidArgument, "template %q is built in and cannot be deleted", name)
	}
	st, err := p.templateStore()
	if err != nil {
		return err
	}
	if _, err := st.Remove(ctx, name, template.RemoveOptions{InUse: p.TemplateUsers, Force: force}); err != nil {
		return err
	}
	if _, err := st.Prune(ctx); err != nil {
		return err
	}
	// The template's boot images with it (bootimage.go).
	_, err = p.PruneBootImages(ctx)
	return err
}
