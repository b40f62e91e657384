package template

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"path"
	"strings"

	"github.com/tupper-dev/tupper/provider"
)

// Overlay's names for what image layers spell as .wh. files.
const (
	whiteoutPrefix = ".wh."
	whiteoutMeta   = ".wh..wh."     // AUFS bookkeeping (.wh..wh.plnk, .wh..wh.aufs): skipped
	whiteoutOpaque = ".wh..wh..opq" // the directory hides what lower layers have in it
	opaqueXattr    = "trusted.overlay.opaque"
)

// budget is what one import may still write: the bytes of the layers' uncompressed tar
// streams, the bytes of the files unpacked from them, and their entries. Every layer of an
// image draws on the same budget.
type budget struct {
	stream, bytes, files int64 // left
	limits               Limits
}

func newBudget(l Limits) *budget {
	return &budget{stream: l.MaxBytes, bytes: l.MaxBytes, files: l.MaxFiles, limits: l}
}

func (b *budget) tooBig() error {
	return provider.Errorf(provider.CodeResourceExhausted, "image is larger than the import limit of %d bytes unpacked", b.limits.MaxBytes)
}

// limitedReader counts the uncompressed stream against the budget: a decompression bomb
// stops here, however little of it is files.
type limitedReader struct {
	r io.Reader
	b *budget
}

func (l *limitedReader) Read(p []byte) (int, error) {
	if l.b.stream <= 0 {
		// One byte more tells a stream that ends exactly at the limit from one that goes on.
		var one [1]byte
		if n, _ := l.r.Read(one[:]); n > 0 {
			return 0, l.b.tooBig()
		}
		return l.r.Read(p[:0])
	}
	if int64(len(p)) > l.b.stream {
		p = p[:l.b.stream]
	}
	n, err := l.r.Read(p)
	l.b.stream -= int64(n)
	return n, err
}

func bad(name, format string, args ...any) error {
	return provider.Errorf(provider.CodeInvalidArgument, "layer entry %q: %s", name, fmt.Sprintf(format, args...))
}

// cleanName turns a tar entry's name into a path relative to the layer root: "" for the root
// itself. Absolute names and ".." components are refused, not reinterpreted.
func cleanName(name string) (string, error) {
	if strings.HasPrefix(name, "/") {
		return "", bad(name, "absolute path")
	}
	if strings.IndexByte(name, 0) >= 0 {
		return "", bad(name, "NUL in name")
	}
	for _, c := range strings.Split(name, "/") {
		if c == ".." {
			return "", bad(name, "'..' in path")
		}
	}
	c := path.Clean(name)
	if c == "." {
		return "", nil
	}
	return c, nil
}

// saneXattrs are the extended attributes of an entry that a layer keeps: user.* and file
// capabilities. trusted.* (overlay's own: redirects, metacopy, opaque) and security labels
// from an image are dropped; an image must not steer the overlay it is mounted in.
func saneXattrs(hdr *tar.Header) map[string]string {
	var out map[string]string
	for k, v := range hdr.PAXRecords {
		name, ok := strings.CutPrefix(k, "SCHILY.xattr.")
		if !ok || !(strings.HasPrefix(name, "user.") || name == "security.capability") {
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		out[name] = v
	}
	return out
}

// UnpackInto unpacks the tar r into dir, an existing directory such as a sandbox's root
// file system seen from the host (a build's COPY and ADD). It refuses what a layer's
// unpacking refuses — a path through a symbolic link, "..", a hard link out of dir —
// and whiteout entries, adds idShift to every owner (the sandbox's user-namespace base;
// owners must be below 65536 then), and stays within limits.
func UnpackInto(ctx context.Context, dir string, r io.Reader, idShift int, limits Limits) error {
	b := newBudget(limits.withDefaults())
	u, err := newUnpacker(dir, b)
	if err != nil {
		return err
	}
	defer u.close()
	u.idShift, u.noWhiteouts = idShift, true
	return u.unpack(tar.NewReader(&limitedReader{r: r, b: b}), ctx.Err)
}
