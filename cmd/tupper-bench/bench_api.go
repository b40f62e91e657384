package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tupper-dev/tupper/store"
)

// The API section: what agents feel. It starts `tupper serve` itself (a child process, its
// store in a temporary directory, its sandboxes in the local provider's home as usual) and
// drives it with one keep-alive HTTP client, side by side with Docker Engine's API on its
// unix socket and E2B's JS SDK against the same server.

// refillDelay mirrors the local provider's wait after a pool hand-out before it starts a
// replacement (providers/local pool.go); the pooled iterations are paced past it.
const poolRefillDelay = 100 * time.Millisecond

func (b *bencher) apiSection(ctx context.Context, rt, image string) error {
	// Each server has a home of its own (a state directory takes one server), with an API key
	// and, for the first, an E2B key.
	newHome := func(e2b bool) (home, key string, err error) {
		home, err = os.MkdirTemp("", "tupper-bench-api-")
		if err != nil {
			return "", "", err
		}
		// The local provider's sandboxes may be kept under it; their unprivileged roots must
		// be able to traverse it.
		if err := os.Chmod(home, 0o711); err != nil {
			return home, "", err
		}
		st, err := store.Open(ctx, home)
		if err != nil {
			return home, "", err
		}
		defer st.Close()
		if _, key, err = st.CreateKey(ctx, "bench"); err == nil && e2b {
			_, b.e2bKey, err = st.CreateE2BKey(ctx, "bench-e2b")
		}
		return home, key, err
	}
	home, key, err := newHome(true)
	if home != "" {
		defer os.RemoveAll(home)
	}
	if err != nil {
		return err
	}

	srv, err := b.startServe(ctx, home, "", 0)
	if err != nil {
		return err
	}
	defer srv.stop()
	api := &tupperAPI{url: srv.url, key: key, c: &http.Client{Timeout: time.Minute}}

	var docker *dockerAPI
	if image != "" {
		docker = newDockerAPI()
		if err := docker.do(ctx, "GET", "/_ping", nil, nil); err != nil {
			b.note("docker's API does not answer, reporting tupper alone: %v", err)
			docker = nil
		}
	}

	// 1. Exec round trip of true in a running sandbox, tupper's and Docker's in turn.
	id, err := api.create(ctx)
	if err != nil {
		return err
	}
	defer api.destroy(context.WithoutCancel(ctx), id)
	fs := []func() error{func() error {
		_, err := api.run(ctx, id, "true")
		return err
	}}
	if docker != nil {
		c, err := docker.create(ctx, image, "/bin/sh", "-c", "exec sleep 3600")
		if err != nil {
			return err
		}
		defer docker.remove(context.WithoutCancel(ctx), c)
		if err := docker.start(ctx, c); err != nil {
			return err
		}
		fs = append(fs, func() error { return docker.exec(ctx, c, "/bin/true") })
	}
	s, err := measureEach(b.o.execN, fs...)
	if err != nil {
		return err
	}
	execRow := b.add("exec true", "tupper API: POST /v1/sandboxes/{id}/run", s[0])
	var e2bRow *benchRow
	if dir, why := b.e2bProject(); dir == "" {
		b.note("E2B SDK: skipped: %s", why)
	} else if es, version, err := b.e2bExec(ctx, dir, srv.url, b.o.execN); err != nil {
		b.note("E2B SDK: skipped: %v", err)
	} else {
		e2bRow = b.add("exec true", "E2B JS SDK "+version+": commands.run against tupper serve", es.stats())
	}
	if docker != nil {
		b.add("exec true", "Docker API: exec create, start (attached), inspect", s[1])
		execRow.versus(s[1], "Docker API")
		e2bRow.versus(s[1], "Docker API")
	}

	// 2. Create → first command → destroyed: without the pool, with it, and Docker's, in
	// turn. After each pooled create the pool refills (a create, 100 ms after the hand-out)
	// while the bench waits, so that the refill competes with nothing measured.
	phome, pkey, err := newHome(false)
	if phome != "" {
		defer os.RemoveAll(phome)
	}
	if err != nil {
		return err
	}
	psrv, err := b.startServe(ctx, phome, "", b.o.pool)
	if err != nil {
		return err
	}
	defer psrv.stop()
	papi := &tupperAPI{url: psrv.url, key: pkey, c: &http.Client{Timeout: time.Minute}}
	var (
		first, full, pfirst, pfull, dfirst, dfull samples
		pooled, unpooledFromPool                  int
	)
	err = repeat(b.o.n, func(timed bool) error {
		t1, t2, fromPool, err := apiCycle(ctx, api)
		if err != nil {
			return err
		}
		pace := poolRefillDelay + 2*t1
		if !timed {
			pace *= time.Duration(b.o.pool) // the pool's first fill
		}
		if timed {
			first, full = append(first, t1), append(full, t2)
			if fromPool {
				unpooledFromPool++
			}
		}
		if docker != nil {
			t1, t2, err := dockerCycle(ctx, docker, image)
			if err != nil {
				return err
			}
			if timed {
				dfirst, dfull = append(dfirst, t1), append(dfull, t2)
			}
		}
		time.Sleep(pace)
		t1, t2, fromPool, err = apiCycle(ctx, papi)
		if err != nil {
			return err
		}
		if timed {
			pfirst, pfull = append(pfirst, t1), append(pfull, t2)
			if fromPool {
				pooled++
			}
		}
		time.Sleep(pace)
		return nil
	})
	if err != nil {
		return err
	}
	if unpooledFromPool != 0 {
		b.note("%d of %d creates without a pool found an agent older than the request", unpooledFromPool, b.o.n)
	}
	r1 := b.add("create → first command", "tupper API, no pool: POST /v1/sandboxes, POST …/run true", first.stats())
	r2 := b.add("create → first command", fmt.Sprintf("tupper API, pool of %d: the same (%d of %d from the pool)", b.o.pool, pooled, b.o.n), pfirst.stats())
	r2.versus(first.stats(), "no pool")
	if docker != nil {
		b.add("create → first command", "Docker API: create, start, wait (true as the container's command)", dfirst.stats())
		r1.versus(dfirst.stats(), "Docker API")
		r2.versus(dfirst.stats(), "Docker API")
	}
	r3 := b.add("… → destroyed", "tupper API, no pool: the same, then DELETE", full.stats())
	r4 := b.add("… → destroyed", fmt.Sprintf("tupper API, pool of %d: the same", b.o.pool), pfull.stats())
	if docker != nil {
		b.add("… → destroyed", "Docker API: the same, then DELETE ?force", dfull.stats())
		r3.versus(dfull.stats(), "Docker API")
		r4.versus(dfull.stats(), "Docker API")
	}
	if b.o.concurrent > 0 {
		if err := b.concurrentCreates(ctx, api); err != nil {
			return err
		}
	}
	title := fmt.Sprintf("HTTP API: tupper serve (%s), one keep-alive client", rt)
	if docker != nil {
		title = fmt.Sprintf("HTTP APIs: tupper serve (%s) and Docker Engine, one keep-alive client each", rt)
	}
	return b.flush(title)
}

// concurrentCreates sends --concurrent creates to the server without a pool at once and
// reports each one's time and the whole burst's.
func (b *bencher) concurrentCreates(ctx context.Context, api *tupperAPI) error {
	n := b.o.concurrent
	lat, all, err := burst(ctx, api, n)
	if err != nil {
		return err
	}
	b.add("concurrent creates", fmt.Sprintf("tupper API, no pool: %d POST /v1/sandboxes at once, each", n), lat.stats())
	b.figure("concurrent creates", fmt.Sprintf("tupper API, no pool: %d at once, all done", n), fmtDur(all),
		fmt.Sprintf("p95 of each %s", fmtDur(lat.percentile(95))))
	return nil
}

// burst sends n creates to api at once, each on a connection of its own, and times each and
// the whole burst; then it destroys them.
func burst(ctx context.Context, api *tupperAPI, n int) (samples, time.Duration, error) {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		ids  []string
		lat  samples
		errs []error
	)
	start := time.Now()
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.Now()
			id, err := api.create(ctx)
			d := time.Since(t)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			ids, lat = append(ids, id), append(lat, d)
		}()
	}
	wg.Wait()
	all := time.Since(start)
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := api.destroy(context.WithoutCancel(ctx), id); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		return nil, 0, fmt.Errorf("%d concurrent creates: %d failed, the first: %w", n, len(errs), errs[0])
	}
	return lat, all, nil
}

// dockerCycle times a container of image running true through Docker's API: created,
// started and waited for (first), then removed (full).
func dockerCycle(ctx context.Context, docker *dockerAPI, image string) (first, full time.Duration, err error) {
	start := time.Now()
	c, err := docker.create(ctx, image, "/bin/true")
	if err != nil {
		return 0, 0, err
	}
	defer docker.remove(context.WithoutCancel(ctx), c)
	if err := docker.start(ctx, c); err != nil {
		return 0, 0, err
	}
	if err := docker.wait(ctx, c); err != nil {
		return 0, 0, err
	}
	first = time.Since(start)
	if err := docker.remove(ctx, c); err != nil {
		return 0, 0, err
	}
	return first, time.Since(start), nil
}

// apiCycle times a sandbox through api: created, `true` run in it (first), destroyed (full).
// It also reports whether the sandbox's agent had started before the create request: a
// sandbox the pool served. That check runs between the two and is not counted.
func apiCycle(ctx context.Context, api *tupperAPI) (first, full time.Duration, fromPool bool, err error) {
	start := time.Now()
	id, err := api.create(ctx)
	if err != nil {
		return 0, 0, false, err
	}
	if _, err := api.run(ctx, id, "true"); err != nil {
		api.destroy(ctx, id)
		return 0, 0, false, err
	}
	first = time.Since(start)
	age, ageErr := agentAge(ctx, api, id)
	checked := time.Since(start)
	if err := api.destroy(ctx, id); err != nil {
		return 0, 0, false, err
	}
	full = time.Since(start) - (checked - first)
	if ageErr != nil {
		return 0, 0, false, ageErr
	}
	return first, full, age > checked+50*time.Millisecond, nil
}

// agentAge is how long the sandbox's PID 1 (the agent) has run, from /proc/1/stat and
// /proc/uptime inside it (both relative to the same boot, under runc, crun and runsc).
func agentAge(ctx context.Context, api *tupperAPI, id string) (time.Duration, error) {
	out, err := api.run(ctx, id, `read up idle < /proc/uptime; set -- $(cat /proc/1/stat); echo "$up ${22}"`)
	if err != nil {
		return 0, err
	}
	return parseAgentAge(out)
}

// parseAgentAge turns "UPTIME STARTTIME" (seconds with a fraction, then clock ticks of 1/100
// s since boot, as /proc/1/stat's 22nd field) into the process's age.
func parseAgentAge(out string) (time.Duration, error) {
	f := strings.Fields(out)
	if len(f) != 2 {
		return 0, fmt.Errorf("agent age: %q", out)
	}
	up, err1 := strconv.ParseFloat(f[0], 64)
	ticks, err2 := strconv.ParseInt(f[1], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("agent age: %q: %v", out, err)
	}
	return time.Duration(up*float64(time.Second)) - time.Duration(ticks)*10*time.Millisecond, nil
}

// serveProc is a `tupper serve` the bench started.
type serveProc struct {
	cmd    *exec.Cmd
	url    string
	exited chan struct{}
	mu     sync.Mutex
	logs   bytes.Buffer // its stderr, after the address line
	once   sync.Once
}

// startServe starts `tupper serve` on a free loopback port with its state directory home,
// its store spec ("": the one in home), a warm pool of pool sandboxes (0: none), --runtime
// when one was asked for and the flags extra, and waits until it answers. Its metrics
// listener is off (a bench server is one of several on this machine); the metrics are
// still collected, unless extra says --metrics=false.
func (b *bencher) startServe(ctx context.Context, home, spec string, pool int, extra ...string) (*serveProc, error) {
	args := append([]string{"serve", "--addr", "127.0.0.1:0", "--home", home, "--provider", "local", "--quiet", "--metrics-addr", "off"}, extra...)
	if spec != "" {
		args = append(args, "--store", spec)
	}
	if pool > 0 {
		args = append(args, "--pool", strconv.Itoa(pool))
	}
	if b.o.runtime != "" {
		args = append(args, "--runtime", b.o.runtime)
	}
	// Not CommandContext: stop sends SIGTERM, so the server destroys its pool on the way out.
	cmd := exec.Command(b.tupper, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &serveProc{cmd: cmd, exited: make(chan struct{})}
	urlc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if u, ok := serveURL(sc.Text()); ok && s.url == "" {
				urlc <- u
				continue
			}
			s.mu.Lock()
			s.logs.WriteString(sc.Text() + "\n")
			s.mu.Unlock()
		}
		cmd.Wait()
		close(s.exited)
	}()
	select {
	case s.url = <-urlc:
	case <-s.exited:
		return nil, fmt.Errorf("tupper serve exited: %s", s.stderr())
	case <-time.After(30 * time.Second):
		s.stop()
		return nil, fmt.Errorf("tupper serve did not say where it listens within 30 s: %s", s.stderr())
	case <-ctx.Done():
		s.stop()
		return nil, ctx.Err()
	}
	for start := time.Now(); ; time.Sleep(10 * time.Millisecond) {
		resp, err := http.Get(s.url + "/v1/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s, nil
			}
		}
		if time.Since(start) > 30*time.Second {
			s.stop()
			return nil, fmt.Errorf("tupper serve at %s does not answer: %v", s.url, err)
		}
	}
}

func (s *serveProc) stderr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.TrimSpace(s.logs.String())
}

// stop asks the server to shut down (it destroys its pool) and waits; idempotent.
func (s *serveProc) stop() {
	s.once.Do(func() {
		s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.exited:
		case <-time.After(2 * time.Minute):
			s.cmd.Process.Kill()
			<-s.exited
		}
	})
}

// serveURL finds the server's URL in the line tupper serve logs when it listens.
func serveURL(line string) (string, bool) {
	rest, ok := strings.CutPrefix(line, "tupper: serving on ")
	if !ok {
		return "", false
	}
	u, _, _ := strings.Cut(rest, " ")
	if !strings.HasPrefix(u, "http://") {
		return "", false
	}
	return u, true
}

// tupperAPI is a client of tupper serve's REST API with an account key.
type tupperAPI struct {
	url, key string
	c        *http.Client
}

// do sends a JSON request and decodes a JSON answer into out (nil: discard).
func (a *tupperAPI) do(ctx context.Context, method, path string, in, out any, want int) error {
	return jsonCall(ctx, a.c, method, a.url+path, "Bearer "+a.key, in, out, func(status int) bool { return status == want })
}

// jsonCall sends in as JSON (nil: no body) with the Authorization header auth (if any),
// reads the answer to its end (so the connection is reused; for Docker's attached exec start
// that is the command's output until it ends), fails unless ok(status), and decodes the
// answer into out (nil: discard).
func jsonCall(ctx context.Context, c *http.Client, method, url, auth string, in, out any, ok func(status int) bool) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		return err
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if !ok(resp.StatusCode) {
		return fmt.Errorf("%s %s: %s: %s", method, req.URL.Path, resp.Status, bytes.TrimSpace(data))
	}
	if out != nil {
		return json.Unmarshal(data, out)
	}
	return nil
}

func (a *tupperAPI) create(ctx context.Context) (string, error) {
	var sb struct {
		ID string `json:"id"`
	}
	err := a.do(ctx, "POST", "/v1/sandboxes", map[string]any{
		"network": map[string]string{"mode": "none"}, "labels": benchLabels, "timeoutMs": time.Hour.Milliseconds(),
	}, &sb, http.StatusCreated)
	if err == nil && sb.ID == "" {
		err = errors.New("POST /v1/sandboxes: no id")
	}
	return sb.ID, err
}

// run runs command and returns its stdout; a non-zero exit is an error.
func (a *tupperAPI) run(ctx context.Context, id, command string) (string, error) {
	var res struct {
		OK     bool   `json:"ok"`
		Stdout string `json:"stdout"`
		Output string `json:"output"`
	}
	if err := a.do(ctx, "POST", "/v1/sandboxes/"+id+"/run", map[string]string{"command": command}, &res, http.StatusOK); err != nil {
		return "", err
	}
	if !res.OK {
		return "", fmt.Errorf("%q failed in %s: %s", command, id, res.Output)
	}
	return res.Stdout, nil
}

func (a *tupperAPI) destroy(ctx context.Context, id string) error {
	return a.do(ctx, "DELETE", "/v1/sandboxes/"+id, nil, nil, http.StatusNoContent)
}

// dockerAPI is a client of Docker Engine's API on its unix socket (DOCKER_HOST when it is a
// unix:// address, else /var/run/docker.sock), with keep-alive like docker's own client.
type dockerAPI struct{ c *http.Client }

func newDockerAPI() *dockerAPI {
	sock := "/var/run/docker.sock"
	if h, ok := strings.CutPrefix(os.Getenv("DOCKER_HOST"), "unix://"); ok {
		sock = h
	}
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}
	return &dockerAPI{c: &http.Client{Transport: tr, Timeout: time.Minute}}
}

// do sends a request (in as JSON) and decodes the answer into out (nil: read and discard it).
func (d *dockerAPI) do(ctx context.Context, method, path string, in, out any) error {
	err := jsonCall(ctx, d.c, method, "http://docker"+path, "", in, out, func(status int) bool { return status < 300 })
	if err != nil {
		return fmt.Errorf("docker %w", err)
	}
	return nil
}

// create makes a container of image running argv with no network.
func (d *dockerAPI) create(ctx context.Context, image string, argv ...string) (string, error) {
	var c struct{ Id string }
	err := d.do(ctx, "POST", "/containers/create", map[string]any{
		"Image": image, "Cmd": argv, "HostConfig": map[string]any{"NetworkMode": "none"},
	}, &c)
	return c.Id, err
}

func (d *dockerAPI) start(ctx context.Context, id string) error {
	return d.do(ctx, "POST", "/containers/"+id+"/start", nil, nil)
}

// wait waits for the container to stop; a non-zero exit is an error.
func (d *dockerAPI) wait(ctx context.Context, id string) error {
	var w struct{ StatusCode int }
	if err := d.do(ctx, "POST", "/containers/"+id+"/wait", nil, &w); err != nil {
		return err
	}
	if w.StatusCode != 0 {
		return fmt.Errorf("docker container %s exited %d", id, w.StatusCode)
	}
	return nil
}

func (d *dockerAPI) remove(ctx context.Context, id string) error {
	err := d.do(ctx, "DELETE", "/containers/"+id+"?force=true", nil, nil)
	if err != nil && strings.Contains(err.Error(), "404") {
		return nil
	}
	return err
}

// exec runs argv in a running container as docker exec does: create the exec, start it
// attached (the answer is its output, until it ends), inspect it for the exit code.
func (d *dockerAPI) exec(ctx context.Context, container string, argv ...string) error {
	var e struct{ Id string }
	if err := d.do(ctx, "POST", "/containers/"+container+"/exec", map[string]any{
		"AttachStdout": true, "AttachStderr": true, "Cmd": argv,
	}, &e); err != nil {
		return err
	}
	if err := d.do(ctx, "POST", "/exec/"+e.Id+"/start", map[string]any{"Detach": false, "Tty": false}, nil); err != nil {
		return err
	}
	var st struct {
		Running  bool
		ExitCode int
	}
	if err := d.do(ctx, "GET", "/exec/"+e.Id+"/json", nil, &st); err != nil {
		return err
	}
	if st.Running || st.ExitCode != 0 {
		return fmt.Errorf("docker exec %v: running %v, exit %d", argv, st.Running, st.ExitCode)
	}
	return nil
}

// e2bProject is the npm project whose E2B SDK the bench runs: --e2b, else test/e2b/v251
// under the current directory; "" and why when there is none installed.
func (b *bencher) e2bProject() (string, string) {
	dir := b.o.e2bDir
	if dir == "" {
		dir = filepath.Join("test", "e2b", "v251")
		if _, err := os.Stat(dir); err != nil {
			return "", "no --e2b DIR, and no test/e2b/v251 under the current directory (run from the repository's root)"
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "e2b")); err != nil {
		return "", fmt.Sprintf("E2B's SDK is not installed in %s (cd %s && npm ci)", dir, dir)
	}
	if _, err := os.Stat(filepath.Join(dir, "bench.mjs")); err != nil {
		return "", fmt.Sprintf("%s has no bench.mjs", dir)
	}
	if _, err := exec.LookPath("node"); err != nil {
		return "", "node not found"
	}
	return dir, ""
}

// e2bExec runs DIR/bench.mjs (test/e2b/bench.mjs with that project's SDK): a sandbox made
// through E2B's API on the server at url, then n timed commands.run('true') after a warm-up.
func (b *bencher) e2bExec(ctx context.Context, dir, url string, n int) (samples, string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "bench.mjs", strconv.Itoa(n))
	cmd.Dir = dir
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "E2B_") { // nothing of the shell's may point at E2B's cloud
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "E2B_API_URL="+url, "E2B_SANDBOX_URL="+url, "E2B_API_KEY="+b.e2bKey)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return nil, "", fmt.Errorf("node bench.mjs in %s: %v: %s", dir, err, strings.TrimSpace(errb.String()+out.String()))
	}
	return parseE2BBench(out.Bytes())
}

// parseE2BBench reads bench.mjs's last line: {"sdk": VERSION, "ms": [milliseconds…]}.
func parseE2BBench(out []byte) (samples, string, error) {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var res struct {
		SDK string    `json:"sdk"`
		MS  []float64 `json:"ms"`
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &res); err != nil || len(res.MS) == 0 {
		return nil, "", fmt.Errorf("bench.mjs printed %q, want {\"sdk\":…,\"ms\":[…]} last", out)
	}
	s := make(samples, len(res.MS))
	for i, ms := range res.MS {
		s[i] = time.Duration(ms * float64(time.Millisecond))
	}
	return s, res.SDK, nil
}
