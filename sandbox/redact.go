package sandbox

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"strings"
	"sync"
)

// Redacted replaces every secret value in output, logs and errors.
const Redacted = "***"

// redactor holds the secret values of one sandbox handle.
type redactor struct {
	mu     sync.RWMutex
	values []string // longest first, so a secret that contains another is replaced whole
}

func newRedactor() *redactor { return &redactor{} }

func (r *redactor) add(secrets map[string]string) {
	vals := make([]string, 0, len(secrets))
	for _, v := range secrets {
		vals = append(vals, v)
	}
	r.addValues(vals...)
}

func (r *redactor) addValues(vals ...string) {
	if len(vals) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, v := range vals {
		if v == "" || slices.Contains(r.values, v) {
			continue
		}
		r.values = append(r.values, v)
	}
	slices.SortFunc(r.values, func(a, b string) int { return len(b) - len(a) })
}

func (r *redactor) snapshot() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return slices.Clone(r.values)
}

// longest is the length of the longest secret.
func (r *redactor) longest() int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if len(r.values) == 0 {
		return 0
	}
	return len(r.values[0])
}

// String redacts s.
func (r *redactor) String(s string) string {
	for _, v := range r.snapshot() {
		s = strings.ReplaceAll(s, v, Redacted)
	}
	return s
}

// Err returns err with secrets removed from its text. It keeps the code.
func (r *redactor) Err(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	clean := r.String(msg)
	if clean == msg {
		return err
	}
	var e *Error
	if errors.As(err, &e) {
		// Drop the cause: its text holds the secret.
		return &Error{Code: e.Code, Op: "", Message: clean}
	}
	return &Error{Code: CodeInternal, Message: clean}
}

// streamRedactor redacts a byte stream whose secrets may be split across writes. It scans
// left to right, replacing the longest secret that starts at each position, and holds back a
// tail that could still grow into a secret, so output is delayed by less than the longest
// secret's length.
type streamRedactor struct {
	values [][]byte // longest first
	first  [256]bool
	held   []byte
}

func (r *redactor) stream() *streamRedactor {
	s := &streamRedactor{}
	for _, v := range r.snapshot() {
		s.values = append(s.values, []byte(v))
		s.first[v[0]] = true
	}
	return s
}

// write takes p and returns the bytes that are safe to emit now.
func (s *streamRedactor) write(p []byte) []byte {
	if len(s.values) == 0 {
		return p
	}
	buf := append(s.held, p...)
	s.held = nil
	return s.scan(buf, false)
}

// flush returns what is held back, redacted; call it when the stream ends.
func (s *streamRedactor) flush() []byte {
	buf := s.held
	s.held = nil
	return s.scan(buf, true)
}

func (s *streamRedactor) scan(buf []byte, final bool) []byte {
	out := make([]byte, 0, len(buf))
	i := 0
	for i < len(buf) {
		if !s.first[buf[i]] {
			out = append(out, buf[i])
			i++
			continue
		}
		rest := buf[i:]
		matched, pending := 0, false
		for _, v := range s.values {
			if bytes.HasPrefix(rest, v) {
				matched = max(matched, len(v))
			} else if !final && len(rest) < len(v) && bytes.HasPrefix(v, rest) {
				pending = true // more input may complete this longer secret
			}
		}
		if pending {
			s.held = append([]byte(nil), rest...)
			return out
		}
		if matched > 0 {
			out = append(out, Redacted...)
			i += matched
			continue
		}
		out = append(out, buf[i])
		i++
	}
	return out
}

// limitedBuffer keeps the first limit bytes written to it and counts the rest.
type limitedBuffer struct {
	buf     bytes.Buffer
	limit   int
	dropped int64
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	room := l.limit - l.buf.Len()
	if room >= len(p) {
		l.buf.Write(p)
		return len(p), nil
	}
	if room > 0 {
		l.buf.Write(p[:room])
	}
	l.dropped += int64(len(p) - max(room, 0))
	return len(p), nil
}

func (l *limitedBuffer) String() string { return l.buf.String() }

// readAllLimit reads r up to limit bytes; more is CodeResourceExhausted.
func readAllLimit(r io.Reader, limit int64) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, errorf(CodeResourceExhausted, "read", "more than %d bytes", limit)
	}
	return data, nil
}
