//go:build linux

package local

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tupper-dev/tupper/internal/testenv"
	"github.com/tupper-dev/tupper/provider"
)

// loopsOf returns the loop devices attached to image img.
func loopsOf(t *testing.T, img string) []string {
	t.Helper()
	matches, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	var out []string
	for _, m := range matches {
		b, err := os.ReadFile(m)
		if err == nil && strings.HasPrefix(strings.TrimSpace(string(b)), img) {
			out = append(out, m)
		}
	}
	return out
}

// TestVolumes: one volume shared by sandboxes of every runtime at once, read-write and
// read-only, bounded in size for root too, never mounted in the host's namespace, refused
// deletion while mounted, and still there after its sandboxes and the provider are gone.
func TestVolumes(t *testing.T) {
	p := newTestProvider(t, RuntimeRunc)
	testenv.Require(t, provider.CapabilitiesOf(p).Has(provider.CapVolumes), "volumes need loop devices and mkfs.ext4 (e2fsprogs)")
	ctx := context.Background()
	if _, err := p.CreateVolume(ctx, provider.VolumeRequest{Name: "../x"}); !errors.Is(err, provider.CodeInvalidArgument) {
		t.Errorf("create ../x: %v; want invalid_argument", err)
	}
	info, err := p.CreateVolume(ctx, provider.VolumeRequest{Name: "shared", SizeMB: 32})
	if err != nil {
		t.Fatal(err)
	}
	if info.SizeMB != 32 || info.Name != "shared" {
		t.Errorf("created %+v", info)
	}
	if _, err := p.CreateVolume(ctx, provider.VolumeRequest{Name: "shared", SizeMB: 32}); !errors.Is(err, provider.CodeConflict) {
		t.Errorf("create again: %v; want conflict", err)
	}
	img := p.lay.volumeImage("shared")
	if l := loopsOf(t, img); len(l) != 0 {
		t.Errorf("an unused volume is attached to %v", l)
	}
	none := provider.Network{Mode: provider.NetworkNone}
	var boxes []*Instance
	for _, rt := range runtimes {
		if _, ok := p.runtimes[rt]; !ok {
			testenv.Skip(t, "runtime "+rt+" is not installed")
			continue
		}
		boxes = append(boxes, create(t, p, provider.CreateSpec{Runtime: rt, Network: none, Volumes: []provider.VolumeMount{
			{Name: "shared", Path: "/data"}, {Name: "shared", Path: "/ro", ReadOnly: true},
		}}))
	}
	for i, b := range boxes {
		rt := runtimes[i]
		run(t, b, "echo from-"+rt+" > /data/"+rt+" && mkdir -p /data/dir-"+rt+" && echo private > /workspace/private-"+rt)
	}
	// Sharing a volume shares nothing else: each sandbox's own files stay its own.
	for i, b := range boxes {
		for j, other := range runtimes[:len(boxes)] {
			if _, _, code := runCode(t, b, "test -e /workspace/private-"+other); (code == 0) != (i == j) {
				t.Errorf("%s sees %s's /workspace/private-%s: %v", runtimes[i], other, other, code == 0)
			}
		}
	}
	for i, b := range boxes {
		rt := runtimes[i]
		for _, other := range runtimes[:len(boxes)] {
			if got := run(t, b, "cat /ro/"+other); got != "from-"+other {
				t.Errorf("%s reads %s's file through its read-only mount: %q", rt, other, got)
			}
		}
		// Files keep the sandbox-relative owner: root's in every sandbox.
		if got := run(t, b, "stat -c %u:%g /data/"+runtimes[0]+" /data"); got != "0:0\n0:0" {
			t.Errorf("%s: owners %q, want root's", rt, got)
		}
		// Root cannot write through the read-only mount, nor make it writable.
		if _, _, code := runCode(t, b, "echo x > /ro/written"); code == 0 {
			t.Errorf("%s: root wrote through the read-only mount", rt)
		}
		if _, _, code := runCode(t, b, "mount -o remount,rw /ro || mount -o remount,rw,bind /ro"); code == 0 {
			t.Errorf("%s: root remounted the read-only mount writable", rt)
		}
		if _, _, code := runCode(t, b, "test -e /data/written"); code == 0 {
			t.Errorf("%s: a write through the read-only mount landed", rt)
		}
	}
	// The size is the limit, root's too; the image on the host grows no further.
	b := boxes[0]
	_, stderr, code := runCode(t, b, "dd if=/dev/zero of=/data/big bs=1M count=64")
	if code == 0 || !strings.Contains(stderr, "No space left") {
		t.Errorf("writing 64 MiB into a 32 MiB volume: exit %d, %s", code, stderr)
	}
	var st os.FileInfo
	if st, err = os.Stat(img); err != nil || st.Size() != 32<<20 {
		t.Errorf("the image: %v, %v", st, err)
	}
	if got := run(t, boxes[len(boxes)-1], "cat /data/"+runtimes[0]); got != "from-"+runtimes[0] {
		t.Errorf("after the full disk: %q", got)
	}
	run(t, b, "rm /data/big")
	info, err = p.VolumeInfo(ctx, "shared")
	if err != nil || len(info.MountedBy) != len(boxes) || info.UsedBytes <= 0 {
		t.Errorf("inspect: %+v, %v", info, err)
	}
	// Nothing of the volume is mounted in the host's namespace.
	if mi, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(mi), p.lay.volumes()) {
		t.Errorf("the volume is mounted in the host's namespace")
	}
	if err := p.DeleteVolume(ctx, "shared"); !errors.Is(err, provider.CodeConflict) {
		t.Errorf("delete while mounted: %v; want conflict", err)
	}
	// A sandbox without the volume sees none of it.
	other := create(t, p, provider.CreateSpec{Network: none})
	if _, _, code := runCode(t, other, "ls /data /ro"); code == 0 {
		t.Errorf("a sandbox without the volume sees it")
	}
	for _, b := range boxes {
		if err := p.Destroy(ctx, b.id); err != nil {
			t.Fatal(err)
		}
	}
	// The loop device goes with the last mount.
	deadline := time.Now().Add(5 * time.Second)
	for len(loopsOf(t, img)) > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if l := loopsOf(t, img); len(l) != 0 {
		t.Errorf("after every sandbox: still attached to %v", l)
	}

	// A new provider on the same Home (a restart) finds the volume and its files.
	p2, err := New(p.cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p2.Close()
	vols, err := p2.Volumes(ctx)
	if err != nil || len(vols) != 1 || vols[0].Name != "shared" || len(vols[0].MountedBy) != 0 {
		t.Fatalf("volumes after restart: %+v, %v", vols, err)
	}
	again := create(t, p2, provider.CreateSpec{Network: none, Volumes: []provider.VolumeMount{{Name: "shared", Path: "/home/user/v"}}})
	if got := run(t, again, "cat /home/user/v/"+runtimes[0]); got != "from-"+runtimes[0] {
		t.Errorf("after restart: %q", got)
	}
	if err := p2.Destroy(ctx, again.id); err != nil {
		t.Fatal(err)
	}
	if err := p2.DeleteVolume(ctx, "shared"); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if _, err := p2.VolumeInfo(ctx, "shared"); !errors.Is(err, provider.CodeNotFound) {
		t.Errorf("inspect after delete: %v", err)
	}
	if _, err := p2.Create(ctx, provider.CreateSpec{Network: none, Volumes: []provider.VolumeMount{{Name: "shared", Path: "/data"}}}); !errors.Is(err, provider.CodeNotFound) {
		t.Errorf("create with a deleted volume: %v; want not_found", err)
	}
	if ents, _ := os.ReadDir(p.lay.volumes()); len(ents) != 1 { // the lock file
		t.Errorf("left in volumes/: %v", ents)
	}
}
