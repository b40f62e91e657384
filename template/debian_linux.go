package template

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/tupper-dev/tupper/internal/flock"
	"github.com/tupper-dev/tupper/provider"
)

// EnsureDebian returns the built-in debian template, making it first when the store lacks it:
// a minimal root file system (debootstrap --variant=minbase, plus ca-certificates) of the
// machine's own release from the machine's own mirror (HostDistro), with that mirror in its
// apt sources and its package lists kept, so `apt-get install` works in a sandbox at once.
// Concurrent callers (in any process sharing the store) make it once.
func (s *Store) EnsureDebian(ctx context.Context, opts DebianOptions) (*Template, error) {
	if t, err := s.Get(Debian); err == nil {
		return t, nil
	}
	lk, err := flock.Acquire(ctx, filepath.Join(s.root, "debian.lock"))
	if err != nil {
		return nil, err
	}
	defer lk.Unlock()
	if t, err := s.Get(Debian); err == nil {
		return t, nil // made meanwhile
	}
	root := opts.Root
	if root == "" {
		root = "/"
	}
	d, err := HostDistro(root)
	if err != nil {
		return nil, err
	}
	prog := opts.Debootstrap
	if prog == "" {
		if prog, err = exec.LookPath("debootstrap"); err != nil {
			return nil, provider.Errorf(provider.CodeUnavailable, "template %s: debootstrap is not installed (apt-get install debootstrap, or run scripts/setup.sh)", Debian)
		}
	}
	tmp, err := os.MkdirTemp(s.root, ".debian-*")
	if err != nil {
		return nil, err
	}
	defer func() {
		// A debootstrap killed halfway (ctx ended) leaves the file systems it mounted in
		// its chroot (/proc, /sys, …): unmounted before the directory is removed, so that
		// RemoveAll never walks into them and nothing stays mounted.
		unmountUnder(tmp)
		os.RemoveAll(tmp)
	}()
	rootfs := filepath.Join(tmp, "rootfs")
	var out bytes.Buffer
	w := io.Writer(&out)
	if opts.Output != nil {
		w = io.MultiWriter(&out, opts.Output)
	}
	cmd := exec.CommandContext(ctx, prog, "--variant=minbase", "--include=ca-certificates", d.Codename, rootfs, d.Mirror)
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		tail := out.String()
		if len(tail) > 2000 {
			tail = tail[len(tail)-2000:]
		}
		return nil, provider.Errorf(provider.CodeUnavailable, "template %s: debootstrap %s from %s failed: %v\n%s", Debian, d.Codename, d.Mirror, err, tail)
	}
	// What debootstrap copied from this host, and the downloaded packages: not the template's.
	for _, p := range []string{"etc/hostname", "etc/resolv.conf", "etc/hosts"} {
		os.Remove(filepath.Join(rootfs, p))
	}
	debs, _ := filepath.Glob(filepath.Join(rootfs, "var/cache/apt/archives/*.deb"))
	for _, p := range debs {
		os.Remove(p)
	}
	pr, pw := io.Pipe()
	go func() {
		pw.CloseWithError(WriteTree(ctx, pw, rootfs, TreeOptions{Skip: func(rel string) bool {
			return rel == "dev" || rel == "proc" || rel == "sys"
		}}))
	}()
	l, err := s.AddLayer(ctx, pr, Limits{})
	pr.CloseWithError(err)
	if err != nil {
		return nil, err
	}
	t := &Template{
		Name:   Debian,
		Layers: []string{l.DiffID},
		Config: Config{Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}},
		Source: fmt.Sprintf("debootstrap %s %s %s", d.ID, d.Codename, d.Mirror),
		// The mirror as this machine reached it for the packages above: its sandboxes
		// may reach it again (apt-get install), wherever it is (docs/network.md).
		Mirror: ResolveMirror(ctx, d.Mirror),
	}
	if err := s.Put(t); err != nil {
		return nil, err
	}
	return t, nil
}
