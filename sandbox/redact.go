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

// streamRedactor redacts a byte stream whose secrets may be split across writes. It holds
// back the longest suffix that could still become a secret, so output is delayed by at most
// the longest secret's length minus one byte.
type streamRedactor struct {
	values [][]byte
	maxLen int
	held   []byte
}

func (r *redactor) stream() *streamRedactor {
	vals := r.snapshot()
	s := &streamRedactor{}
	for _, v := range vals {
		s.values = append(s.values, []byte(v))
		s.maxLen = max(s.maxLen, len(v))
	}
	return s
}

// write takes p and returns the bytes that are safe to emit now.
func (s *streamRedactor) write(p []byte) []byte {
	if len(s.values) == 0 {
		return p
	}
	buf := append(s.held, p...)
	out := s.replace(buf)
	// Hold back a tail that is a prefix of some secret.
	keep := 0
	for _, v := range s.values {
		for n := min(len(v)-1, len(out)); n > keep; n-- {
			if bytes.HasSuffix(out, v[:n]) {
				keep = n
				break
			}
		}
	}
	s.held = append([]byte(nil), out[len(out)-keep:]...)
	return out[:len(out)-keep]
}

// flush returns what is held back; call it when the stream ends.
func (s *streamRedactor) flush() []byte {
	out := s.held
	s.held = nil
	return out
}

func (s *streamRedactor) replace(b []byte) []byte {
	for _, v := range s.values {
		if bytes.Contains(b, v) {
			b = bytes.ReplaceAll(b, v, []byte(Redacted))
		}
	}
	return b
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
