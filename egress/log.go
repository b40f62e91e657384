package egress

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/netip"
	"os"
	"strings"
	"unicode/utf8"
)

// Limits on what ReadLog returns: a page of at most maxPage bytes of the log, lines of at
// most maxLine bytes (longer ones are skipped), names of at most 253 bytes.
const (
	maxPage   = 256 << 10
	maxLine   = 2 << 10
	maxName   = 253
	maxReason = 200
)

// ReadLog reads the entries of a proxy's log (Config.Log) from byte offset after, up to a
// bounded page, and returns them with the offset of the next unread line and whether more
// lines follow it. A line not yet ended (being written) is left for the next read. Every
// entry is sanitized: the log is the proxy's, but names in it come from the sandbox.
func ReadLog(path string, after int64) (entries []Entry, next int64, more bool, err error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, after, false, nil
	}
	if err != nil {
		return nil, after, false, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, after, false, err
	}
	if after < 0 || after > st.Size() {
		after = st.Size() // a cursor of another file: from its end
	}
	buf := make([]byte, min(st.Size()-after, maxPage))
	n, err := f.ReadAt(buf, after)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, after, false, err
	}
	buf = buf[:n]
	next = after
	for {
		i := bytes.IndexByte(buf, '\n')
		if i < 0 {
			break
		}
		line := buf[:i]
		buf = buf[i+1:]
		next += int64(i + 1)
		if len(line) > maxLine {
			continue
		}
		var e Entry
		if json.Unmarshal(line, &e) != nil {
			continue
		}
		if e = sanitize(e); e.Kind != "" {
			entries = append(entries, e)
		}
	}
	if next == after && len(buf) == maxPage {
		next += int64(len(buf)) // a line longer than a page: skipped
	}
	return entries, next, next < st.Size(), nil
}

// sanitize bounds an entry's fields and keeps in its names only what a host name may hold
// (letters, digits, '-', '_', '.', '*', and ':' of an IPv6 literal), each other byte a '?'; an unknown kind or a
// destination that is no address and port empties the entry.
func sanitize(e Entry) Entry {
	if e.Kind != "dns" && e.Kind != "connect" {
		return Entry{}
	}
	e.Name, e.Via = SanitizeName(e.Name), SanitizeName(e.Via)
	if e.Dest != "" {
		ap, err := netip.ParseAddrPort(e.Dest)
		if err != nil {
			return Entry{}
		}
		e.Dest = ap.String()
	}
	if len(e.Type) > 16 {
		e.Type = e.Type[:16]
	}
	e.Type = SanitizeName(e.Type)
	e.Reason = strings.ToValidUTF8(e.Reason, "?")
	if len(e.Reason) > maxReason {
		e.Reason = e.Reason[:maxReason]
		for !utf8.ValidString(e.Reason) {
			e.Reason = e.Reason[:len(e.Reason)-1]
		}
	}
	e.Reason = strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return ' '
		}
		return r
	}, e.Reason)
	return e
}

// SanitizeName bounds a name from a sandbox (a DNS question, a TLS SNI, an HTTP Host) to
// 253 bytes of host-name characters, each other byte replaced by '?', so it can be shown,
// logged and sent in an event as it is.
func SanitizeName(s string) string {
	if len(s) > maxName {
		s = s[:maxName]
	}
	b := []byte(s)
	for i, c := range b {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '-', c == '_', c == '.', c == '*', c == ':':
		default:
			b[i] = '?'
		}
	}
	return string(b)
}
