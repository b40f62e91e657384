//go:build linux

package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tupper-dev/tupper/egress"
	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/providers/local/internal/blocks"
	"github.com/tupper-dev/tupper/providers/local/internal/copier"
	"github.com/tupper-dev/tupper/providers/local/internal/durable"
)

// A snapshot is a copy of a sandbox's writable layer (the overlay's upper directory: every
// file it changed relative to its template), kept under Home/snapshots:
//
//	snapshots/<id>/meta.json   snapMeta
//	snapshots/<id>/upper/      the copy: modes, owners, symlinks, hard links, device nodes,
//	                           overlay whiteouts and xattrs (opaque directories) as they were;
//	                           files of blockMinFile bytes or more are empty placeholders,
//	                           their contents in the block store (package blocks)
//	snapshots/<id>/image/      a full snapshot's checkpoint image, its large files likewise
//	snapshots/<id>/blocks.json which blocks make each placeholder (none: an older snapshot,
//	                           all of whose files are copies)
//	snapshots/<id>/secrets.json the sandbox's bound secrets (egress.Secret, values included),
//	                           mode 0600: only ever read by Create, into a proxy's config
//	snapshots/.tmp-<id>-<pid>/ a snapshot being written; renamed to <id> when complete
//
// Processes and memory are not captured, nor are the files of the sandbox's volumes: meta.json
// names the volumes it mounted, which a sandbox from the snapshot mounts again. The files keep the host uids they had in the
// sandbox's user namespace (never host root, unless the sandbox had no user namespace);
// restoring shifts them into the new sandbox's range.

// blocks is Home's block store: Home/blocks, whose roots are the committed snapshots.
func (l layout) blocks() blocks.Store {
	return blocks.New(filepath.Join(l.home, "blocks"), filepath.Join(l.locks(), "blocks.lock"), l.snapshots(), validID)
}

func (l layout) snapshots() string             { return filepath.Join(l.home, "snapshots") }
func (l layout) snapshot(id string) string     { return filepath.Join(l.snapshots(), id) }
func (l layout) snapshotMeta(id string) string { return filepath.Join(l.snapshot(id), "meta.json") }
func (l layout) snapshotSecrets(id string) string {
	return filepath.Join(l.snapshot(id), "secrets.json")
}
func (l layout) snapshotProxy(id string) string {
	return filepath.Join(l.snapshot(id), "egress-proxy.json")
}

// snapMeta describes a snapshot.
type snapMeta struct {
	ID      string                `json:"id"`
	Name    string                `json:"name,omitempty"`
	Kind    provider.SnapshotKind `json:"kind,omitempty"` // "": filesystem (older snapshots)
	Network string                `json:"network,omitempty"`
	// Policy is the egress policy in force when it was taken (network "allow"), which
	// SnapshotInfo reports and a fork gives its children.
	Policy *egress.File `json:"policy,omitempty"`
	// BoundSecrets says the sandbox had bound secrets: their names, placeholders, values
	// and hosts are in secrets.json beside (mode 0600, never in the snapshot's files).
	BoundSecrets bool `json:"boundSecrets,omitempty"`
	// CPU, MemoryMB and DiskGB are the size of the sandbox of a full snapshot, which
	// every sandbox restored from it has.
	CPU      float64 `json:"cpu,omitempty"`
	MemoryMB int     `json:"memoryMB,omitempty"`
	DiskGB   int     `json:"diskGB,omitempty"`
	// Volumes are the volumes the sandbox mounted (never their files: a volume is shared
	// storage that outlives sandboxes), which a sandbox from the snapshot mounts again by
	// name unless its create names its own (snapshotVolumes).
	Volumes   []provider.VolumeMount `json:"volumes,omitempty"`
	Template  string                 `json:"template"`
	Runtime   string                 `json:"runtime"` // of the sandbox it was taken from
	Source    string                 `json:"source"`  // that sandbox's id
	CreatedAt time.Time              `json:"createdAt"`
	ExpiresAt time.Time              `json:"expiresAt,omitzero"` // zero: kept until deleted
	Size      int64                  `json:"size"`               // bytes allocated by its files
	Inodes    int64                  `json:"inodes"`             // entries
	UIDBase   uint32                 `json:"uidBase"`            // host uid of root inside when taken
	// Transient: taken only to carry a sandbox to the creates that follow (a fork), then
	// deleted; plain (no blocks, its files not synced) and not listed.
	Transient bool `json:"transient,omitempty"`
}

func (m *snapMeta) expired(now time.Time) bool {
	return !m.ExpiresAt.IsZero() && now.After(m.ExpiresAt)
}

func errSnapNotFound(id string) error {
	return provider.Errorf(provider.CodeNotFound, "snapshot %s not found", id)
}

// readSnapshot returns a snapshot's metadata; an id of the wrong shape, a missing snapshot
// and an expired one (removed here) are all CodeNotFound.
func (p *Provider) readSnapshot(id string) (*snapMeta, error) {
	if !validID(id) {
		return nil, errSnapNotFound(id)
	}
	b, err := os.ReadFile(p.lay.snapshotMeta(id))
	if errors.Is(err, os.ErrNotExist) {
		return nil, errSnapNotFound(id)
	}
	if err != nil {
		return nil, err
	}
	var m snapMeta
	if err := json.Unmarshal(b, &m); err != nil || m.ID != id {
		return nil, fmt.Errorf("snapshot %s: bad metadata", id)
	}
	if m.expired(time.Now()) {
		p.removeSnapshot(id)
		return nil, errSnapNotFound(id)
	}
	return &m, nil
}

// removeSnapshot deletes a snapshot and collects the blocks only it used (package blocks).
func (p *Provider) removeSnapshot(id string) { p.lay.removeSnapshot(id) }

func (l layout) removeSnapshot(id string) {
	if l.unlinkSnapshot(id) {
		l.blocks().GC()
	}
}

// unlinkSnapshot deletes a snapshot's directory, reporting whether there was one: it is
// renamed out of sight first, so a half-removed one is never found, and its blocks are
// garbage from that moment.
func (l layout) unlinkSnapshot(id string) bool {
	if !fileExists(l.snapshot(id)) {
		return false
	}
	// Owed from before the rename: a crash just after it must not leave the blocks.
	l.blocks().Owe()
	gone := filepath.Join(l.snapshots(), ".rm-"+id+"-"+strconv.Itoa(os.Getpid()))
	if os.Rename(l.snapshot(id), gone) != nil {
		return false
	}
	blocks.CrashPoint("removed")
	os.RemoveAll(gone)
	blocks.CrashPoint("unlinked")
	return true
}

// writeSnapshot writes snapshot meta.ID, committing it only once it is complete and
// durable. fill writes its contents into the temporary directory tmp, storing large files
// through the blocks.Layer that layer gives for a prefix of the manifest's paths (see
// copyLayerBlocks), and may set meta's sizes. Until the rename that commits it the snapshot
// is invisible, and its blocks are garbage should this process die (package blocks). A plain
// snapshot (a transient one: provider.SnapshotRequest.Transient) has no blocks: layer
// gives nil, its files are copied whole, and only its metadata is synced.
func (l layout) writeSnapshot(ctx context.Context, meta *snapMeta, plain bool, fill func(tmp string, layer func(prefix string) *blocks.Layer) error) error {
	if err := os.MkdirAll(l.snapshots(), 0o700); err != nil {
		return err
	}
	tmp := filepath.Join(l.snapshots(), ".tmp-"+meta.ID+"-"+strconv.Itoa(os.Getpid()))
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return err
	}
	lease, err := l.blocks().Use(ctx)
	if err != nil {
		os.RemoveAll(tmp)
		return err
	}
	defer lease.Release()
	man := blocks.NewManifest()
	err = func() error {
		err := fill(tmp, func(prefix string) *blocks.Layer {
			if plain {
				return nil
			}
			return lease.Storing(man, prefix)
		})
		if err != nil {
			return err
		}
		if h := testHookSnapshotWrite; h != nil {
			if err := h(tmp); err != nil {
				return err
			}
		}
		// The blocks are synced, their names next, then the manifest and the metadata
		// that name them, then the rename.
		if err := lease.Sync(); err != nil {
			return err
		}
		if !plain {
			if err := man.Write(tmp); err != nil {
				return err
			}
		}
		b, err := json.MarshalIndent(meta, "", "  ")
		if err != nil {
			return err
		}
		if err := durable.WriteFile(filepath.Join(tmp, "meta.json"), b); err != nil {
			return err
		}
		if err := durable.SyncDir(tmp); err != nil {
			return err
		}
		blocks.CrashPoint("commit")
		if err := os.Rename(tmp, l.snapshot(meta.ID)); err != nil {
			return err
		}
		return durable.SyncDir(l.snapshots())
	}()
	if err != nil {
		// Its blocks are garbage now: collected once the lease is released (or at the
		// next reap, should this process die first).
		l.blocks().Owe()
		os.RemoveAll(tmp)
	}
	return err
}

// testHookSnapshotWrite, when set by a test, runs once a snapshot's contents are written to
// its temporary directory and before its metadata is: an error fails the snapshot there.
var testHookSnapshotWrite func(tmp string) error

// DeleteSnapshot removes a snapshot now (provider.SnapshotDeleter); CodeNotFound when there
// is none by that id (or it has expired, and is removed all the same).
func (p *Provider) DeleteSnapshot(ctx context.Context, id string) error {
	if _, err := p.readSnapshot(id); err != nil {
		return err
	}
	p.removeSnapshot(id)
	return nil
}

var _ provider.SnapshotDeleter = (*Provider)(nil)

// reapSnapshots removes expired snapshots and what a snapshot or removal interrupted by a
// crash left (temporary directories whose process is gone).
func (p *Provider) reapSnapshots() {
	ents, err := os.ReadDir(p.lay.snapshots())
	if err != nil {
		return
	}
	now := time.Now()
	removed := false
	for _, e := range ents {
		name := e.Name()
		if validID(name) {
			b, err := os.ReadFile(p.lay.snapshotMeta(name))
			var m snapMeta
			if err == nil && json.Unmarshal(b, &m) == nil && m.expired(now) {
				removed = p.lay.unlinkSnapshot(name) || removed
			}
			continue
		}
		if strings.HasPrefix(name, ".tmp-") || strings.HasPrefix(name, ".rm-") {
			i := strings.LastIndexByte(name, '-')
			pid, err := strconv.Atoi(name[i+1:])
			if err == nil && pid != os.Getpid() && unix.Kill(pid, 0) == unix.ESRCH {
				os.RemoveAll(filepath.Join(p.lay.snapshots(), name))
				removed = true
			}
		}
	}
	if bs := p.lay.blocks(); removed || bs.Owed() {
		bs.GC()
	}
}

// dirBytes is the space the files below dir take.
func dirBytes(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				if st, ok := fi.Sys().(*syscall.Stat_t); ok {
					n += st.Blocks * 512
				}
			}
		}
		return nil
	})
	return n
}

// snapshotFits reports, as CodeInvalidArgument, a snapshot that cannot fit a disk of diskGB.
func snapshotFits(m *snapMeta, diskGB int) error {
	// The sandbox's own skeleton and /etc files take a few inodes and pages besides.
	const slackBytes, slackInodes = 1 << 20, 64
	if m.Size+slackBytes > int64(diskGB)<<30 || m.Inodes+slackInodes > int64(diskGB)*65536 {
		return provider.Errorf(provider.CodeInvalidArgument,
			"snapshot %s holds %d MB in %d files, more than a %d GB disk takes: ask for a larger size",
			m.ID, (m.Size+(1<<20)-1)>>20, m.Inodes, diskGB)
	}
	return nil
}

// restoreSnapshot fills a new sandbox's upper directory (before the overlay is mounted) from
// snapshot m, shifting owners from the snapshot's uid base to uidBase. The new sandbox's own
// /etc/resolv.conf, which depends on its network, is kept. With tmp (runsc), the snapshot's
// /tmp goes there instead of into upper, and only when it is a directory: sandbox code may
// have made it a symlink, and the host binds tmp, a directory it made, whatever the
// snapshot holds.
func restoreSnapshot(ctx context.Context, bs blocks.Store, dir string, m *snapMeta, upper, tmp string, uidBase uint32) error {
	lease, man, err := useSnapshotBlocks(ctx, bs, dir)
	if err != nil {
		return err
	}
	defer lease.Release()
	layer := func(prefix string) *blocks.Layer {
		if man == nil {
			return nil // a snapshot from before blocks: plain copies
		}
		return lease.Restoring(man, prefix)
	}
	shift := func(id uint32) uint32 {
		if id >= m.UIDBase && id-m.UIDBase < idMapSize {
			return id - m.UIDBase + uidBase
		}
		return uidBase + 65534 // not mapped in the old sandbox: nobody
	}
	skip := map[string]bool{"etc/resolv.conf": true}
	if tmp != "" {
		skip["tmp"] = true
	}
	if _, err := copyLayerBlocks(ctx, filepath.Join(dir, "upper"), upper, shift, skip, layer("upper/")); err != nil {
		return err
	}
	if tmp == "" {
		return nil
	}
	src := filepath.Join(dir, "upper", "tmp")
	if fi, err := os.Lstat(src); err != nil || !fi.IsDir() {
		return nil // no /tmp, or not a directory: the sandbox starts with an empty one
	}
	_, err = copyLayerBlocks(ctx, src, tmp, shift, nil, layer("upper/tmp/"))
	return err
}

// useSnapshotBlocks takes the block store for reading the snapshot in dir and reads its
// manifest (nil for a snapshot from before blocks). Read under the lease, a manifest found
// is one whose blocks stay until the lease is released.
func useSnapshotBlocks(ctx context.Context, bs blocks.Store, dir string) (*blocks.Lease, *blocks.Manifest, error) {
	lease, err := bs.Use(ctx)
	if err != nil {
		return nil, nil, err
	}
	if _, err := os.Stat(filepath.Join(dir, "meta.json")); err != nil {
		lease.Release()
		return nil, nil, provider.Errorf(provider.CodeNotFound, "snapshot %s not found", filepath.Base(dir))
	}
	man, err := blocks.ReadManifest(dir)
	if err != nil {
		lease.Release()
		return nil, nil, err
	}
	return lease, man, nil
}

// snapshotImage makes the checkpoint image of full snapshot m whole for runsc restore,
// at into (created): its large files are assembled from blocks, with holes for blocks of
// zeros. A snapshot from before blocks has its image whole already: its path is returned
// and into is not made. The caller removes into once the restore is done.
func snapshotImage(ctx context.Context, bs blocks.Store, dir, into string) (string, error) {
	lease, man, err := useSnapshotBlocks(ctx, bs, dir)
	if err != nil {
		return "", err
	}
	defer lease.Release()
	if man == nil {
		return filepath.Join(dir, "image"), nil
	}
	if _, err := copyLayerBlocks(ctx, filepath.Join(dir, "image"), into, nil, nil, lease.Restoring(man, "image/")); err != nil {
		os.RemoveAll(into)
		return "", err
	}
	return into, nil
}

// copyLayer copies the tree at src to dst (package copier), shifting owners through shift
// (nil: unchanged) and leaving alone the relative paths in skip and the provider's own
// .tupper at the top.
func copyLayer(ctx context.Context, src, dst string, shift func(uint32) uint32, skip map[string]bool) (copier.Stats, error) {
	return copyLayerBlocks(ctx, src, dst, shift, skip, nil)
}

// copyLayerBlocks is copyLayer storing large files as blocks, or filling them from blocks,
// through b (package blocks); nil: copyLayer.
func copyLayerBlocks(ctx context.Context, src, dst string, shift func(uint32) uint32, skip map[string]bool, b *blocks.Layer) (copier.Stats, error) {
	o := copier.Options{Shift: shift, Skip: map[string]bool{".tupper": true}}
	for k, v := range skip {
		o.Skip[k] = v
	}
	if b != nil {
		o.Blocks = b
	}
	return copier.Copy(ctx, src, dst, o)
}

var (
	_ provider.Snapshotter     = (*Instance)(nil)
	_ provider.KindSnapshotter = (*Instance)(nil)
	_ provider.SnapshotLister  = (*Provider)(nil)
)

func (m *snapMeta) kind() provider.SnapshotKind {
	if m.Kind == "" {
		return provider.SnapshotFilesystem
	}
	return m.Kind
}

func (m *snapMeta) info() provider.SnapshotInfo {
	info := provider.SnapshotInfo{
		ID: m.ID, Name: m.Name, Kind: m.kind(), Template: m.Template, Runtime: m.Runtime,
		Network: provider.NetworkMode(m.Network), Source: m.Source, CreatedAt: m.CreatedAt,
		ExpiresAt: m.ExpiresAt, Size: m.Size, Volumes: m.Volumes,
	}
	if f := m.Policy; f != nil {
		// The egress proxy without its password, which the snapshot keeps host-side only: a
		// create from it naming this proxy logs in with it (snapshotProxyPassword).
		n := provider.Network{Mode: provider.NetworkAllow, Allow: f.Allow, Deny: f.Deny, Proxy: f.Proxy.Redacted()}
		switch {
		case f.Nothing:
			n = provider.Network{Mode: provider.NetworkNone}
		case len(f.Allow) == 0 && len(f.Deny) == 0:
			n.Learn = true // open, and recorded: what an empty policy is
		}
		info.Policy = &n
	}
	return info
}

// Snapshots lists the snapshots in Home, oldest first (provider.SnapshotLister). Expired
// ones are removed, not listed; one being written is not listed until it is complete.
func (p *Provider) Snapshots(ctx context.Context) ([]provider.SnapshotInfo, error) {
	p.reapSnapshots()
	ents, err := os.ReadDir(p.lay.snapshots())
	if errors.Is(err, os.ErrNotExist) {
		return []provider.SnapshotInfo{}, nil
	}
	if err != nil {
		return nil, provider.Wrap(err, provider.CodeProvider, "snapshots")
	}
	out := []provider.SnapshotInfo{}
	for _, e := range ents {
		if !validID(e.Name()) {
			continue
		}
		m, err := p.readSnapshot(e.Name())
		if err != nil || m.Transient {
			continue
		}
		out = append(out, m.info())
	}
	slices.SortFunc(out, func(a, b provider.SnapshotInfo) int { return a.CreatedAt.Compare(b.CreatedAt) })
	return out, nil
}

// SnapshotInfo describes one snapshot (provider.SnapshotLister); CodeNotFound when there is
// none by that id or it has expired.
func (p *Provider) SnapshotInfo(ctx context.Context, id string) (provider.SnapshotInfo, error) {
	m, err := p.readSnapshot(id)
	if err != nil {
		return provider.SnapshotInfo{}, err
	}
	return m.info(), nil
}
