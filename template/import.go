package template

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/bzip2"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/klauspost/compress/zstd"

	"github.com/tupper-dev/tupper/internal/flock"
	"github.com/tupper-dev/tupper/provider"
)

// Default import limits: generous for real images (the largest common ones unpack to a few
// GiB and a few hundred thousand files), small enough that one hostile image cannot fill a
// host's disk or inode table.
const (
	DefaultMaxBytes = 32 << 30
	DefaultMaxFiles = 2_000_000
)

// Limits bound what one import may write. The zero value means the defaults.
type Limits struct {
	// MaxBytes bounds both the uncompressed size of the layers fetched and the bytes of the
	// files unpacked from them (a sparse file counts at its full size).
	MaxBytes int64
	// MaxFiles bounds the entries unpacked.
	MaxFiles int64
}

func (l Limits) withDefaults() Limits {
	if l.MaxBytes <= 0 {
		l.MaxBytes = DefaultMaxBytes
	}
	if l.MaxFiles <= 0 {
		l.MaxFiles = DefaultMaxFiles
	}
	return l
}

// Manifests, indexes and image configurations are read whole into memory: bounded.
const (
	maxManifestBytes = 8 << 20
	maxConfigBytes   = 16 << 20
	maxIndexDepth    = 8 // an index of indexes of …: real ones nest once
	// maxLayers is overlayfs's own bound on lower layers: a template of more could never
	// be mounted.
	maxLayers = 500
)

func tooManyLayers(n int) error {
	if n > maxLayers {
		return provider.Errorf(provider.CodeInvalidArgument, "image has %d layers, more than the %d an overlay can stack", n, maxLayers)
	}
	return nil
}

// Format says what a file or directory holds.
type Format string

// The formats Import reads from a path.
const (
	FormatDetect        Format = ""               // look at the file
	FormatDockerArchive Format = "docker-archive" // what `docker save` writes
	FormatOCILayout     Format = "oci-layout"     // an OCI image layout, a directory or a tar of one
	FormatRootFS        Format = "rootfs"         // a tar of a root filesystem: plain, gzip, zstd or bzip2
)

// Source is where an image comes from: a registry reference, or a path.
type Source struct {
	// Ref is an image reference: "python:3.12-slim", "host:5000/team/app@sha256:…".
	Ref string
	// Path is a file or directory on this machine, read as Format.
	Path   string
	Format Format
}

// SourceOf reads a command-line argument: an existing file or directory, or a path-like
// argument ("./x", "/x"), is a Path; anything else a registry reference.
func SourceOf(arg string) Source {
	if _, err := os.Stat(arg); err == nil || strings.HasPrefix(arg, "/") || strings.HasPrefix(arg, "./") || strings.HasPrefix(arg, "../") {
		return Source{Path: arg}
	}
	return Source{Ref: arg}
}

func (s Source) validate() error {
	if (s.Ref == "") == (s.Path == "") {
		return provider.Errorf(provider.CodeInvalidArgument, "an image source is a reference or a path, one of the two")
	}
	switch s.Format {
	case FormatDetect, FormatDockerArchive, FormatOCILayout, FormatRootFS:
	default:
		return provider.Errorf(provider.CodeInvalidArgument, "image format %q: use %s, %s or %s", s.Format, FormatDockerArchive, FormatOCILayout, FormatRootFS)
	}
	if s.Ref != "" && s.Format != FormatDetect {
		return provider.Errorf(provider.CodeInvalidArgument, "a format applies to a path, not to reference %q", s.Ref)
	}
	return nil
}

// ImportOptions tune Import. The zero value imports the host's platform with the default
// limits and no progress reports.
type ImportOptions struct {
	// Platform picks an image from an index: "os/arch[/variant]". "" is this host's.
	Platform string
	// Insecure lets a registry that is not on loopback be reached over plain HTTP or with a
	// certificate that does not verify. Loopback registries may use plain HTTP regardless.
	Insecure bool
	// Tags are other names for the template.
	Tags []string
	// Limits bound what the import writes.
	Limits Limits
	// Progress, if set, is called as layers are fetched and unpacked, from Import's goroutine.
	Progress func(Progress)
}

// Validate checks the options.
func (o ImportOptions) Validate() error {
	if _, err := o.platform(); err != nil {
		return err
	}
	for _, t := range o.Tags {
		// An image reference is a tag (a build's FROM tags what it imports with it, so the
		// next build finds it): '/' is allowed, as in "ghcr.io/org/app:1".
		if t == "" || len(t) > 255 || strings.ContainsAny(t, " \t\n") {
			return provider.Errorf(provider.CodeInvalidArgument, "tag %q: up to 255 characters, no spaces", t)
		}
	}
	if o.Limits.MaxBytes < 0 || o.Limits.MaxFiles < 0 {
		return provider.Errorf(provider.CodeInvalidArgument, "import limits must not be negative")
	}
	return nil
}

func (o ImportOptions) platform() (v1.Platform, error) {
	if o.Platform == "" {
		return v1.Platform{OS: runtime.GOOS, Architecture: runtime.GOARCH}, nil
	}
	p, err := v1.ParsePlatform(o.Platform)
	if err != nil || p.OS == "" || p.Architecture == "" {
		return v1.Platform{}, provider.Errorf(provider.CodeInvalidArgument, "platform %q: use os/arch[/variant], e.g. linux/amd64", o.Platform)
	}
	return *p, nil
}

// Progress reports an import's advance through its layers.
type Progress struct {
	Layer  int    // 1-based index of the layer, lowest first
	Layers int    // how many the image has
	DiffID string // "" until known (a root filesystem tarball learns it at the end)
	Bytes  int64  // bytes of the layer read so far, as fetched (compressed)
	Total  int64  // the layer's size as fetched, -1 when unknown
	Cached bool   // the layer was in the store already: nothing fetched
	Done   bool   // the layer is in the store
}

// image is a resolved source: its layers, lowest first, and its defaults.
type image struct {
	layers  []layerSource
	config  Config
	source  string // for Template.Source
	digest  string // the manifest's digest, "" when the source has none that means anything
	cleanup func()
}

// layerSource opens one layer as its source stores it.
type layerSource struct {
	diffID string // "sha256:…" of the uncompressed tar; "" when only unpacking tells
	digest string // of the stored blob, verified when set
	size   int64  // of the stored blob, -1 when unknown
	open   func(context.Context) (io.ReadCloser, error)
}

// Import makes the template name from src: it resolves the image, fetches and unpacks each
// layer not yet in the store (verifying every digest on the way), and writes the template's
// record, replacing one of the same name. Layers already in the store are not fetched.
// A failed import leaves no layer behind that it did not finish.
//
// Import may run concurrently with itself in this and other processes; a layer two imports
// both need is unpacked once. Prune waits for running imports.
func (s *Store) Import(ctx context.Context, name string, src Source, opts ImportOptions) (*Template, error) {
	if err := ValidName(name); err != nil {
		return nil, err
	}
	if err := src.validate(); err != nil {
		return nil, err
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	plat, _ := opts.platform()
	lock, err := flock.AcquireShared(ctx, s.storeLock())
	if err != nil {
		return nil, fmt.Errorf("template store: %w", err)
	}
	defer lock.Unlock()

	var img *image
	switch {
	case src.Ref != "":
		img, err = s.fromRegistry(ctx, src.Ref, plat, opts.Insecure)
	default:
		img, err = s.fromPath(ctx, src.Path, src.Format, plat)
	}
	if err != nil {
		return nil, err
	}
	if img.cleanup != nil {
		defer img.cleanup()
	}

	b := newBudget(opts.Limits.withDefaults())
	t := &Template{Name: name, Tags: opts.Tags, Config: img.config, Source: img.source, Digest: img.digest}
	for i, l := range img.layers {
		report := func(p Progress) {
			if opts.Progress != nil {
				p.Layer, p.Layers, p.Total = i+1, len(img.layers), l.size
				opts.Progress(p)
			}
		}
		diffID, err := s.unpackLayer(ctx, l, b, report)
		if err != nil {
			return nil, err
		}
		t.Layers = append(t.Layers, diffID)
	}
	t.Created = time.Now().UTC()
	if err := s.Put(t); err != nil {
		return nil, err
	}
	return t, nil
}

// AddLayer unpacks the layer tar r (plain, gzip, zstd or bzip2) into the store, unless a
// layer of the same content is there, and returns its record: how a build adds the layer a
// step made. It is unpacked as an imported layer is, with the same refusals, within
// limits. A layer no template names is Prune's to remove: write the template soon.
func (s *Store) AddLayer(ctx context.Context, r io.Reader, limits Limits) (*Layer, error) {
	lock, err := flock.AcquireShared(ctx, s.storeLock())
	if err != nil {
		return nil, fmt.Errorf("template store: %w", err)
	}
	defer lock.Unlock()
	l := layerSource{size: -1, open: func(context.Context) (io.ReadCloser, error) { return io.NopCloser(r), nil }}
	diffID, err := s.unpackLayer(ctx, l, newBudget(limits.withDefaults()), func(Progress) {})
	if err != nil {
		return nil, err
	}
	return s.Layer(diffID)
}

func (s *Store) storeLock() string { return filepath.Join(s.root, "locks", "store.lock") }
func (s *Store) layerLock(diffID string) string {
	return filepath.Join(s.root, "locks", strings.TrimPrefix(diffID, "sha256:")+".lock")
}
func (s *Store) tmp() string { return filepath.Join(s.root, "tmp") }

// unpackLayer puts the layer l into the store, unless it is there, and returns its diff ID.
// It unpacks into a directory of its own under the store's tmp/ and renames it into place
// with its meta.json inside, so the layer is whole or absent.
func (s *Store) unpackLayer(ctx context.Context, l layerSource, b *budget, report func(Progress)) (string, error) {
	if l.diffID != "" {
		if s.LayerDir(l.diffID) == "" {
			return "", provider.Errorf(provider.CodeInvalidArgument, "layer diff id %q is not a sha256 digest", l.diffID)
		}
		if s.HasLayer(l.diffID) {
			report(Progress{DiffID: l.diffID, Cached: true, Done: true})
			return l.diffID, nil
		}
		lock, err := flock.Acquire(ctx, s.layerLock(l.diffID))
		if err != nil {
			return "", fmt.Errorf("template store: %w", err)
		}
		defer lock.Unlock()
		if s.HasLayer(l.diffID) { // another import finished it while we waited
			report(Progress{DiffID: l.diffID, Cached: true, Done: true})
			return l.diffID, nil
		}
	}
	tmp, err := os.MkdirTemp(s.tmp(), "layer-")
	if err != nil {
		return "", fmt.Errorf("template store: %w", err)
	}
	defer os.RemoveAll(tmp) // gone once renamed into place
	if err := os.Mkdir(filepath.Join(tmp, "fs"), 0o755); err != nil {
		return "", err
	}
	report(Progress{DiffID: l.diffID})
	meta, err := unpackStream(ctx, l, filepath.Join(tmp, "fs"), b, func(n int64) { report(Progress{DiffID: l.diffID, Bytes: n}) })
	if err != nil {
		return "", err
	}
	mb, _ := json.Marshal(meta)
	if err := os.WriteFile(filepath.Join(tmp, "meta.json"), mb, 0o644); err != nil {
		return "", err
	}
	if err := os.Chmod(tmp, 0o711); err != nil {
		return "", err
	}
	if err := syncFS(tmp); err != nil {
		return "", err
	}
	if l.diffID == "" { // learnt only now
		lock, err := flock.Acquire(ctx, s.layerLock(meta.DiffID))
		if err != nil {
			return "", fmt.Errorf("template store: %w", err)
		}
		defer lock.Unlock()
	}
	dst := s.LayerDir(meta.DiffID)
	if !s.HasLayer(meta.DiffID) {
		if _, err := os.Lstat(dst); err == nil {
			// Not whole: what a store older than the rename rule, or a hand, left. Ours replaces it.
			if err := os.RemoveAll(dst); err != nil {
				return "", err
			}
		}
		if err := os.Rename(tmp, dst); err != nil {
			return "", fmt.Errorf("template store: %w", err)
		}
	}
	report(Progress{DiffID: meta.DiffID, Bytes: meta.fetched, Done: true})
	return meta.DiffID, nil
}

// layerMeta is a Layer as unpackStream learns it.
type layerMeta struct {
	Layer
	fetched int64
}

// unpackStream reads layer l into dir, verifying its digests, and describes what it wrote.
func unpackStream(ctx context.Context, l layerSource, dir string, b *budget, progress func(int64)) (*layerMeta, error) {
	rc, err := l.open(ctx)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	raw := &rawReader{r: rc, size: l.size, want: l.digest, h: sha256.New(), progress: progress}
	dec, err := decompress(raw)
	if err != nil {
		return nil, err
	}
	defer dec.Close()
	diffH := sha256.New()
	stream := &limitedReader{r: io.TeeReader(dec, diffH), b: b}
	u, err := newUnpacker(dir, b)
	if err != nil {
		return nil, err
	}
	err = u.unpack(tar.NewReader(stream), ctx.Err)
	u.close()
	if err != nil {
		return nil, err
	}
	// Read to the very end: the digests cover every byte, the tar's padding too.
	if _, err := io.Copy(io.Discard, stream); err != nil {
		return nil, streamErr(err)
	}
	if _, err := io.Copy(io.Discard, raw); err != nil {
		return nil, streamErr(err)
	}
	if l.size >= 0 && raw.n != l.size {
		return nil, provider.Errorf(provider.CodeInvalidArgument, "layer %s: %d bytes, its descriptor says %d", l.digest, raw.n, l.size)
	}
	if l.digest != "" && raw.sum() != l.digest {
		return nil, digestMismatch(l.digest, raw.sum())
	}
	diffID := "sha256:" + hex.EncodeToString(diffH.Sum(nil))
	if l.diffID != "" && diffID != l.diffID {
		return nil, provider.Errorf(provider.CodeInvalidArgument, "layer %s does not match its diff id: its uncompressed content is %s", l.diffID, diffID)
	}
	u.layer.DiffID = diffID
	return &layerMeta{Layer: u.layer, fetched: raw.n}, nil
}

func digestMismatch(want, got string) error {
	return provider.Errorf(provider.CodeInvalidArgument, "layer %s does not match its digest: its content is %s", want, got)
}

// streamErr keeps a coded error and calls anything else a malformed layer.
func streamErr(err error) error {
	var pe *provider.Error
	if errors.As(err, &pe) {
		return err
	}
	return provider.Errorf(provider.CodeInvalidArgument, "malformed layer: %w", err)
}

// rawReader reads a layer as fetched: it hashes and counts it, refuses more than its
// descriptor's size, and says what a broken read was.
type rawReader struct {
	r        io.Reader
	size     int64
	want     string
	h        hash.Hash
	n        int64
	last     int64
	progress func(int64)
}

func (r *rawReader) sum() string { return "sha256:" + hex.EncodeToString(r.h.Sum(nil)) }

func (r *rawReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	r.h.Write(p[:n])
	r.n += int64(n)
	if r.n-r.last >= 1<<20 || (err == io.EOF && r.n != r.last) {
		r.last = r.n
		r.progress(r.n)
	}
	if r.size >= 0 && r.n > r.size {
		return n, provider.Errorf(provider.CodeInvalidArgument, "layer %s is larger than its descriptor's %d bytes", r.want, r.size)
	}
	if err != nil && err != io.EOF {
		var pe *provider.Error
		switch {
		case errors.As(err, &pe):
		case r.want != "" && r.n == r.size && r.sum() != r.want:
			// The fetcher's own check fired at the end: the content is wrong, not the network.
			err = digestMismatch(r.want, r.sum())
		default:
			err = provider.Errorf(provider.CodeUnavailable, "reading layer %s: %w", r.want, err)
		}
	}
	return n, err
}

// decompress sniffs r's compression: gzip, zstd, bzip2, or none (a plain tar).
func decompress(r io.Reader) (io.ReadCloser, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	magic, err := br.Peek(4)
	if err != nil && err != io.EOF {
		return nil, streamErr(err)
	}
	switch {
	case bytes.HasPrefix(magic, []byte{0x1f, 0x8b}):
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, streamErr(err)
		}
		return zr, nil
	case bytes.HasPrefix(magic, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		// The window bound keeps a hostile frame from asking for gigabytes of memory.
		zr, err := zstd.NewReader(br, zstd.WithDecoderMaxWindow(128<<20), zstd.WithDecoderConcurrency(1))
		if err != nil {
			return nil, streamErr(err)
		}
		return zr.IOReadCloser(), nil
	case bytes.HasPrefix(magic, []byte("BZh")):
		return io.NopCloser(bzip2.NewReader(br)), nil
	}
	return io.NopCloser(br), nil
}

// fromPath resolves an image in a file or directory.
func (s *Store) fromPath(ctx context.Context, path string, format Format, plat v1.Platform) (*image, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	fi, err := os.Stat(abs)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, provider.Errorf(provider.CodeNotFound, "image file %s not found", path)
		}
		return nil, provider.Errorf(provider.CodeInvalidArgument, "image file %s: %w", path, err)
	}
	if format == FormatDetect {
		if format, err = detect(abs, fi); err != nil {
			return nil, err
		}
	}
	switch format {
	case FormatOCILayout:
		if fi.IsDir() {
			img, err := fromLayout(ctx, layoutDir(abs), plat)
			if err == nil {
				img.source = "oci-layout:" + abs
			}
			return img, err
		}
		dir, err := os.MkdirTemp(s.tmp(), "layout-")
		if err != nil {
			return nil, err
		}
		if err := extractLayout(abs, dir, fi.Size()); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		img, err := fromLayout(ctx, layoutDir(dir), plat)
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		img.source, img.cleanup = "oci-archive:"+abs, func() { os.RemoveAll(dir) }
		return img, nil
	case FormatDockerArchive:
		return fromDockerArchive(abs, plat)
	}
	if fi.IsDir() {
		return nil, provider.Errorf(provider.CodeInvalidArgument, "%s is a directory: a root filesystem is imported from a tar of it", path)
	}
	return &image{
		source: "rootfs:" + abs,
		layers: []layerSource{{size: -1, open: func(context.Context) (io.ReadCloser, error) { return os.Open(abs) }}},
	}, nil
}

// detect tells a file's format: a directory with an oci-layout file is a layout; a tar with
// one at its top is a layout too (`docker save` writes both), a tar with a manifest.json
// is a docker archive, and anything else a root filesystem.
func detect(path string, fi os.FileInfo) (Format, error) {
	if fi.IsDir() {
		if _, err := os.Stat(filepath.Join(path, "oci-layout")); err != nil {
			return "", provider.Errorf(provider.CodeInvalidArgument, "directory %s is not an OCI image layout (no oci-layout file)", path)
		}
		return FormatOCILayout, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	var magic [4]byte
	if n, _ := io.ReadFull(f, magic[:]); n >= 2 && (magic[0] == 0x1f && magic[1] == 0x8b || bytes.Equal(magic[:], []byte{0x28, 0xb5, 0x2f, 0xfd}) || bytes.HasPrefix(magic[:], []byte("BZh"))) {
		return FormatRootFS, nil // compressed: image archives are plain tars
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return "", err
	}
	tr := tar.NewReader(f) // f seeks, so skipping contents reads only headers
	format := FormatRootFS
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return format, nil
		}
		if err != nil {
			return "", provider.Errorf(provider.CodeInvalidArgument, "%s is not a tar archive: %w", path, err)
		}
		switch strings.TrimPrefix(hdr.Name, "./") {
		case "oci-layout":
			return FormatOCILayout, nil
		case "manifest.json":
			format = FormatDockerArchive
		}
	}
}

// fromDockerArchive reads what `docker save` writes: one image.
func fromDockerArchive(path string, plat v1.Platform) (*image, error) {
	img, err := tarball.ImageFromPath(path, nil)
	if err != nil {
		return nil, provider.Errorf(provider.CodeInvalidArgument, "docker archive %s: %w", path, err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, provider.Errorf(provider.CodeInvalidArgument, "docker archive %s: image configuration: %w", path, err)
	}
	if err := checkPlatform(cfg, plat); err != nil {
		return nil, err
	}
	layers, err := img.Layers()
	if err != nil {
		return nil, provider.Errorf(provider.CodeInvalidArgument, "docker archive %s: %w", path, err)
	}
	if err := tooManyLayers(len(layers)); err != nil {
		return nil, err
	}
	out := &image{source: "docker-archive:" + path, config: configOf(cfg)}
	for _, l := range layers {
		d, err := l.DiffID()
		if err != nil {
			return nil, provider.Errorf(provider.CodeInvalidArgument, "docker archive %s: %w", path, err)
		}
		// The archive's layers are checked against the configuration's diff IDs; their
		// compressed digests are not claimed by anything in the archive.
		out.layers = append(out.layers, layerSource{diffID: d.String(), size: -1, open: func(context.Context) (io.ReadCloser, error) {
			rc, err := l.Uncompressed()
			if err != nil {
				return nil, provider.Errorf(provider.CodeInvalidArgument, "docker archive %s: layer %s: %w", path, d, err)
			}
			return rc, nil
		}})
	}
	return out, nil
}

// extractLayout unpacks an OCI layout tar into dir, keeping only what a layout has
// (oci-layout, index.json, blobs/<algorithm>/<hex>) as regular files, and no more bytes than
// the archive holds.
func extractLayout(archive, dir string, size int64) error {
	f, err := os.Open(archive)
	if err != nil {
		return err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	left := size
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return provider.Errorf(provider.CodeInvalidArgument, "OCI layout archive %s: %w", archive, err)
		}
		name := strings.TrimPrefix(hdr.Name, "./")
		parts := strings.Split(name, "/")
		keep := name == "oci-layout" || name == "index.json" ||
			len(parts) == 3 && parts[0] == "blobs" && v1HashOK(parts[1]+":"+parts[2])
		if !keep || hdr.Typeflag != tar.TypeReg {
			continue
		}
		if left -= hdr.Size; left < 0 {
			return provider.Errorf(provider.CodeInvalidArgument, "OCI layout archive %s: its entries are larger than the archive (sparse entries are refused)", archive)
		}
		dst := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
			return err
		}
		out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|oNoFollow, 0o600)
		if err != nil {
			return err
		}
		_, err = io.Copy(out, tr)
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return provider.Errorf(provider.CodeInvalidArgument, "OCI layout archive %s: %s: %w", archive, name, err)
		}
	}
}

func v1HashOK(s string) bool {
	h, err := v1.NewHash(s)
	return err == nil && h.Algorithm == "sha256"
}

// fetcher reads an image's manifests and blobs from where they are.
type fetcher interface {
	// manifest returns the manifest or index desc names, unverified.
	manifest(ctx context.Context, desc v1.Descriptor) ([]byte, error)
	// blob opens the blob desc names, as stored.
	blob(ctx context.Context, desc v1.Descriptor) (io.ReadCloser, error)
}

// resolve walks from a manifest or index (raw, described by desc) to the one image manifest
// for plat, verifying each manifest it fetches against its digest, and reads that image's
// configuration. A loop of manifests would need a cycle of digests: each manifest is
// verified, so a manifest naming itself or an ancestor fails as a mismatch, and a walk
// deeper than maxIndexDepth is refused.
func resolve(ctx context.Context, f fetcher, desc v1.Descriptor, raw []byte, plat v1.Platform) (*image, error) {
	for depth := 0; ; depth++ {
		mt := desc.MediaType
		if mt == "" {
			var probe struct {
				MediaType types.MediaType `json:"mediaType"`
				Manifests json.RawMessage `json:"manifests"`
			}
			_ = json.Unmarshal(raw, &probe)
			switch {
			case probe.MediaType != "":
				mt = probe.MediaType
			case probe.Manifests != nil:
				mt = types.OCIImageIndex
			default:
				mt = types.OCIManifestSchema1
			}
		}
		switch {
		case mt.IsIndex():
			if depth >= maxIndexDepth {
				return nil, provider.Errorf(provider.CodeInvalidArgument, "image indexes nest more than %d deep", maxIndexDepth)
			}
			idx, err := v1.ParseIndexManifest(bytes.NewReader(raw))
			if err != nil {
				return nil, provider.Errorf(provider.CodeInvalidArgument, "image index: %w", err)
			}
			child, err := pick(idx, plat)
			if err != nil {
				return nil, err
			}
			if raw, err = fetchManifest(ctx, f, child); err != nil {
				return nil, err
			}
			desc = child
		case mt.IsImage():
			return fromManifest(ctx, f, raw, plat, desc.Digest)
		case mt.IsSchema1():
			return nil, provider.Errorf(provider.CodeUnsupported, "image manifest schema 1 is not supported: push the image again with a current client")
		default:
			return nil, provider.Errorf(provider.CodeUnsupported, "manifest media type %q is not an image or an index", mt)
		}
	}
}

func fetchManifest(ctx context.Context, f fetcher, desc v1.Descriptor) ([]byte, error) {
	if desc.Size > maxManifestBytes {
		return nil, provider.Errorf(provider.CodeInvalidArgument, "manifest %s is %d bytes, more than %d", desc.Digest, desc.Size, maxManifestBytes)
	}
	raw, err := f.manifest(ctx, desc)
	if err != nil {
		return nil, err
	}
	if err := verifyBytes(raw, desc, maxManifestBytes, "manifest"); err != nil {
		return nil, err
	}
	return raw, nil
}

func verifyBytes(b []byte, desc v1.Descriptor, limit int64, what string) error {
	if int64(len(b)) > limit {
		return provider.Errorf(provider.CodeInvalidArgument, "%s %s is more than %d bytes", what, desc.Digest, limit)
	}
	if desc.Digest.Algorithm != "sha256" {
		return provider.Errorf(provider.CodeUnsupported, "%s digest %q: only sha256 is supported", what, desc.Digest)
	}
	sum := sha256.Sum256(b)
	if hex.EncodeToString(sum[:]) != desc.Digest.Hex {
		return provider.Errorf(provider.CodeInvalidArgument, "%s %s does not match its digest", what, desc.Digest)
	}
	return nil
}

// pick chooses plat's manifest in an index; an index with one manifest that names no
// platform (an OCI layout of one image) gives that one.
func pick(idx *v1.IndexManifest, plat v1.Platform) (v1.Descriptor, error) {
	var bare []v1.Descriptor
	var have []string
	for _, m := range idx.Manifests {
		if !m.MediaType.IsImage() && !m.MediaType.IsIndex() {
			continue
		}
		if m.Platform == nil {
			bare = append(bare, m)
			continue
		}
		have = append(have, m.Platform.String())
		if m.Platform.OS == plat.OS && m.Platform.Architecture == plat.Architecture && (plat.Variant == "" || m.Platform.Variant == plat.Variant) {
			return m, nil
		}
	}
	if len(bare) == 1 && len(have) == 0 {
		return bare[0], nil
	}
	if len(bare) > 1 && len(have) == 0 {
		return v1.Descriptor{}, provider.Errorf(provider.CodeInvalidArgument, "the index holds %d images and names no platforms: import one of them", len(bare))
	}
	sort.Strings(have)
	return v1.Descriptor{}, provider.Errorf(provider.CodeNotFound, "no %s image in the index (it has %s)", plat.String(), strings.Join(slices.Compact(have), ", "))
}

// fromManifest reads an image manifest and its configuration.
func fromManifest(ctx context.Context, f fetcher, raw []byte, plat v1.Platform, digest v1.Hash) (*image, error) {
	m, err := v1.ParseManifest(bytes.NewReader(raw))
	if err != nil {
		return nil, provider.Errorf(provider.CodeInvalidArgument, "image manifest: %w", err)
	}
	if m.SchemaVersion != 2 {
		return nil, provider.Errorf(provider.CodeUnsupported, "image manifest schema %d is not supported", m.SchemaVersion)
	}
	if m.Config.Size > maxConfigBytes {
		return nil, provider.Errorf(provider.CodeInvalidArgument, "image configuration is %d bytes, more than %d", m.Config.Size, maxConfigBytes)
	}
	rc, err := f.blob(ctx, m.Config)
	if err != nil {
		return nil, err
	}
	cb, err := io.ReadAll(io.LimitReader(rc, maxConfigBytes+1))
	rc.Close()
	if err != nil {
		return nil, provider.Errorf(provider.CodeUnavailable, "image configuration: %w", err)
	}
	if err := verifyBytes(cb, m.Config, maxConfigBytes, "image configuration"); err != nil {
		return nil, err
	}
	cfg, err := v1.ParseConfigFile(bytes.NewReader(cb))
	if err != nil {
		return nil, provider.Errorf(provider.CodeInvalidArgument, "image configuration: %w", err)
	}
	if err := checkPlatform(cfg, plat); err != nil {
		return nil, err
	}
	if err := tooManyLayers(len(m.Layers)); err != nil {
		return nil, err
	}
	if len(cfg.RootFS.DiffIDs) != len(m.Layers) {
		return nil, provider.Errorf(provider.CodeInvalidArgument, "image has %d layers and %d diff ids", len(m.Layers), len(cfg.RootFS.DiffIDs))
	}
	img := &image{config: configOf(cfg)}
	if digest != (v1.Hash{}) {
		img.digest = digest.String()
	}
	for i, l := range m.Layers {
		if strings.Contains(string(l.MediaType), "encrypted") {
			return nil, provider.Errorf(provider.CodeUnsupported, "layer %s is encrypted (%s)", l.Digest, l.MediaType)
		}
		if l.Digest.Algorithm != "sha256" || l.Size < 0 {
			return nil, provider.Errorf(provider.CodeUnsupported, "layer digest %q: only sha256 is supported", l.Digest)
		}
		img.layers = append(img.layers, layerSource{
			diffID: cfg.RootFS.DiffIDs[i].String(),
			digest: l.Digest.String(),
			size:   l.Size,
			open:   func(ctx context.Context) (io.ReadCloser, error) { return f.blob(ctx, l) },
		})
	}
	return img, nil
}

// checkPlatform refuses an image whose configuration names another platform.
func checkPlatform(cfg *v1.ConfigFile, plat v1.Platform) error {
	if (cfg.OS != "" && cfg.OS != plat.OS) || (cfg.Architecture != "" && cfg.Architecture != plat.Architecture) {
		return provider.Errorf(provider.CodeInvalidArgument, "the image is for %s/%s, not %s", cfg.OS, cfg.Architecture, plat.String())
	}
	return nil
}

// configOf takes a template's defaults from an image's configuration.
func configOf(cfg *v1.ConfigFile) Config {
	c := cfg.Config
	out := Config{Env: c.Env, WorkingDir: c.WorkingDir, User: c.User, Entrypoint: c.Entrypoint, Cmd: c.Cmd, Labels: c.Labels}
	for p := range c.ExposedPorts {
		out.ExposedPorts = append(out.ExposedPorts, p)
	}
	sort.Strings(out.ExposedPorts)
	return out
}

// layoutDir is an OCI image layout on disk.
type layoutDir string

func fromLayout(ctx context.Context, l layoutDir, plat v1.Platform) (*image, error) {
	raw, err := readLimited(filepath.Join(string(l), "index.json"), maxManifestBytes)
	if err != nil {
		return nil, provider.Errorf(provider.CodeInvalidArgument, "OCI layout %s: %w", l, err)
	}
	return resolve(ctx, l, v1.Descriptor{MediaType: types.OCIImageIndex}, raw, plat)
}

func (l layoutDir) path(d v1.Descriptor) string {
	return filepath.Join(string(l), "blobs", d.Digest.Algorithm, d.Digest.Hex)
}

func (l layoutDir) manifest(_ context.Context, d v1.Descriptor) ([]byte, error) {
	b, err := readLimited(l.path(d), maxManifestBytes)
	if err != nil {
		return nil, provider.Errorf(provider.CodeInvalidArgument, "OCI layout %s: manifest %s: %w", l, d.Digest, err)
	}
	return b, nil
}

func (l layoutDir) blob(_ context.Context, d v1.Descriptor) (io.ReadCloser, error) {
	p := l.path(d)
	if fi, err := os.Lstat(p); err != nil || !fi.Mode().IsRegular() {
		return nil, provider.Errorf(provider.CodeInvalidArgument, "OCI layout %s: blob %s is missing or not a regular file", l, d.Digest)
	}
	return os.Open(p)
}

// readLimited reads a regular file of at most limit bytes.
func readLimited(path string, limit int64) ([]byte, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", filepath.Base(path))
	}
	if fi.Size() > limit {
		return nil, fmt.Errorf("%s is %d bytes, more than %d", filepath.Base(path), fi.Size(), limit)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, limit))
}
