// Package syncbuf is a bytes.Buffer that goroutines may write and read at once: a log sink
// of a server under test, or a command's output read while it still runs.
package syncbuf

import (
	"bytes"
	"sync"
)

// Buffer is a bytes.Buffer behind a mutex. The zero value is an empty buffer ready to use.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p to the buffer.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns what was written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
