//go:build linux

package agent

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// File metadata (envd 0.6.2): small key → value pairs a client attaches to a file it writes
// (POST /files with X-Metadata-KEY headers), kept in the file's user.e2b.KEY extended
// attributes and reported in every EntryInfo of the file (stat, list, move, watch entries)
// and in the upload's answer. Writing a file replaces its metadata: an upload without
// headers clears what an earlier one set. Keys are lowercased (HTTP header names carry no
// case); anything in the sandbox that sets user.e2b.* attributes itself (setfattr) is
// reported the same way.
const (
	metadataHeader = "X-Metadata-"
	metadataXattr  = "user.e2b."

	maxMetadataKeys  = 64
	maxMetadataBytes = 4096 // keys and values together: one ext4 block holds them
)

// metadataOf returns the metadata an upload's headers carry; nil when there is none.
func metadataOf(h http.Header) (map[string]string, error) {
	var md map[string]string
	size := 0
	for name, vals := range h {
		key, ok := cutPrefixFold(name, metadataHeader)
		if !ok {
			continue
		}
		key = strings.ToLower(key)
		if key == "" || !isToken(key) {
			return nil, fmt.Errorf("metadata key %q: use letters, digits and !#$%%&'*+-.^_`|~", key)
		}
		if len(vals) != 1 {
			return nil, fmt.Errorf("metadata key %q is given %d times", key, len(vals))
		}
		v := vals[0]
		for i := 0; i < len(v); i++ {
			if v[i] < 0x20 || v[i] > 0x7e {
				return nil, fmt.Errorf("metadata value of %q: printable US-ASCII only", key)
			}
		}
		if md == nil {
			md = map[string]string{}
		}
		md[key] = v
		size += len(key) + len(v)
	}
	if len(md) > maxMetadataKeys {
		return nil, fmt.Errorf("%d metadata keys: at most %d", len(md), maxMetadataKeys)
	}
	if size > maxMetadataBytes {
		return nil, fmt.Errorf("metadata of %d bytes: at most %d", size, maxMetadataBytes)
	}
	return md, nil
}

func cutPrefixFold(s, prefix string) (string, bool) {
	if len(s) < len(prefix) || !strings.EqualFold(s[:len(prefix)], prefix) {
		return "", false
	}
	return s[len(prefix):], true
}

func isToken(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// errNoMetadata is returned when the file system cannot keep metadata.
var errNoMetadata = errors.New("this file system keeps no file metadata (user extended attributes)")

// setMetadata replaces the user.e2b.* attributes of the open file f with md.
func setMetadata(f *os.File, md map[string]string) error {
	fd := int(f.Fd())
	names, err := xattrNames(func(buf []byte) (int, error) { return unix.Flistxattr(fd, buf) })
	if err != nil && !errors.Is(err, unix.ENOTSUP) {
		return fmt.Errorf("list metadata: %v", err)
	}
	for _, n := range names {
		if _, ok := md[strings.TrimPrefix(n, metadataXattr)]; ok {
			continue // set below
		}
		if err := unix.Fremovexattr(fd, n); err != nil && !errors.Is(err, unix.ENODATA) {
			return fmt.Errorf("clear metadata %q: %v", n, err)
		}
	}
	for k, v := range md {
		if err := unix.Fsetxattr(fd, metadataXattr+k, []byte(v), 0); err != nil {
			if errors.Is(err, unix.ENOTSUP) {
				return errNoMetadata
			}
			return fmt.Errorf("set metadata %q: %v", k, err)
		}
	}
	return nil
}

// metadataAt returns the metadata of the file at p (not following a final symlink); nil when
// it has none or the file system keeps none.
func metadataAt(p string) map[string]string {
	names, err := xattrNames(func(buf []byte) (int, error) { return unix.Llistxattr(p, buf) })
	if err != nil || len(names) == 0 {
		return nil
	}
	var md map[string]string
	buf := make([]byte, maxMetadataBytes)
	for _, n := range names {
		sz, err := unix.Lgetxattr(p, n, buf)
		if err != nil || sz > len(buf) {
			continue // vanished, or larger than anything written through the API
		}
		if md == nil {
			md = map[string]string{}
		}
		md[strings.TrimPrefix(n, metadataXattr)] = string(buf[:sz])
		if len(md) == maxMetadataKeys {
			break
		}
	}
	return md
}

// xattrNames returns the user.e2b.* names list reports, growing its buffer as needed (a
// sandbox can set many attributes).
func xattrNames(list func([]byte) (int, error)) ([]string, error) {
	size := 1024
	for {
		buf := make([]byte, size)
		n, err := list(buf)
		if errors.Is(err, unix.ERANGE) && size < 1<<16 {
			size *= 8
			continue
		}
		if err != nil {
			return nil, err
		}
		var out []string
		for name := range strings.SplitSeq(string(buf[:n]), "\x00") {
			if strings.HasPrefix(name, metadataXattr) && len(name) > len(metadataXattr) {
				out = append(out, name)
			}
		}
		return out, nil
	}
}
