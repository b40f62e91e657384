package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"golang.org/x/term"
)

// progress shows a one-line progress bar on stderr for a long transfer, only when stderr is a
// terminal (scripts and pipes get nothing).
type progress struct {
	w     io.Writer
	name  string
	total int64

	mu    sync.Mutex
	done  int64
	start time.Time
	last  time.Time
	shown bool
}

// newProgress returns nil (no bar) unless stderr is a terminal.
func newProgress(name string, total int64) *progress {
	if !term.IsTerminal(int(os.Stderr.Fd())) {
		return nil
	}
	return &progress{w: os.Stderr, name: name, total: total, start: time.Now()}
}

// reader counts what passes through r.
func (p *progress) reader(r io.Reader) io.Reader {
	if p == nil {
		return r
	}
	return readerFunc(func(b []byte) (int, error) {
		n, err := r.Read(b)
		p.add(int64(n))
		return n, err
	})
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(b []byte) (int, error) { return f(b) }

func (p *progress) add(n int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done += n
	if now := time.Now(); now.Sub(p.last) >= 200*time.Millisecond && now.Sub(p.start) >= 500*time.Millisecond {
		p.last = now
		p.draw()
	}
}

func (p *progress) draw() {
	const width = 30
	pct := 0.0
	if p.total > 0 {
		pct = min(float64(p.done)/float64(p.total), 1)
	}
	bar := make([]byte, width)
	for i := range bar {
		bar[i] = ' '
		if float64(i) < pct*width {
			bar[i] = '='
		}
	}
	rate := float64(p.done) / max(time.Since(p.start).Seconds(), 0.001)
	fmt.Fprintf(p.w, "\r%s [%s] %s / %s  %s/s ", p.name, bar, bytesHuman(p.done), bytesHuman(p.total), bytesHuman(int64(rate)))
	p.shown = true
}

// finish ends the line if a bar was drawn.
func (p *progress) finish() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.shown {
		p.draw()
		fmt.Fprintln(p.w)
	}
}

func bytesHuman(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
