//go:build linux

package local

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/tupper-dev/tupper/internal/flock"
	"golang.org/x/sys/unix"
)

// TemplateHost is the default template: the host's /usr, /bin, /sbin and /lib* as
// read-only lower layers under the sandbox's own writable layer, with a private /etc, /tmp,
// /home and /workspace.
const TemplateHost = "host"

// templateVersion changes when the layout of a built template changes; an older build is
// rebuilt.
const templateVersion = "2"

// hostDirs are the host directories of the host template, each a read-only lower layer of
// an overlay of its own (mountRootfs). On a merged-/usr host most are symlinks, which the
// template copies instead.
var hostDirs = []string{"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32"}

// realHostDirs are the host directories that are directories (not a merged-/usr host's
// symlinks, which the template copies): each becomes a lower layer (see mountRootfs).
func realHostDirs() []string {
	var out []string
	for _, d := range hostDirs {
		if fi, err := os.Lstat("/" + d); err == nil && fi.IsDir() {
			out = append(out, d)
		}
	}
	return out
}

// hostEtcDir is the host's /etc, which hostEtc is copied from; a test points it elsewhere.
var hostEtcDir = "/etc"

// hostEtc are the host /etc entries copied into the host template's shared lower layer:
// what makes /usr work (alternatives symlinks, the loader cache), CA certificates for TLS,
// and static tables. Nothing an administrator puts secrets in: the files that can carry
// them (environment, profile, profile.d, bash.bashrc, gitconfig, skel, …) are never
// copied; templateEtc writes clean versions instead.
var hostEtc = []string{
	"alternatives", "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "timezone",
	"ssl/certs/ca-certificates.crt", "ca-certificates.conf", "inputrc", "login.defs",
	"mime.types", "protocols", "services", "host.conf", "gai.conf", "debian_version",
	"os-release", "shells", "terminfo", "magic", "mke2fs.conf", "ethertypes", "rpc",
}

// templateEtc are the shell start-up files of the host template, the same on every host:
// a login shell's PATH and prompt, and the dotfiles useradd copies into a new home.
var templateEtc = map[string]string{
	"profile": `# /etc/profile: for login shells (written by tupper).
if [ "$(id -u)" -eq 0 ]; then
  PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
else
  PATH="/usr/local/bin:/usr/bin:/bin"
fi
export PATH
if [ "${PS1-}" ]; then
  if [ "${BASH-}" ] && [ "$BASH" != "/bin/sh" ]; then
    [ -f /etc/bash.bashrc ] && . /etc/bash.bashrc
  elif [ "$(id -u)" -eq 0 ]; then
    PS1='# '
  else
    PS1='$ '
  fi
fi
`,
	"bash.bashrc": `# /etc/bash.bashrc: for interactive bash shells (written by tupper).
[ -z "${PS1-}" ] && return
shopt -s checkwinsize
PS1='\u@\h:\w\$ '
`,
	"skel/.bashrc": `# ~/.bashrc (written by tupper)
case $- in *i*) ;; *) return ;; esac
HISTCONTROL=ignoreboth
alias ls='ls --color=auto'
`,
	"skel/.profile": `# ~/.profile (written by tupper)
if [ -n "${BASH_VERSION-}" ] && [ -f "$HOME/.bashrc" ]; then
  . "$HOME/.bashrc"
fi
`,
	"skel/.bash_logout": "# ~/.bash_logout (written by tupper)\n",
}

// skeleton is the writable directory tree every sandbox gets in its private upper layer,
// owned by its root (or, for /home/user, by user) so root inside can write where a root
// user expects to. mode 0 means 0o755.
var skeleton = []struct {
	path string
	mode os.FileMode
	uid  uint32 // inside the sandbox
}{
	{"etc", 0, 0}, {"tmp", 0o1777 | os.ModeSticky, 0}, {"root", 0o700, 0}, {"home", 0, 0},
	{"home/user", 0o755, 1000}, {"workspace", 0, 0}, {"var", 0, 0}, {"var/tmp", 0o1777 | os.ModeSticky, 0},
	{"var/lib", 0, 0}, {"var/log", 0, 0}, {"var/cache", 0, 0}, {"opt", 0, 0}, {"srv", 0, 0},
	{"mnt", 0, 0}, {"media", 0, 0}, {"run", 0, 0},
}

// buildTemplate makes the shared lower layer of template name under dir (once; later calls
// return at once). It holds mount points for the host directories, the host's symlinks for
// merged /usr, the static /etc files above and templateEtc. It is owned by host root and never written
// after it is built, so every sandbox can share it.
func buildTemplate(ctx context.Context, dir, name string) (string, error) {
	if name != TemplateHost {
		return "", fmt.Errorf("unknown template %q (the local provider has %q)", name, TemplateHost)
	}
	// Each version has its own directory: a rebuild never touches the lower layer of a
	// sandbox that still runs on an older one.
	final := filepath.Join(dir, name+".v"+templateVersion)
	if fileExists(filepath.Join(final, ".tupper", "template-version")) {
		return final, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	lk, err := flock.Acquire(ctx, filepath.Join(dir, ".build.lock"))
	if err != nil {
		return "", err
	}
	defer lk.Unlock()
	if fileExists(filepath.Join(final, ".tupper", "template-version")) {
		return final, nil
	}
	tmp, err := os.MkdirTemp(dir, "."+name+"-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", err
	}
	for _, d := range []string{"proc", "sys", "dev", "etc", ".tupper/bin", ".tupper/run"} {
		if err := os.MkdirAll(filepath.Join(tmp, d), 0o755); err != nil {
			return "", err
		}
	}
	// The agent binary is bound onto this empty file.
	if err := os.WriteFile(filepath.Join(tmp, ".tupper/bin/tupper"), nil, 0o755); err != nil {
		return "", err
	}
	for _, d := range hostDirs {
		fi, err := os.Lstat("/" + d)
		switch {
		case err != nil:
			continue
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink("/" + d)
			if err != nil {
				return "", err
			}
			if err := os.Symlink(target, filepath.Join(tmp, d)); err != nil {
				return "", err
			}
		case fi.IsDir():
			if err := os.Mkdir(filepath.Join(tmp, d), 0o755); err != nil {
				return "", err
			}
		}
	}
	for _, e := range hostEtc {
		if err := copyTree(filepath.Join(hostEtcDir, e), filepath.Join(tmp, "etc", e)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("copy /etc/%s: %w", e, err)
		}
	}
	for name, content := range templateEtc {
		p := filepath.Join(tmp, "etc", name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return "", err
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			return "", err
		}
	}
	if err := os.WriteFile(filepath.Join(tmp, ".tupper", "template-version"), []byte(templateVersion), 0o644); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, final); err != nil {
		return "", err
	}
	return final, nil
}

// copyTree copies a file, symlink or directory tree, keeping modes (owner: root).
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(dst, rel)
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			return err
		}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			t, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(t, to)
		case fi.IsDir():
			return os.MkdirAll(to, fi.Mode().Perm())
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			return os.WriteFile(to, b, fi.Mode().Perm())
		}
		return nil // sockets, devices and fifos are not copied
	})
}

// etcFiles are the per-sandbox /etc files written into the private upper layer.
func etcFiles(hostname string, nameservers []netip.Addr) map[string]string {
	resolv := ""
	for _, ns := range nameservers {
		resolv += "nameserver " + ns.String() + "\n"
	}
	return map[string]string{
		"passwd": "root:x:0:0:root:/root:/bin/bash\n" +
			"user:x:1000:1000:user:/home/user:/bin/bash\n" +
			"nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
		"group": "root:x:0:\nuser:x:1000:\nnogroup:x:65534:\n",
		"hosts": "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n" +
			"127.0.1.1\t" + hostname + "\n",
		"hostname":      hostname + "\n",
		"resolv.conf":   resolv,
		"nsswitch.conf": "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\nnetworks: files\nprotocols: files\nservices: files\n",
	}
}

// rootfsPlan is what mountRootfs stacks for one sandbox.
type rootfsPlan struct {
	// lowers are the template's layer directories, top first (overlayfs's order).
	lowers []string
	// hostDirs are, for template host, the host directories ("usr", …) that become read-only
	// lower layers of overlays of their own at /<dir> (see the package doc).
	hostDirs []string
	// image: the template is an image, whose layers have their own tree; only what the
	// sandbox needs and the image lacks is added (imageSkeleton), never the host skeleton.
	image bool
	// workdir is an image's working directory, made when the image lacks it.
	workdir string
	// build: a build step's sandbox; see sandboxTemplate.build.
	build bool
	// usernsFD is a user namespace with the sandbox's mapping, through which every lower
	// layer is idmapped (idmap.go); -1 mounts them as they are (runsc, NoUserNS).
	usernsFD int
	uidBase  uint32 // host uid of root inside: the owner of what is made in the upper layer
	diskGB   int
	// hostTmp also makes disk/tmp, the directory runsc binds at /tmp (see layout.tmp).
	hostTmp bool
	etc     map[string]string // files written into the upper layer's /etc
	// trust, when not "", is the CA bundle written at trustBundle, after fill (bound
	// secrets: the sandbox's own CA).
	trust string
	// fill, when not nil, adds to the upper layer (and disk/tmp) before the overlay is
	// mounted (a snapshot's files).
	fill func(upper string) error
}

// mountRootfs mounts the sandbox's root file system at rootfs: a tmpfs of the disk size at
// disk (which bounds the writable layer), the private skeleton in disk/upper owned by the
// sandbox's root, and an overlay of the template's layers, each a read-only (idmapped)
// view attached at disk/l/N, under that upper layer. For template host each host directory
// gets an overlay of its own, mounted at /<dir> above it, whose upper directory is
// disk/upper/<dir>: so the sandbox's whole writable layer is one tree (what a snapshot
// copies). Run it on the sandbox's mount-namespace thread: it changes that thread's
// working directory for the mounts and restores it.
func mountRootfs(disk, rootfs string, plan rootfsPlan) error {
	for _, d := range []string{disk, rootfs} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	// nr_inodes bounds metadata too: 64 Ki inodes per GiB.
	opts := fmt.Sprintf("size=%dm,nr_inodes=%d,mode=0700", plan.diskGB*1024, plan.diskGB*65536)
	if err := unix.Mount("tmpfs", disk, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return fmt.Errorf("mount tmpfs: %w", err)
	}
	err := func() error {
		upper := filepath.Join(disk, "upper")
		base := int(plan.uidBase)
		for _, d := range []string{"upper", "work", "l", "w", "m"} {
			if err := os.Mkdir(filepath.Join(disk, d), 0o755); err != nil {
				return err
			}
		}
		if err := os.Chown(upper, base, base); err != nil {
			return err
		}
		if plan.image {
			if err := imageSkeleton(upper, plan.lowers, plan.uidBase, plan.workdir, plan.build); err != nil {
				return err
			}
		} else if err := hostSkeleton(upper, plan.hostDirs, plan.uidBase); err != nil {
			return err
		}
		if plan.hostTmp {
			tmp := filepath.Join(disk, "tmp")
			if err := os.Mkdir(tmp, 0o755); err != nil {
				return err
			}
			if err := os.Chown(tmp, base, base); err != nil {
				return err
			}
			if err := os.Chmod(tmp, 0o1777|os.ModeSticky); err != nil {
				return err
			}
		}
		for name, content := range plan.etc {
			p := filepath.Join(upper, "etc", name)
			if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
				return err
			}
			if err := os.Chown(p, base, base); err != nil {
				return err
			}
		}
		if plan.fill != nil {
			if err := plan.fill(upper); err != nil {
				return err
			}
		}
		if plan.trust != "" {
			if err := writeOwned(upper, trustBundle, plan.trust, base); err != nil {
				return err
			}
		}
		// Relative paths keep the overlays' options short (a page at most) however many
		// layers an image has.
		if err := unix.Chdir(disk); err != nil {
			return err
		}
		defer unix.Chdir("/")
		lowers := make([]string, len(plan.lowers))
		for i, l := range plan.lowers {
			lowers[i] = "l/" + strconv.Itoa(i)
			if err := os.Mkdir(lowers[i], 0o700); err != nil {
				return err
			}
			if err := mountIdmapped(l, lowers[i], plan.usernsFD); err != nil {
				return err
			}
		}
		// The host directories' overlays are mounted before the root's and moved onto it
		// after: mounted the other way round, each would have an upper directory inside an
		// upper directory in use (disk/upper), which overlayfs warns of.
		for _, d := range plan.hostDirs {
			l, w, m := "l/host-"+d, "w/"+d, "m/"+d
			for _, dir := range []string{l, w, m} {
				if err := os.Mkdir(dir, 0o700); err != nil {
					return err
				}
			}
			if err := mountIdmapped("/"+d, l, plan.usernsFD); err != nil {
				return err
			}
			data := fmt.Sprintf("lowerdir=%s,upperdir=upper/%s,workdir=%s", l, d, w)
			// nosuid as the root overlay below: host's /usr has set-uid programs (su,
			// passwd, sudo), which run as the sandbox's root where it has a user namespace.
			hflags := uintptr(unix.MS_NODEV)
			if plan.usernsFD < 0 {
				hflags |= unix.MS_NOSUID
			}
			if err := unix.Mount("overlay", m, "overlay", hflags, data); err != nil {
				return fmt.Errorf("mount the overlay of /%s: %w", d, err)
			}
		}
		data := fmt.Sprintf("lowerdir=%s,upperdir=upper,workdir=work", strings.Join(lowers, ":"))
		// nodev: the host never honours a device node that sandbox code made. nosuid unless
		// the sandbox has a user namespace (runc, crun): there a set-uid file can only be
		// owned by the sandbox's own ids, so honouring it raises a process to the sandbox's
		// root at most, and sudo works inside. Under runsc (files made inside are host
		// root's; the sentry decides set-uid inside) and without a user namespace the host
		// never honours a set-id bit that sandbox code made.
		flags := uintptr(unix.MS_NODEV)
		if plan.usernsFD < 0 {
			flags |= unix.MS_NOSUID
		}
		if err := unix.Mount("overlay", rootfs, "overlay", flags, data); err != nil {
			return fmt.Errorf("mount overlay: %w", err)
		}
		for _, d := range plan.hostDirs {
			if err := unix.Mount("m/"+d, filepath.Join(rootfs, d), "", unix.MS_MOVE, ""); err != nil {
				return fmt.Errorf("move the overlay of /%s into place: %w", d, err)
			}
		}
		// The overlays hold their own references to the layers: the views need no place
		// in the namespace any more.
		ents, _ := os.ReadDir("l")
		for _, e := range ents {
			if err := unix.Unmount("l/"+e.Name(), unix.MNT_DETACH); err != nil {
				return fmt.Errorf("detach the view of a layer: %w", err)
			}
		}
		return nil
	}()
	if err != nil {
		unix.Unmount(rootfs, unix.MNT_DETACH)
		unix.Unmount(disk, unix.MNT_DETACH)
		return err
	}
	return nil
}

// hostSkeleton makes the host template's writable skeleton in upper, and the upper
// directories of the host directories' overlays (root's, 0755, as the host's own).
func hostSkeleton(upper string, hostDirs []string, uidBase uint32) error {
	for _, s := range skeleton {
		if err := mkdirOwned(filepath.Join(upper, s.path), s.mode, uidBase+s.uid); err != nil {
			return err
		}
	}
	for _, d := range hostDirs {
		if err := mkdirOwned(filepath.Join(upper, d), 0, uidBase); err != nil {
			return err
		}
	}
	return nil
}

// mkdirOwned makes the directory p with mode (0: 0755) owned by host uid and gid id.
func mkdirOwned(p string, mode os.FileMode, id uint32) error {
	if mode == 0 {
		mode = 0o755
	}
	if err := os.Mkdir(p, mode.Perm()); err != nil {
		return err
	}
	if err := os.Chmod(p, mode); err != nil {
		return err
	}
	return os.Chown(p, int(id), int(id))
}

// unmountRootfs undoes mountRootfs. Paths that are not mounted are fine.
func unmountRootfs(disk, rootfs string) error {
	var errs []error
	for _, p := range []string{rootfs, disk} {
		if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

// writeOwned writes content at rel (absolute in the sandbox) under upper, making its
// missing directories; what it makes is owned by uid (the sandbox's root) and readable by all.
func writeOwned(upper, rel, content string, uid int) error {
	dir := upper
	parts := strings.Split(strings.Trim(path.Dir(rel), "/"), "/")
	for _, part := range parts {
		dir = filepath.Join(dir, part)
		if err := os.Mkdir(dir, 0o755); err == nil {
			if err := os.Chown(dir, uid, uid); err != nil {
				return err
			}
		} else if !errors.Is(err, fs.ErrExist) {
			return err
		}
	}
	p := filepath.Join(upper, rel)
	os.Remove(p) // a snapshot's copy, or a link
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		return err
	}
	return os.Chown(p, uid, uid)
}
