package provider

import (
	"context"
	"os"
	"path"
	"strings"
	"time"
)

// A volume is named, persistent storage with a size limit that outlives the sandboxes that
// mount it: CreateSpec.Volumes mounts volumes into a new sandbox at a path, read-write or
// read-only, and several sandboxes may mount one volume at once.

// VolumeInfo describes a volume.
type VolumeInfo struct {
	Name      string
	SizeMB    int       // the limit: what the sandboxes that mount it can store, root included
	UsedBytes int64     // bytes in use now; 0 when unknown
	CreatedAt time.Time //
	MountedBy []string  // the ids of the sandboxes that mount it now
}

// VolumeRequest is what Volumer.CreateVolume takes.
type VolumeRequest struct {
	Name   string // ValidVolumeName
	SizeMB int    // 0: DefaultVolumeSizeMB
}

// Volume sizes.
const (
	DefaultVolumeSizeMB = 1024
	MinVolumeSizeMB     = 16
	MaxVolumeSizeMB     = 1 << 20 // 1 TiB
)

// VolumeMount is one volume in a sandbox.
type VolumeMount struct {
	Name     string `json:"name"`               // the volume
	Path     string `json:"path"`               // absolute, clean path inside the sandbox
	ReadOnly bool   `json:"readOnly,omitempty"` // refuse writes, root's included
}

// Volumer is optional on a Provider (listed as CapVolumes): create, list, inspect and
// delete named volumes, which CreateSpec.Volumes mounts. A name taken is CodeConflict; an
// unknown name is CodeNotFound; deleting a volume a sandbox mounts is CodeConflict. Without
// it (or where the provider refuses it: Refuser), every volume call fails with
// CodeUnsupported, and so does a create with Volumes, before anything is made.
type Volumer interface {
	CreateVolume(ctx context.Context, req VolumeRequest) (VolumeInfo, error)
	Volumes(ctx context.Context) ([]VolumeInfo, error)
	VolumeInfo(ctx context.Context, name string) (VolumeInfo, error)
	DeleteVolume(ctx context.Context, name string) error
}

// ValidVolumeName checks a volume's name: 1 to 63 of a-z, A-Z, 0-9, '.', '_', '-', starting
// with a letter or digit. So a name is never a path ("..", "a/b"), hidden, or empty.
func ValidVolumeName(name string) error {
	if name == "" || len(name) > 63 {
		return Errorf(CodeInvalidArgument, "volume name %q must be 1 to 63 characters", name)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if i > 0 && (c == '.' || c == '_' || c == '-') {
			ok = true
		}
		if !ok {
			return Errorf(CodeInvalidArgument, "volume name %q: letters, digits, '.', '_' and '-' only, starting with a letter or digit", name)
		}
	}
	return nil
}

// Validate checks r: a valid name and a size between MinVolumeSizeMB and MaxVolumeSizeMB
// (0 is the default).
func (r VolumeRequest) Validate() error {
	if err := ValidVolumeName(r.Name); err != nil {
		return err
	}
	if r.SizeMB != 0 && (r.SizeMB < MinVolumeSizeMB || r.SizeMB > MaxVolumeSizeMB) {
		return Errorf(CodeInvalidArgument, "volume size %d MB is not between %d and %d", r.SizeMB, MinVolumeSizeMB, MaxVolumeSizeMB)
	}
	return nil
}

// reservedMountPaths are where a volume may not go: the kernel's and the agent's.
var reservedMountPaths = []string{"/proc", "/sys", "/dev", "/.tupper"}

// ValidateVolumeMounts checks mounts: valid names, absolute clean paths that are not the
// root, not under /proc, /sys, /dev or /.tupper, and no path twice.
func ValidateVolumeMounts(mounts []VolumeMount) error {
	seen := map[string]bool{}
	for _, m := range mounts {
		if err := ValidVolumeName(m.Name); err != nil {
			return err
		}
		p := m.Path
		if !strings.HasPrefix(p, "/") || path.Clean(p) != p || p == "/" || strings.ContainsRune(p, 0) {
			return Errorf(CodeInvalidArgument, "volume %s: mount path %q must be an absolute, clean path other than /", m.Name, p)
		}
		for _, r := range reservedMountPaths {
			if p == r || strings.HasPrefix(p, r+"/") {
				return Errorf(CodeInvalidArgument, "volume %s: mount path %q is under %s", m.Name, p, r)
			}
		}
		if seen[p] {
			return Errorf(CodeInvalidArgument, "two volumes at %s", p)
		}
		seen[p] = true
	}
	return nil
}

// ParseVolumeMount parses NAME:/path[:ro|:rw], the form of the CLI's --volume.
func ParseVolumeMount(s string) (VolumeMount, error) {
	parts := strings.Split(s, ":")
	if len(parts) < 2 || len(parts) > 3 {
		return VolumeMount{}, Errorf(CodeInvalidArgument, "volume %q: want NAME:/path or NAME:/path:ro", s)
	}
	m := VolumeMount{Name: parts[0], Path: parts[1]}
	if len(parts) == 3 {
		switch parts[2] {
		case "ro":
			m.ReadOnly = true
		case "rw":
		default:
			return VolumeMount{}, Errorf(CodeInvalidArgument, "volume %q: mode %q is not ro or rw", s, parts[2])
		}
	}
	return m, ValidateVolumeMounts([]VolumeMount{m})
}

// VolumeOpener is optional beside Volumer: the host's own access to a volume's files (a
// server's file API of volumes, E2B's /volumecontent). OpenVolume returns the volume's root
// directory, open, for the caller to reach its files relative to it — as hostile input:
// sandboxes write those files, so a caller must not follow a symbolic link in them (openat2
// with RESOLVE_IN_ROOT and RESOLVE_NO_SYMLINKS). The volume stays reachable until the file
// is closed. Without it, a volume's files are reached only from inside a sandbox that mounts
// it, and a file API of volumes answers CodeUnsupported.
type VolumeOpener interface {
	OpenVolume(ctx context.Context, name string) (*os.File, error)
}
