package sandboxtest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/sandbox"
)

func runCases() []testCase {
	return []testCase{
		{"Stdout", runStdout},
		{"Stderr", runStderr},
		{"OutputInterleaving", runInterleaving},
		{"ExitCode", runExitCode},
		{"OK", runOK},
		{"CwdDefault", runCwdDefault},
		{"CwdRelative", runCwdRelative},
		{"CwdAbsolute", runCwdAbsolute},
		{"Env", runEnv},
		{"EnvOverridesCreateEnv", runEnvOverride},
		{"StdinGiven", runStdinGiven},
		{"StdinReader", runStdinReader},
		{"StdinClosed", runStdinClosed},
		{"FreshShell", runFreshShell},
		{"Timeout", runTimeout},
		{"TimeoutKillsProcessGroup", runTimeoutKillsGroup},
		{"CancelledContext", runAborted},
		{"CancelledBeforeStart", runAbortedBefore},
		{"OutputCap", runOutputCap},
		{"LargeOutput", runLargeOutput},
		{"Duration", runDuration},
		{"CommandField", runCommandField},
		{"NonInteractiveEnv", runNonInteractive},
		{"InvalidOptions", runInvalid},
		{"Concurrent", runConcurrent},
		{"DestroyedSandbox", runDestroyed},
	}
}

func runStdout(c *C) {
	b := c.Box()
	res := c.MustRun(b, "echo hello; printf 'no newline'")
	Eq(c, "Stdout", res.Stdout, "hello\nno newline")
	Eq(c, "Stderr", res.Stderr, "")
	Eq(c, "Output", res.Output, "hello\nno newline")
}

func runStderr(c *C) {
	b := c.Box()
	res := c.MustRun(b, "echo oops >&2")
	Eq(c, "Stdout", res.Stdout, "")
	Eq(c, "Stderr", res.Stderr, "oops\n")
	Eq(c, "Output", res.Output, "oops\n")
}

func runInterleaving(c *C) {
	b := c.Box()
	res := c.MustRun(b, "echo a; sleep 0.1; echo b >&2; sleep 0.1; echo c; sleep 0.1; echo d >&2")
	Eq(c, "Stdout", res.Stdout, "a\nc\n")
	Eq(c, "Stderr", res.Stderr, "b\nd\n")
	Eq(c, "Output", res.Output, "a\nb\nc\nd\n")
}

func runExitCode(c *C) {
	b := c.Box()
	for _, code := range []int{1, 2, 3, 42, 127, 255} {
		res, err := b.Run(c.Ctx, fmt.Sprintf("echo before; exit %d", code), sandbox.RunOptions{})
		if err != nil {
			c.Errorf("exit %d: err %v; a non-zero exit is a result, not an error", code, err)
			continue
		}
		Eq(c, fmt.Sprintf("exit %d: ExitCode", code), res.ExitCode, code)
		Eq(c, fmt.Sprintf("exit %d: OK", code), res.OK, false)
		Eq(c, fmt.Sprintf("exit %d: Stdout", code), res.Stdout, "before\n")
		Eq(c, fmt.Sprintf("exit %d: TimedOut", code), res.TimedOut, false)
	}
	res := c.Run(b, "no-such-command-sbt", sandbox.RunOptions{})
	Eq(c, "unknown command: ExitCode", res.ExitCode, 127)
}

func runOK(c *C) {
	b := c.Box()
	res := c.Run(b, "true", sandbox.RunOptions{})
	Eq(c, "true: OK", res.OK, true)
	Eq(c, "true: ExitCode", res.ExitCode, 0)
	res = c.Run(b, "false", sandbox.RunOptions{})
	Eq(c, "false: OK", res.OK, false)
	Eq(c, "false: ExitCode", res.ExitCode, 1)
	Eq(c, "false: TimedOut", res.TimedOut, false)
	Eq(c, "false: Aborted", res.Aborted, false)
}

func runCwdDefault(c *C) {
	b := c.Box()
	res := c.MustRun(b, "pwd")
	Eq(c, "pwd", res.Stdout, "/workspace\n")
	Eq(c, "Cwd", res.Cwd, "/workspace")
}

func runCwdRelative(c *C) {
	b := c.Box()
	c.MustRun(b, "mkdir -p sub/dir")
	res := c.Run(b, "pwd", sandbox.RunOptions{Cwd: "sub/dir"})
	Eq(c, "pwd", res.Stdout, "/workspace/sub/dir\n")
	Eq(c, "Cwd", res.Cwd, "/workspace/sub/dir")
	res = c.Run(b, "pwd", sandbox.RunOptions{Cwd: "sub/dir/../dir/."})
	Eq(c, "Cwd cleaned", res.Cwd, "/workspace/sub/dir")
}

func runCwdAbsolute(c *C) {
	b := c.Box()
	res := c.Run(b, "pwd", sandbox.RunOptions{Cwd: "/tmp"})
	Eq(c, "pwd", res.Stdout, "/tmp\n")
	Eq(c, "Cwd", res.Cwd, "/tmp")
	res, err := b.Run(c.Ctx, "pwd", sandbox.RunOptions{Cwd: "/no/such/dir"})
	if err == nil && res.OK {
		c.Errorf("Run in a missing cwd succeeded with %q", res.Stdout)
	}
	c.CheckErr("Run in a missing cwd", err)
}

func runEnv(c *C) {
	b := c.Box()
	res := c.Run(b, `printf '%s|%s' "$FOO" "$BAR"`, sandbox.RunOptions{Env: map[string]string{"FOO": "a b $c 'd'", "BAR": ""}})
	Eq(c, "env", res.Stdout, "a b $c 'd'|")
}

func runEnvOverride(c *C) {
	b := c.Create(sandbox.CreateOptions{Env: map[string]string{"A": "create", "B": "create"}})
	res := c.Run(b, `printf '%s %s' "$A" "$B"`, sandbox.RunOptions{Env: map[string]string{"A": "run"}})
	Eq(c, "env", res.Stdout, "run create")
}

func runStdinGiven(c *C) {
	b := c.Box()
	res := c.Run(b, "cat", sandbox.RunOptions{Stdin: []byte("hello\nworld\n")})
	Eq(c, "cat", res.Stdout, "hello\nworld\n")
	res = c.Run(b, "wc -l", sandbox.RunOptions{Stdin: []byte("1\n2\n3\n")})
	Eq(c, "wc -l", strings.TrimSpace(res.Stdout), "3")
	res = c.Run(b, "cat", sandbox.RunOptions{Stdin: []byte{}})
	Eq(c, "empty stdin", res.Stdout, "")
}

func runStdinReader(c *C) {
	b := c.Box()
	res := c.Run(b, "cat", sandbox.RunOptions{StdinReader: strings.NewReader("streamed\n")})
	Eq(c, "cat", res.Stdout, "streamed\n")
}

func runStdinClosed(c *C) {
	b := c.Box()
	start := time.Now()
	res := c.Run(b, "cat; echo rc=$?", sandbox.RunOptions{Timeout: 20 * time.Second})
	if res.TimedOut || time.Since(start) > 10*time.Second {
		c.Errorf("cat without stdin did not return at once (timed out %v, %v); stdin must be closed", res.TimedOut, time.Since(start))
	}
	Eq(c, "cat without stdin", res.Stdout, "rc=0\n")
	res = c.Run(b, `read x; echo "read=$?"`, sandbox.RunOptions{Timeout: 20 * time.Second})
	Eq(c, "read without stdin", res.Stdout, "read=1\n")
}

func runFreshShell(c *C) {
	b := c.Box()
	c.MustRun(b, "cd /tmp; export LEAK=yes; LEAK2=yes")
	res := c.MustRun(b, `pwd; echo "${LEAK-unset} ${LEAK2-unset}"`)
	Eq(c, "second command", res.Stdout, "/workspace\nunset unset\n")
}

func runTimeout(c *C) {
	b := c.Box()
	start := time.Now()
	// The timeout counts from the request, so it must leave the shell time to start and echo
	// even on a loaded machine: 2 s (a 500 ms one lost "started" at a load average of 50).
	res, err := b.Run(c.Ctx, "echo started; sleep 30; echo never", sandbox.RunOptions{Timeout: 2 * time.Second})
	if err != nil {
		c.Fatalf("a timeout must be a result, not an error: %v", err)
	}
	Eq(c, "TimedOut", res.TimedOut, true)
	Eq(c, "OK", res.OK, false)
	Eq(c, "Aborted", res.Aborted, false)
	Eq(c, "ExitCode", res.ExitCode, -1)
	Eq(c, "Stdout", res.Stdout, "started\n")
	if d := time.Since(start); d > 12*time.Second {
		c.Errorf("a 2 s timeout took %v", d)
	}
	if res.Duration < 1900*time.Millisecond {
		c.Errorf("Duration %v is shorter than the timeout", res.Duration)
	}
	// The sandbox still works.
	c.MustRun(b, "true")
}

func runTimeoutKillsGroup(c *C) {
	c.Need(provider.CapShell)
	b := c.Box()
	// The timeout leaves the shell time to start its child and say so, even on a loaded
	// machine (500 ms did not, once, through the E2B provider under a load of 40).
	res := c.Run(b, "sleep 300 & echo $! > /tmp/child; sleep 300", sandbox.RunOptions{Timeout: 2 * time.Second})
	Eq(c, "TimedOut", res.TimedOut, true)
	pid := strings.TrimSpace(c.Read(b, "/tmp/child"))
	ok := c.waitFor(5*time.Second, func() bool {
		r := c.Run(b, "kill -0 "+pid+" 2>/dev/null", sandbox.RunOptions{})
		return r.ExitCode != 0
	})
	if !ok {
		c.Errorf("a background child (pid %s) of a timed-out command still runs; the process group must be killed", pid)
	}
}

func runAborted(c *C) {
	b := c.Box()
	ctx, cancel := context.WithCancel(c.Ctx)
	h := b.Stream(ctx, "echo started; sleep 30", sandbox.RunOptions{})
	for ch := range h.Chunks() {
		if strings.Contains(ch.Text, "started") {
			break
		}
	}
	cancel()
	start := time.Now()
	res, err := h.Wait()
	if err != nil {
		c.Fatalf("a cancelled ctx must give a result, not an error: %v", err)
	}
	Eq(c, "Aborted", res.Aborted, true)
	Eq(c, "TimedOut", res.TimedOut, false)
	Eq(c, "OK", res.OK, false)
	Eq(c, "ExitCode", res.ExitCode, -1)
	Eq(c, "Stdout", res.Stdout, "started\n")
	if d := time.Since(start); d > 10*time.Second {
		c.Errorf("the command took %v to end after the cancel", d)
	}
	c.MustRun(b, "true")
}

func runAbortedBefore(c *C) {
	b := c.Box()
	ctx, cancel := context.WithCancel(c.Ctx)
	cancel()
	res, err := b.Run(ctx, "echo should-not-run > /tmp/ran", sandbox.RunOptions{})
	if err != nil {
		c.Fatalf("a cancelled ctx must give a result, not an error: %v", err)
	}
	Eq(c, "Aborted", res.Aborted, true)
	Eq(c, "OK", res.OK, false)
}

func runOutputCap(c *C) {
	b := c.Box()
	res := c.Run(b, "seq 1 20000; seq 1 20000 >&2", sandbox.RunOptions{MaxOutputBytes: 1000})
	Eq(c, "len(Stdout)", len(res.Stdout), 1000)
	Eq(c, "len(Stderr)", len(res.Stderr), 1000)
	Eq(c, "Truncated", res.Truncated, true)
	Eq(c, "OK", res.OK, true)
	if len(res.Output) > 2000 {
		c.Errorf("len(Output) = %d; want at most 2000", len(res.Output))
	}
	want := seqText(20000)[:1000]
	Eq(c, "Stdout is the first 1000 bytes", res.Stdout, want)
	Eq(c, "Stderr is the first 1000 bytes", res.Stderr, want)
	res = c.Run(b, "seq 1 10", sandbox.RunOptions{MaxOutputBytes: 1000})
	Eq(c, "small output Truncated", res.Truncated, false)
	res = c.Run(b, "printf 1234567890", sandbox.RunOptions{MaxOutputBytes: 10})
	Eq(c, "output of exactly the cap: Truncated", res.Truncated, false)
	Eq(c, "output of exactly the cap", res.Stdout, "1234567890")
}

func seqText(n int) string {
	var s strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&s, "%d\n", i)
	}
	return s.String()
}

func runLargeOutput(c *C) {
	b := c.Box()
	res := c.MustRun(b, "seq 1 100000")
	want := seqText(100000)
	Eq(c, "len(Stdout)", len(res.Stdout), len(want))
	if res.Stdout != want {
		c.Errorf("588 KB of output came back altered")
	}
	Eq(c, "Truncated", res.Truncated, false)
}

func runDuration(c *C) {
	b := c.Box()
	start := time.Now()
	res := c.MustRun(b, "sleep 0.3")
	wall := time.Since(start)
	if res.Duration < 300*time.Millisecond || res.Duration > wall+50*time.Millisecond {
		c.Errorf("Duration = %v; want between 300ms and the wall time %v", res.Duration, wall)
	}
}

func runCommandField(c *C) {
	b := c.Box()
	cmd := "echo 'a  b' | tr -s ' '"
	res := c.MustRun(b, cmd)
	Eq(c, "Command", res.Command, cmd)
	Eq(c, "Stdout", res.Stdout, "a b\n")
}

func runNonInteractive(c *C) {
	b := c.Box()
	for k, v := range map[string]string{
		"GIT_TERMINAL_PROMPT": "0",
		"DEBIAN_FRONTEND":     "noninteractive",
		"PAGER":               "cat",
		"GIT_PAGER":           "cat",
		"SANDBOX_SDK_RUN":     "1",
	} {
		Eq(c, "printenv "+k, c.Out(b, "printenv "+k), v+"\n")
	}
	// A caller may override them.
	res := c.Run(b, "printenv PAGER", sandbox.RunOptions{Env: map[string]string{"PAGER": "less"}})
	Eq(c, "overridden PAGER", res.Stdout, "less\n")
}

func runInvalid(c *C) {
	b := c.Box()
	cases := map[string]struct {
		cmd  string
		opts sandbox.RunOptions
	}{
		"negative timeout":       {"true", sandbox.RunOptions{Timeout: -time.Second}},
		"negative output cap":    {"true", sandbox.RunOptions{MaxOutputBytes: -1}},
		"stdin and stdin reader": {"true", sandbox.RunOptions{Stdin: []byte("x"), StdinReader: strings.NewReader("y")}},
		"bad env name":           {"true", sandbox.RunOptions{Env: map[string]string{"A-B": "x"}}},
		"NUL in env value":       {"true", sandbox.RunOptions{Env: map[string]string{"A": "x\x00"}}},
		"NUL in cwd":             {"true", sandbox.RunOptions{Cwd: "a\x00b"}},
		"NUL in command":         {"echo a\x00b", sandbox.RunOptions{}},
	}
	for what, tc := range cases {
		res, err := b.Run(c.Ctx, tc.cmd, tc.opts)
		if c.WantCode(what, err, sandbox.CodeInvalidArgument) && res != nil {
			c.Errorf("%s: got a result with the error", what)
		}
		h := b.Stream(c.Ctx, tc.cmd, tc.opts)
		n := 0
		for range h.Chunks() {
			n++
		}
		_, err = h.Wait()
		c.WantCode(what+" (Stream)", err, sandbox.CodeInvalidArgument)
		Eq(c, what+": chunks", n, 0)
	}
}

func runConcurrent(c *C) {
	b := c.Box()
	const n = 8
	var wg sync.WaitGroup
	outs := make([]string, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := b.Run(c.Ctx, fmt.Sprintf("sleep 0.1; echo %d; echo e%d >&2", i, i), sandbox.RunOptions{})
			errs[i] = err
			if err == nil {
				outs[i] = res.Stdout + res.Stderr
			}
		}()
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			c.Errorf("run %d: %v", i, errs[i])
			continue
		}
		Eq(c, fmt.Sprintf("run %d output", i), outs[i], fmt.Sprintf("%d\ne%d\n", i, i))
	}
}

func runDestroyed(c *C) {
	b := c.Box()
	c.NoErr("Destroy", b.Destroy(c.Ctx))
	res, err := b.Run(c.Ctx, "true", sandbox.RunOptions{})
	if err == nil {
		c.Errorf("Run on a destroyed sandbox gave a result (%+v), want a not_found error", res)
		return
	}
	c.WantCode("Run on a destroyed sandbox", err, sandbox.CodeNotFound)
	_, err = b.Files.Read(c.Ctx, "/etc/hostname")
	c.WantCode("Files.Read on a destroyed sandbox", err, sandbox.CodeNotFound)
}

func streamCases() []testCase {
	return []testCase{
		{"ChunksInOrder", streamInOrder},
		{"ChunkStreams", streamStreams},
		{"Incremental", streamIncremental},
		{"ChunksReplay", streamReplay},
		{"WaitWithoutChunks", streamWaitOnly},
		{"EarlyBreak", streamEarlyBreak},
	}
}

func collect(h *sandbox.RunHandle) (out, errs, all string, chunks []sandbox.Chunk) {
	var o, e, a strings.Builder
	for ch := range h.Chunks() {
		chunks = append(chunks, ch)
		a.WriteString(ch.Text)
		if ch.Stream == sandbox.Stderr {
			e.WriteString(ch.Text)
		} else {
			o.WriteString(ch.Text)
		}
	}
	return o.String(), e.String(), a.String(), chunks
}

func streamInOrder(c *C) {
	b := c.Box()
	h := b.Stream(c.Ctx, "for i in $(seq 1 20); do echo line$i; sleep 0.01; done", sandbox.RunOptions{})
	out, _, all, _ := collect(h)
	res, err := h.Wait()
	c.NoErr("Wait", err)
	var want strings.Builder
	for i := 1; i <= 20; i++ {
		fmt.Fprintf(&want, "line%d\n", i)
	}
	Eq(c, "joined chunks", out, want.String())
	Eq(c, "Stdout equals the chunks", res.Stdout, out)
	Eq(c, "Output equals the chunks", res.Output, all)
}

func streamStreams(c *C) {
	b := c.Box()
	h := b.Stream(c.Ctx, "echo out1; sleep 0.05; echo err1 >&2; sleep 0.05; echo out2", sandbox.RunOptions{})
	out, errs, all, chunks := collect(h)
	res, err := h.Wait()
	c.NoErr("Wait", err)
	Eq(c, "stdout chunks", out, "out1\nout2\n")
	Eq(c, "stderr chunks", errs, "err1\n")
	Eq(c, "all chunks in order", all, "out1\nerr1\nout2\n")
	Eq(c, "Stdout", res.Stdout, out)
	Eq(c, "Stderr", res.Stderr, errs)
	Eq(c, "Output", res.Output, all)
	for _, ch := range chunks {
		if ch.Stream != sandbox.Stdout && ch.Stream != sandbox.Stderr {
			c.Errorf("chunk stream %q is neither stdout nor stderr", ch.Stream)
		}
		if ch.Text == "" {
			c.Errorf("empty chunk")
		}
	}
}

func streamIncremental(c *C) {
	b := c.Box()
	start := time.Now()
	h := b.Stream(c.Ctx, "echo first; sleep 2; echo second", sandbox.RunOptions{})
	var first time.Duration
	for ch := range h.Chunks() {
		if strings.Contains(ch.Text, "first") && first == 0 {
			first = time.Since(start)
		}
	}
	total := time.Since(start)
	if first == 0 {
		c.Fatalf("no chunk with the first line")
	}
	if total-first < time.Second {
		c.Errorf("the first line arrived %v after start and the command ended at %v: output is not streamed", first, total)
	}
	_, err := h.Wait()
	c.NoErr("Wait", err)
}

func streamReplay(c *C) {
	b := c.Box()
	h := b.Stream(c.Ctx, "echo a; sleep 0.05; echo b >&2", sandbox.RunOptions{})
	_, err := h.Wait()
	c.NoErr("Wait", err)
	_, _, all1, ch1 := collect(h)
	_, _, all2, ch2 := collect(h)
	Eq(c, "second Chunks", all2, all1)
	Eq(c, "chunk counts", len(ch2), len(ch1))
	Eq(c, "replayed output", all1, "a\nb\n")
}

func streamWaitOnly(c *C) {
	b := c.Box()
	res, err := b.Stream(c.Ctx, "seq 1 1000", sandbox.RunOptions{}).Wait()
	c.NoErr("Wait", err)
	Eq(c, "Stdout", res.Stdout, seqText(1000))
}

func streamEarlyBreak(c *C) {
	b := c.Box()
	h := b.Stream(c.Ctx, "echo one; sleep 0.2; echo two", sandbox.RunOptions{})
	for range h.Chunks() {
		break
	}
	res, err := h.Wait()
	c.NoErr("Wait", err)
	Eq(c, "Stdout after an early break", res.Stdout, "one\ntwo\n")
}
