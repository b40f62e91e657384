//go:build linux

package local

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/providers/local/internal/lease"
)

// The state layout under Config.Home:
//
//	locks/keys.lock                 exact-key get-or-create (flock)
//	keys/<hash of a key>            the id of the sandbox created with that key (see keys.go)
//	agent/<sha256 prefix>/tupper    the agent binary bound into sandboxes (agent.go)
//	agent/seen/                     what was learned about candidate agent binaries
//	templates/<name>.v<N>/          the host template's shared read-only lower layer (built
//	                                once; delete it to pick up changes to the host's /etc)
//	store/                          image templates and their layers (package template)
//	runc/, runsc/, crun/            the runtimes' --root (their own container state)
//	sandboxes/<id>/                 0700 root, or 0710 root:<its root's gid> with a user
//	                                namespace: no other host user reaches anything below
//	sandboxes/<id>/record.json      the sandbox's record (see record)
//	sandboxes/<id>/config.json      the OCI bundle's spec; the directory is the bundle
//	sandboxes/<id>/disk/            tmpfs bounding the writable layer: upper/ and work/, the
//	                                mount points of the layers' views (l/) and of the host
//	                                directories' overlays (m/, their work directories in w/)
//	sandboxes/<id>/rootfs/          the overlay mount: template lowers + private upper
//	                                (both mounted in the sandbox's own mount namespace, not
//	                                the host's: the host reaches them below
//	                                /proc/<holder>/root, see holder.go)
//	sandboxes/<id>/run/             bind-mounted at /.tupper/run: agent.sock, config.json
//	sandboxes/<id>/disk/tmp/        (runsc) bound at /tmp: made by the host, on the sandbox's
//	                                disk, never a path of the sandbox's own layer (a /tmp
//	                                that sandbox code made a symlink must not pick what the
//	                                host binds)
//	sandboxes/<id>/disk/agent.log   the runtime's and the agent's stdout and stderr (on the
//	                                sandbox's own tmpfs, so a sandbox writing to its agent's
//	                                output cannot fill the host's disk)
//	sandboxes/<id>/saved/           a paused runsc sandbox's checkpoint image (pausesaved.go)
//	sandboxes/<id>/netns            (runsc, network all) the network namespace, bound there
//	                                in the sandbox's mount namespace
//	sandboxes/<id>/vs/, v/           the mount points of its volumes' file systems and views
//	                                (in the sandbox's mount namespace; see volume.go)
//	volumes/<name>/meta.json        a volume's metadata; disk.img is its ext4 image, mnt/ the
//	                                mount point used to inspect it (never in the host's
//	                                namespace); volumes/.<name>.lock its lock
//	snapshots/<id>/meta.json        a snapshot's metadata; upper/ is its copy of the writable
//	                                layer (see snapshot.go), image/ a full one's checkpoint,
//	                                blocks.json the manifest of its files kept in blocks/
//	blocks/<h[:2]>/<h>              up to 512 KiB of a snapshot's file, named by its SHA-256; with
//	                                locks/blocks.lock (flock), see package internal/blocks
//
// and, shared by every Home that uses the same bridge (see network):
//
//	/run/tupper/net-<bridge>/lock            bridge and NAT setup and teardown (flock)
//	/run/tupper/net-<bridge>/leases/<a.b.c.d> one file per address: "<id> <home>"
//	/run/tupper/uids-<base>/<n>              one file per user-namespace range: "<id> <home>"
//
// Host-wide resources (addresses, uid ranges) are leased there rather than in Home, so that
// two Homes on one host never hand out the same one; like the kernel objects they stand
// for, the leases do not outlive a reboot.
type layout struct{ home string }

func (l layout) locks() string                { return filepath.Join(l.home, "locks") }
func (l layout) templates() string            { return filepath.Join(l.home, "templates") }
func (l layout) runtimeRoot(rt string) string { return filepath.Join(l.home, rt) }
func (l layout) sandboxes() string            { return filepath.Join(l.home, "sandboxes") }
func (l layout) dir(id string) string         { return filepath.Join(l.sandboxes(), id) }
func (l layout) record(id string) string      { return filepath.Join(l.dir(id), "record.json") }
func (l layout) disk(id string) string        { return filepath.Join(l.dir(id), "disk") }
func (l layout) rootfs(id string) string      { return filepath.Join(l.dir(id), "rootfs") }
func (l layout) run(id string) string         { return filepath.Join(l.dir(id), "run") }
func (l layout) socket(id string) string      { return filepath.Join(l.run(id), "agent.sock") }
func (l layout) agentConfig(id string) string { return filepath.Join(l.run(id), "config.json") }
func (l layout) log(id string) string         { return filepath.Join(l.disk(id), "agent.log") }
func (l layout) tmp(id string) string         { return filepath.Join(l.disk(id), "tmp") }
func (l layout) netns(id string) string       { return filepath.Join(l.dir(id), "netns") }
func (l layout) pidFile(id string) string     { return filepath.Join(l.dir(id), "init.pid") }

// Status is where a record is in its life.
type status string

const (
	statusCreating status = "creating" // Create is still building it
	statusReady    status = "ready"    // the agent answered
)

// record is what the provider knows about a sandbox, in sandboxes/<id>/record.json. It is
// the only state that matters outside the sandbox: any process with the same Home reads it.
type record struct {
	ID          string            `json:"id"`
	Key         string            `json:"key,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Status      status            `json:"status"`
	CreatedAt   time.Time         `json:"createdAt"`
	Deadline    time.Time         `json:"deadline,omitzero"` // hard lifetime; zero: none
	IdleTimeout time.Duration     `json:"idleTimeout,omitempty"`
	Runtime     string            `json:"runtime"`
	Template    string            `json:"template"`
	Network     string            `json:"network"`      // "none", "all" or "allow"
	IP          string            `json:"ip,omitempty"` // network all: the sandbox's address
	HostVeth    string            `json:"hostVeth,omitempty"`
	// Mirror are the non-public addresses, each with its TCP port, of its template's package
	// mirror that it may reach with a network (mirror.go), fixed at creation.
	Mirror    []netip.AddrPort `json:"mirror,omitempty"`
	UIDIndex  int              `json:"uidIndex"` // -1: no user namespace
	UIDBase   uint32           `json:"uidBase"`  // host uid of root inside
	CPU       float64          `json:"cpu"`
	MemoryMB  int              `json:"memoryMB"`
	DiskGB    int              `json:"diskGB"`
	Pids      int64            `json:"pids"`
	InitPID   int              `json:"initPID,omitempty"`
	InitStart uint64           `json:"initStart,omitempty"` // /proc/PID/stat starttime, against pid reuse
	Paused    bool             `json:"paused,omitempty"`
	// Saved marks a paused sandbox whose memory and processes are on disk and whose runtime
	// is gone (runsc; pausesaved.go). Paused is set too.
	Saved bool `json:"saved,omitempty"`
	// Cold marks a sandbox paused without its memory (coldpause.go): its container is gone,
	// or going, and Resume boots a new one. Paused is set too. It is written before the
	// container is killed.
	Cold bool `json:"cold,omitempty"`
	// HolderPID and HolderStart are the holder's, the process keeping the sandbox's mount
	// namespace (holder.go). Zero in records from before the sandbox's mounts left the
	// host's namespace: their disk and rootfs are mounted at the host paths.
	HolderPID   int    `json:"holderPID,omitempty"`
	HolderStart uint64 `json:"holderStart,omitempty"`
	// Restarts are the times its gVisor sandbox stopped at a limit and was booted again on
	// its files (revive.go), the last ones, oldest first.
	Restarts []provider.Restart `json:"restarts,omitempty"`
	// Egress is the egress proxy of a sandbox with network "allow" (egress.go).
	Egress *egressProc `json:"egress,omitempty"`
	// Caps are the sandbox's capabilities, fixed at creation (they depend on its runtime).
	// Empty in records from before they were kept: the provider's then apply.
	Caps []provider.Capability `json:"caps,omitempty"`
	// Volumes are the volumes the sandbox mounts (volume.go): a volume named here is not
	// deleted while the record exists.
	Volumes []provider.VolumeMount `json:"volumes,omitempty"`
	// Pooled marks a sandbox waiting in its provider's pool (Config.Pool): not listed, not
	// found by key, not connectable. PoolOwner and PoolOwnerStart (its /proc starttime) name
	// the process whose pool it is; once that process is gone, any provider removes it.
	Pooled         bool   `json:"pooled,omitempty"`
	PoolOwner      int    `json:"poolOwner,omitempty"`
	PoolOwnerStart uint64 `json:"poolOwnerStart,omitempty"`
	// BootImage is the key of the boot image the sandbox was restored from (bootimage.go);
	// "" for a sandbox that booted.
	BootImage string `json:"bootImage,omitempty"`
	// Workdir is the template's working directory ("" when it names none), where the
	// agent starts a command given no cwd; Info reports it, so that the SDK does the same.
	Workdir string `json:"workdir,omitempty"`
}

func (l layout) readRecord(id string) (*record, error) {
	if !validID(id) {
		return nil, errNotFound(id)
	}
	b, err := os.ReadFile(l.record(id))
	if errors.Is(err, os.ErrNotExist) {
		return nil, errNotFound(id)
	}
	if err != nil {
		return nil, err
	}
	var r record
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("sandbox %s: bad record: %w", id, err)
	}
	if r.ID != id {
		return nil, fmt.Errorf("sandbox %s: record names %q", id, r.ID)
	}
	return &r, nil
}

// writeRecord replaces the record atomically (write a temporary file, then rename).
func (l layout) writeRecord(r *record) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	tmp := l.record(r.ID) + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, l.record(r.ID))
}

// ids lists the sandbox directories.
func (l layout) ids() ([]string, error) {
	ents, err := os.ReadDir(l.sandboxes())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(ents))
	for _, e := range ents {
		if e.IsDir() && validID(e.Name()) {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// leaseHolder is what a host-wide lease file holds: the sandbox id and its Home.
func leaseHolder(l layout, id string) string { return id + " " + l.home }

// leasesIn is the host-wide leases in dir (package lease): of uid ranges, or of a bridge's
// addresses.
func leasesIn(dir string) lease.Dir { return lease.New(dir, staleHolder) }

// staleHolder reports whether a lease's holder (leaseHolder) is a sandbox that has no
// record any more (its Home was deleted without a teardown). A lease taken at this moment,
// before its record exists, cannot be judged stale: Create writes the record before it
// leases anything.
func staleHolder(h string) bool {
	f := strings.Fields(h)
	if len(f) != 2 || !validID(f[0]) || !filepath.IsAbs(f[1]) {
		return false
	}
	_, err := os.Stat(layout{home: f[1]}.record(f[0]))
	return errors.Is(err, os.ErrNotExist)
}

// procStart returns the start time of pid (field 22 of /proc/PID/stat), or 0 when there is
// no such process. Comparing it with the recorded value tells a live init from a reused pid.
func procStart(pid int) uint64 {
	if pid <= 0 {
		return 0
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	s := string(b)
	// The command name (field 2) is in parentheses and may contain spaces.
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	fields := strings.Fields(s[i+1:])
	// fields[0] is field 3 (state); starttime is field 22.
	if len(fields) < 20 {
		return 0
	}
	if fields[0] == "Z" || fields[0] == "X" {
		return 0
	}
	v, _ := strconv.ParseUint(fields[19], 10, 64)
	return v
}
