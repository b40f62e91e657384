package sandboxtest

import (
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/sandbox"
)

func terminalCases() []testCase {
	return []testCase{
		{"Echo", termEcho},
		{"IsTTY", termIsTTY},
		{"Resize", termResize},
		{"ExitCode", termExitCode},
		{"CloseKills", termCloseKills},
		{"InvalidSize", termInvalidSize},
		{"RedactsSecrets", termRedactsSecrets},
		{"Unsupported", termUnsupported},
	}
}

// termOut collects a terminal's output in the background, so a case can wait for text
// without a Read blocking past its deadline.
type termOut struct {
	mu      sync.Mutex
	buf     strings.Builder
	err     error // the error that ended reading; io.EOF at the process's end
	changed chan struct{}
}

// openTerm opens a cols × rows terminal on b, reads it in the background and closes it when
// the case ends.
func openTerm(c *C, b *sandbox.Sandbox, cols, rows int) (provider.Terminal, *termOut) {
	c.Helper()
	t, err := b.Terminal(c.Ctx, cols, rows)
	c.NoErr(fmt.Sprintf("Terminal(%d, %d)", cols, rows), err)
	if t == nil {
		c.Fatalf("Terminal: nil terminal and nil error")
	}
	c.Cleanup(func() { _ = t.Close() })
	o := &termOut{changed: make(chan struct{}, 1)}
	go func() {
		p := make([]byte, 4096)
		for {
			n, err := t.Read(p)
			o.mu.Lock()
			o.buf.Write(p[:n])
			if err != nil {
				o.err = err
			}
			o.mu.Unlock()
			select {
			case o.changed <- struct{}{}:
			default:
			}
			if err != nil {
				return
			}
		}
	}()
	return t, o
}

// wait waits until cond holds for the output so far and the read error, failing the case at
// its deadline.
func (o *termOut) wait(c *C, what string, cond func(out string, err error) bool) string {
	c.Helper()
	for {
		o.mu.Lock()
		out, err := o.buf.String(), o.err
		o.mu.Unlock()
		if cond(out, err) {
			return out
		}
		if err != nil {
			c.Fatalf("%s: terminal read ended with %v; output so far:\n%q", what, err, out)
		}
		select {
		case <-o.changed:
		case <-c.Ctx.Done():
			c.Fatalf("%s: not seen before the deadline; output so far:\n%q", what, out)
		}
	}
}

// until waits for re to match the output after the first `from` bytes and returns the match.
func (o *termOut) until(c *C, from int, re *regexp.Regexp) []string {
	c.Helper()
	var m []string
	o.wait(c, fmt.Sprintf("waiting for %q", re), func(out string, _ error) bool {
		if from <= len(out) {
			m = re.FindStringSubmatch(out[from:])
		}
		return m != nil
	})
	return m
}

func (o *termOut) len() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.Len()
}

func typeIn(c *C, t provider.Terminal, s string) {
	c.Helper()
	n, err := t.Write([]byte(s))
	c.NoErr(fmt.Sprintf("Write(%q)", s), err)
	Eq(c, "Write count", n, len(s))
}

func termEcho(c *C) {
	c.Need(provider.CapTerminal)
	t, out := openTerm(c, c.Box(), 80, 24)
	// The terminal echoes the input as typed; only the shell's expansion prints hi-2.
	typeIn(c, t, "echo hi-$((1+1))\n")
	out.until(c, 0, regexp.MustCompile(`hi-2`))
}

func termIsTTY(c *C) {
	c.Need(provider.CapTerminal)
	t, out := openTerm(c, c.Box(), 80, 24)
	typeIn(c, t, "tty; test -t 0 && test -t 1 && echo both-$((6*7))\n")
	out.until(c, 0, regexp.MustCompile(`/dev/pts/[0-9]+`))
	out.until(c, 0, regexp.MustCompile(`both-42`))
}

func termResize(c *C) {
	c.Need(provider.CapTerminal)
	t, out := openTerm(c, c.Box(), 80, 24)
	typeIn(c, t, "stty size; echo s1-$((0+1))\n")
	m := out.until(c, 0, regexp.MustCompile(`([0-9]+) ([0-9]+)\s+s1-1`))
	Eq(c, "initial stty size", m[1]+" "+m[2], "24 80")

	mark := out.len()
	c.NoErr("Resize(91, 37)", t.Resize(c.Ctx, 91, 37))
	typeIn(c, t, "stty size; echo s2-$((1+1))\n")
	m = out.until(c, mark, regexp.MustCompile(`([0-9]+) ([0-9]+)\s+s2-2`))
	Eq(c, "stty size after Resize", m[1]+" "+m[2], "37 91")
}

func termExitCode(c *C) {
	c.Need(provider.CapTerminal)
	t, out := openTerm(c, c.Box(), 80, 24)
	typeIn(c, t, "exit 3\n")
	out.wait(c, "read to the end after exit", func(_ string, err error) bool { return err != nil })
	out.mu.Lock()
	err := out.err
	out.mu.Unlock()
	if err != io.EOF {
		c.Errorf("Read after exit: got %v, want io.EOF", err)
	}
	res, err := sandbox.WaitTerminal(c.Ctx, t)
	if errors.Is(err, sandbox.CodeUnsupported) {
		c.Logf("terminal %T has no Wait; only the end of output was checked", t)
		return
	}
	c.NoErr("Wait", err)
	Eq(c, "exit code", res.ExitCode, 3)
	Eq(c, "signal", res.Signal, "")
}

var pidRe = regexp.MustCompile(`pid=([0-9]+)\.`)

func termCloseKills(c *C) {
	c.Need(provider.CapTerminal)
	b := c.Box()
	t, out := openTerm(c, b, 80, 24)
	typeIn(c, t, "echo pid=$$.\n")
	pid, err := strconv.Atoi(out.until(c, 0, pidRe)[1])
	c.NoErr("parse pid", err)
	if res := c.Run(b, fmt.Sprintf("kill -0 %d", pid), sandbox.RunOptions{}); !res.OK {
		c.Fatalf("the terminal's shell (pid %d) is not running before Close: %+v", pid, res)
	}
	start := time.Now()
	c.NoErr("Close", t.Close())
	c.NoErr("second Close", t.Close())
	if d := time.Since(start); d > 10*time.Second {
		c.Errorf("Close took %v", d)
	}
	gone := c.waitFor(10*time.Second, func() bool {
		return !c.Run(b, fmt.Sprintf("kill -0 %d 2>/dev/null", pid), sandbox.RunOptions{}).OK
	})
	if !gone {
		c.Errorf("the terminal's shell (pid %d) still runs 10 s after Close", pid)
	}
	if _, err := t.Write([]byte("true\n")); err == nil {
		c.Errorf("Write after Close: no error")
	}
	out.wait(c, "Read after Close", func(_ string, err error) bool { return err != nil })
	if res, err := sandbox.WaitTerminal(c.Ctx, t); !errors.Is(err, sandbox.CodeUnsupported) {
		if err == nil && res.ExitCode == 0 {
			c.Errorf("Wait after Close: exit 0, want the kill to show")
		} else if err != nil && !errors.Is(err, io.EOF) {
			c.Logf("Wait after Close: %v", err)
		}
	}
}

func termInvalidSize(c *C) {
	c.Need(provider.CapTerminal)
	b := c.Box()
	for _, sz := range [][2]int{{0, 24}, {80, 0}, {-1, 24}, {80, -5}, {100000, 24}, {80, 100000}} {
		t, err := b.Terminal(c.Ctx, sz[0], sz[1])
		if c.WantCode(fmt.Sprintf("Terminal(%d, %d)", sz[0], sz[1]), err, sandbox.CodeInvalidArgument) && t != nil {
			c.Errorf("Terminal(%d, %d): a terminal with the error", sz[0], sz[1])
		}
		if t != nil {
			_ = t.Close()
		}
	}
	t, _ := openTerm(c, b, 80, 24)
	for _, sz := range [][2]int{{0, 24}, {80, 0}, {-3, -3}, {100000, 24}} {
		c.WantCode(fmt.Sprintf("Resize(%d, %d)", sz[0], sz[1]), t.Resize(c.Ctx, sz[0], sz[1]), sandbox.CodeInvalidArgument)
	}
	// The terminal still works after the refused resizes.
	c.NoErr("Resize(100, 30)", t.Resize(c.Ctx, 100, 30))
}

func termUnsupported(c *C) {
	c.NeedNot(provider.CapTerminal, "Terminal/Echo")
	t, err := c.Box().Terminal(c.Ctx, 80, 24)
	c.WantCode("Terminal without the terminal capability", err, sandbox.CodeUnsupported)
	if t != nil {
		c.Errorf("Terminal: a terminal with the unsupported error")
		_ = t.Close()
	}
}

// termRedactsSecrets: a secret the shell prints (also one split by the terminal across
// reads) comes out redacted, as from Run.
func termRedactsSecrets(c *C) {
	c.Need(provider.CapTerminal)
	sec := newSecret()
	b := c.Create(sandbox.CreateOptions{Secrets: map[string]string{"API_TOKEN": sec}})
	t, out := openTerm(c, b, 80, 24)
	// Printed in two pieces with a pause between, so the value spans two reads.
	typeIn(c, t, "printf '%s' \"${API_TOKEN%????}\"; sleep 0.3; printf '%s-done-%s\\n' \"${API_TOKEN#${API_TOKEN%????}}\" $((2+3))\n")
	got := out.until(c, 0, regexp.MustCompile(`(\S*)-done-5`))
	if strings.Contains(out.all(), sec) {
		c.Errorf("the secret came out of the terminal unredacted: %q", out.all())
	}
	if !strings.Contains(got[1], sandbox.Redacted) {
		c.Errorf("printed %q, want the redaction marker %q", got[1], sandbox.Redacted)
	}
}

func (o *termOut) all() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}
