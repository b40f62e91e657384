// Package template stores sandbox templates: named stacks of read-only layers with the
// defaults a sandbox made from them starts with (environment, working directory, user,
// start and ready commands).
//
// A Store lives under a provider's home directory:
//
//	store/templates/<name>.json        a template's record (Template)
//	store/layers/sha256/<hex>/fs/      a layer, unpacked once and shared by every template
//	                                   that uses it; <hex> is the digest of its uncompressed
//	                                   tar (the image's diff ID)
//	store/layers/sha256/<hex>/meta.json what was unpacked (Layer)
//
// Layers hold files with the owners and modes of the image (root-owned /usr is host uid 0
// in the store); a provider maps them into each sandbox's user namespace when it mounts
// them (providers/local: idmapped mounts under an overlay whose upper layer is the
// sandbox's own). Records and layers are written to a temporary name and renamed, so a
// process dying halfway leaves either nothing or a whole record. layers/ and tmp/ are
// root's alone (0700): an image's setuid files are never reachable by host users.
//
// Import makes templates from OCI and Docker images: from a registry, a docker save archive,
// an OCI image layout, or a root filesystem tarball. Everything in an image is treated as
// hostile: each layer is verified against its digests and unpacked under openat2 without
// following a symbolic link, within limits on bytes and files (docs/templates.md lists the
// guarantees). Usage and Prune measure and reclaim the store's disk.
package template

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/tupper-dev/tupper/internal/flock"
	"github.com/tupper-dev/tupper/provider"
)

// Template is a template's record.
type Template struct {
	// Name is how sandboxes ask for it: lowercase letters, digits, '.', '_' and '-'.
	Name string `json:"name"`
	// Tags are other names for the same record (E2B aliases, "name:tag").
	Tags []string `json:"tags,omitempty"`
	// Layers are the diff IDs ("sha256:<hex>") of its layers, lowest first.
	Layers []string `json:"layers"`
	// Config holds what a sandbox starts with.
	Config Config `json:"config"`
	// Source says where it came from: an image reference, an archive, a Dockerfile.
	Source string `json:"source,omitempty"`
	// Digest is the digest of the image manifest it was imported from, when it has one (a
	// registry or an OCI layout).
	Digest string `json:"digest,omitempty"`
	// Mirror is the package mirror its files were fetched from, as this machine reached it
	// when the template was made: set on the built-in debian template (EnsureDebian) and on
	// templates built from it (base among them); nil for others. A provider may let the
	// template's sandboxes reach that mirror (providers/local does, docs/network.md).
	Mirror  *Mirror   `json:"mirror,omitempty"`
	Created time.Time `json:"created"`
	// Build is the id of the build that wrote this record (BuildOptions.ID: the server's
	// build id, whose tags E2B's API reports with it); "" for an import.
	Build string `json:"build,omitempty"`
}

// Mirror is a package mirror a template was made from: the URI of its apt source, and the
// addresses and port its host had on the machine that made the template.
type Mirror struct {
	URI string `json:"uri"`
	// Addrs are the IPv4 addresses the URI's host resolved to, each with the URI's port
	// (80 for http, 443 for https unless the URI names one). Empty for a URI that names no
	// network host (file:, cdrom:) or whose host did not resolve.
	Addrs []netip.AddrPort `json:"addrs,omitempty"`
}

// Config are a template's defaults, from an image's configuration or a build's ENV,
// WORKDIR, USER, CMD and ENTRYPOINT instructions.
type Config struct {
	Env          []string          `json:"env,omitempty"` // KEY=VALUE
	WorkingDir   string            `json:"workingDir,omitempty"`
	User         string            `json:"user,omitempty"` // name, uid, or uid:gid
	Entrypoint   []string          `json:"entrypoint,omitempty"`
	Cmd          []string          `json:"cmd,omitempty"`
	Labels       map[string]string `json:"labels,omitempty"`
	ExposedPorts []string          `json:"exposedPorts,omitempty"` // "8080/tcp"
	// StartCmd runs in the background when a sandbox starts; ReadyCmd is run until it exits
	// 0 before the sandbox is handed out (E2B's start and ready commands).
	StartCmd string `json:"startCmd,omitempty"`
	ReadyCmd string `json:"readyCmd,omitempty"`
}

// Layer describes an unpacked layer.
type Layer struct {
	DiffID string `json:"diffID"` // sha256:<hex> of the uncompressed tar
	Size   int64  `json:"size"`   // bytes of regular files unpacked
	Files  int64  `json:"files"`  // entries unpacked
	// Skipped counts the entries left out: device nodes (see docs/templates.md).
	Skipped int64 `json:"skipped,omitempty"`
}

// validNameChars reports whether name is 1 to 128 of [a-z0-9._-], starting with [a-z0-9]:
// the regular expression ^[a-z0-9][a-z0-9._-]{0,127}$ written out, which every tupper
// command would otherwise compile at start-up (127 copies of its class).
func validNameChars(name string) bool {
	if len(name) < 1 || len(name) > 128 {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case i > 0 && (c == '.' || c == '_' || c == '-'):
		default:
			return false
		}
	}
	return true
}

// ValidName reports whether name can name a template.
func ValidName(name string) error {
	if !validNameChars(name) || strings.Contains(name, "..") {
		return provider.Errorf(provider.CodeInvalidArgument, "template name %q: use 1 to 128 lowercase letters, digits, '.', '_' and '-', starting with a letter or digit", name)
	}
	return nil
}

// Store is the template and layer store under one home directory.
type Store struct{ root string }

// Open returns the store under home (home/store), making its directories.
func Open(home string) (*Store, error) {
	s := &Store{root: filepath.Join(home, "store")}
	for _, d := range []string{s.templates(), filepath.Join(s.root, "layers", "sha256"), s.tmp(), filepath.Join(s.root, "locks")} {
		if err := os.MkdirAll(d, 0o711); err != nil {
			return nil, fmt.Errorf("template store: %w", err)
		}
	}
	// Layers hold an image's files as it has them, setuid-root programs included, and tmp/
	// holds layers being unpacked: no host user but root may reach into either. Sandboxes
	// see layers through mounts the provider makes as root, never through these paths.
	for _, d := range []string{filepath.Join(s.root, "layers"), s.tmp()} {
		if err := os.Chmod(d, 0o700); err != nil {
			return nil, fmt.Errorf("template store: %w", err)
		}
	}
	return s, nil
}

func (s *Store) templates() string { return filepath.Join(s.root, "templates") }

// Root is the store's directory.
func (s *Store) Root() string { return s.root }

// LayerDir is where the layer with diffID is (or would be) unpacked: a directory whose fs/
// holds its files and meta.json its Layer. It is "" for a malformed diffID.
func (s *Store) LayerDir(diffID string) string {
	hex, ok := strings.CutPrefix(diffID, "sha256:")
	if !ok || len(hex) != 64 || strings.Trim(hex, "0123456789abcdef") != "" {
		return ""
	}
	return filepath.Join(s.root, "layers", "sha256", hex)
}

// LayerFS is the directory holding the files of the layer with diffID, or "".
func (s *Store) LayerFS(diffID string) string {
	d := s.LayerDir(diffID)
	if d == "" {
		return ""
	}
	return filepath.Join(d, "fs")
}

// HasLayer reports whether the layer with diffID is fully unpacked.
func (s *Store) HasLayer(diffID string) bool {
	d := s.LayerDir(diffID)
	if d == "" {
		return false
	}
	_, err := os.Stat(filepath.Join(d, "meta.json"))
	return err == nil
}

// Get returns the template named name, or one of whose Tags is name. An unknown name is
// provider.CodeNotFound.
func (s *Store) Get(name string) (*Template, error) {
	if err := ValidName(name); err == nil {
		t, err := s.read(filepath.Join(s.templates(), name+".json"))
		if err == nil || !errors.Is(err, os.ErrNotExist) {
			return t, err
		}
	}
	all, err := s.List()
	if err != nil {
		return nil, err
	}
	for _, t := range all {
		for _, tag := range t.Tags {
			if tag == name {
				return t, nil
			}
		}
	}
	return nil, provider.Errorf(provider.CodeNotFound, "template %q not found", name)
}

// List returns every template, by name.
func (s *Store) List() ([]*Template, error) {
	ents, err := os.ReadDir(s.templates())
	if err != nil {
		return nil, fmt.Errorf("template store: %w", err)
	}
	var out []*Template
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || ValidName(name) != nil {
			continue // temporary files and strangers
		}
		t, err := s.read(filepath.Join(s.templates(), e.Name()))
		if errors.Is(err, os.ErrNotExist) {
			continue // removed meanwhile
		}
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (s *Store) read(path string) (*Template, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var t Template
	if err := json.Unmarshal(b, &t); err != nil {
		return nil, fmt.Errorf("template record %s: %w", path, err)
	}
	return &t, nil
}

// Put writes t's record, replacing one of the same name. Every layer it names must be in
// the store.
func (s *Store) Put(t *Template) error {
	if err := ValidName(t.Name); err != nil {
		return err
	}
	for _, l := range t.Layers {
		if !s.HasLayer(l) {
			return provider.Errorf(provider.CodeInvalidArgument, "template %q: layer %s is not in the store", t.Name, l)
		}
	}
	if t.Created.IsZero() {
		t.Created = time.Now().UTC()
	}
	b, err := json.MarshalIndent(t, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(s.templates(), t.Name+".json"), b)
}

// Retag changes the tags of the template named name (or tagged name) to what change returns
// for its current ones, and returns the template as written. Changes of tags in this
// process or another take turns, so none is lost.
func (s *Store) Retag(ctx context.Context, name string, change func(t *Template) ([]string, error)) (*Template, error) {
	lock, err := flock.Acquire(ctx, filepath.Join(s.root, "locks", "tags.lock"))
	if err != nil {
		return nil, fmt.Errorf("template store: %w", err)
	}
	defer lock.Unlock()
	t, err := s.Get(name)
	if err != nil {
		return nil, err
	}
	tags, err := change(t)
	if err != nil {
		return nil, err
	}
	t.Tags = tags
	if err := s.Put(t); err != nil {
		return nil, err
	}
	return t, nil
}

// Delete removes the record of the template named name. Its layers stay until Prune.
func (s *Store) Delete(name string) error {
	if err := ValidName(name); err != nil {
		return err
	}
	err := os.Remove(filepath.Join(s.templates(), name+".json"))
	if errors.Is(err, os.ErrNotExist) {
		return provider.Errorf(provider.CodeNotFound, "template %q not found", name)
	}
	return err
}

// writeFileAtomic writes b to a temporary file beside path, syncs it and renames it over path.
func writeFileAtomic(path string, b []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Chmod(f.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}
