//go:build linux

package local

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tupper-dev/tupper/egress"
	"github.com/tupper-dev/tupper/internal/flock"
	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/providers/local/internal/blocks"
	"github.com/tupper-dev/tupper/providers/local/internal/durable"
)

// Taking a snapshot: the sandbox frozen for one moment (a full snapshot's checkpoint taken
// then), its writable layer copied, then thawed while the copy is stored (snapshot.go).

// Snapshot copies the sandbox's file system (its writable layer) to a new snapshot and
// returns its id; CreateSpec.From starts a sandbox from it. Running processes and memory
// are not captured (SnapshotKind with SnapshotFull captures them under runsc). The sandbox is
// frozen while the copy runs and thawed after, unless it was paused already (it stays
// paused). expires > 0 removes the snapshot that long after.
func (i *Instance) Snapshot(ctx context.Context, expires time.Duration) (string, error) {
	return i.SnapshotKind(ctx, provider.SnapshotRequest{Expires: expires})
}

// SnapshotKind takes a snapshot of req.Kind (provider.KindSnapshotter). A full one (runsc
// only) is the filesystem copy of Snapshot plus a checkpoint of the sandbox's memory and
// processes taken at the same frozen moment: the agent first closes its host socket
// (package agent, "Checkpoints"), the sandbox is paused, runsc checkpoints it (leaving it
// running), the writable layer is copied, then the sandbox is resumed and its agent told to
// listen again. A sandbox that is paused cannot take a full snapshot (CodeConflict).
func (i *Instance) SnapshotKind(ctx context.Context, req provider.SnapshotRequest) (string, error) {
	s, err := i.newSnapshotting(ctx, req)
	if err != nil {
		return "", err
	}
	defer s.close(ctx)
	if err := s.freeze(ctx); err != nil {
		return "", provider.Wrap(err, provider.CodeProvider, "snapshot")
	}
	if err := s.describe(); err != nil {
		return "", provider.Wrap(err, provider.CodeProvider, "snapshot")
	}
	fill := func(tmp string, layer func(string) *blocks.Layer) error { return s.fill(ctx, tmp, layer) }
	if err := i.p.lay.writeSnapshot(ctx, &s.meta, s.plain, fill); err != nil {
		if ctx.Err() != nil {
			return "", provider.Wrap(errors.Join(ctx.Err(), err), provider.CodeAborted, "snapshot")
		}
		return "", provider.Wrap(err, provider.CodeProvider, "snapshot")
	}
	return s.meta.ID, nil
}

// snapshotting is one SnapshotKind under way: the sandbox's record, locked, and what the
// snapshot is becoming.
type snapshotting struct {
	i     *Instance
	req   provider.SnapshotRequest
	full  bool // memory and processes too
	plain bool // transient: no blocks (writeSnapshot)
	lk    *flock.Lock
	rec   *record
	rt    ociRuntime
	disk  string // the sandbox's disk directory, in its mount namespace
	meta  snapMeta
	bound []egress.Secret       // its bound secrets, kept beside the metadata
	proxy *provider.EgressProxy // its egress proxy, with its password, likewise
	// What freeze did, which thaw undoes, last first.
	quiesced, paused bool
	thawOnce         sync.Once
}

// newSnapshotting checks the request and the sandbox, and locks the sandbox's record.
func (i *Instance) newSnapshotting(ctx context.Context, req provider.SnapshotRequest) (*snapshotting, error) {
	if req.Expires < 0 {
		return nil, provider.Errorf(provider.CodeInvalidArgument, "negative snapshot expiry %v", req.Expires)
	}
	switch req.Kind {
	case "":
		req.Kind = provider.SnapshotFilesystem
	case provider.SnapshotFilesystem, provider.SnapshotFull:
	default:
		return nil, provider.Errorf(provider.CodeInvalidArgument, "unknown snapshot kind %q (filesystem or full)", req.Kind)
	}
	if len(req.Name) > 128 {
		return nil, provider.Errorf(provider.CodeInvalidArgument, "snapshot name longer than 128 bytes")
	}
	p := i.p
	p.probed()
	lk, rec, err := p.lockRecord(ctx, i.id)
	if err != nil {
		return nil, err
	}
	s := &snapshotting{i: i, req: req, full: req.Kind == provider.SnapshotFull, plain: req.Transient, lk: lk, rec: rec}
	if err := s.check(); err != nil {
		lk.Unlock()
		return nil, err
	}
	return s, nil
}

// check says whether the sandbox can take the snapshot, and finds its runtime and disk.
func (s *snapshotting) check() error {
	i, p, rec, full := s.i, s.i.p, s.rec, s.full
	if rec.Status != statusReady || !p.live(rec) {
		return provider.Errorf(provider.CodeNotFound, "sandbox %s has stopped", i.id)
	}
	caps := provider.NewCapabilities(rec.Caps...)
	if !caps.Has(provider.CapSnapshot) && len(rec.Caps) > 0 {
		return provider.Errorf(provider.CodeUnsupported, "sandbox %s cannot be snapshotted", i.id)
	}
	if full && rec.Runtime == RuntimeRunsc && !caps.Has(provider.CapSnapshotFull) && len(rec.Caps) > 0 {
		return provider.Errorf(provider.CodeUnsupported,
			"sandbox %s uses the host's network stack (network %s), which gVisor cannot checkpoint: full snapshots need network none; take a filesystem snapshot", i.id, rec.Network)
	}
	if full && (!caps.Has(provider.CapSnapshotFull) || rec.Runtime != RuntimeRunsc) {
		return provider.Errorf(provider.CodeUnsupported,
			"sandbox %s runs on %s: full snapshots (memory and processes) need runsc; take a filesystem snapshot", i.id, rec.Runtime)
	}
	if full && rec.Paused {
		return provider.Errorf(provider.CodeConflict, "sandbox %s is paused: resume it to take a full snapshot", i.id)
	}
	p.reapSnapshots()
	rt, ok := p.runtimes[rec.Runtime]
	if !ok {
		return provider.Errorf(provider.CodeUnavailable, "runtime %s not found", rec.Runtime)
	}
	s.rt = rt
	// The writable layer is in the sandbox's mount namespace, reached through its holder.
	disk, err := p.diskDir(rec)
	if err != nil {
		return provider.Wrap(err, provider.CodeProvider, "snapshot")
	}
	s.disk = disk
	return nil
}

// close thaws the sandbox if the snapshot did not, and unlocks its record.
func (s *snapshotting) close(ctx context.Context) {
	s.thaw(ctx)
	s.lk.Unlock()
}

// freeze stops the sandbox at one moment, so that the copy (and a full snapshot's
// checkpoint) is of that moment: for a full snapshot the agent first closes its host
// socket, which gVisor cannot save; then the sandbox is paused, unless it is already. The
// record says paused meanwhile: calls that would wait on the frozen agent fail at once, and
// a crash here leaves a sandbox that Resume thaws. thaw undoes it.
func (s *snapshotting) freeze(ctx context.Context) error {
	if s.full {
		c := agentClient(s.i.p.lay.socket(s.i.id))
		qerr := c.Quiesce(ctx)
		c.Close()
		s.quiesced = true
		if qerr != nil {
			return qerr
		}
	}
	if s.rec.Paused {
		return nil // paused by its owner: it stays paused
	}
	if err := s.rt.run(ctx, runscNetwork(s.rec), "pause", s.i.id); err != nil {
		return err
	}
	s.rec.Paused, s.paused = true, true
	return s.i.p.lay.writeRecord(s.rec)
}

// thaw lets the sandbox run again once the copy of its moment is taken: resumed where
// freeze stopped it, then (full) its agent told to listen again. It runs once: in fill as
// soon as the copy is taken (storing it as blocks, or writing the metadata, needs no frozen
// sandbox), else on the way out.
func (s *snapshotting) thaw(ctx context.Context) {
	s.thawOnce.Do(func() {
		bg := context.WithoutCancel(ctx)
		i, rec := s.i, s.rec
		if s.paused {
			s.rt.run(bg, runscNetwork(rec), "resume", i.id)
			rec.Paused = false
			i.p.lay.writeRecord(rec)
			if !rec.Deadline.IsZero() && !s.full {
				_ = i.SetDeadline(bg, rec.Deadline)
			}
		}
		if s.quiesced {
			_ = i.relisten(bg, s.rt, rec)
		}
	})
}

// describe makes the snapshot's metadata, and reads what it keeps beside it: the egress
// policy, the bound secrets and the proxy's password of a sandbox with network "allow".
func (s *snapshotting) describe() error {
	rec, p := s.rec, s.i.p
	s.meta = snapMeta{
		ID: newID(), Name: s.req.Name, Kind: s.req.Kind, Template: rec.Template, Runtime: rec.Runtime, Source: rec.ID,
		Network: rec.Network, Volumes: rec.Volumes,
		CreatedAt: time.Now().UTC().Truncate(time.Millisecond), UIDBase: rec.UIDBase,
		Transient: s.req.Transient,
	}
	if s.full {
		s.meta.CPU, s.meta.MemoryMB, s.meta.DiskGB = rec.CPU, rec.MemoryMB, rec.DiskGB
	}
	if rec.Egress != nil {
		f, err := p.readEgressPolicy(s.i.id)
		if err != nil {
			return err
		}
		if f.Proxy != nil && f.Proxy.Password != "" {
			s.proxy = f.Proxy
		}
		f.Proxy = f.Proxy.Redacted() // a snapshot's metadata holds no credential
		s.meta.Policy = &f
		if s.bound, err = p.readBoundSecrets(s.i.id); err != nil {
			return err
		}
		s.meta.BoundSecrets = len(s.bound) > 0
	}
	if s.req.Expires > 0 {
		s.meta.ExpiresAt = time.Now().Add(s.req.Expires).UTC()
	}
	return nil
}

// fill writes the snapshot's contents into tmp (writeSnapshot): the credentials, then, the
// sandbox frozen, the checkpoint and the copy of its files; then, thawed, the checkpoint
// image stored as blocks.
func (s *snapshotting) fill(ctx context.Context, tmp string, layer func(string) *blocks.Layer) error {
	if err := s.writeCredentials(tmp); err != nil {
		return err
	}
	ckpt, err := s.checkpoint(ctx, tmp)
	if err != nil {
		return err
	}
	if err := s.copyFiles(ctx, tmp, layer); err != nil {
		return err
	}
	s.thaw(ctx)
	return s.storeImage(ctx, tmp, ckpt, layer)
}

// writeCredentials keeps the bound secrets and the egress proxy's password beside the
// metadata (mode 0600, never in the snapshot's files).
func (s *snapshotting) writeCredentials(tmp string) error {
	if len(s.bound) > 0 {
		b, err := json.Marshal(s.bound)
		if err != nil {
			return err
		}
		if err := durable.WriteFile(filepath.Join(tmp, "secrets.json"), b); err != nil {
			return err
		}
	}
	if s.proxy != nil {
		b, err := json.Marshal(s.proxy)
		if err != nil {
			return err
		}
		if err := durable.WriteFile(filepath.Join(tmp, "egress-proxy.json"), b); err != nil {
			return err
		}
	}
	return nil
}

// checkpoint writes a full snapshot's checkpoint of the frozen sandbox and returns where.
// Uncompressed: a compressed image of the same memory differs from one checkpoint to the
// next, an uncompressed one only where memory changed, and its zeros become holes in blocks
// anyway. A plain snapshot keeps the image as runsc wrote it; else it is stored as blocks
// once the sandbox runs again (storeImage).
func (s *snapshotting) checkpoint(ctx context.Context, tmp string) (string, error) {
	ckpt := filepath.Join(tmp, "checkpoint")
	if s.plain {
		ckpt = filepath.Join(tmp, "image")
	}
	if !s.full {
		return ckpt, nil
	}
	if err := os.Mkdir(ckpt, 0o700); err != nil {
		return "", err
	}
	return ckpt, checkpointRunning(ctx, s.rt, s.rec, ckpt)
}

// copyFiles copies the frozen sandbox's writable layer (and runsc's host-made /tmp) into
// tmp/upper, and counts it in the metadata.
func (s *snapshotting) copyFiles(ctx context.Context, tmp string, layer func(string) *blocks.Layer) error {
	p, rec := s.i.p, s.rec
	var skip map[string]bool
	diskTmp, err := p.nsPath(rec, p.lay.tmp(s.i.id))
	if err != nil {
		return err
	}
	hostTmp := fileExists(diskTmp)
	if hostTmp {
		// runsc: /tmp is the host-made disk/tmp, not the layer's (empty) tmp.
		skip = map[string]bool{"tmp": true}
	}
	st, err := copyLayerBlocks(ctx, filepath.Join(s.disk, "upper"), filepath.Join(tmp, "upper"), nil, skip, layer("upper/"))
	if err != nil {
		return err
	}
	if hostTmp {
		tst, err := copyLayerBlocks(ctx, diskTmp, filepath.Join(tmp, "upper", "tmp"), nil, nil, layer("upper/tmp/"))
		if err != nil {
			return err
		}
		st.Bytes, st.Inodes = st.Bytes+tst.Bytes, st.Inodes+tst.Inodes
	}
	if rec.HolderPID != 0 && !holderAlive(rec) {
		// Its pid may have been reused under the copy: what was copied is not known
		// to be this sandbox's.
		_, err := p.nsPath(rec, p.lay.disk(s.i.id))
		return err
	}
	s.meta.Size, s.meta.Inodes = s.meta.Size+st.Bytes, st.Inodes
	return nil
}

// storeImage stores a full snapshot's checkpoint image as blocks (a plain one's stays as
// runsc wrote it), and counts it.
func (s *snapshotting) storeImage(ctx context.Context, tmp, ckpt string, layer func(string) *blocks.Layer) error {
	switch {
	case s.full && s.plain:
		s.meta.Size += dirBytes(ckpt)
	case s.full:
		ist, err := copyLayerBlocks(ctx, ckpt, filepath.Join(tmp, "image"), nil, nil, layer("image/"))
		if err != nil {
			return err
		}
		s.meta.Size += ist.Bytes
		if err := os.RemoveAll(ckpt); err != nil {
			return err
		}
	}
	return nil
}

// checkpointRunning writes runsc's checkpoint of the sandbox rec into dir and leaves it
// running: uncompressed (a compressed image of the same memory differs from one checkpoint
// to the next, an uncompressed one only where memory changed), or compressed by a runsc
// older than the flag. extra flags go before the sandbox's id.
func checkpointRunning(ctx context.Context, rt ociRuntime, rec *record, dir string, extra ...string) error {
	args := append([]string{"checkpoint", "--image-path", dir, "--compression=none"}, extra...)
	err := rt.run(ctx, runscNetwork(rec), append(args, "--leave-running", rec.ID)...)
	if err != nil && strings.Contains(err.Error(), "flag provided but not defined") {
		args = slices.DeleteFunc(args, func(a string) bool { return a == "--compression=none" })
		err = rt.run(ctx, runscNetwork(rec), append(args, "--leave-running", rec.ID)...)
	}
	return err
}

// relisten tells the agent of a sandbox that runs again after a checkpoint (the one it was
// taken from, or one restored from it) to listen on its socket again, waits until it
// answers, and gives it the record's deadline.
func (i *Instance) relisten(ctx context.Context, rt ociRuntime, rec *record) error {
	if err := rt.kill(ctx, runscNetwork(rec), rec.ID, "USR2"); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := i.p.waitAgent(wctx, rec); err != nil {
		return err
	}
	if !rec.Deadline.IsZero() {
		return i.SetDeadline(ctx, rec.Deadline)
	}
	return nil
}
