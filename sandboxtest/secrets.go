package sandboxtest

import (
	"context"
	"regexp"
	"strings"
	"time"

	"github.com/tupper-dev/tupper/sandbox"
)

func secretCases() []testCase {
	return []testCase{
		{"InvalidNames", secretsInvalid},
		{"InEnvironment", secretsInEnv},
		{"RedactStdoutStderrOutput", secretsRedactRun},
		{"RedactChunks", secretsRedactChunks},
		{"SplitAcrossChunks", secretsSplit},
		{"RedactCommand", secretsRedactCommand},
		{"RedactLogs", secretsRedactLogs},
		{"RedactProcessExitedError", secretsRedactProcessError},
		{"RedactErrors", secretsRedactErrors},
		{"RedactSearch", secretsRedactSearch},
	}
}

func newSecret() string { return "sbt-secret-" + randHex(12) }

func secretsInvalid(c *C) {
	for _, bad := range []string{"1ABC", "A-B", "A B", "", "A=B", "ü"} {
		_, err := c.TryCreate(sandbox.CreateOptions{Secrets: map[string]string{bad: "v"}})
		c.WantCode("secret name "+bad, err, sandbox.CodeInvalidArgument)
	}
	c.nothingCreated("invalid secret names")
}

func secretsInEnv(c *C) {
	sec := newSecret()
	b := c.Create(sandbox.CreateOptions{Secrets: map[string]string{"API_TOKEN": sec}})
	// Compare inside the sandbox so the value never needs to come out.
	res := c.Run(b, `test "$API_TOKEN" = "$WANT"`, sandbox.RunOptions{Env: map[string]string{"WANT": sec}})
	if !res.OK {
		c.Errorf("API_TOKEN in the sandbox is not the secret (exit %d)", res.ExitCode)
	}
}

func secretsRedactRun(c *C) {
	sec := newSecret()
	b := c.Create(sandbox.CreateOptions{Secrets: map[string]string{"API_TOKEN": sec}})
	res := c.MustRun(b, `echo "out $API_TOKEN end"; echo "err $API_TOKEN end" >&2`)
	c.noLeak(sec, map[string]string{"Stdout": res.Stdout, "Stderr": res.Stderr, "Output": res.Output})
	Eq(c, "Stdout", res.Stdout, "out "+sandbox.Redacted+" end\n")
	Eq(c, "Stderr", res.Stderr, "err "+sandbox.Redacted+" end\n")
}

func secretsRedactChunks(c *C) {
	sec := newSecret()
	b := c.Create(sandbox.CreateOptions{Secrets: map[string]string{"API_TOKEN": sec}})
	h := b.Stream(c.Ctx, `for i in 1 2 3; do echo "$i $API_TOKEN"; echo "e$i $API_TOKEN" >&2; sleep 0.05; done`, sandbox.RunOptions{})
	var all strings.Builder
	for ch := range h.Chunks() {
		c.noLeak(sec, map[string]string{"chunk": ch.Text})
		all.WriteString(ch.Text)
	}
	res, err := h.Wait()
	c.NoErr("Wait", err)
	c.noLeak(sec, map[string]string{"joined chunks": all.String(), "Output": res.Output})
	Eq(c, "redactions in the chunks", strings.Count(all.String(), sandbox.Redacted), 6)
}

// secretsSplit writes the secret in two pieces with a pause between, so a provider that
// streams delivers them in separate chunks.
func secretsSplit(c *C) {
	sec := newSecret()
	half := len(sec) / 2
	b := c.Create(sandbox.CreateOptions{Secrets: map[string]string{"API_TOKEN": sec}})
	env := map[string]string{"H1": sec[:half], "H2": sec[half:]}
	cmd := `printf 'a=%s' "$H1"; sleep 0.3; printf '%s\n' "$H2"; printf 'b=%s' "$H1" >&2; sleep 0.3; printf '%s\n' "$H2" >&2`
	h := b.Stream(c.Ctx, cmd, sandbox.RunOptions{Env: env})
	var out, errs strings.Builder
	for ch := range h.Chunks() {
		if strings.Contains(ch.Text, sec) {
			c.Errorf("chunk leaks the secret: %q", ch.Text)
		}
		if ch.Stream == sandbox.Stderr {
			errs.WriteString(ch.Text)
		} else {
			out.WriteString(ch.Text)
		}
	}
	res, err := h.Wait()
	c.NoErr("Wait", err)
	c.noLeak(sec, map[string]string{"joined stdout chunks": out.String(), "joined stderr chunks": errs.String(),
		"Stdout": res.Stdout, "Stderr": res.Stderr, "Output": res.Output})
	Eq(c, "joined stdout chunks", out.String(), "a="+sandbox.Redacted+"\n")
	Eq(c, "joined stderr chunks", errs.String(), "b="+sandbox.Redacted+"\n")
	Eq(c, "Stdout", res.Stdout, "a="+sandbox.Redacted+"\n")
	Eq(c, "Stderr", res.Stderr, "b="+sandbox.Redacted+"\n")
}

func secretsRedactCommand(c *C) {
	sec := newSecret()
	b := c.Create(sandbox.CreateOptions{Secrets: map[string]string{"API_TOKEN": sec}})
	res := c.Run(b, "echo "+sec+" >/dev/null; exit 3", sandbox.RunOptions{})
	c.noLeak(sec, map[string]string{"Command": res.Command})
	Eq(c, "Command", res.Command, "echo "+sandbox.Redacted+" >/dev/null; exit 3")
	Eq(c, "ExitCode", res.ExitCode, 3)
}

func secretsRedactLogs(c *C) {
	sec := newSecret()
	half := len(sec) / 2
	b := c.Create(sandbox.CreateOptions{Secrets: map[string]string{"API_TOKEN": sec}})
	cmd := `echo "line1 $API_TOKEN"; echo "err $API_TOKEN" >&2; printf 'x=%s' "$H1"; sleep 0.2; printf '%s\n' "$H2"; echo done`
	p, err := b.Start(c.Ctx, cmd, sandbox.StartOptions{Name: "leaky", Env: map[string]string{"H1": sec[:half], "H2": sec[half:]}})
	c.NoErr("Start", err)
	_, err = p.Wait(c.Ctx)
	c.NoErr("Wait", err)
	page, err := p.Logs(c.Ctx, sandbox.LogsOptions{})
	c.NoErr("Logs", err)
	c.noLeak(sec, map[string]string{"Logs page": page.Text})
	if got := strings.Count(page.Text, sandbox.Redacted); got != 3 {
		c.Errorf("Logs page has %d redactions, want 3: %q", got, page.Text)
	}
	// Small pages: the secret may not leak through a page boundary either.
	var joined strings.Builder
	cur := ""
	for i := 0; i < 200; i++ {
		pg, err := p.Logs(c.Ctx, sandbox.LogsOptions{After: cur, MaxBytes: 7})
		c.NoErr("Logs small page", err)
		c.noLeak(sec, map[string]string{"small Logs page": pg.Text})
		joined.WriteString(pg.Text)
		cur = pg.NextCursor
		if !pg.Truncated {
			break
		}
	}
	c.noLeak(sec, map[string]string{"joined small pages": joined.String()})
	n := 0
	for line, err := range p.Lines(c.Ctx, "") {
		c.NoErr("Lines", err)
		c.noLeak(sec, map[string]string{"line": line.Text})
		n++
	}
	Eq(c, "lines", n, 4)
	c.noLeak(sec, map[string]string{"Process.Command": p.Command()})
}

func secretsRedactProcessError(c *C) {
	sec := newSecret()
	b := c.Create(sandbox.CreateOptions{Secrets: map[string]string{"API_TOKEN": sec}})
	_, err := b.Start(c.Ctx, `echo "failing with $API_TOKEN"; exit 4`, sandbox.StartOptions{
		Ready: sandbox.ReadyLog(regexp.MustCompile("never-printed")), ReadyTimeout: 20 * time.Second})
	if c.WantCode("Start of a process that dies", err, sandbox.CodeProcessExited) {
		c.noLeak(sec, map[string]string{"process_exited error": err.Error()})
		if !strings.Contains(err.Error(), "failing with") {
			c.Errorf("process_exited error %q does not carry the process's last output", err)
		}
	}
}

func secretsRedactErrors(c *C) {
	sec := newSecret()
	b := c.Create(sandbox.CreateOptions{Secrets: map[string]string{"API_TOKEN": sec}})
	var errs []error
	_, err := b.Files.Read(c.Ctx, "/workspace/missing-"+sec)
	c.WantCode("Read of a missing file", err, sandbox.CodeNotFound)
	errs = append(errs, err)
	err = b.Files.Edit(c.Ctx, "/workspace/missing-"+sec, "a", "b")
	c.WantCode("Edit of a missing file", err, sandbox.CodeNotFound)
	errs = append(errs, err)
	c.Write(b, "f-"+sec, "content")
	err = b.Files.Edit(c.Ctx, "f-"+sec, "absent", "b")
	c.WantCode("Edit not found", err, sandbox.CodeEditNotFound)
	errs = append(errs, err)
	_, err = b.Files.List(c.Ctx, "/workspace/nodir-"+sec, sandbox.FileListOptions{})
	c.WantCode("List of a missing dir", err, sandbox.CodeNotFound)
	errs = append(errs, err)
	_, err = b.Process(c.Ctx, "nope")
	errs = append(errs, err)
	for _, e := range errs {
		c.noLeak(sec, map[string]string{"error": errText(e)})
	}
}

func secretsRedactSearch(c *C) {
	sec := newSecret()
	b := c.Create(sandbox.CreateOptions{Secrets: map[string]string{"API_TOKEN": sec}})
	c.Write(b, "conf/app.env", "TOKEN="+sec+"\nOTHER=1\n")
	ms, err := b.Files.Search(c.Ctx, "TOKEN=", sandbox.SearchOptions{Path: "conf"})
	c.NoErr("Search", err)
	if len(ms) != 1 {
		c.Fatalf("Search found %d matches, want 1: %+v", len(ms), ms)
	}
	c.noLeak(sec, map[string]string{"match text": ms[0].Text})
	Eq(c, "match text", ms[0].Text, "TOKEN="+sandbox.Redacted)
}

var _ = context.Background
