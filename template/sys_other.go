//go:build !linux

package template

import (
	"archive/tar"
	"context"

	"github.com/tupper-dev/tupper/provider"
)

// errNeedsLinux is what unpacking a layer or a build context returns off Linux: the store's
// layers are the local provider's, which runs on Linux only. The Docker provider keeps its
// templates as the engine's images and never unpacks one here.
var errNeedsLinux = provider.Errorf(provider.CodeUnsupported, "template layers are unpacked on Linux only (the local provider's store); use --provider docker, whose templates are images")

// unpacker is never made off Linux: newUnpacker refuses.
type unpacker struct {
	idShift     int
	noWhiteouts bool
	layer       Layer
}

func newUnpacker(string, *budget) (*unpacker, error)     { return nil, errNeedsLinux }
func (*unpacker) unpack(*tar.Reader, func() error) error { return errNeedsLinux }
func (*unpacker) finish() error                          { return errNeedsLinux }
func (*unpacker) close()                                 {}

// syncFS has nothing to flush: nothing is unpacked off Linux.
func syncFS(string) error { return nil }

// unmountUnder has nothing to unmount: nothing is mounted off Linux.
func unmountUnder(string) {}

// oNoFollow is 0 where O_NOFOLLOW is not portable; extractLayout writes only regular files
// into a fresh directory of its own, so there is no link for it to follow.
const oNoFollow = 0

// EnsureDebian needs Linux: debootstrap, and a layer unpacked into the store.
func (s *Store) EnsureDebian(context.Context, DebianOptions) (*Template, error) {
	return nil, errNeedsLinux
}
