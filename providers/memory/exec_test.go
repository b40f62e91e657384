package memory

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tupper-dev/tupper/provider"
)

// chanWriter sends every Write to a channel, so a test sees output as it is produced.
type chanWriter struct{ ch chan string }

func (w chanWriter) Write(p []byte) (int, error) {
	w.ch <- string(p)
	return len(p), nil
}

func TestExecStreamsOutput(t *testing.T) {
	in := newInstance(t, provider.CreateSpec{})
	w := chanWriter{make(chan string, 16)}
	done := make(chan error, 1)
	go func() {
		_, err := in.Exec(context.Background(), provider.ExecRequest{Command: "echo one; sleep 0.3; echo two", Cwd: "/", Stdout: w})
		done <- err
	}()
	// collect accumulates writes until the text reaches want.
	collect := func(want string) {
		t.Helper()
		got := ""
		for got != want {
			select {
			case s := <-w.ch:
				got += s
				if !strings.HasPrefix(want, got) {
					t.Fatalf("output %q, want %q", got, want)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("no output %q while the command ran (got %q)", want, got)
			}
		}
	}
	collect("one\n")
	select {
	case err := <-done:
		t.Fatalf("Exec returned (%v) before the second line was written", err)
	default:
	}
	collect("two\n")
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestExecContextCancel(t *testing.T) {
	in := newInstance(t, provider.CreateSpec{})
	for _, tc := range []struct {
		name   string
		script string
	}{
		{"sleep", "sleep 30"},
		{"loop", "while true; do :; done"},
		{"pipe", "while :; do echo y; done | cat > /dev/null"},
		{"nested", "sh -c 'sh -c \"sleep 30\"'"},
		{"stdin", "cat"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			pr, pw := io.Pipe() // a stdin that never ends
			defer pw.Close()
			start := time.Now()
			_, err := in.Exec(ctx, provider.ExecRequest{Command: tc.script, Cwd: "/", Stdin: pr})
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("err = %v, want one wrapping context.DeadlineExceeded", err)
			}
			if provider.CodeOf(err) != provider.CodeTimeout {
				t.Errorf("code %s, want timeout", provider.CodeOf(err))
			}
			if d := time.Since(start); d > 3*time.Second {
				t.Errorf("Exec took %v after its deadline", d)
			}
		})
	}
	busy, err := in.Busy(context.Background())
	if err != nil || busy {
		t.Errorf("Busy after cancelled commands = %v, %v", busy, err)
	}
}

// wait polls cond until it holds or 5 s pass.
func wait(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func readFile(t *testing.T, in *Instance, p string) (string, error) {
	t.Helper()
	rc, err := in.ReadFile(context.Background(), p)
	if err != nil {
		return "", err
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	return string(b), err
}

// wrapper is the shape of the core's background-process command.
func wrapper(name, user string) string {
	d := "/var/lib/sandbox-sdk/procs/" + name
	return fmt.Sprintf("mkdir -p %[1]s && cd /workspace && sh -c '%[2]s' >%[1]s/stdout 2>%[1]s/stderr </dev/null; echo $? > %[1]s/exit", d, user)
}

func TestDetachRunsToCompletion(t *testing.T) {
	in := newInstance(t, provider.CreateSpec{})
	res, err := in.Exec(context.Background(), provider.ExecRequest{Command: wrapper("ok", "echo out; echo err >&2; exit 3"), Cwd: "/", Detach: true})
	if err != nil || res.PID <= 0 {
		t.Fatalf("detach: %+v, %v", res, err)
	}
	wait(t, "the exit file", func() bool { s, _ := readFile(t, in, "/var/lib/sandbox-sdk/procs/ok/exit"); return s == "3\n" })
	if s, _ := readFile(t, in, "/var/lib/sandbox-sdk/procs/ok/stdout"); s != "out\n" {
		t.Errorf("stdout %q", s)
	}
	if s, _ := readFile(t, in, "/var/lib/sandbox-sdk/procs/ok/stderr"); s != "err\n" {
		t.Errorf("stderr %q", s)
	}
	wait(t, "the job to leave the table", func() bool { b, _ := in.Busy(context.Background()); return !b })
	expect(t, in, "kill -0 "+strconv.Itoa(res.PID)+"; echo $?", "1\n", 0)
}

func TestDetachOutlivesContext(t *testing.T) {
	in := newInstance(t, provider.CreateSpec{})
	ctx, cancel := context.WithCancel(context.Background())
	res, err := in.Exec(ctx, provider.ExecRequest{Command: "sleep 0.2; echo late > /tmp/late", Cwd: "/", Detach: true})
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	wait(t, "the detached job to finish after its ctx ended", func() bool { s, _ := readFile(t, in, "/tmp/late"); return s == "late\n" })
	_ = res
}

func TestDetachKill(t *testing.T) {
	for _, sig := range []string{"-TERM", "-KILL", "-15", "-9", "-s TERM", "-s KILL"} {
		t.Run(sig, func(t *testing.T) {
			in := newInstance(t, provider.CreateSpec{})
			user := "echo started; i=0; while true; do echo tick $i; i=$((i+1)); sleep 0.01; done"
			res, err := in.Exec(context.Background(), provider.ExecRequest{Command: wrapper("job", user), Cwd: "/", Detach: true})
			if err != nil {
				t.Fatal(err)
			}
			pid := strconv.Itoa(res.PID)
			wait(t, "output while the job runs", func() bool {
				s, _ := readFile(t, in, "/var/lib/sandbox-sdk/procs/job/stdout")
				return strings.Contains(s, "tick 3")
			})
			if b, _ := in.Busy(context.Background()); !b {
				t.Error("Busy is false while a detached job runs")
			}
			expect(t, in, "kill -0 "+pid+" && echo alive", "alive\n", 0)
			expect(t, in, "kill "+sig+" -"+pid+"; echo $?", "0\n", 0)
			wait(t, "the job to stop", func() bool { return sh(t, in, "kill -0 "+pid).code == 1 })
			if _, err := readFile(t, in, "/var/lib/sandbox-sdk/procs/job/exit"); !errors.Is(err, provider.CodeNotFound) {
				t.Errorf("a killed job wrote its exit file (err %v)", err)
			}
			before, _ := readFile(t, in, "/var/lib/sandbox-sdk/procs/job/stdout")
			time.Sleep(50 * time.Millisecond)
			after, _ := readFile(t, in, "/var/lib/sandbox-sdk/procs/job/stdout")
			if before != after {
				t.Error("the job kept writing after it was killed")
			}
			wait(t, "Busy false", func() bool { b, _ := in.Busy(context.Background()); return !b })
		})
	}
}

func TestKillAttachedCommand(t *testing.T) {
	in := newInstance(t, provider.CreateSpec{})
	type out struct {
		res provider.ExecResult
		err error
	}
	done := make(chan out, 1)
	go func() {
		res, err := in.Exec(context.Background(), provider.ExecRequest{Command: "echo $$ > /tmp/pid; sleep 30", Cwd: "/"})
		done <- out{res, err}
	}()
	var pid string
	wait(t, "the pid file", func() bool { pid, _ = readFile(t, in, "/tmp/pid"); return pid != "" })
	expect(t, in, "kill -9 "+strings.TrimSpace(pid), "", 0)
	select {
	case o := <-done:
		if o.err != nil || o.res.ExitCode != 137 || o.res.Signal != "SIGKILL" {
			t.Errorf("killed command: %+v, %v; want exit 137, SIGKILL", o.res, o.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the killed command did not return")
	}
	// A command can signal itself.
	r := sh(t, in, "kill $$; echo not reached")
	if r.code != 143 || r.out != "" {
		t.Errorf("kill $$: exit %d, stdout %q", r.code, r.out)
	}
}

func TestKillUsage(t *testing.T) {
	in := newInstance(t, provider.CreateSpec{})
	r := sh(t, in, "kill -0 4242")
	if r.code != 1 || !strings.Contains(r.err, "No such process") {
		t.Errorf("kill -0 of an unknown pid: exit %d, stderr %q", r.code, r.err)
	}
	expect(t, in, "kill -l 15; kill -l TERM", "TERM\n15\n", 0)
	expect(t, in, "kill -BOGUS 1; echo $?", "1\n", 0)
	expect(t, in, "kill; echo $?", "2\n", 0)
	// STOP and CONT do not end a job.
	res, err := in.Exec(context.Background(), provider.ExecRequest{Command: "sleep 30", Cwd: "/", Detach: true})
	if err != nil {
		t.Fatal(err)
	}
	pid := strconv.Itoa(res.PID)
	expect(t, in, "kill -CONT "+pid+"; kill -0 "+pid+" && echo alive; kill -9 -"+pid, "alive\n", 0)
}

func TestConcurrentWritesAreVisible(t *testing.T) {
	in := newInstance(t, provider.CreateSpec{})
	script := "i=0; while [ $i -lt 40 ]; do echo line $i; i=$((i+1)); sleep 0.002; done > /tmp/log"
	if _, err := in.Exec(context.Background(), provider.ExecRequest{Command: script, Cwd: "/", Detach: true}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var seen []string
	for range 4 {
		wg.Go(func() {
			deadline := time.Now().Add(5 * time.Second)
			for time.Now().Before(deadline) {
				s, err := readFile(t, in, "/tmp/log")
				if err != nil {
					continue
				}
				mu.Lock()
				seen = append(seen, s)
				mu.Unlock()
				if strings.Contains(s, "line 39\n") {
					return
				}
			}
		})
	}
	// Other writers run at the same time.
	for i := range 4 {
		wg.Go(func() {
			for j := range 20 {
				p := fmt.Sprintf("/tmp/w%d", i)
				if err := in.WriteFile(context.Background(), p, strings.NewReader(strconv.Itoa(j)), nil); err != nil {
					t.Error(err)
				}
				sh(t, in, fmt.Sprintf("echo %d >> /tmp/a%d", j, i))
			}
		})
	}
	wg.Wait()
	final, _ := readFile(t, in, "/tmp/log")
	if !strings.HasSuffix(final, "line 39\n") {
		t.Fatalf("final log %q", final)
	}
	partial := 0
	for _, s := range seen {
		if !strings.HasPrefix(final, s) {
			t.Fatalf("a read saw %q, not a prefix of the final content", s)
		}
		if s != final {
			partial++
		}
	}
	if partial == 0 {
		t.Error("no read saw the log while it was being written")
	}
}

func TestExecEnvironment(t *testing.T) {
	in := newInstance(t, provider.CreateSpec{Env: map[string]string{"A": "env", "B": "env"}, Secrets: map[string]string{"TOKEN": "s3cret", "B": "secret"}})
	var out strings.Builder
	_, err := in.Exec(context.Background(), provider.ExecRequest{
		Command: `echo "$A $B $C $TOKEN $HOME $PWD"; env | grep -c '^PATH='`,
		Cwd:     "/tmp",
		Env:     map[string]string{"C": "req", "A": "req"},
		Stdout:  &out,
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := "req secret req s3cret /root /tmp\n1\n"; out.String() != want {
		t.Errorf("got %q, want %q", out.String(), want)
	}
	_, err = in.Exec(context.Background(), provider.ExecRequest{Command: "true", User: "nobody"})
	if !errors.Is(err, provider.CodeUnsupported) {
		t.Errorf("another user: %v", err)
	}
	_, err = in.Exec(context.Background(), provider.ExecRequest{Command: "true", Cwd: "relative"})
	if !errors.Is(err, provider.CodeInvalidArgument) {
		t.Errorf("relative cwd: %v", err)
	}
}

func TestExecAfterDestroy(t *testing.T) {
	p := New()
	inst, err := p.Create(context.Background(), provider.CreateSpec{})
	if err != nil {
		t.Fatal(err)
	}
	in := inst.(*Instance)
	done := make(chan error, 1)
	go func() {
		_, err := in.Exec(context.Background(), provider.ExecRequest{Command: "sleep 30", Cwd: "/"})
		done <- err
	}()
	wait(t, "the command to start", func() bool { b, _ := in.Busy(context.Background()); return b })
	if err := p.Destroy(context.Background(), in.ID()); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, provider.CodeNotFound) {
			t.Errorf("exec in a destroyed sandbox: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("destroy did not stop the running command")
	}
	if _, err := in.Exec(context.Background(), provider.ExecRequest{Command: "true"}); !errors.Is(err, provider.CodeNotFound) {
		t.Errorf("exec after destroy: %v", err)
	}
}
