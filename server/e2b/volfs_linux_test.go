package e2b

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tupper-dev/tupper/provider"
)

// TestVolumeFilesHostile: a volume's files are written by sandboxes; the content API never
// follows a symbolic link in them (to a host file, the host's root, or out with ".."), never
// writes through one, and "..", absolute and doubled paths stay in the volume.
func TestVolumeFilesHostile(t *testing.T) {
	base := t.TempDir()
	vol := filepath.Join(base, "vol")
	secret := filepath.Join(base, "secret")
	if err := os.WriteFile(secret, []byte("host secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(vol, "dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(vol, "dir", "ok.txt"), []byte("ok"), 0o644)
	for name, target := range map[string]string{"abs": secret, "rel": "../secret", "root": "/", "up": "..", "dirlink": "dir"} {
		if err := os.Symlink(target, filepath.Join(vol, name)); err != nil {
			t.Fatal(err)
		}
	}
	root, err := os.Open(vol)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()

	for _, p := range []string{"/abs", "rel", "/root" + secret, "up/secret", "/dirlink/ok.txt", "../secret", "/../../secret"} {
		fd, err := volOpen(root, volRel(p), os.O_RDONLY|unix.O_NOFOLLOW, 0)
		if err == nil {
			unix.Close(fd)
			t.Errorf("read %s: opened", p)
			continue
		}
		if c := provider.CodeOf(volErr(p, err)); c != provider.CodeInvalidArgument && c != provider.CodeNotFound {
			t.Errorf("read %s: %v (%s)", p, err, c)
		}
	}
	for _, p := range []string{"/root" + base + "/written", "up/written", "/dirlink/written", "abs"} {
		err := volWrite(root, volRel(p), strings.NewReader("x"), true, nil, nil, nil)
		if err == nil {
			t.Errorf("write %s: written", p)
		}
	}
	if b, _ := os.ReadFile(secret); string(b) != "host secret" {
		t.Errorf("the host file changed: %q", b)
	}
	if _, err := os.Stat(filepath.Join(base, "written")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a file was written outside the volume: %v", err)
	}
	if err := volMkdir(root, volRel("/dirlink/sub"), true, nil, nil, nil); err == nil {
		t.Errorf("mkdir through a link: made")
	}
	// A link is described, not followed; removing one removes the link only.
	e, err := volStat(root, volRel("/abs"))
	if err != nil || e.Type != "symlink" || e.Target != secret {
		t.Errorf("stat of a link: %+v %v", e, err)
	}
	if err := volRemove(root, volRel("/root")); err != nil {
		t.Errorf("remove a link to /: %v", err)
	}
	if err := volRemove(root, volRel("/dirlink")); err != nil {
		t.Errorf("remove a link to a directory: %v", err)
	}
	if _, err := os.Stat(filepath.Join(vol, "dir", "ok.txt")); err != nil {
		t.Errorf("removing a link removed its target's files: %v", err)
	}
	// ".." stays in the volume: /../../dir/ok.txt is the volume's dir/ok.txt.
	list, err := volList(root, volRel("/../../dir"), 1)
	if err != nil || len(list) != 1 || list[0].Name != "ok.txt" || list[0].Path != "/dir/ok.txt" {
		t.Errorf("list /../../dir: %+v %v", list, err)
	}
	if err := volWrite(root, volRel("dir/new.txt"), strings.NewReader("new"), false, nil, nil, nil); err != nil {
		t.Errorf("write a new file: %v", err)
	}
	if err := volWrite(root, volRel("dir/new.txt"), strings.NewReader("new"), false, nil, nil, nil); provider.CodeOf(volErr("dir/new.txt", err)) != provider.CodeConflict {
		t.Errorf("write an existing file without force: %v", err)
	}
}
