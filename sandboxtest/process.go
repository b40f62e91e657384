package sandboxtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/sandbox"
)

func processCases() []testCase {
	return []testCase{
		{"DefaultName", procDefaultName},
		{"InvalidNames", procInvalidNames},
		{"NameConflict", procNameConflict},
		{"SameCommandReturnsRunning", procSameCommand},
		{"ReuseNameAfterExit", procReuseName},
		{"CwdAndEnv", procCwdEnv},
		{"ReadyLog", procReadyLog},
		{"ReadyTimeout", procReadyTimeout},
		{"ExitedBeforeReady", procExitedBeforeReady},
		{"ReadyPort", procReadyPort},
		{"ReadyHTTP", procReadyHTTP},
		{"ReadyPortUnsupported", procPortUnsupported},
		{"Status", procStatus},
		{"WaitExitCode", procWaitExit},
		{"OutlivesStartContext", procOutlivesCtx},
		{"LogsPages", procLogsPages},
		{"LogsDefaultPage", procLogsDefault},
		{"LogsMaxBytesValidation", procLogsMaxBytes},
		{"LogsCursorContinues", procLogsCursor},
		{"LogsInvalidCursor", procLogsBadCursor},
		{"LogsPartialLastLine", procLogsPartial},
		{"Lines", procLines},
		{"LinesFromCursor", procLinesCursor},
		{"LinesFollow", procLinesFollow},
		{"LinesCancel", procLinesCancel},
		{"StopTerm", procStopTerm},
		{"StopTrapsTermThenKill", procStopTrap},
		{"StopIdempotent", procStopIdempotent},
		{"Restart", procRestart},
		{"FindByNameFromConnect", procFindFromConnect},
		{"FindNotFound", procFindNotFound},
		{"Processes", procList},
	}
}

var procNameRe = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)

func start(c *C, b *sandbox.Sandbox, cmd string, opts sandbox.StartOptions) *sandbox.Process {
	c.Helper()
	p, err := b.Start(c.Ctx, cmd, opts)
	if err != nil {
		c.CheckErr("Start", err)
		c.Fatalf("Start(%q): %v", cmd, err)
	}
	return p
}

func wait(c *C, p *sandbox.Process) sandbox.ExitStatus {
	c.Helper()
	es, err := p.Wait(c.Ctx)
	c.NoErr("Wait", err)
	return es
}

func allLogs(c *C, p *sandbox.Process) string {
	c.Helper()
	var s strings.Builder
	cur := ""
	for range 1000 {
		pg, err := p.Logs(c.Ctx, sandbox.LogsOptions{After: cur, MaxBytes: sandbox.MaxLogPageBytes})
		c.NoErr("Logs", err)
		s.WriteString(pg.Text)
		cur = pg.NextCursor
		if !pg.Truncated {
			break
		}
	}
	return s.String()
}

func procDefaultName(c *C) {
	b := c.Box()
	p := start(c, b, "sleep 300", sandbox.StartOptions{})
	if !procNameRe.MatchString(p.Name()) {
		c.Errorf("default name %q is not a valid process name", p.Name())
	}
	if !strings.HasPrefix(p.Name(), "sleep") {
		c.Errorf("default name %q does not start with the command's first word", p.Name())
	}
	again := start(c, b, "sleep 300", sandbox.StartOptions{})
	Eq(c, "name of the same command", again.Name(), p.Name())
	other := start(c, b, "sleep 301", sandbox.StartOptions{})
	if other.Name() == p.Name() {
		c.Errorf("two commands got the same default name %q", p.Name())
	}
	// Stable across handles and sandboxes.
	b2 := c.Box()
	p2 := start(c, b2, "sleep 300", sandbox.StartOptions{})
	Eq(c, "name in another sandbox", p2.Name(), p.Name())
	odd := start(c, b, "/bin/../bin/sh -c 'sleep 300' # ünï", sandbox.StartOptions{})
	if !procNameRe.MatchString(odd.Name()) {
		c.Errorf("default name %q of an odd command is not valid", odd.Name())
	}
}

func procInvalidNames(c *C) {
	b := c.Box()
	for _, n := range []string{"bad name", "a/b", "../x", "x.y", "ü", strings.Repeat("a", 129), "a\x00"} {
		_, err := b.Start(c.Ctx, "sleep 1", sandbox.StartOptions{Name: n})
		c.WantCode(fmt.Sprintf("Start name %q", n), err, sandbox.CodeInvalidArgument)
		_, err = b.Process(c.Ctx, n)
		c.WantCode(fmt.Sprintf("Process name %q", n), err, sandbox.CodeInvalidArgument)
	}
	p := start(c, b, "true", sandbox.StartOptions{Name: strings.Repeat("a", 128)})
	Eq(c, "128-character name", len(p.Name()), 128)
	for what, o := range map[string]sandbox.StartOptions{
		"negative ready timeout": {ReadyTimeout: -time.Second},
		"ready port 0":           {Ready: &sandbox.Ready{Port: 0}},
		"ready port 70000":       {Ready: sandbox.ReadyPort(70000)},
		"bad env":                {Env: map[string]string{"1X": "y"}},
	} {
		_, err := b.Start(c.Ctx, "sleep 1", o)
		c.WantCode(what, err, sandbox.CodeInvalidArgument)
	}
	for _, cmd := range []string{"", "   ", "echo a\x00b"} {
		_, err := b.Start(c.Ctx, cmd, sandbox.StartOptions{})
		c.WantCode(fmt.Sprintf("Start command %q", cmd), err, sandbox.CodeInvalidArgument)
	}
}

func procNameConflict(c *C) {
	b := c.Box()
	start(c, b, "sleep 300", sandbox.StartOptions{Name: "svc"})
	_, err := b.Start(c.Ctx, "sleep 301", sandbox.StartOptions{Name: "svc"})
	c.WantCode("another command under a running name", err, sandbox.CodeConflict)
}

func procSameCommand(c *C) {
	b := c.Box()
	p := start(c, b, "echo once >> /tmp/starts; sleep 300", sandbox.StartOptions{Name: "svc"})
	q := start(c, b, "echo once >> /tmp/starts; sleep 300", sandbox.StartOptions{Name: "svc"})
	Eq(c, "PID of the second Start", q.PID(), p.PID())
	// The command may not have run its echo yet on a loaded machine: wait for it, then give a
	// second run (were there one) as long again to show.
	begun := time.Now()
	if !c.waitFor(30*time.Second, func() bool { return c.Out(b, "cat /tmp/starts 2>/dev/null || true") != "" }) {
		c.Fatalf("the started command never wrote /tmp/starts")
	}
	time.Sleep(time.Since(begun) + 100*time.Millisecond)
	Eq(c, "times started", c.Read(b, "/tmp/starts"), "once\n")
}

func procReuseName(c *C) {
	b := c.Box()
	p := start(c, b, "echo first", sandbox.StartOptions{Name: "job"})
	wait(c, p)
	q := start(c, b, "echo second", sandbox.StartOptions{Name: "job"})
	wait(c, q)
	Eq(c, "logs of the new run", allLogs(c, q), "second\n")
}

func procCwdEnv(c *C) {
	b := c.Create(sandbox.CreateOptions{Env: map[string]string{"FROM_CREATE": "c"}})
	c.MustRun(b, "mkdir -p app")
	p := start(c, b, `pwd; echo "$X $FROM_CREATE $SANDBOX_SDK_RUN"`, sandbox.StartOptions{Cwd: "app", Env: map[string]string{"X": "x y"}})
	wait(c, p)
	Eq(c, "logs", allLogs(c, p), "/workspace/app\nx y c 1\n")
}

func procReadyLog(c *C) {
	b := c.Box()
	started := time.Now()
	p := start(c, b, `echo booting; sleep 0.5; echo "listening on 8080"; sleep 300`, sandbox.StartOptions{
		Ready: sandbox.ReadyLog(regexp.MustCompile(`listening on \d+`))})
	if d := time.Since(started); d < 450*time.Millisecond {
		c.Errorf("Start returned after %v, before the ready line was printed", d)
	}
	Eq(c, "Ready", p.Ready(), true)
	Eq(c, "URL without a port", p.URL(), "")
	st, err := p.Status(c.Ctx)
	c.NoErr("Status", err)
	Eq(c, "Status", st, sandbox.ProcessRunning)
	if l := allLogs(c, p); !strings.Contains(l, "listening on 8080\n") {
		c.Errorf("logs %q lack the ready line", l)
	}
	// A ready line on stderr counts too.
	p2 := start(c, b, `sleep 0.2; echo "ready-on-stderr" >&2; sleep 300`, sandbox.StartOptions{
		Ready: sandbox.ReadyLog(regexp.MustCompile(`^ready-on-stderr$`))})
	Eq(c, "Ready (stderr)", p2.Ready(), true)
}

func procReadyTimeout(c *C) {
	b := c.Box()
	started := time.Now()
	_, err := b.Start(c.Ctx, "echo nothing useful; sleep 300", sandbox.StartOptions{
		Ready: sandbox.ReadyLog(regexp.MustCompile("never")), ReadyTimeout: 700 * time.Millisecond})
	c.WantCode("Start that never becomes ready", err, sandbox.CodeTimeout)
	if d := time.Since(started); d < 600*time.Millisecond || d > 15*time.Second {
		c.Errorf("ready timeout of 700 ms ended after %v", d)
	}
}

func procExitedBeforeReady(c *C) {
	b := c.Box()
	_, err := b.Start(c.Ctx, "echo boom-output; exit 3", sandbox.StartOptions{
		Ready: sandbox.ReadyLog(regexp.MustCompile("never")), ReadyTimeout: 20 * time.Second})
	if c.WantCode("Start of a process that exits", err, sandbox.CodeProcessExited) {
		if !errors.Is(err, sandbox.CodeProcessExited) {
			c.Errorf("errors.Is(err, CodeProcessExited) is false")
		}
		if !strings.Contains(err.Error(), "boom-output") {
			c.Errorf("process_exited error %q lacks the process's last output", err)
		}
	}
	// A process that prints its ready line and then exits is ready.
	p, err := b.Start(c.Ctx, "echo ready-now", sandbox.StartOptions{Name: "quick", Ready: sandbox.ReadyLog(regexp.MustCompile("ready-now"))})
	if err != nil {
		c.Errorf("a process that printed its ready line before exiting: %v", err)
	} else {
		Eq(c, "Ready", p.Ready(), true)
	}
}

func procReadyPort(c *C) {
	c.Need(provider.CapShell)
	b := c.Box()
	bin := c.helper(b)
	started := time.Now()
	p := start(c, b, bin+" -port 18080 -delay 500ms", sandbox.StartOptions{Ready: sandbox.ReadyPort(18080)})
	if d := time.Since(started); d < 450*time.Millisecond {
		c.Errorf("Start returned after %v, before the port listened", d)
	}
	Eq(c, "Ready", p.Ready(), true)
	// Inside the sandbox the port answers.
	res := c.Run(b, bin+" -get http://127.0.0.1:18080/hello", sandbox.RunOptions{})
	Eq(c, "GET inside the sandbox", res.Stdout, "ok /hello\n")
	_, err := b.Start(c.Ctx, "sleep 300", sandbox.StartOptions{Name: "noport", Ready: sandbox.ReadyPort(18081), ReadyTimeout: 700 * time.Millisecond})
	c.WantCode("port that never listens", err, sandbox.CodeTimeout)
}

func procReadyHTTP(c *C) {
	c.Need(provider.CapPreview)
	b := c.Create(sandbox.CreateOptions{Ports: []int{3000}})
	bin := c.helper(b)
	p := start(c, b, bin+" -port 3000 -delay 300ms", sandbox.StartOptions{Ready: sandbox.ReadyHTTP(3000, "/health")})
	Eq(c, "Ready", p.Ready(), true)
	if p.URL() == "" {
		c.Fatalf("URL is empty after HTTP readiness")
	}
	u, err := b.PreviewURL(c.Ctx, 3000)
	c.NoErr("PreviewURL", err)
	Eq(c, "URL", p.URL(), u)
	req, _ := http.NewRequestWithContext(c.Ctx, http.MethodGet, strings.TrimSuffix(p.URL(), "/")+"/x", nil)
	resp, err := http.DefaultClient.Do(req)
	c.NoErr("GET the preview URL", err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	Eq(c, "body through the preview URL", string(body), "ok /x\n")
}

func procPortUnsupported(c *C) {
	if c.Has(provider.CapShell) || c.Has(provider.CapPreview) {
		c.Skipf("provider %s declares %q or %q; Process/ReadyPort and Process/ReadyHTTP test ports", c.P().Name(), provider.CapShell, provider.CapPreview)
	}
	b := c.Box()
	_, err := b.Start(c.Ctx, "sleep 300", sandbox.StartOptions{Ready: sandbox.ReadyPort(3000)})
	c.WantCode("port readiness without shell or preview", err, sandbox.CodeUnsupported)
	_, err = b.PreviewURL(c.Ctx, 3000)
	c.WantCode("PreviewURL without preview", err, sandbox.CodeUnsupported)
	_, err = b.PreviewURL(c.Ctx, 0)
	c.WantCode("PreviewURL port 0", err, sandbox.CodeInvalidArgument)
}

func procStatus(c *C) {
	b := c.Box()
	p := start(c, b, "sleep 300", sandbox.StartOptions{})
	st, err := p.Status(c.Ctx)
	c.NoErr("Status", err)
	Eq(c, "Status while running", st, sandbox.ProcessRunning)
	if p.PID() <= 0 {
		c.Errorf("PID = %d", p.PID())
	}
	c.NoErr("Stop", p.Stop(c.Ctx, sandbox.StopOptions{Grace: time.Second}))
	st, err = p.Status(c.Ctx)
	c.NoErr("Status", err)
	Eq(c, "Status after Stop", st, sandbox.ProcessExited)
}

func procWaitExit(c *C) {
	b := c.Box()
	for _, code := range []int{0, 1, 7} {
		p := start(c, b, fmt.Sprintf("sleep 0.2; exit %d", code), sandbox.StartOptions{Name: fmt.Sprintf("exit%d", code)})
		es := wait(c, p)
		Eq(c, fmt.Sprintf("exit %d: ExitCode", code), es.ExitCode, code)
		Eq(c, fmt.Sprintf("exit %d: Signal", code), es.Signal, "")
		st, err := p.Status(c.Ctx)
		c.NoErr("Status", err)
		Eq(c, "Status after exit", st, sandbox.ProcessExited)
	}
	p := start(c, b, "sleep 300", sandbox.StartOptions{Name: "forever"})
	ctx, cancel := context.WithCancel(c.Ctx)
	defer cancel()
	time.AfterFunc(300*time.Millisecond, cancel)
	_, err := p.Wait(ctx)
	c.WantCode("Wait with a ctx cancelled first", err, sandbox.CodeAborted)
}

func procOutlivesCtx(c *C) {
	b := c.Box()
	ctx, cancel := context.WithCancel(c.Ctx)
	p, err := b.Start(ctx, "sleep 300", sandbox.StartOptions{})
	c.NoErr("Start", err)
	cancel()
	time.Sleep(300 * time.Millisecond)
	st, err := p.Status(c.Ctx)
	c.NoErr("Status", err)
	Eq(c, "Status after the Start ctx ended", st, sandbox.ProcessRunning)
}

func procLogsPages(c *C) {
	b := c.Box()
	p := start(c, b, "seq 1 3000", sandbox.StartOptions{})
	wait(c, p)
	want := seqText(3000)
	var got strings.Builder
	cur := ""
	pages := 0
	for {
		pg, err := p.Logs(c.Ctx, sandbox.LogsOptions{After: cur, MaxBytes: 1000})
		c.NoErr("Logs", err)
		pages++
		if len(pg.Text) > 1000 {
			c.Errorf("page %d has %d bytes; MaxBytes is 1000", pages, len(pg.Text))
		}
		if pg.Text != "" && !strings.HasSuffix(pg.Text, "\n") {
			c.Errorf("page %d does not end at a line boundary: ...%q", pages, pg.Text[max(0, len(pg.Text)-20):])
		}
		if pg.NextCursor == "" {
			c.Fatalf("page %d has no next cursor", pages)
		}
		got.WriteString(pg.Text)
		cur = pg.NextCursor
		if !pg.Truncated {
			break
		}
		if pages > 1000 {
			c.Fatalf("no end of logs after %d pages", pages)
		}
	}
	Eq(c, "len(joined pages)", got.Len(), len(want))
	if got.String() != want {
		c.Errorf("joined pages differ from the output")
	}
	if pages < len(want)/1000 {
		c.Errorf("%d pages for %d bytes at 1000 per page", pages, len(want))
	}
	// Past the end: an empty page that is not truncated.
	pg, err := p.Logs(c.Ctx, sandbox.LogsOptions{After: cur})
	c.NoErr("Logs at the end", err)
	Eq(c, "text at the end", pg.Text, "")
	Eq(c, "truncated at the end", pg.Truncated, false)
}

func procLogsDefault(c *C) {
	b := c.Box()
	p := start(c, b, "seq 1 10000", sandbox.StartOptions{})
	wait(c, p)
	pg, err := p.Logs(c.Ctx, sandbox.LogsOptions{})
	c.NoErr("Logs", err)
	if len(pg.Text) > sandbox.DefaultLogPageBytes || len(pg.Text) < sandbox.DefaultLogPageBytes-16 {
		c.Errorf("default page has %d bytes; want just under %d", len(pg.Text), sandbox.DefaultLogPageBytes)
	}
	Eq(c, "Truncated", pg.Truncated, true)
	Eq(c, "first page is the start", pg.Text, seqText(10000)[:len(pg.Text)])
}

func procLogsMaxBytes(c *C) {
	b := c.Box()
	p := start(c, b, "echo hi", sandbox.StartOptions{})
	wait(c, p)
	for _, n := range []int{-1, sandbox.MaxLogPageBytes + 1} {
		_, err := p.Logs(c.Ctx, sandbox.LogsOptions{MaxBytes: n})
		c.WantCode(fmt.Sprintf("MaxBytes %d", n), err, sandbox.CodeInvalidArgument)
	}
	pg, err := p.Logs(c.Ctx, sandbox.LogsOptions{MaxBytes: sandbox.MaxLogPageBytes})
	c.NoErr("MaxBytes at the maximum", err)
	Eq(c, "text", pg.Text, "hi\n")
}

func procLogsCursor(c *C) {
	b := c.Box()
	c.MustRun(b, "mkdir -p /tmp/gate")
	p := start(c, b, "echo one; while [ ! -e /tmp/gate/go ]; do sleep 0.05; done; echo two; sleep 300", sandbox.StartOptions{
		Ready: sandbox.ReadyLog(regexp.MustCompile("one"))})
	pg, err := p.Logs(c.Ctx, sandbox.LogsOptions{})
	c.NoErr("Logs", err)
	Eq(c, "first page", pg.Text, "one\n")
	cur := pg.NextCursor
	pg, err = p.Logs(c.Ctx, sandbox.LogsOptions{After: cur})
	c.NoErr("Logs", err)
	Eq(c, "nothing new yet", pg.Text, "")
	c.MustRun(b, "touch /tmp/gate/go")
	var text string
	c.waitFor(10*time.Second, func() bool {
		pg, err = p.Logs(c.Ctx, sandbox.LogsOptions{After: cur})
		text = pg.Text
		return err == nil && text != ""
	})
	Eq(c, "page after the stored cursor", text, "two\n")
}

func procLogsBadCursor(c *C) {
	b := c.Box()
	p := start(c, b, "echo hi", sandbox.StartOptions{})
	wait(c, p)
	for _, cur := range []string{"!!!", "bm90LWEtY3Vyc29y", "YS4tMS4w"} {
		_, err := p.Logs(c.Ctx, sandbox.LogsOptions{After: cur})
		c.WantCode("cursor "+cur, err, sandbox.CodeInvalidArgument)
	}
}

func procLogsPartial(c *C) {
	b := c.Box()
	p := start(c, b, "echo full; printf 'partial'", sandbox.StartOptions{})
	wait(c, p)
	Eq(c, "logs after exit keep the unterminated last line", allLogs(c, p), "full\npartial")
}

func procLines(c *C) {
	b := c.Box()
	p := start(c, b, "echo a; echo b; echo err >&2; printf c", sandbox.StartOptions{})
	wait(c, p)
	var got []string
	for l, err := range p.Lines(c.Ctx, "") {
		c.NoErr("Lines", err)
		got = append(got, l.Stream+":"+l.Text)
		if l.Cursor == "" {
			c.Errorf("line %q has no cursor", l.Text)
		}
	}
	Eq(c, "lines", strings.Join(got, ","), "stdout:a,stdout:b,stdout:c,stderr:err")
}

func procLinesCursor(c *C) {
	b := c.Box()
	p := start(c, b, "seq 1 5", sandbox.StartOptions{})
	wait(c, p)
	var cur string
	for l, err := range p.Lines(c.Ctx, "") {
		c.NoErr("Lines", err)
		if l.Text == "2" {
			cur = l.Cursor
			break
		}
	}
	var got []string
	for l, err := range p.Lines(c.Ctx, cur) {
		c.NoErr("Lines", err)
		got = append(got, l.Text)
	}
	Eq(c, "lines after the cursor of line 2", strings.Join(got, ","), "3,4,5")
	// A Logs page continues from a line's cursor too.
	pg, err := p.Logs(c.Ctx, sandbox.LogsOptions{After: cur})
	c.NoErr("Logs", err)
	Eq(c, "Logs after the cursor of line 2", pg.Text, "3\n4\n5\n")
}

func procLinesFollow(c *C) {
	b := c.Box()
	p := start(c, b, "for i in 1 2 3 4 5; do echo l$i; sleep 0.1; done", sandbox.StartOptions{})
	var got []string
	for l, err := range p.Lines(c.Ctx, "") {
		c.NoErr("Lines", err)
		got = append(got, l.Text)
	}
	Eq(c, "followed lines", strings.Join(got, ","), "l1,l2,l3,l4,l5")
	st, err := p.Status(c.Ctx)
	c.NoErr("Status", err)
	Eq(c, "Status when Lines ended", st, sandbox.ProcessExited)
}

func procLinesCancel(c *C) {
	b := c.Box()
	p := start(c, b, "echo first; sleep 300", sandbox.StartOptions{})
	ctx, cancel := context.WithCancel(c.Ctx)
	defer cancel()
	var got []string
	var lastErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		for l, err := range p.Lines(ctx, "") {
			if err != nil {
				lastErr = err
				continue
			}
			got = append(got, l.Text)
			cancel()
		}
	}()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		c.Fatalf("Lines did not end within 15 s of its ctx being cancelled")
	}
	Eq(c, "lines before the cancel", strings.Join(got, ","), "first")
	c.WantCode("Lines after cancel", lastErr, sandbox.CodeAborted)
}

func procStopTerm(c *C) {
	b := c.Box()
	p := start(c, b, "sleep 300", sandbox.StartOptions{})
	started := time.Now()
	c.NoErr("Stop", p.Stop(c.Ctx, sandbox.StopOptions{Grace: 10 * time.Second}))
	if d := time.Since(started); d > 8*time.Second {
		c.Errorf("Stop of a process that honours SIGTERM took %v; SIGTERM should end it at once", d)
	}
	es := wait(c, p)
	Eq(c, "Signal", es.Signal, "SIGTERM")
	Eq(c, "ExitCode", es.ExitCode, 128+15)
}

// procStopTrap needs CapShell: a handler for a real SIGTERM is signal semantics beyond
// killing a process group, which a provider without a POSIX shell need not have.
func procStopTrap(c *C) {
	c.Need(provider.CapShell)
	b := c.Box()
	p := start(c, b, `trap 'echo got-term' TERM; echo ready; while true; do sleep 0.05; done`, sandbox.StartOptions{
		Ready: sandbox.ReadyLog(regexp.MustCompile("^ready$"))})
	grace := 800 * time.Millisecond
	started := time.Now()
	c.NoErr("Stop", p.Stop(c.Ctx, sandbox.StopOptions{Grace: grace}))
	d := time.Since(started)
	if d < grace {
		c.Errorf("Stop returned after %v, before the %v grace period, though the process ignores SIGTERM", d, grace)
	}
	if d > grace+10*time.Second {
		c.Errorf("Stop took %v with a %v grace", d, grace)
	}
	es := wait(c, p)
	Eq(c, "Signal", es.Signal, "SIGKILL")
	Eq(c, "ExitCode", es.ExitCode, 128+9)
	st, err := p.Status(c.Ctx)
	c.NoErr("Status", err)
	Eq(c, "Status", st, sandbox.ProcessExited)
	// Nothing of the process group may survive: the trapping shell included.
	if res := c.Run(b, fmt.Sprintf("kill -0 -%d 2>/dev/null", p.PID()), sandbox.RunOptions{}); res.ExitCode == 0 {
		c.Errorf("process group %d still has members after Stop returned", p.PID())
	}
	if l := allLogs(c, p); !strings.Contains(l, "got-term") {
		c.Errorf("logs %q: the TERM trap never ran, so SIGTERM was not sent first", l)
	}
}

func procStopIdempotent(c *C) {
	b := c.Box()
	p := start(c, b, "sleep 300", sandbox.StartOptions{})
	c.NoErr("first Stop", p.Stop(c.Ctx, sandbox.StopOptions{}))
	c.NoErr("second Stop", p.Stop(c.Ctx, sandbox.StopOptions{}))
	q := start(c, b, "true", sandbox.StartOptions{})
	wait(c, q)
	c.NoErr("Stop of an exited process", q.Stop(c.Ctx, sandbox.StopOptions{}))
	es := wait(c, q)
	Eq(c, "exit of a process that ended by itself", es, sandbox.ExitStatus{ExitCode: 0})
	c.WantCode("negative grace", p.Stop(c.Ctx, sandbox.StopOptions{Grace: -1}), sandbox.CodeInvalidArgument)
}

func procRestart(c *C) {
	b := c.Box()
	// The count first: ready means "started" was printed, and the count must be in by then.
	p := start(c, b, "echo x >> /tmp/count; echo started; sleep 300", sandbox.StartOptions{Name: "svc",
		Ready: sandbox.ReadyLog(regexp.MustCompile("started"))})
	pg, err := p.Logs(c.Ctx, sandbox.LogsOptions{})
	c.NoErr("Logs", err)
	oldCursor := pg.NextCursor
	oldPID := p.PID()
	c.NoErr("Restart", p.Restart(c.Ctx))
	Eq(c, "Ready after Restart", p.Ready(), true)
	if p.PID() == oldPID {
		c.Errorf("PID %d unchanged by Restart", oldPID)
	}
	st, err := p.Status(c.Ctx)
	c.NoErr("Status", err)
	Eq(c, "Status after Restart", st, sandbox.ProcessRunning)
	Eq(c, "times started", c.Read(b, "/tmp/count"), "x\nx\n")
	// A cursor from before the restart reads the new run from its start.
	pg, err = p.Logs(c.Ctx, sandbox.LogsOptions{After: oldCursor})
	c.NoErr("Logs with a cursor from before the restart", err)
	Eq(c, "logs of the new run", pg.Text, "started\n")
	ps, err := b.Processes(c.Ctx)
	c.NoErr("Processes", err)
	Eq(c, "processes after Restart", len(ps), 1)
}

func procFindFromConnect(c *C) {
	b := c.Box()
	c.MustRun(b, "mkdir -p /tmp/gate")
	p := start(c, b, "echo one; echo two; while [ ! -e /tmp/gate/go ]; do sleep 0.05; done; echo three; sleep 300", sandbox.StartOptions{
		Name: "server", Ready: sandbox.ReadyLog(regexp.MustCompile("two"))})
	var stored string
	for l, err := range p.Lines(c.Ctx, "") {
		c.NoErr("Lines", err)
		if l.Text == "one" {
			stored = l.Cursor
			break
		}
	}
	// Another process, another handle: find it by name and continue from the stored cursor.
	b2, err := sandbox.Connect(c.Ctx, c.P(), b.ID, sandbox.ConnectOptions{})
	c.NoErr("Connect", err)
	defer b2.Close()
	q, err := b2.Process(c.Ctx, "server")
	c.NoErr("Process by name", err)
	Eq(c, "Name", q.Name(), "server")
	Eq(c, "Command", q.Command(), p.Command())
	Eq(c, "PID", q.PID(), p.PID())
	st, err := q.Status(c.Ctx)
	c.NoErr("Status", err)
	Eq(c, "Status", st, sandbox.ProcessRunning)
	pg, err := q.Logs(c.Ctx, sandbox.LogsOptions{After: stored})
	c.NoErr("Logs from the stored cursor", err)
	Eq(c, "page from the stored cursor", pg.Text, "two\n")
	c.MustRun(b2, "touch /tmp/gate/go")
	var got []string
	ctx, cancel := context.WithTimeout(c.Ctx, 15*time.Second)
	defer cancel()
	for l, err := range q.Lines(ctx, stored) {
		c.NoErr("Lines", err)
		got = append(got, l.Text)
		if l.Text == "three" {
			break
		}
	}
	Eq(c, "lines from the stored cursor", strings.Join(got, ","), "two,three")
	c.NoErr("Stop from the second handle", q.Stop(c.Ctx, sandbox.StopOptions{Grace: time.Second}))
	st, err = p.Status(c.Ctx)
	c.NoErr("Status", err)
	Eq(c, "Status seen by the first handle", st, sandbox.ProcessExited)
}

func procFindNotFound(c *C) {
	b := c.Box()
	_, err := b.Process(c.Ctx, "nothing-here")
	c.WantCode("Process of an unknown name", err, sandbox.CodeNotFound)
	ps, err := b.Processes(c.Ctx)
	c.NoErr("Processes of a fresh sandbox", err)
	Eq(c, "processes of a fresh sandbox", len(ps), 0)
}

func procList(c *C) {
	b := c.Box()
	start(c, b, "sleep 300", sandbox.StartOptions{Name: "b-running"})
	done := start(c, b, "true", sandbox.StartOptions{Name: "a-done"})
	wait(c, done)
	ps, err := b.Processes(c.Ctx)
	c.NoErr("Processes", err)
	var got []string
	for _, pi := range ps {
		got = append(got, pi.Name+":"+string(pi.Status)+":"+pi.Command)
		if pi.StartedAt.IsZero() || time.Since(pi.StartedAt) > time.Minute {
			c.Errorf("process %s StartedAt = %v", pi.Name, pi.StartedAt)
		}
	}
	Eq(c, "processes", strings.Join(got, ","), "a-done:exited:true,b-running:running:sleep 300")
}
