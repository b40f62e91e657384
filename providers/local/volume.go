//go:build linux

package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/tupper-dev/tupper/internal/flock"
	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/providers/local/internal/durable"
)

// Volumes (see docs/volumes.md). A volume is a sparse file holding an ext4 file system,
// Home/volumes/<name>/disk.img, whose size is the volume's limit: no process in any sandbox,
// root included, can store more (the file system is made with no blocks reserved for root).
//
// Nothing of a volume is mounted in the host's mount namespace. Whoever needs its files —
// a sandbox's Create, or the provider inspecting it — attaches the image to a loop device
// (or finds the one it is attached to already: one device per image, so every mount shares
// one ext4 superblock and never two kernels' views of one disk), mounts it in a mount
// namespace of its own, and takes views of it from there. A sandbox's views live in its own
// namespace (nsworker.go) and go with it; the loop device is made auto-clearing, so it goes
// with the last mount. A server restart needs to find nothing: a volume is its directory.
//
// Creation is built in a hidden directory renamed into place once complete, deletion
// renames the directory away before removing it: a crash leaves no half volume visible,
// and the leftovers are removed by the next volume call. Each volume has a lock
// (volumes/.<name>.lock) held across create, delete, attach, and a sandbox's check that the
// volume exists after its record names it, so a delete sees every sandbox that may mount it.

// volumeMeta is volumes/<name>/meta.json.
type volumeMeta struct {
	Name      string    `json:"name"`
	SizeMB    int       `json:"sizeMB"`
	CreatedAt time.Time `json:"createdAt"`
}

func (l layout) volumes() string               { return filepath.Join(l.home, "volumes") }
func (l layout) volume(name string) string     { return filepath.Join(l.volumes(), name) }
func (l layout) volumeLock(name string) string { return filepath.Join(l.volumes(), "."+name+".lock") }
func (l layout) volumeImage(name string) string {
	return filepath.Join(l.volume(name), "disk.img")
}

// volumesAvailable reports whether this host can make and mount volumes: loop devices and
// mkfs.ext4 (e2fsprogs).
func volumesAvailable() bool {
	return mkfsExt4() != "" && fileExists("/dev/loop-control")
}

// mkfsExt4 is the path of mkfs.ext4: on PATH, else in /usr/sbin or /sbin (a PATH without
// the sbin directories is common for services); "" when there is none.
func mkfsExt4() string {
	if p, err := exec.LookPath("mkfs.ext4"); err == nil {
		return p
	}
	for _, p := range []string{"/usr/sbin/mkfs.ext4", "/sbin/mkfs.ext4"} {
		if fileExists(p) {
			return p
		}
	}
	return ""
}

func volumeNotFound(name string) error {
	return provider.Errorf(provider.CodeNotFound, "volume %s not found", name)
}

// lockVolume takes the volume's lock (see above).
func (p *Provider) lockVolume(ctx context.Context, name string) (*flock.Lock, error) {
	if err := os.MkdirAll(p.lay.volumes(), 0o700); err != nil {
		return nil, err
	}
	return flock.Acquire(ctx, p.lay.volumeLock(name))
}

func (p *Provider) volumer() error {
	p.probed()
	if p.unavail != nil {
		return p.unavail
	}
	return p.Refuse(provider.CapVolumes)
}

// CreateVolume makes a volume (provider.Volumer).
func (p *Provider) CreateVolume(ctx context.Context, req provider.VolumeRequest) (provider.VolumeInfo, error) {
	if err := req.Validate(); err != nil {
		return provider.VolumeInfo{}, err
	}
	if err := p.volumer(); err != nil {
		return provider.VolumeInfo{}, err
	}
	if req.SizeMB == 0 {
		req.SizeMB = provider.DefaultVolumeSizeMB
	}
	p.cleanVolumeLeftovers()
	lk, err := p.lockVolume(ctx, req.Name)
	if err != nil {
		return provider.VolumeInfo{}, provider.Wrap(err, provider.CodeProvider, "create volume")
	}
	defer lk.Unlock()
	if fileExists(p.lay.volume(req.Name)) {
		return provider.VolumeInfo{}, provider.Errorf(provider.CodeConflict, "volume %s exists", req.Name)
	}
	meta := volumeMeta{Name: req.Name, SizeMB: req.SizeMB, CreatedAt: time.Now().UTC().Truncate(time.Millisecond)}
	tmp := filepath.Join(p.lay.volumes(), fmt.Sprintf(".new-%s-%d-%s", req.Name, os.Getpid(), newID()[:8]))
	if err := p.makeVolume(ctx, tmp, meta); err != nil {
		os.RemoveAll(tmp)
		return provider.VolumeInfo{}, provider.Wrap(err, provider.CodeProvider, "create volume")
	}
	if err := os.Rename(tmp, p.lay.volume(req.Name)); err != nil {
		os.RemoveAll(tmp)
		return provider.VolumeInfo{}, provider.Wrap(err, provider.CodeProvider, "create volume")
	}
	return provider.VolumeInfo{Name: meta.Name, SizeMB: meta.SizeMB, CreatedAt: meta.CreatedAt, MountedBy: []string{}}, nil
}

// makeVolume makes a volume's directory at dir: a sparse image of the size holding an
// empty ext4 file system whose root is root's, 0755, then meta.json.
func (p *Provider) makeVolume(ctx context.Context, dir string, meta volumeMeta) error {
	if err := os.Mkdir(dir, 0o700); err != nil {
		return err
	}
	img := filepath.Join(dir, "disk.img")
	f, err := os.OpenFile(img, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	err = f.Truncate(int64(meta.SizeMB) << 20)
	f.Close()
	if err != nil {
		return err
	}
	// -m 0: no blocks reserved for root, so root in a sandbox has no more room than anyone.
	// nodiscard: the file is sparse already. The root directory is root's (uid 0: the
	// sandbox's root once idmapped), lost+found is not made by hand later: a fresh volume
	// is empty.
	out, err := exec.CommandContext(ctx, mkfsExt4(), "-q", "-F", "-m", "0", "-E", "nodiscard,root_owner=0:0", "-L", "tupper-volume", img).CombinedOutput()
	if err != nil {
		return fmt.Errorf("mkfs.ext4: %w: %s", err, strings.TrimSpace(string(out)))
	}
	if err := withVolumeMounted(img, filepath.Join(dir, "mnt"), func(root string) error {
		return os.Remove(filepath.Join(root, "lost+found"))
	}); err != nil {
		return err
	}
	b, err := json.Marshal(meta)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "meta.json"), b, 0o600); err != nil {
		return err
	}
	return durable.SyncDir(dir)
}

// cleanVolumeLeftovers removes what crashed creates (.new-<name>-<pid>-…, whose process is
// gone) and deletes (.del-…) left.
func (p *Provider) cleanVolumeLeftovers() {
	ents, _ := os.ReadDir(p.lay.volumes())
	for _, e := range ents {
		n := e.Name()
		switch {
		case strings.HasPrefix(n, ".del-") && e.IsDir():
			os.RemoveAll(filepath.Join(p.lay.volumes(), n))
		case strings.HasPrefix(n, ".new-") && e.IsDir():
			parts := strings.Split(n, "-")
			if len(parts) < 4 {
				continue
			}
			pid, err := strconv.Atoi(parts[len(parts)-2])
			if err != nil || pid == os.Getpid() {
				continue
			}
			if unix.Kill(pid, 0) == nil {
				continue
			}
			os.RemoveAll(filepath.Join(p.lay.volumes(), n))
		}
	}
}

func (p *Provider) readVolume(name string) (volumeMeta, error) {
	var m volumeMeta
	if err := provider.ValidVolumeName(name); err != nil {
		return m, volumeNotFound(name)
	}
	b, err := os.ReadFile(filepath.Join(p.lay.volume(name), "meta.json"))
	if errors.Is(err, os.ErrNotExist) {
		return m, volumeNotFound(name)
	}
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("volume %s: %w", name, err)
	}
	return m, nil
}

// volumeUsers returns the ids of the sandboxes whose records name volume name, in every
// state but gone: removing first the dead among them, whose mounts go with them.
func (p *Provider) volumeUsers(ctx context.Context, name string, reap bool) []string {
	ids, _ := p.lay.ids()
	var users []string
	for _, id := range ids {
		rec, err := p.lay.readRecord(id)
		if err != nil || !slices.ContainsFunc(rec.Volumes, func(m provider.VolumeMount) bool { return m.Name == name }) {
			continue
		}
		if reap && p.dead(rec, time.Now()) {
			if n, _ := p.reapIDs(ctx, []string{id}, true); n > 0 || !fileExists(p.lay.dir(id)) {
				continue
			}
		}
		users = append(users, id)
	}
	return users
}

func (p *Provider) volumeInfo(ctx context.Context, m volumeMeta) provider.VolumeInfo {
	info := provider.VolumeInfo{Name: m.Name, SizeMB: m.SizeMB, CreatedAt: m.CreatedAt, MountedBy: p.volumeUsers(ctx, m.Name, false)}
	if info.MountedBy == nil {
		info.MountedBy = []string{}
	}
	if lk, err := p.lockVolume(ctx, m.Name); err == nil {
		withVolumeMounted(p.lay.volumeImage(m.Name), filepath.Join(p.lay.volume(m.Name), "mnt"), func(root string) error {
			var st unix.Statfs_t
			if err := unix.Statfs(root, &st); err != nil {
				return err
			}
			info.UsedBytes = int64(st.Blocks-st.Bfree) * st.Bsize
			return nil
		})
		lk.Unlock()
	}
	return info
}

// Volumes lists the volumes (provider.Volumer).
func (p *Provider) Volumes(ctx context.Context) ([]provider.VolumeInfo, error) {
	if err := p.volumer(); err != nil {
		return nil, err
	}
	ents, err := os.ReadDir(p.lay.volumes())
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, provider.Wrap(err, provider.CodeProvider, "volumes")
	}
	out := []provider.VolumeInfo{}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".") || !e.IsDir() {
			continue
		}
		m, err := p.readVolume(e.Name())
		if err != nil {
			continue // being deleted, or not a volume
		}
		out = append(out, p.volumeInfo(ctx, m))
	}
	return out, nil
}

// VolumeInfo describes a volume (provider.Volumer).
func (p *Provider) VolumeInfo(ctx context.Context, name string) (provider.VolumeInfo, error) {
	if err := p.volumer(); err != nil {
		return provider.VolumeInfo{}, err
	}
	m, err := p.readVolume(name)
	if err != nil {
		return provider.VolumeInfo{}, err
	}
	return p.volumeInfo(ctx, m), nil
}

// DeleteVolume deletes a volume that no sandbox mounts (provider.Volumer).
func (p *Provider) DeleteVolume(ctx context.Context, name string) error {
	if err := p.volumer(); err != nil {
		return err
	}
	if err := provider.ValidVolumeName(name); err != nil {
		return err
	}
	p.cleanVolumeLeftovers()
	lk, err := p.lockVolume(ctx, name)
	if err != nil {
		return provider.Wrap(err, provider.CodeProvider, "delete volume")
	}
	defer lk.Unlock()
	if _, err := p.readVolume(name); err != nil {
		return err
	}
	if users := p.volumeUsers(ctx, name, true); len(users) > 0 {
		return provider.Errorf(provider.CodeConflict, "volume %s is mounted by sandbox %s", name, strings.Join(users, ", "))
	}
	gone := filepath.Join(p.lay.volumes(), ".del-"+name+"-"+newID()[:8])
	if err := os.Rename(p.lay.volume(name), gone); err != nil {
		return provider.Wrap(err, provider.CodeProvider, "delete volume")
	}
	durable.SyncDir(p.lay.volumes())
	if err := os.RemoveAll(gone); err != nil {
		return provider.Wrap(err, provider.CodeProvider, "delete volume")
	}
	return nil
}

// loopFor returns the loop device the image file img is attached to, attaching it (auto-
// clearing) when it is attached to none, opened: while the caller holds it open the device
// cannot be cleared or reused. Call with the volume's lock held, so that two processes never
// attach one image twice.
func loopFor(img string) (*os.File, error) {
	var st unix.Stat_t
	if err := unix.Stat(img, &st); err != nil {
		return nil, err
	}
	matches, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, m := range matches {
		dev := "/dev/" + filepath.Base(filepath.Dir(filepath.Dir(m)))
		f, err := os.OpenFile(dev, os.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			continue
		}
		info, err := unix.IoctlLoopGetStatus64(int(f.Fd()))
		if err == nil && info.Inode == st.Ino && info.Device == st.Dev {
			return f, nil
		}
		f.Close()
	}
	imgF, err := os.OpenFile(img, os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer imgF.Close()
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer ctl.Close()
	for range 16 {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return nil, fmt.Errorf("a free loop device: %w", err)
		}
		f, err := os.OpenFile("/dev/loop"+strconv.Itoa(n), os.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, err
		}
		cfg := unix.LoopConfig{Fd: uint32(imgF.Fd())}
		cfg.Info.Flags = unix.LO_FLAGS_AUTOCLEAR
		copy(cfg.Info.File_name[:], img)
		err = unix.IoctlLoopConfigure(int(f.Fd()), &cfg)
		if err == nil {
			return f, nil
		}
		f.Close()
		if !errors.Is(err, unix.EBUSY) {
			return nil, fmt.Errorf("attach %s to a loop device: %w", img, err)
		}
		// Another process took the device between GET_FREE and CONFIGURE: next.
	}
	return nil, fmt.Errorf("attach %s: no free loop device", img)
}

// mountVolume mounts the ext4 file system of image img at target (which must exist), in
// the calling thread's mount namespace, nosuid and nodev. Call with the volume's lock held.
func mountVolume(img, target string) error {
	loop, err := loopFor(img)
	if err != nil {
		return err
	}
	defer loop.Close()
	// errors=remount-ro: a corrupt file system stops writes rather than the host.
	if err := unix.Mount(loop.Name(), target, "ext4", unix.MS_NOSUID|unix.MS_NODEV, "errors=remount-ro"); err != nil {
		return fmt.Errorf("mount volume %s: %w", img, err)
	}
	return nil
}

// withVolumeMounted runs fn with the volume of image img mounted at mnt in a mount
// namespace of a thread of its own: nothing is mounted in the host's namespace, and the
// mount goes with the thread. Call with the volume's lock held.
func withVolumeMounted(img, mnt string, fn func(root string) error) error {
	if err := os.MkdirAll(mnt, 0o700); err != nil {
		return err
	}
	w, err := newNSWorker()
	if err != nil {
		return err
	}
	defer w.close()
	return w.do(func() error {
		if err := mountVolume(img, mnt); err != nil {
			return err
		}
		defer unix.Unmount(mnt, unix.MNT_DETACH)
		return fn(mnt)
	})
}

// lockVolumes takes the locks of the volumes mounts name, in name order, and checks each
// exists. The caller unlocks every lock returned, also on error.
func (p *Provider) lockVolumes(ctx context.Context, mounts []provider.VolumeMount) ([]*flock.Lock, error) {
	var names []string
	for _, m := range mounts {
		if !slices.Contains(names, m.Name) {
			names = append(names, m.Name)
		}
	}
	slices.Sort(names)
	var locks []*flock.Lock
	for _, n := range names {
		lk, err := p.lockVolume(ctx, n)
		if err != nil {
			return locks, err
		}
		locks = append(locks, lk)
		if _, err := p.readVolume(n); err != nil {
			return locks, err
		}
	}
	return locks, nil
}

// snapshotVolumes returns the volumes a sandbox created from snapshot m mounts, given those
// its create names (docs/volumes.md, "With snapshots, forks and pause"): a filesystem
// snapshot's sandbox boots afresh and mounts whatever it is given, else the volumes m's
// sandbox mounted, by name; a full snapshot's continues processes that may hold files of
// its volumes open, and gVisor's restore finds each mount of the checkpoint by its path in
// the new sandbox's bundle, so it mounts m's volumes, at the same paths and read-only as
// they were, and given others is CodeInvalidArgument.
func snapshotVolumes(m *snapMeta, given []provider.VolumeMount) ([]provider.VolumeMount, error) {
	if len(given) > 0 && m.kind() != provider.SnapshotFull {
		return given, nil
	}
	if len(given) == 0 || sameVolumes(given, m.Volumes) {
		return slices.Clone(m.Volumes), nil // in m's order: its bundle's
	}
	return nil, provider.Errorf(provider.CodeInvalidArgument,
		"snapshot %s is a full snapshot of a sandbox with %s: its processes continue on the mounts they had, so a sandbox from it mounts the same volumes at the same paths (give no volumes to mount them), not %s; a filesystem snapshot can take other volumes",
		m.ID, describeVolumes(m.Volumes), describeVolumes(given))
}

// sameVolumes reports whether a and b are the same mounts, in any order (a path holds one
// volume).
func sameVolumes(a, b []provider.VolumeMount) bool {
	byPath := func(x, y provider.VolumeMount) int { return strings.Compare(x.Path, y.Path) }
	a, b = slices.Clone(a), slices.Clone(b)
	slices.SortFunc(a, byPath)
	slices.SortFunc(b, byPath)
	return slices.Equal(a, b)
}

// describeVolumes names mounts for a message: "volumes data at /data, models at /m
// (read-only)", or "no volumes".
func describeVolumes(mounts []provider.VolumeMount) string {
	if len(mounts) == 0 {
		return "no volumes"
	}
	var parts []string
	for _, m := range mounts {
		s := m.Name + " at " + m.Path
		if m.ReadOnly {
			s += " (read-only)"
		}
		parts = append(parts, s)
	}
	return "volumes " + strings.Join(parts, ", ")
}

// volumesExist reports the first volume of mounts that does not exist as CodeNotFound,
// saying so when snapshot snap (nil: none) mounted it.
func (p *Provider) volumesExist(mounts []provider.VolumeMount, snap *snapMeta) error {
	for _, m := range mounts {
		_, err := p.readVolume(m.Name)
		if err == nil || !errors.Is(err, provider.CodeNotFound) {
			continue // another error is the volumes step's to meet
		}
		if snap != nil && slices.Contains(snap.Volumes, m) {
			how := "give the create volumes of its own to start from it without"
			if snap.kind() == provider.SnapshotFull {
				how = "a full snapshot restores only with the volumes it had"
			}
			return provider.Errorf(provider.CodeNotFound,
				"volume %s not found: snapshot %s mounted it at %s, and a sandbox from it mounts the same volumes by name (%s)", m.Name, snap.ID, m.Path, how)
		}
		return err
	}
	return nil
}

// mountSandboxVolumes makes the views of a sandbox's volumes, in its mount namespace (run
// it on the namespace's thread, with the volumes' locks held): each volume's file system
// mounted once at dir/vs/<i>, then for each mount a view at dir/v/<j> — read-only when the
// mount is, always nosuid and nodev, idmapped into the sandbox's uid range through usernsFD
// (-1: as they are) — which the bundle binds at the mount's path. The file systems' own
// mounts are detached after: the views hold them.
func mountSandboxVolumes(lay layout, dir string, mounts []provider.VolumeMount, usernsFD int) error {
	vs, v := filepath.Join(dir, "vs"), filepath.Join(dir, "v")
	for _, d := range []string{vs, v} {
		if err := os.Mkdir(d, 0o711); err != nil {
			return err
		}
	}
	src := map[string]string{}
	for _, m := range mounts {
		if _, ok := src[m.Name]; ok {
			continue
		}
		t := filepath.Join(vs, strconv.Itoa(len(src)))
		if err := os.Mkdir(t, 0o700); err != nil {
			return err
		}
		if err := mountVolume(lay.volumeImage(m.Name), t); err != nil {
			return err
		}
		src[m.Name] = t
	}
	for j, m := range mounts {
		t := volumeView(dir, j)
		if err := os.Mkdir(t, 0o700); err != nil {
			return err
		}
		if err := mountView(src[m.Name], t, usernsFD, m.ReadOnly); err != nil {
			return err
		}
	}
	for _, t := range src {
		if err := unix.Unmount(t, unix.MNT_DETACH); err != nil {
			return fmt.Errorf("detach a volume: %w", err)
		}
	}
	return nil
}

// volumeView is where mountSandboxVolumes puts the view of a sandbox's j-th volume mount.
func volumeView(dir string, j int) string { return filepath.Join(dir, "v", strconv.Itoa(j)) }

// volumeBinds are the bundle's mounts of a sandbox's volumes: each view bound at its path.
func volumeBinds(dir string, mounts []provider.VolumeMount) []specs.Mount {
	var out []specs.Mount
	for j, m := range mounts {
		mode := "rw"
		if m.ReadOnly {
			mode = "ro"
		}
		out = append(out, specs.Mount{Destination: m.Path, Type: "bind", Source: volumeView(dir, j), Options: []string{"rbind", mode, "nosuid", "nodev"}})
	}
	return out
}

var _ provider.Volumer = (*Provider)(nil)

var _ provider.VolumeOpener = (*Provider)(nil)

// OpenVolume returns the root directory of a volume, open (provider.VolumeOpener). The file
// system is mounted in a namespace of its own, the directory opened there and the mount
// detached at once: the open directory keeps it, and the last close unmounts it (and frees
// the loop device when no sandbox mounts it either). Nothing is mounted in the host's
// namespace.
func (p *Provider) OpenVolume(ctx context.Context, name string) (*os.File, error) {
	if err := p.volumer(); err != nil {
		return nil, err
	}
	lk, err := p.lockVolume(ctx, name)
	if err != nil {
		return nil, provider.Wrap(err, provider.CodeProvider, "open volume")
	}
	defer lk.Unlock()
	if _, err := p.readVolume(name); err != nil {
		return nil, err
	}
	var root *os.File
	mnt := filepath.Join(p.lay.volume(name), "mnt")
	err = withVolumeMounted(p.lay.volumeImage(name), mnt, func(dir string) error {
		fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
		if err != nil {
			return err
		}
		root = os.NewFile(uintptr(fd), name)
		return nil
	})
	if err != nil {
		if root != nil {
			root.Close()
		}
		return nil, provider.Wrap(err, provider.CodeProvider, "open volume")
	}
	return root, nil
}
