package sandbox

import (
	"context"
	"io"
	"strings"
	"testing"
)

// chunkTerm is a Terminal whose Reads return the given chunks, then io.EOF.
type chunkTerm struct{ chunks []string }

func (c *chunkTerm) Read(p []byte) (int, error) {
	if len(c.chunks) == 0 {
		return 0, io.EOF
	}
	n := copy(p, c.chunks[0])
	c.chunks[0] = c.chunks[0][n:]
	if c.chunks[0] == "" {
		c.chunks = c.chunks[1:]
	}
	return n, nil
}
func (c *chunkTerm) Write(p []byte) (int, error)                      { return len(p), nil }
func (c *chunkTerm) Resize(ctx context.Context, cols, rows int) error { return nil }
func (c *chunkTerm) Close() error                                     { return nil }

// Terminal output is redacted whatever the read boundaries, and nothing is lost around it.
func TestRedactedTerminalAtEveryCut(t *testing.T) {
	const secret = "tok-7f3a9c"
	text := "before " + secret + " middle " + secret + "after\n"
	want := strings.ReplaceAll(text, secret, Redacted)
	red := newRedactor()
	red.add(map[string]string{"T": secret})
	for cut := 0; cut <= len(text); cut++ {
		term := &redactedTerminal{Terminal: &chunkTerm{chunks: []string{text[:cut], text[cut:]}}, sr: red.stream()}
		got, err := io.ReadAll(term)
		if err != nil || string(got) != want {
			t.Fatalf("cut %d: got %q, %v; want %q", cut, got, err, want)
		}
	}
}
