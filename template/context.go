package template

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/tupper-dev/tupper/provider"
)

// UnpackContext unpacks a build context sent as a tar (plain, gzip, zstd or bzip2) into
// dir, an existing empty directory: with the refusals of a layer's unpacking (absolute
// paths, "..", a path through a symbolic link, a hard link out of dir, whiteouts) and
// within limits on bytes unpacked (a decompression bomb stops at MaxBytes) and files. A
// refusal is CodeInvalidArgument, a limit CodeResourceExhausted; what was unpacked stays
// in dir for the caller to remove.
func UnpackContext(ctx context.Context, dir string, r io.Reader, limits Limits) error {
	zr, err := decompress(r)
	if err != nil {
		return contextErr(err)
	}
	defer zr.Close()
	if err := UnpackInto(ctx, dir, zr, 0, limits); err != nil {
		return contextErr(err)
	}
	return nil
}

// contextErr speaks of the build context where the unpacker speaks of layers and images.
func contextErr(err error) error {
	c := provider.CodeOf(err)
	if c == provider.CodeInternal {
		return fmt.Errorf("build context: %w", err)
	}
	msg := err.Error()
	var pe *provider.Error
	if errors.As(err, &pe) && pe.Message != "" {
		msg = pe.Message
	}
	msg = strings.NewReplacer("layer entry", "entry", "malformed layer tar", "not a tar archive",
		"image is larger than the import limit", "larger than the limit",
		"image has more than the import limit", "more than the limit").Replace(msg)
	return provider.Errorf(c, "build context: %s", msg)
}

// PullBase is how a build gets a FROM that is neither a template of the store nor a built-in
// one (Ensure resolved it first): the image is imported from its registry as the template
// ImportName(ref), tagged ref, so the next build finds it. out receives a line saying so
// (nil: none).
func (s *Store) PullBase(ctx context.Context, ref string, out io.Writer) (*Template, error) {
	if out == nil {
		out = io.Discard
	}
	name := ImportName(ref)
	fmt.Fprintf(out, "importing %s as template %s\n", ref, name)
	return s.Import(ctx, name, Source{Ref: ref}, ImportOptions{Tags: []string{ref}})
}

// ImportName is the template name an image reference is imported under: its repository's
// last path element and its tag ("python:3.12-slim" → "python-3.12-slim").
func ImportName(ref string) string {
	r := ref
	if i := strings.LastIndex(r, "/"); i >= 0 {
		r = r[i+1:]
	}
	r, _, _ = strings.Cut(r, "@")
	r = strings.NewReplacer(":", "-").Replace(strings.ToLower(r))
	if ValidName(r) != nil {
		r = "image"
	}
	if _, ok := BuiltinNamed(r); ok {
		r += "-image" // an image called debian (docker.io/library/debian) is not the built-in one
	}
	return r
}
