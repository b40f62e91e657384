//go:build linux

package local

import (
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tupper-dev/tupper/internal/testenv"
	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/template"
)

// testLayer writes a layer into the store from a function that fills its fs directory,
// with its meta.json, and returns its diff ID (here a hash of what makes it unique).
func testLayer(t *testing.T, st *template.Store, seed string, fill func(dir string)) string {
	t.Helper()
	sum := sha256.Sum256([]byte(seed))
	diff := "sha256:" + hex.EncodeToString(sum[:])
	dir := st.LayerFS(diff)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	fill(dir)
	b, _ := json.Marshal(template.Layer{DiffID: diff})
	if err := os.WriteFile(filepath.Join(st.LayerDir(diff), "meta.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return diff
}

// busyboxTemplate puts a two-layer template called name in p's store, made of the host's
// static busybox (Debian's busybox-static):
//
//	lower layer: /bin/busybox and a link per applet in /bin, /usr/bin/hello (root's, 0755),
//	             /data/owned and /data (1000's), /data/gone, /etc/passwd and /etc/group
//	             with root and img (1001) but no user
//	upper layer: /usr/bin/hello replaced ("hello from the top layer"), /data/gone whited out,
//	             /.tupper a symlink to /usr
//
// and returns its layers' directories on the host.
func busyboxTemplate(t *testing.T, p *Provider, name string, cfg template.Config) []string {
	t.Helper()
	bb := testenv.RequireBinary(t, "busybox")
	f, err := elf.Open(bb)
	if err != nil {
		t.Fatal(err)
	}
	static := true
	for _, ph := range f.Progs {
		if ph.Type == elf.PT_INTERP {
			static = false
		}
	}
	f.Close()
	testenv.Require(t, static, bb+" is not static: apt-get install busybox-static (scripts/setup.sh --test does)")
	applets, err := exec.Command(bb, "--list").Output()
	if err != nil {
		t.Fatal(err)
	}
	bin, err := os.ReadFile(bb)
	if err != nil {
		t.Fatal(err)
	}
	st, err := template.Open(p.cfg.Home)
	if err != nil {
		t.Fatal(err)
	}
	write := func(p, content string, mode os.FileMode, uid int) {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Lchown(p, uid, uid); err != nil {
			t.Fatal(err)
		}
	}
	base := testLayer(t, st, name+"/base", func(dir string) {
		write(filepath.Join(dir, "bin", "busybox"), string(bin), 0o755, 0)
		for _, a := range strings.Fields(string(applets)) {
			if a != "busybox" {
				if err := os.Symlink("busybox", filepath.Join(dir, "bin", a)); err != nil {
					t.Fatal(err)
				}
			}
		}
		write(filepath.Join(dir, "usr", "bin", "hello"), "#!/bin/sh\necho hello from the base layer\n", 0o755, 0)
		write(filepath.Join(dir, "data", "owned"), "mine\n", 0o640, 1000)
		if err := os.Chown(filepath.Join(dir, "data"), 1000, 1000); err != nil {
			t.Fatal(err)
		}
		write(filepath.Join(dir, "data", "gone"), "whited out above\n", 0o644, 0)
		write(filepath.Join(dir, "etc", "passwd"), "root:x:0:0:root:/root:/bin/sh\nimg:x:1001:1001::/data:/bin/sh\n", 0o644, 0)
		write(filepath.Join(dir, "etc", "group"), "root:x:0:\nimg:x:1001:\n", 0o644, 0)
	})
	top := testLayer(t, st, name+"/top", func(dir string) {
		write(filepath.Join(dir, "usr", "bin", "hello"), "#!/bin/sh\necho hello from the top layer\n", 0o755, 0)
		if err := os.MkdirAll(filepath.Join(dir, "data"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(filepath.Join(dir, "data"), 1000, 1000); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mknod(filepath.Join(dir, "data", "gone"), unix.S_IFCHR, 0); err != nil {
			t.Fatal(err)
		}
		// An image's own /.tupper never decides where the agent's mounts go.
		if err := os.Symlink("/usr", filepath.Join(dir, ".tupper")); err != nil {
			t.Fatal(err)
		}
	})
	if err := st.Put(&template.Template{Name: name, Layers: []string{base, top}, Config: cfg}); err != nil {
		t.Fatal(err)
	}
	return []string{st.LayerDir(base), st.LayerDir(top)}
}

// treeHash hashes a directory tree: names, types, modes, owners, sizes, link targets and
// contents, never following a symlink.
func treeHash(t *testing.T, dirs ...string) string {
	t.Helper()
	h := sha256.New()
	for _, d := range dirs {
		err := filepath.WalkDir(d, func(p string, e fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			fi, err := os.Lstat(p)
			if err != nil {
				return err
			}
			st := fi.Sys().(*syscall.Stat_t)
			fmt.Fprintf(h, "%s %v %d:%d %d %d\n", strings.TrimPrefix(p, d), fi.Mode(), st.Uid, st.Gid, fi.Size(), fi.ModTime().UnixNano())
			switch {
			case fi.Mode()&fs.ModeSymlink != 0:
				l, _ := os.Readlink(p)
				fmt.Fprintln(h, l)
			case fi.Mode().IsRegular():
				b, err := os.ReadFile(p)
				if err != nil {
					return err
				}
				h.Write(b)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

// TestImageTemplate: a sandbox of a store template runs on its layers, top layer first,
// with the image's owners inside whatever its uid range, the template's environment and
// working directory, and /etc/passwd with user added; root can write anywhere, the layers
// on the host never change, and another sandbox of the template sees none of it.
func TestImageTemplate(t *testing.T) {
	forRuntimes(t, func(t *testing.T, rt string) {
		p := newTestProvider(t, rt)
		layers := busyboxTemplate(t, p, "bb", template.Config{
			Env:        []string{"TPL_VAR=from-template", "OVERRIDDEN=template", "PATH=/usr/local/bin:/usr/bin:/bin"},
			WorkingDir: "/srv/app",
		})
		before := treeHash(t, layers...)
		a := create(t, p, provider.CreateSpec{Template: "bb", Network: netNone, Env: map[string]string{"OVERRIDDEN": "spec"}})
		if got := run(t, a, "hello; test -e /data/gone && echo gone-is-there; test -e /usr/bin/tupper && echo agent-in-usr; id -u; pwd; echo $TPL_VAR $OVERRIDDEN"); got != "hello from the top layer\n0\n/srv/app\nfrom-template spec" {
			t.Errorf("layers, user, cwd, env: %q", got)
		}
		// Owners as in the image, whatever the uid range on the host.
		if got := run(t, a, "stat -c '%n %u:%g %a' / /usr /usr/bin/hello /bin/busybox /data /data/owned /etc/passwd"); got != strings.Join([]string{
			"/ 0:0 755", "/usr 0:0 755", "/usr/bin/hello 0:0 755", "/bin/busybox 0:0 755", "/data 1000:1000 755", "/data/owned 1000:1000 640", "/etc/passwd 0:0 644",
		}, "\n") {
			t.Errorf("owners inside:\n%s", got)
		}
		// The image's passwd kept, root not doubled, user added.
		if got := run(t, a, "cut -d: -f1,3,6 /etc/passwd"); got != "root:0:/root\nimg:1001:/data\nuser:1000:/home/user" {
			t.Errorf("/etc/passwd:\n%s", got)
		}
		if got := runAs(t, a, "user", "id -u; echo $HOME; cat /data/owned; ls -d /tmp /workspace"); got != "1000\n/home/user\nmine\n/tmp\n/workspace" {
			t.Errorf("as user: %q", got)
		}
		// Root writes anywhere: a new tool in /usr/bin, a change to the image's file, a file
		// given to user, a package-manager-like tree.
		run(t, a, `set -e
printf '#!/bin/sh\necho new tool\n' > /usr/bin/newtool; chmod 755 /usr/bin/newtool; chown 1000:1000 /usr/bin/newtool
echo 'echo changed' >> /usr/bin/hello
mkdir -p /usr/local/lib/python3/site-packages/pkg; echo x > /usr/local/lib/python3/site-packages/pkg/__init__.py
echo y > /data/owned; rm /bin/vi; echo z > /etc/motd`)
		if got := run(t, a, "newtool; hello; stat -c '%u:%g' /usr/bin/newtool; cat /data/owned; test -e /bin/vi || echo vi-gone"); got != "new tool\nhello from the top layer\nchanged\n1000:1000\ny\nvi-gone" {
			t.Errorf("after the writes: %q", got)
		}
		if after := treeHash(t, layers...); after != before {
			t.Errorf("ESCAPE: the template's layers changed on the host")
		}
		// Another sandbox of the template starts from the image.
		b := create(t, p, provider.CreateSpec{Template: "bb", Network: netNone})
		if got := run(t, b, "hello; test -e /usr/bin/newtool || echo no-newtool; cat /data/owned; test -e /bin/vi && echo vi"); got != "hello from the top layer\nno-newtool\nmine\nvi" {
			t.Errorf("a second sandbox sees the first's writes: %q", got)
		}
		// The record and the listing keep the template's name.
		rec, err := p.lay.readRecord(a.ID())
		if err != nil || rec.Template != "bb" {
			t.Errorf("record template %q (%v), want bb", rec.Template, err)
		}
		if info, err := a.Info(context.Background()); err != nil || info.Template != "bb" {
			t.Errorf("info template %q (%v)", info.Template, err)
		}
		// A snapshot of it restores onto the same template with the writes.
		if provider.CapabilitiesOf(p).Has(provider.CapSnapshot) {
			snap, err := a.Snapshot(context.Background(), 0)
			if err != nil {
				t.Fatal(err)
			}
			c := create(t, p, provider.CreateSpec{From: snap, Network: netNone})
			if got := run(t, c, "newtool; hello; stat -c '%u:%g' /usr/bin/newtool /data/owned; cat /data/owned /etc/motd; test -e /bin/vi || echo vi-gone; pwd"); got != "new tool\nhello from the top layer\nchanged\n1000:1000\n1000:1000\ny\nz\nvi-gone\n/srv/app" {
				t.Errorf("restored from the snapshot: %q", got)
			}
			if rec, err := p.lay.readRecord(c.ID()); err != nil || rec.Template != "bb" {
				t.Errorf("restored sandbox's template: %v %v", rec, err)
			}
		}
	})
}

// TestImageTemplateErrors: an unknown template is not_found and names it; nothing is made.
func TestImageTemplateErrors(t *testing.T) {
	p := newTestProvider(t, "")
	_, err := p.Create(context.Background(), provider.CreateSpec{Template: "no-such-template", Network: netNone})
	if provider.CodeOf(err) != provider.CodeNotFound || !strings.Contains(err.Error(), `"no-such-template"`) {
		t.Errorf("unknown template: %v, want not_found naming it", err)
	}
	if ids, _ := p.lay.ids(); len(ids) != 0 {
		t.Errorf("a failed create left sandboxes: %v", ids)
	}
}

// TestImageTemplateUser: the template's user (a uid here) is the default user of commands.
func TestImageTemplateUser(t *testing.T) {
	p := newTestProvider(t, "")
	busyboxTemplate(t, p, "bb-user", template.Config{User: "1001:1001"})
	a := create(t, p, provider.CreateSpec{Template: "bb-user", Network: netNone})
	if got := run(t, a, "id -un; id -u; pwd"); got != "img\n1001\n/workspace" {
		t.Errorf("default user: %q", got)
	}
}

// TestHostTemplateWritable: on template host, root inside owns /usr and writes anywhere in
// it, including over the host's own files; the host's /usr never changes and another
// sandbox sees none of it.
func TestHostTemplateWritable(t *testing.T) {
	forRuntimes(t, func(t *testing.T, rt string) {
		p := newTestProvider(t, rt)
		m := "tupper-rootfs-" + randHex(t)
		a := create(t, p, provider.CreateSpec{Network: netNone})
		if got := run(t, a, "stat -c '%n %U:%G' / /usr /usr/bin /usr/bin/env /etc/ld.so.cache"); got != "/ root:root\n/usr root:root\n/usr/bin root:root\n/usr/bin/env root:root\n/etc/ld.so.cache root:root" {
			t.Errorf("owners inside: %q", got)
		}
		// Root inside reads what only host root may read in /usr (docs/security.md,
		// finding 8): the idmap makes host root's files root's inside.
		secret := "/usr/local/share/" + m + ".root-only"
		if err := os.WriteFile(secret, []byte(m), 0o600); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove(secret) })
		if got := run(t, a, "cat "+secret); got != m {
			t.Errorf("root-only host file inside: %q", got)
		}
		envBefore, err := os.ReadFile("/usr/bin/env")
		if err != nil {
			t.Fatal(err)
		}
		run(t, a, `set -e
printf '#!/bin/sh\necho local tool\n' > /usr/local/bin/`+m+`; chmod 755 /usr/local/bin/`+m+`
echo x > /usr/bin/`+m+`
cp /usr/bin/env /tmp/env.orig; echo appended >> /usr/bin/env; chmod 700 /usr/bin/env
rm /usr/bin/`+m+`; echo y > /usr/bin/`+m+`.2
mkdir -p /usr/lib/`+m+`/pkg`)
		if got := run(t, a, m+"; tail -c 9 /usr/bin/env; stat -c %a /usr/bin/env; cat /usr/bin/"+m+".2"); got != "local tool\nappended\n700\ny" {
			t.Errorf("after the writes: %q", got)
		}
		for _, f := range []string{"/usr/local/bin/" + m, "/usr/bin/" + m, "/usr/bin/" + m + ".2", "/usr/lib/" + m} {
			if _, err := os.Lstat(f); err == nil {
				os.RemoveAll(f)
				t.Errorf("ESCAPE: a sandbox's write is on the host at %s", f)
			}
		}
		if b, err := os.ReadFile("/usr/bin/env"); err != nil || string(b) != string(envBefore) {
			t.Errorf("ESCAPE: the host's /usr/bin/env changed")
		}
		if fi, err := os.Stat("/usr/bin/env"); err != nil || fi.Mode().Perm() != 0o755 {
			t.Errorf("ESCAPE: the host's /usr/bin/env mode: %v %v", fi, err)
		}
		b := create(t, p, provider.CreateSpec{Network: netNone})
		if got := run(t, b, "ls /usr/local/bin /usr/bin | grep -c "+m+"; tail -c 9 /usr/bin/env | grep -c appended; true"); got != "0\n0" {
			t.Errorf("another sandbox sees the first's writes: %q", got)
		}
	})
}

// TestImageTemplateStartReady: the template's start command runs in the background once the
// agent answers, and Create returns only once its ready command succeeds; a ready command
// that never does fails the create when its context ends, leaving nothing.
func TestImageTemplateStartReady(t *testing.T) {
	p := newTestProvider(t, "")
	busyboxTemplate(t, p, "bb-start", template.Config{
		StartCmd: "sleep 1; echo up > /tmp/ready-flag; exec sleep 1000",
		ReadyCmd: "test -e /tmp/ready-flag",
	})
	a := create(t, p, provider.CreateSpec{Template: "bb-start", Network: netNone})
	if got := run(t, a, "cat /tmp/ready-flag; ps -o args | grep -c '^sleep 1000'"); got != "up\n1" {
		t.Errorf("after create: %q, want the ready flag and the start command running", got)
	}
	busyboxTemplate(t, p, "bb-never", template.Config{ReadyCmd: "false"})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if _, err := p.Create(ctx, provider.CreateSpec{Template: "bb-never", Network: netNone}); provider.CodeOf(err) != provider.CodeAborted {
		t.Errorf("create with a ready command that never succeeds: %v, want aborted", err)
	}
	if ids, _ := p.lay.ids(); len(ids) != 1 {
		t.Errorf("sandboxes after the failed create: %v, want only the first", ids)
	}
}
