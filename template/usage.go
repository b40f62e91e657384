package template

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/tupper-dev/tupper/internal/flock"
	"github.com/tupper-dev/tupper/provider"
)

// Layer returns what the store knows of the layer with diffID; provider.CodeNotFound when it
// is not (fully) in the store.
func (s *Store) Layer(diffID string) (*Layer, error) {
	d := s.LayerDir(diffID)
	if d == "" {
		return nil, provider.Errorf(provider.CodeInvalidArgument, "layer diff id %q is not a sha256 digest", diffID)
	}
	b, err := os.ReadFile(filepath.Join(d, "meta.json"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, provider.Errorf(provider.CodeNotFound, "layer %s is not in the store", diffID)
	}
	if err != nil {
		return nil, err
	}
	var l Layer
	if err := json.Unmarshal(b, &l); err != nil {
		return nil, fmt.Errorf("layer %s: meta.json: %w", diffID, err)
	}
	return &l, nil
}

// Usage is the store's disk use, in bytes of the files its layers hold.
type Usage struct {
	// Templates is each template's size: the sum of its layers, shared or not.
	Templates map[string]int64 `json:"templates"`
	// Layers and Bytes count every layer in the store once, however many templates share it.
	Layers int   `json:"layers"`
	Bytes  int64 `json:"bytes"`
	// Unreferenced is the part of Bytes in layers no template uses, which Prune frees.
	Unreferenced int64 `json:"unreferenced"`
}

// Usage measures the store from its layers' records.
func (s *Store) Usage() (*Usage, error) {
	all, err := s.List()
	if err != nil {
		return nil, err
	}
	sizes, err := s.layerSizes()
	if err != nil {
		return nil, err
	}
	u := &Usage{Templates: map[string]int64{}}
	used := map[string]bool{}
	for _, t := range all {
		var n int64
		for _, l := range t.Layers {
			n += sizes[l]
			used[l] = true
		}
		u.Templates[t.Name] = n
	}
	for d, n := range sizes {
		u.Layers++
		u.Bytes += n
		if !used[d] {
			u.Unreferenced += n
		}
	}
	return u, nil
}

// layerSizes maps every whole layer in the store to its size.
func (s *Store) layerSizes() (map[string]int64, error) {
	ents, err := os.ReadDir(filepath.Join(s.root, "layers", "sha256"))
	if err != nil {
		return nil, fmt.Errorf("template store: %w", err)
	}
	out := map[string]int64{}
	for _, e := range ents {
		d := "sha256:" + e.Name()
		if s.LayerDir(d) == "" {
			continue
		}
		l, err := s.Layer(d)
		if provider.CodeOf(err) == provider.CodeNotFound {
			continue
		}
		if err != nil {
			return nil, err
		}
		out[d] = l.Size
	}
	return out, nil
}

// Pruned says what Prune freed.
type Pruned struct {
	Layers int   `json:"layers"`
	Bytes  int64 `json:"bytes"`
}

// Prune removes the layers no template references, and what failed imports left in the
// store's tmp/. It waits until no import or build runs (they wait for it in turn), so a
// layer an import has just found in the store, or a build's step has just added, is not
// removed before its template is written.
func (s *Store) Prune(ctx context.Context) (Pruned, error) {
	var p Pruned
	lock, err := flock.Acquire(ctx, s.storeLock())
	if err != nil {
		return p, fmt.Errorf("template store: %w", err)
	}
	defer lock.Unlock()
	all, err := s.List()
	if err != nil {
		return p, err
	}
	used := map[string]bool{}
	for _, t := range all {
		for _, l := range t.Layers {
			used[l] = true
		}
	}
	// No import runs: whatever is in tmp/ is a dead one's.
	if ents, err := os.ReadDir(s.tmp()); err == nil {
		for _, e := range ents {
			if err := os.RemoveAll(filepath.Join(s.tmp(), e.Name())); err != nil {
				return p, err
			}
		}
	}
	layers := filepath.Join(s.root, "layers", "sha256")
	ents, err := os.ReadDir(layers)
	if err != nil {
		return p, fmt.Errorf("template store: %w", err)
	}
	for _, e := range ents {
		d := "sha256:" + e.Name()
		if used[d] {
			continue
		}
		var size int64
		if l, err := s.Layer(d); err == nil {
			size = l.Size
		}
		// Renamed out first: a layer is whole or gone, never half removed with its meta.json.
		dead, err := os.MkdirTemp(s.tmp(), "prune-")
		if err != nil {
			return p, err
		}
		if err := os.Rename(filepath.Join(layers, e.Name()), filepath.Join(dead, "layer")); err != nil {
			os.RemoveAll(dead)
			return p, fmt.Errorf("template store: %w", err)
		}
		if err := os.RemoveAll(dead); err != nil {
			return p, err
		}
		os.Remove(s.layerLock(d))
		p.Layers++
		p.Bytes += size
	}
	return p, nil
}

// RemoveOptions tune Remove.
type RemoveOptions struct {
	// InUse, if set, names what uses the template (sandboxes, snapshots); Remove refuses a
	// template in use unless Force. Nil means no one is asked.
	InUse func(ctx context.Context, name string) ([]string, error)
	// Force removes a template even while it is in use.
	Force bool
}

// Remove deletes the template named name (or tagged name), unless it is in use. Its layers
// stay until Prune.
func (s *Store) Remove(ctx context.Context, name string, opts RemoveOptions) (*Template, error) {
	t, err := s.Get(name)
	if err != nil {
		return nil, err
	}
	if opts.InUse != nil && !opts.Force {
		users, err := opts.InUse(ctx, t.Name)
		if err != nil {
			return nil, err
		}
		if len(users) > 0 {
			return nil, provider.Errorf(provider.CodeConflict, "template %q is in use by %s (force removes it anyway)", t.Name, strings.Join(users, ", "))
		}
	}
	return t, s.Delete(t.Name)
}
