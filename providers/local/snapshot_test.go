//go:build linux

package local

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/providers/local/internal/copier"
)

// runAs runs cmd as user and fails t on a non-zero exit.
func runAs(t *testing.T, inst provider.Instance, user, cmd string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var o, e bytes.Buffer
	res, err := inst.Exec(ctx, provider.ExecRequest{Command: cmd, User: user, Stdout: &o, Stderr: &e})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("%s: %q: %v exit %d: %s", user, cmd, err, res.ExitCode, e.String())
	}
	return strings.TrimSpace(o.String())
}

// TestSnapshotRestore carries a file system with owners, modes, hard links, symlinks that
// point at host paths, a deleted template file (a whiteout) and a replaced template
// directory (an opaque one) into a new sandbox, with a new uid range under runc.
func TestSnapshotRestore(t *testing.T) {
	forRuntimes(t, func(t *testing.T, rt string) {
		p := newTestProvider(t, rt)
		ctx := context.Background()
		a := create(t, p, provider.CreateSpec{Network: provider.Network{Mode: provider.NetworkNone}})
		run(t, a, `set -e
echo root > /workspace/root.txt
ln /workspace/root.txt /workspace/hard.txt
echo suid > /workspace/suid && chmod 4750 /workspace/suid
ln -s /etc/shadow /workspace/shadow-link
ln -s `+p.cfg.Home+` /workspace/home-link
ln -s / /workspace/root-link
rm /etc/profile
rm -rf /etc/skel && mkdir /etc/skel && echo new > /etc/skel/new
mkfifo /workspace/fifo
echo edited >> /etc/hosts`)
		runAs(t, a, "user", `set -e; echo user > /home/user/u.txt; echo user > /tmp/u.txt; mkdir /tmp/ud`)
		// What the new sandbox must see: the same as the original at the snapshot. Under
		// runc, /etc/skel (a template directory owned by host root, unmapped) cannot be
		// emptied, so only runsc makes an opaque directory here; TestCopyLayer covers the
		// xattr. gVisor keeps named pipes in the sentry, so under runsc the fifo is not on
		// the host layer and not in the snapshot.
		view := `cd /workspace; stat -c '%n %U:%G %a %h' root.txt hard.txt suid /home/user/u.txt /tmp/u.txt /tmp/ud /home/user /tmp
readlink shadow-link home-link root-link
test -e /etc/profile && echo profile-exists
ls -A /etc/skel
grep -c edited /etc/hosts
test -e after.txt && echo after-exists; true`
		if rt != RuntimeRunsc {
			view += "\ntest -p fifo && echo fifo"
		}
		orig := run(t, a, view)
		for _, w := range []string{"root.txt root:root 644 2", "suid root:root 4750 1", "/home/user/u.txt user:user 644 1", "/tmp/ud user:user 755", "/etc/shadow\n" + p.cfg.Home + "\n/\n"} {
			if !strings.Contains(orig, w) {
				t.Errorf("original sandbox's view lacks %q:\n%s", w, orig)
			}
		}
		if strings.Contains(orig, "profile-exists") {
			t.Errorf("rm /etc/profile did not take")
		}
		snap, err := a.Snapshot(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		// The sandbox runs on after the snapshot, thawed.
		run(t, a, "echo after > /workspace/after.txt")

		// On the host, the symlinks are stored as symlinks: nothing behind them was read.
		sup := filepath.Join(p.lay.snapshot(snap), "upper")
		for _, l := range []string{"shadow-link", "home-link", "root-link"} {
			fi, err := os.Lstat(filepath.Join(sup, "workspace", l))
			if err != nil || fi.Mode()&os.ModeSymlink == 0 {
				t.Errorf("snapshot's %s: %v, %v; want a symlink", l, fi, err)
			}
		}
		if _, err := os.Lstat(filepath.Join(sup, "workspace", "after.txt")); err == nil {
			t.Errorf("a file written after the snapshot is in it")
		}

		b := create(t, p, provider.CreateSpec{From: snap, Network: provider.Network{Mode: provider.NetworkNone}})
		if b.ID() == a.ID() {
			t.Fatal("same id")
		}
		if got := run(t, b, view); got != orig {
			t.Errorf("in the new sandbox:\n%s\nin the original at the snapshot:\n%s", got, orig)
		}
		// Writing through the new sandbox's hard link changes both names, as before.
		if out := run(t, b, "echo x >> /workspace/hard.txt; cat /workspace/root.txt"); out != "root\nx" {
			t.Errorf("hard link not kept: %q", out)
		}
		// On the host, the new sandbox's files are in its own uid range.
		rec, err := p.lay.readRecord(b.ID())
		if err != nil {
			t.Fatal(err)
		}
		disk, err := p.diskDir(rec)
		if err != nil {
			t.Fatal(err)
		}
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(disk, "upper", "home", "user", "u.txt"), &st); err != nil {
			t.Fatal(err)
		}
		if st.Uid != rec.UIDBase+1000 {
			t.Errorf("host owner of user's file: %d, want %d (uid base %d)", st.Uid, rec.UIDBase+1000, rec.UIDBase)
		}
		if err := unix.Lstat(filepath.Join(disk, "upper", "workspace", "shadow-link"), &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFLNK {
			t.Errorf("restored shadow-link on the host: %v, mode %#o; want a symlink", err, st.Mode)
		}
		// The original is unaffected and still runs.
		if out := run(t, a, "cat /workspace/root.txt; test -e /workspace/after.txt && echo ok"); out != "root\nok" {
			t.Errorf("original after restore: %q", out)
		}
	})
}

// TestSnapshotPausedStaysPaused: a snapshot of a paused sandbox leaves it paused; of a
// running one leaves it running.
func TestSnapshotPausedStaysPaused(t *testing.T) {
	p := newTestProvider(t, RuntimeRunc)
	ctx := context.Background()
	a := create(t, p, provider.CreateSpec{Network: provider.Network{Mode: provider.NetworkNone}})
	if _, err := a.Snapshot(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if in, _ := a.Info(ctx); in.State != provider.StateRunning {
		t.Errorf("after a snapshot of a running sandbox: %s", in.State)
	}
	if err := a.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Snapshot(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if in, _ := a.Info(ctx); in.State != provider.StatePaused {
		t.Errorf("after a snapshot of a paused sandbox: %s", in.State)
	}
	if err := a.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	run(t, a, "true")
}

// TestSnapshotTooLarge: a snapshot larger than the new sandbox's disk fails before anything
// is made, and leaves nothing behind.
func TestSnapshotTooLarge(t *testing.T) {
	p := newTestProvider(t, RuntimeRunc)
	ctx := context.Background()
	a := create(t, p, provider.CreateSpec{Network: provider.Network{Mode: provider.NetworkNone}, Size: provider.Size{DiskGB: 2, MemoryMB: 2048}})
	run(t, a, "head -c 1100M /dev/zero > /workspace/big")
	snap, err := a.Snapshot(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	run(t, a, "rm /workspace/big")
	before, _ := p.lay.ids()
	leases := func() int { ents, _ := os.ReadDir(p.uidLeases()); return len(ents) }
	l0 := leases()
	_, err = p.Create(ctx, provider.CreateSpec{From: snap, Network: provider.Network{Mode: provider.NetworkNone}, Size: provider.Size{DiskGB: 1}})
	if !errors.Is(err, provider.CodeInvalidArgument) {
		t.Fatalf("create from a 1.1 GB snapshot with a 1 GB disk: %v; want invalid_argument", err)
	}
	if !strings.Contains(err.Error(), "larger size") {
		t.Errorf("error does not say what to do: %v", err)
	}
	after, _ := p.lay.ids()
	if len(after) != len(before) || leases() != l0 {
		t.Errorf("sandboxes %v → %v, leases %d → %d: the failed create left something", before, after, l0, leases())
	}
	// The snapshot itself is still there and usable with a disk that fits.
	if _, err := p.readSnapshot(snap); err != nil {
		t.Errorf("snapshot after the failed create: %v", err)
	}
}

// TestSnapshotRestoreFailureCleansUp: a restore that fails halfway (the snapshot vanished)
// undoes the create.
func TestSnapshotRestoreFailureCleansUp(t *testing.T) {
	p := newTestProvider(t, RuntimeRunc)
	ctx := context.Background()
	a := create(t, p, provider.CreateSpec{Network: provider.Network{Mode: provider.NetworkNone}})
	snap, err := a.Snapshot(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Metadata present, data gone: the copy fails inside the root file system step.
	if err := os.RemoveAll(filepath.Join(p.lay.snapshot(snap), "upper")); err != nil {
		t.Fatal(err)
	}
	before, _ := p.lay.ids()
	if _, err := p.Create(ctx, provider.CreateSpec{From: snap, Network: provider.Network{Mode: provider.NetworkNone}}); err == nil {
		t.Fatal("create from a broken snapshot succeeded")
	}
	after, _ := p.lay.ids()
	if len(after) != len(before) {
		t.Errorf("sandboxes %v → %v after the failed create", before, after)
	}
}

// TestSnapshotNotFound: malformed, unknown and expired ids, and a destroyed sandbox.
func TestSnapshotNotFound(t *testing.T) {
	p := newTestProvider(t, RuntimeRunc)
	ctx := context.Background()
	for _, id := range []string{"../../etc", "/etc/passwd", "UPPERCASEUPPERCASEAB", strings.Repeat("a", 21), ".", "aaaaaaaaaaaaaaaaaaaa", "aaaaaaaaaaaaaaaaaa/."} {
		if _, err := p.Create(ctx, provider.CreateSpec{From: id}); !errors.Is(err, provider.CodeNotFound) {
			t.Errorf("create from %q: %v; want not_found", id, err)
		}
	}
	a := create(t, p, provider.CreateSpec{Network: provider.Network{Mode: provider.NetworkNone}})
	if _, err := a.Snapshot(ctx, -time.Second); !errors.Is(err, provider.CodeInvalidArgument) {
		t.Errorf("negative expiry: %v", err)
	}
	snap, err := a.Snapshot(ctx, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	if _, err := p.Create(ctx, provider.CreateSpec{From: snap}); !errors.Is(err, provider.CodeNotFound) {
		t.Errorf("create from an expired snapshot: %v; want not_found", err)
	}
	if _, err := os.Stat(p.lay.snapshot(snap)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("expired snapshot still on disk: %v", err)
	}
	// An expired snapshot is removed by the next list too.
	snap, err = a.Snapshot(ctx, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	if _, err := p.List(ctx, provider.ListFilter{}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p.lay.snapshot(snap)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("expired snapshot still on disk after List: %v", err)
	}
	if err := p.Destroy(ctx, a.ID()); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Snapshot(ctx, 0); !errors.Is(err, provider.CodeNotFound) {
		t.Errorf("snapshot of a destroyed sandbox: %v; want not_found", err)
	}
	ents, _ := os.ReadDir(p.lay.snapshots())
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".") {
			t.Errorf("left in snapshots/: %s", e.Name())
		}
	}
}

// TestSnapshotDeepTree: a tree nested deeper than the copier goes is refused with
// resource_exhausted (it holds two descriptors per level, and sandbox code can nest without
// bound), and the sandbox is thawed and answers afterwards.
func TestSnapshotDeepTree(t *testing.T) {
	p := newTestProvider(t, RuntimeRunc)
	a := create(t, p, provider.CreateSpec{Network: provider.Network{Mode: provider.NetworkNone}})
	run(t, a, fmt.Sprintf(`cd /workspace && for i in $(seq %d); do mkdir d && cd d || exit 1; done`, copier.MaxDepth+10))
	_, err := a.Snapshot(context.Background(), 0)
	if !errors.Is(err, provider.CodeResourceExhausted) {
		t.Fatalf("snapshot of a tree %d deep: %v; want resource_exhausted", copier.MaxDepth+10, err)
	}
	if got := run(t, a, "echo ok"); got != "ok" {
		t.Errorf("after the refused snapshot: %q", got)
	}
	if ents, _ := os.ReadDir(p.lay.snapshots()); len(ents) != 0 {
		t.Errorf("the refused snapshot left %d entries", len(ents))
	}
}
