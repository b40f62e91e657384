//go:build linux

package local

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tupper-dev/tupper/internal/testenv"
	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/sandbox"
)

// TestSecurity is the local provider's security suite (issue 3, item 8): each subtest is an
// attack from inside a sandbox that must fail, run under runc, runsc and crun in parallel.
// What it checks, and the result per runtime, is tabled in docs/security.md.
//
// The host side plants what an escape would reach: a directory under the host's /root
// holding a random marker, a host process whose argv carries a marker, and a TCP listener on
// the host's 127.0.0.1 that counts connections. Attacks that need a system call no tool of
// the host template makes run secHelper, a static Go program built once and written into
// the sandbox through the file API.
func TestSecurity(t *testing.T) {
	testenv.RequireRoot(t)
	env := newSecEnv(t)
	for _, rt := range runtimes {
		t.Run(rt, func(t *testing.T) {
			t.Parallel()
			s := newSecSuite(t, env, rt)
			t.Run("host-files", s.hostFiles)
			t.Run("host-processes", s.hostProcesses)
			t.Run("template-write", s.templateWrite)
			t.Run("template-modify", s.templateModify)
			t.Run("file-api-symlinks", s.fileAPISymlinks)
			t.Run("host-loopback", s.hostLoopback)
			t.Run("privileged-calls", s.privilegedCalls)
			t.Run("cross-sandbox", s.crossSandbox)
			t.Run("fork-bomb", s.forkBomb)
			t.Run("memory-hog", s.memoryHog)
			t.Run("swap", s.swap)
			t.Run("disk-fill", s.diskFill)
			t.Run("host-user", s.hostUser)
		})
	}
}

// secEnv is what the host plants once for every runtime.
type secEnv struct {
	helper     []byte // secHelper for the host's architecture
	marker     string // random text that must never be read from inside
	rootDir    string // /root/tupper-sec-*: holds secret.txt and nothing else
	secretPath string
	procMarker string // in the argv of a host sleep
	hostPID    int
	loopPort   int          // the host's 127.0.0.1 listener
	loopConns  atomic.Int64 // connections it accepted
}

func newSecEnv(t *testing.T) *secEnv {
	e := &secEnv{marker: "tupper-sec-marker-" + randHex(t)}
	e.helper = buildSecHelper(t)

	dir, err := os.MkdirTemp("/root", "tupper-sec-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	e.rootDir, e.secretPath = dir, filepath.Join(dir, "secret.txt")
	if err := os.WriteFile(e.secretPath, []byte(e.marker+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	e.procMarker = "tupper-sec-proc-" + randHex(t)
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	cmd := &exec.Cmd{Path: sleep, Args: []string{e.procMarker, "3600"}}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	e.hostPID = cmd.Process.Pid
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	e.loopPort = ln.Addr().(*net.TCPAddr).Port
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			e.loopConns.Add(1)
			c.Close()
		}
	}()
	return e
}

// assertHostUntouched checks that the planted directory still holds exactly secret.txt with
// the marker.
func (e *secEnv) assertHostUntouched(t *testing.T) {
	t.Helper()
	ents, err := os.ReadDir(e.rootDir)
	if err != nil {
		t.Fatalf("host marker directory: %v", err)
	}
	if len(ents) != 1 || ents[0].Name() != "secret.txt" {
		var names []string
		for _, d := range ents {
			names = append(names, d.Name())
		}
		t.Errorf("ESCAPE: the host's %s now holds %v", e.rootDir, names)
	}
	b, err := os.ReadFile(e.secretPath)
	if err != nil || string(b) != e.marker+"\n" {
		t.Errorf("ESCAPE: the host's %s changed: %q %v", e.secretPath, b, err)
	}
	if fi, err := os.Lstat(e.secretPath); err == nil && fi.Mode().Type() != 0 {
		t.Errorf("ESCAPE: the host's %s is now a %v", e.secretPath, fi.Mode().Type())
	}
}

// secSuite is one runtime's provider and the sandboxes its attacks share: a and b on
// network "all" (a attacks, b is the neighbour), n on network "none".
type secSuite struct {
	env     *secEnv
	rt      string
	p       *Provider
	a, b, n *Instance
	ctx     context.Context
}

const helperIn = "/tmp/tupper-sec"

func newSecSuite(t *testing.T, env *secEnv, rt string) *secSuite {
	p := newTestProvider(t, rt)
	if !p.Capabilities().Has(provider.CapNetworkAll) {
		testenv.Skip(t, "network all unavailable: "+fmt.Sprint(p.netErr))
	}
	s := &secSuite{env: env, rt: rt, p: p, ctx: context.Background()}
	all := provider.CreateSpec{Network: provider.Network{Mode: provider.NetworkAll}}
	s.a = create(t, p, all)
	s.b = create(t, p, all)
	s.n = create(t, p, provider.CreateSpec{Network: netNone})
	for _, inst := range []*Instance{s.a, s.b, s.n} {
		s.installHelper(t, inst)
	}
	return s
}

func (s *secSuite) installHelper(t *testing.T, inst *Instance) {
	t.Helper()
	mode := uint32(0o755)
	if err := inst.WriteFile(s.ctx, helperIn, bytes.NewReader(s.env.helper), &mode); err != nil {
		t.Fatalf("writing the helper: %v", err)
	}
}

// sdk is the SDK's handle on inst, for the file API the way callers use it.
func (s *secSuite) sdk(t *testing.T, inst *Instance) *sandbox.Sandbox {
	t.Helper()
	b, err := sandbox.Connect(s.ctx, s.p, inst.ID(), sandbox.ConnectOptions{SkipRecoverSecrets: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// sh runs cmd in inst and returns stdout and stderr together, and the exit code.
func (s *secSuite) sh(t *testing.T, inst *Instance, cmd string) (string, int) {
	t.Helper()
	out, errOut, code := runCode(t, inst, cmd)
	return strings.TrimSpace(out + "\n" + errOut), code
}

// mustFail runs cmd, which must exit non-zero with want in its output and without the host
// marker.
func (s *secSuite) mustFail(t *testing.T, inst *Instance, cmd, want string) {
	t.Helper()
	out, code := s.sh(t, inst, cmd)
	if strings.Contains(out, s.env.marker) {
		t.Errorf("ESCAPE: %q printed the host marker: %s", cmd, out)
	}
	if code == 0 || !strings.Contains(out, want) {
		t.Errorf("%q: exit %d, output %q; want a failure with %q", cmd, code, out, want)
	}
}

// mustNotExist checks that path does not exist in inst (lstat: ENOENT).
func (s *secSuite) mustNotExist(t *testing.T, inst *Instance, path string) {
	t.Helper()
	if r := s.helper(t, inst, "stat "+path); r["stat"] != "ENOENT" {
		t.Errorf("lstat %s in the sandbox: %q, want ENOENT", path, r["stat"])
	}
}

// helper runs secHelper in inst with args and returns its "name result" lines.
func (s *secSuite) helper(t *testing.T, inst *Instance, args string) map[string]string {
	t.Helper()
	out := run(t, inst, helperIn+" "+args)
	res := map[string]string{}
	for line := range strings.Lines(out) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), " "); ok {
			res[k] = v
		}
	}
	return res
}

// 1. Host files outside the template: the host's /root, the state root, another sandbox.
func (s *secSuite) hostFiles(t *testing.T) {
	e := s.env
	base := filepath.Base(e.rootDir)
	for _, inst := range []*Instance{s.a, s.n} {
		s.mustFail(t, inst, "cat "+e.secretPath, "No such file or directory")
		s.mustNotExist(t, inst, e.rootDir)
		// The sandbox has a /root of its own, which does not have the host's entries.
		if out := run(t, inst, "ls -A /root; echo listed"); strings.Contains(out, base) || !strings.HasSuffix(out, "listed") {
			t.Errorf("the sandbox's /root lists %q", out)
		}
		// Walk the whole tree but the host's own read-only /usr (which has no /root) and /proc.
		found := run(t, inst, "find / -xdev \\( -path /proc -o -path /sys -o -path /usr \\) -prune -o -name 'tupper-sec-*' -print 2>/dev/null; echo walked")
		if found != "walked" {
			t.Errorf("ESCAPE: find saw %q", found)
		}
		// /proc: the agent's root is the sandbox's own (and closed: the agent is not dumpable),
		// a command's root is its own, and no host process is there to borrow one from.
		s.mustFail(t, inst, "cat /proc/1/root"+e.secretPath, "Permission denied")
		s.mustFail(t, inst, "cat /proc/self/root"+e.secretPath, "No such file or directory")
		s.mustFail(t, inst, "cat /proc/*/root"+e.secretPath, "")
		s.mustFail(t, inst, "cat /proc/1/cwd/../../../"+e.secretPath, "Permission denied")
	}
	// The file API (the agent's view, which under runc still has /.tupper).
	for _, inst := range []*Instance{s.a, s.n} {
		for _, p := range []string{e.secretPath, "/proc/1/root" + e.secretPath, "/proc/self/root" + e.secretPath,
			"/../../.." + e.secretPath, "/workspace/../../" + e.secretPath} {
			if _, err := s.sdk(t, inst).Files.Read(s.ctx, p); !errors.Is(err, sandbox.CodeNotFound) {
				t.Errorf("Files.Read(%q): %v, want not_found", p, err)
			}
		}
	}

	// The state root: the provider's Home, and b's directory (its socket, record, bundle).
	bdir := s.p.lay.dir(s.b.ID())
	for _, p := range []string{s.p.cfg.Home, bdir, s.p.lay.record(s.b.ID()), s.p.lay.run(s.b.ID())} {
		s.mustNotExist(t, s.a, p)
		if _, err := s.sdk(t, s.a).Files.Read(s.ctx, p+"/record.json"); !errors.Is(err, sandbox.CodeNotFound) {
			t.Errorf("Files.Read(%q): %v, want not_found", p+"/record.json", err)
		}
	}
	if out, _ := s.sh(t, s.a, "grep -rl "+s.b.ID()+" /etc /tmp /workspace /root /home /var 2>/dev/null; echo done"); out != "done" {
		t.Errorf("b's id appears in a's files: %q", out)
	}

	// Another sandbox's files: b writes a marker; a cannot find it anywhere.
	bm := "tupper-sec-b-" + randHex(t)
	run(t, s.b, "echo "+bm+" > /workspace/b-secret; echo "+bm+" > /tmp/b-secret")
	s.mustFail(t, s.a, "cat /workspace/b-secret /tmp/b-secret", "No such file or directory")
	if _, err := s.sdk(t, s.a).Files.Read(s.ctx, "/workspace/b-secret"); !errors.Is(err, sandbox.CodeNotFound) {
		t.Errorf("a's Files.Read of b's file: %v, want not_found", err)
	}
	if out, _ := s.sh(t, s.a, "grep -rl "+bm+" /workspace /tmp /root /home /etc /var /dev/shm 2>/dev/null; echo done"); out != "done" {
		t.Errorf("b's marker visible in a: %q", out)
	}
	e.assertHostUntouched(t)
}

// 2. Host processes are invisible.
func (s *secSuite) hostProcesses(t *testing.T) {
	e := s.env
	// The host sees its sleep, so the marker is there to be seen.
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", e.hostPID)); err != nil || !bytes.Contains(b, []byte(e.procMarker)) {
		t.Fatalf("host sleep not running: %q %v", b, err)
	}
	for _, inst := range []*Instance{s.a, s.n} {
		// A sandbox marker process shows that ps and /proc list what is there.
		own := "tupper-sec-own-" + randHex(t)
		out := run(t, inst, "bash -c 'exec -a "+own+" sleep 30' & sleep 0.2; ps -eo pid,args; for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; done; kill $!")
		if strings.Contains(out, e.procMarker) {
			t.Errorf("ESCAPE: the sandbox sees the host process %d: %s", e.hostPID, out)
		}
		if !strings.Contains(out, own) {
			t.Errorf("the sandbox's own process is missing from its listing, so the check proves nothing: %s", out)
		}
		if e.hostPID > 1000 {
			s.mustFail(t, inst, fmt.Sprintf("kill -0 %d", e.hostPID), "No such process")
			s.mustFail(t, inst, fmt.Sprintf("cat /proc/%d/cmdline", e.hostPID), "No such file or directory")
		}
		// PID 1 is the agent, not the host's init.
		if got := run(t, inst, "tr '\\0' ' ' < /proc/1/cmdline"); !strings.Contains(got, "agent") {
			t.Errorf("pid 1 is %q", got)
		}
	}
}

// 3. Root inside writes anywhere, the host's /usr included (TestHostTemplateWritable has
// more), and what one sandbox writes stays in its own upper layer: never on the host, in
// the template or in another sandbox.
func (s *secSuite) templateWrite(t *testing.T) {
	m := "tupper-sec-tpl-" + randHex(t)
	for _, d := range []string{"/usr", "/usr/bin", "/bin", "/sbin", "/lib", "/usr/local"} {
		run(t, s.a, "touch "+d+"/"+m)
	}
	if err := s.sdk(t, s.a).Files.Write(s.ctx, "/usr/bin/"+m+".api", []byte("x"), sandbox.WriteOptions{}); err != nil {
		t.Errorf("Files.Write into /usr/bin: %v", err)
	}
	for _, d := range []string{"/usr", "/usr/bin", "/bin", "/sbin", "/lib", "/usr/local"} {
		for _, f := range []string{d + "/" + m, d + "/" + m + ".api"} {
			if _, err := os.Lstat(f); err == nil {
				os.Remove(f)
				t.Errorf("ESCAPE: a sandbox created the host's %s", f)
			}
		}
	}
	for _, inst := range []*Instance{s.b, s.n} {
		if out, _ := s.sh(t, inst, "ls /usr /usr/bin /usr/local | grep -c "+m+"; true"); out != "0" {
			t.Errorf("a's write to /usr shows in another sandbox: %q", out)
		}
	}
	// /etc is the sandbox's own (upper layer): writable inside, invisible everywhere else.
	run(t, s.a, "echo "+m+" > /etc/"+m+"; echo '"+m+":x:0:0::/:/bin/sh' >> /etc/passwd; echo "+m+" > /workspace/"+m+"; echo "+m+" > /tmp/"+m)
	for _, inst := range []*Instance{s.b, s.n} {
		if out, _ := s.sh(t, inst, "grep -rl "+m+" /etc /workspace /tmp 2>/dev/null; echo done"); out != "done" {
			t.Errorf("a's write shows in another sandbox: %q", out)
		}
	}
	for _, p := range []string{"/etc/" + m, "/workspace/" + m, "/tmp/" + m} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("ESCAPE: a's write shows on the host at %s", p)
		}
	}
	if b, _ := os.ReadFile("/etc/passwd"); bytes.Contains(b, []byte(m)) {
		t.Errorf("ESCAPE: a's /etc/passwd line is in the host's /etc/passwd")
	}
	// The shared lower layer on the host is unchanged.
	filepath.WalkDir(s.p.lay.templates(), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if strings.Contains(d.Name(), m) {
			t.Errorf("a's write is in the template at %s", p)
		}
		if d.Type().IsRegular() {
			if b, _ := os.ReadFile(p); bytes.Contains(b, []byte(m)) {
				t.Errorf("a's write is in the template's %s", p)
			}
		}
		return nil
	})
}

// 3b. Every way of changing an existing host file of the template works on the sandbox's
// copy (overlayfs copies it up) and the host's file keeps its bytes, mode and times, and
// stays executable by the host while a sandbox holds its copy open for writing. The victim
// is a file the test puts under the host's /usr/local/share, never a file the host needs:
// under runsc 20240729, open(O_TRUNC) on the bound /usr of old used to reach the gofer and
// truncate the host's file.
func (s *secSuite) templateModify(t *testing.T) {
	dir := "/usr/local/share"
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	victim := filepath.Join(dir, "tupper-sec-victim-"+randHex(t))
	content := []byte("#!/bin/sh\n# tupper victim: must stay as it is\nexit 0\n")
	if err := os.WriteFile(victim, content, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(victim) })
	before, err := os.Stat(victim)
	if err != nil {
		t.Fatal(err)
	}
	// A command that holds it open for writing while the host runs it: a writable open that
	// reached the host's file would make the host's exec fail with ETXTBSY.
	s.sh(t, s.a, "(exec 3<>"+victim+" && sleep 3) >/dev/null 2>&1 & sleep 0.5")
	if out, err := exec.Command(victim).CombinedOutput(); err != nil {
		t.Errorf("the host cannot run %s while the sandbox holds it: %v %s", victim, err, out)
	}
	r := s.helper(t, s.a, "modify "+victim)
	for _, op := range []string{"open-trunc", "open-wronly", "open-rdwr", "open-append", "truncate", "chmod", "chown", "utimes", "rename"} {
		if got := r[op]; got != "ok" {
			t.Errorf("%s of the sandbox's copy of %s: %q, want ok (root's own writable root)", op, victim, got)
		}
	}
	after, err := os.Stat(victim)
	if err != nil {
		t.Fatalf("ESCAPE: the host's %s is gone: %v", victim, err)
	}
	if b, _ := os.ReadFile(victim); !bytes.Equal(b, content) || after.Mode() != before.Mode() || !after.ModTime().Equal(before.ModTime()) {
		t.Errorf("ESCAPE: the sandbox changed the host's %s: %q, mode %v, mtime %v (was %v, %v)", victim, b, after.Mode(), after.ModTime(), before.Mode(), before.ModTime())
	}
}

// 4. Symlinks planted in the sandbox never make the file API read or write a host path,
// and downloads never write through symlinks already in the host directory.
func (s *secSuite) fileAPISymlinks(t *testing.T) {
	e := s.env
	files := s.sdk(t, s.a).Files
	bRun := s.p.lay.run(s.b.ID())
	aRun := s.p.lay.run(s.a.ID())
	links := map[string]string{
		"/workspace/l-root":   e.rootDir,
		"/workspace/l-proc":   "/proc/1/root" + e.rootDir,
		"/workspace/l-self":   "/proc/self/root" + e.rootDir,
		"/workspace/l-dotdot": "../../../../../../.." + e.rootDir,
		"/workspace/l-home":   s.p.cfg.Home,
		"/workspace/l-b":      bRun,
		"/workspace/l-run":    agentRunDir, // a's own socket directory: on the host's disk
	}
	var script strings.Builder
	for l, target := range links {
		fmt.Fprintf(&script, "ln -sfn %s %s\n", target, l)
	}
	run(t, s.a, script.String())
	bRunBefore := dirNames(t, bRun)
	aRunBefore := dirNames(t, aRun)

	for l := range links {
		// Read through the link.
		if data, err := files.Read(s.ctx, l+"/secret.txt"); bytes.Contains(data, []byte(e.marker)) {
			t.Errorf("ESCAPE: Files.Read(%s/secret.txt) read the host marker", l)
		} else if err == nil && l != "/workspace/l-run" {
			t.Errorf("Files.Read(%s/secret.txt) read %q", l, data)
		}
		// Write through the link: it must fail, or land inside the sandbox.
		pwn := "pwned-" + randHex(t)
		err := files.Write(s.ctx, l+"/secret.txt", []byte(pwn), sandbox.WriteOptions{})
		if err == nil {
			got, _ := files.Read(s.ctx, l+"/secret.txt")
			if string(got) != pwn {
				t.Errorf("Files.Write(%s/secret.txt) worked but the sandbox reads back %q", l, got)
			}
		}
		if err := files.Write(s.ctx, l+"/new-"+randHex(t), []byte(pwn), sandbox.WriteOptions{}); err == nil {
			t.Logf("Files.Write through %s created a file (where is checked below)", l)
		}
		// Upload into a directory that is the link.
		up := t.TempDir()
		os.WriteFile(filepath.Join(up, "up.txt"), []byte(pwn), 0o644)
		os.MkdirAll(filepath.Join(up, "sub"), 0o755)
		os.WriteFile(filepath.Join(up, "sub", "up2.txt"), []byte(pwn), 0o644)
		// A symlink in the local directory pointing at the host secret is skipped, not sent.
		os.Symlink(e.secretPath, filepath.Join(up, "leak.txt"))
		files.Upload(s.ctx, up, l, sandbox.UploadOptions{})
		e.assertHostUntouched(t)
	}
	// The upload never sent the host secret through the local symlink.
	if out, _ := s.sh(t, s.a, "cat /workspace/l-*/leak.txt /root"+e.rootDir[len("/root"):]+"/leak.txt 2>/dev/null; echo done"); strings.Contains(out, e.marker) {
		t.Errorf("ESCAPE: Upload followed a local symlink to the host secret")
	}
	if got := dirNames(t, bRun); got != bRunBefore {
		t.Errorf("ESCAPE: writes through a's links changed b's run directory on the host: %s -> %s", bRunBefore, got)
	}
	if got := dirNames(t, aRun); got != aRunBefore {
		t.Errorf("FINDING: the file API followed a link to /.tupper/run and wrote into a's state directory on the host's disk (%s): %s -> %s", aRun, aRunBefore, got)
	}
	if _, err := os.Lstat(filepath.Join(s.p.cfg.Home, "secret.txt")); err == nil {
		t.Errorf("ESCAPE: a write through a link to the Home created %s", filepath.Join(s.p.cfg.Home, "secret.txt"))
	}

	// Download a sandbox directory holding links (to host paths, to /, to the socket
	// directory) into a host directory that already holds symlinks pointing at the host.
	run(t, s.a, strings.Join([]string{
		"mkdir -p /workspace/dl/sub /workspace/dl/esc",
		"echo from-sandbox > /workspace/dl/hostlink",
		"echo from-sandbox > /workspace/dl/sub/f",
		"echo from-sandbox > /workspace/dl/esc/f",
		"ln -s " + e.rootDir + " /workspace/dl/l-root",
		"ln -s / /workspace/dl/l-slash",
		"ln -s ../../../../.. /workspace/dl/l-up",
		"ln -s " + agentRunDir + " /workspace/dl/l-run",
	}, " && "))
	parent := t.TempDir()
	local := filepath.Join(parent, "dl")
	os.MkdirAll(local, 0o755)
	// hostlink: a file symlink to the host secret; the download must replace the link, not
	// write through it.
	os.Symlink(e.secretPath, filepath.Join(local, "hostlink"))
	if err := files.Download(s.ctx, "/workspace/dl", local); err != nil {
		t.Errorf("download: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(local, "hostlink")); err != nil || string(b) != "from-sandbox\n" {
		t.Errorf("downloaded hostlink: %q %v", b, err)
	}
	for _, l := range []string{"l-root", "l-slash", "l-up", "l-run"} {
		if _, err := os.Lstat(filepath.Join(local, l)); err == nil {
			t.Errorf("download created %s for a sandbox symlink", l)
		}
	}
	// esc: a directory symlink to the host's marker directory; the download must refuse to
	// go through it.
	local2 := filepath.Join(parent, "dl2")
	os.MkdirAll(local2, 0o755)
	os.Symlink(e.rootDir, filepath.Join(local2, "esc"))
	err := files.Download(s.ctx, "/workspace/dl", local2)
	if err == nil || !strings.Contains(err.Error(), "escapes") {
		t.Errorf("download through a local symlink to the host: %v, want a path-escapes error", err)
	}
	if got := dirNames(t, parent); got != "dl dl2" {
		t.Errorf("download created %q next to its target", got)
	}
	e.assertHostUntouched(t)
}

// dirNames lists dir's entries, sorted and space-separated.
func dirNames(t *testing.T, dir string) string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range ents {
		names = append(names, d.Name())
	}
	return strings.Join(names, " ")
}

// 5. A listener on the host's 127.0.0.1 is out of reach with network "none" and "all".
func (s *secSuite) hostLoopback(t *testing.T) {
	e := s.env
	before := e.loopConns.Load()
	addr := fmt.Sprintf("127.0.0.1:%d", e.loopPort)
	for name, inst := range map[string]*Instance{"none": s.n, "all": s.a} {
		// 127.0.0.1 inside is the sandbox's own loopback: nothing listens there.
		if r := s.helper(t, inst, "connect "+addr); r["connect"] != "ECONNREFUSED" {
			t.Errorf("network %s: connect %s: %q, want ECONNREFUSED", name, addr, r["connect"])
		}
		s.mustFail(t, inst, fmt.Sprintf("bash -c 'exec 3<>/dev/tcp/127.0.0.1/%d'", e.loopPort), "Connection refused")
		s.mustFail(t, inst, fmt.Sprintf("git ls-remote http://127.0.0.1:%d/x", e.loopPort), "Failed to connect")
		// No routes to change (no CAP_NET_ADMIN), e.g. to send 127/8 to the gateway.
		s.mustFail(t, inst, "ip route add 127.1.0.0/16 via "+s.p.net.Gateway().String(), "")
		if out, _ := s.sh(t, inst, "ip link set lo down"); !strings.Contains(out, "Operation not permitted") && !strings.Contains(out, "Permission denied") {
			t.Errorf("network %s: ip link set lo down: %q", name, out)
		}
	}
	// Network none has no route anywhere: not even the bridge's gateway.
	// (gVisor's netstack said EHOSTUNREACH where Linux says ENETUNREACH until 2025; since, as
	// Linux.)
	unreach := []string{"ENETUNREACH"}
	if s.rt == RuntimeRunsc {
		unreach = append(unreach, "EHOSTUNREACH")
	}
	if r := s.helper(t, s.n, "connect "+net.JoinHostPort(s.p.net.Gateway().String(), strconv.Itoa(e.loopPort))); !slices.Contains(unreach, r["connect"]) {
		t.Errorf("network none: connect to the gateway: %q, want one of %s", r["connect"], unreach)
	}
	// Network all does not reach the host either: the firewall refuses everything a
	// sandbox sends to the host's addresses, the gateway's included, whether or not
	// something listens there (the egress matrix is TestSecurityNetwork's).
	gw, gwConns := countingListener(t, "tcp", net.JoinHostPort(s.p.net.Gateway().String(), "0"))
	for _, addr := range []string{gw.Addr().String(), net.JoinHostPort(s.p.net.Gateway().String(), strconv.Itoa(e.loopPort))} {
		if r := s.helper(t, s.a, "connect "+addr); r["connect"] != "EHOSTUNREACH" {
			t.Errorf("network all: connect to the host at %s: %q, want EHOSTUNREACH (refused by the firewall)", addr, r["connect"])
		}
	}
	if n := gwConns.Load(); n != 0 {
		t.Errorf("ESCAPE: the host's listener on the gateway address accepted %d connections from a sandbox", n)
	}
	// Positive control: the host reaches a listener in a through the bridge, and a sees the
	// gateway as the peer, so the refusals above are the firewall's, not a dead link.
	port := 20000 + int(randUint16(t)%20000)
	log := "/tmp/tupper-sec-host-conns"
	if _, err := s.a.Exec(s.ctx, provider.ExecRequest{Command: fmt.Sprintf("%s listen 0.0.0.0:%d %s", helperIn, port, log), Detach: true}); err != nil {
		t.Fatal(err)
	}
	aIP := s.ip(t, s.a)
	var derr error
	for start := time.Now(); time.Since(start) < 10*time.Second; time.Sleep(50 * time.Millisecond) {
		var c net.Conn
		if c, derr = net.DialTimeout("tcp", net.JoinHostPort(aIP, strconv.Itoa(port)), time.Second); derr == nil {
			c.Close()
			break
		}
	}
	if derr != nil {
		t.Errorf("the host cannot reach a's listener at %s:%d: %v", aIP, port, derr)
	} else if out := waitFor(t, s.a, "cat "+log, s.p.net.Gateway().String()); !strings.Contains(out, s.p.net.Gateway().String()+":") {
		t.Errorf("a's listener saw %q, want a connection from the gateway %s", out, s.p.net.Gateway())
	}
	if n := e.loopConns.Load() - before; n != 0 {
		t.Errorf("ESCAPE: the host's loopback listener accepted %d connections from sandboxes", n)
	}
}

// 9. Privileged calls: mount, ptrace, module loading, raw sockets and friends.
func (s *secSuite) privilegedCalls(t *testing.T) {
	want := map[string]string{
		"mount-tmpfs":          "EPERM",
		"remount-usr-rw":       "EPERM",
		"umount-tupper":        "EPERM",
		"unshare-mnt":          "EPERM",
		"umount-after-unshare": "EPERM",
		"mount-after-unshare":  "EPERM",
		"unshare-user":         "EPERM",
		"ptrace-attach-1":      "EPERM",
		"ptrace-seize-1":       "EPERM",
		"proc1-mem":            "EACCES",
		"proc1-environ":        "EACCES",
		"proc1-root":           "EACCES",
		"init_module":          "EPERM",
		"finit_module":         "EPERM",
		"delete_module":        "EPERM",
		"kexec_load":           "EPERM",
		"raw-socket":           "EPERM",
		"packet-socket":        "EPERM",
		"vsock-stream":         "EPERM",
		"vsock-dgram":          "EPERM",
		"open_by_handle_at":    "EPERM",
		"mknod-block":          "EPERM",
		"bpf":                  "EPERM",
		"keyctl":               "EPERM",
		"io_uring_setup":       "EPERM",
		"userfaultfd":          "EPERM",
		"perf_event_open":      "EPERM",
		"write-sysrq":          "EROFS",
		"write-proc-sys":       "EROFS",
		"write-sys":            "EROFS",
		"no_new_privs":         "1",
		"cap-sys-admin":        "no",
		"cap-sys-module":       "no",
		"cap-sys-ptrace":       "no",
		"cap-net-raw":          "no",
		"cap-net-admin":        "no",
		"cap-mknod":            "no",
	}
	if !fileExists("/proc/sysrq-trigger") {
		want["write-sysrq"] = "ENOENT" // this kernel has no magic SysRq
	}
	if s.rt != RuntimeRunsc && s.p.userns {
		// Set-uid programs (sudo) work inside a user namespace: they raise a process to
		// the sandbox's root at most, whose capabilities the rows above bound (the
		// agent drops CAP_SYS_ADMIN from the bounding set, so none regains it).
		want["no_new_privs"] = "0"
	}
	// Other refusals that count, per key: gVisor answers with its own errnos, which differ
	// between releases (checked with Debian's 20221219 and 20240729).
	also := map[string][]string{}
	if s.rt == RuntimeRunsc {
		// Its /proc and /sys are its own; raw and packet sockets without CAP_NET_RAW are
		// EPERM or do not exist; 20221219 accepts unshare(CLONE_NEWNS) as a no-op (one mount
		// namespace), after which mount and umount are still refused.
		also["write-sysrq"] = []string{"EPERM", "EIO", "EACCES"}
		also["write-proc-sys"] = []string{"EPERM", "EACCES"}
		also["write-sys"] = []string{"ENOENT", "EPERM", "EACCES"}
		also["raw-socket"] = []string{"EAFNOSUPPORT"}
		also["packet-socket"] = []string{"EAFNOSUPPORT"}
		also["unshare-mnt"] = []string{"ok"}
		// gVisor until 2025 lets any process read a non-dumpable process's environ (since,
		// EACCES as Linux); where it can be read, the agent's holds only PATH, HOME and LANG
		// (secrets are in its hidden config).
		also["proc1-environ"] = []string{"ok"}
		env := run(t, s.a, "tr '\\0' '\\n' < /proc/1/environ 2>/dev/null | cut -d= -f1 | sort | tr '\\n' ' '")
		if env != "HOME LANG PATH" && env != "" {
			t.Errorf("the agent's environment, readable under runsc, holds %q", env)
		}
	}
	for _, user := range []string{"root", "user"} {
		inst := s.a
		cmd := helperIn + " probe"
		var o, eo bytes.Buffer
		res, err := inst.Exec(s.ctx, provider.ExecRequest{Command: cmd, User: user, Stdout: &o, Stderr: &eo})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("probe as %s: %+v %v %s", user, res, err, eo.String())
		}
		got := map[string]string{}
		for line := range strings.Lines(o.String()) {
			if k, v, ok := strings.Cut(strings.TrimSpace(line), " "); ok {
				got[k] = v
			}
		}
		for k, w := range want {
			g := got[k]
			if user != "root" && g == "EACCES" && w == "EPERM" {
				g = w // an unprivileged user may be refused by permissions first
			}
			if user != "root" && (k == "write-sys" || k == "write-proc-sys" || k == "write-sysrq" || k == "mount-after-unshare") && g == "EACCES" {
				g = w
			}
			if g != w && !slices.Contains(also[k], g) {
				t.Errorf("as %s: %s = %q, want %q", user, k, g, w)
			}
		}
		t.Logf("as %s: %s", user, strings.Join(strings.Fields(o.String()), " "))
	}
}

// 10. One sandbox's socket, files or network never reach another sandbox.
func (s *secSuite) crossSandbox(t *testing.T) {
	// The agent's socket directory is hidden from commands.
	s.mustNotExist(t, s.a, agentRunDir)
	s.mustFail(t, s.a, "cat "+agentConfigPath, "No such file or directory")
	if r := s.helper(t, s.a, "readdir /.tupper"); r["readdir"] != "0" {
		t.Errorf("readdir /.tupper: %q; want an empty cover", r["readdir"])
	}
	for _, p := range []string{agentSocket, "/proc/1/root" + agentSocket, s.p.lay.socket(s.a.ID()), s.p.lay.socket(s.b.ID())} {
		r := s.helper(t, s.a, "dialunix "+p)
		if w := map[bool]string{true: "EACCES", false: "ENOENT"}[strings.HasPrefix(p, "/proc/1/")]; r["dialunix"] != w {
			t.Errorf("dial %s from a: %q, want %s", p, r["dialunix"], w)
		}
	}
	// The agent's socket shows in /proc/net/unix (same network namespace) but a path is not
	// a connection: nothing abstract listens.
	if out := run(t, s.a, "cat /proc/net/unix"); strings.Contains(out, " @") {
		t.Errorf("an abstract unix socket is listening in the sandbox: %s", out)
	}

	// Network "all": b listens on every address; a cannot reach it.
	bIP := s.bIP(t)
	port := 20000 + int(randUint16(t)%20000)
	log := "/tmp/tupper-sec-conns"
	if _, err := s.b.Exec(s.ctx, provider.ExecRequest{Command: fmt.Sprintf("%s listen 0.0.0.0:%d %s", helperIn, port, log), Detach: true}); err != nil {
		t.Fatal(err)
	}
	var r map[string]string
	for start := time.Now(); time.Since(start) < 10*time.Second; time.Sleep(50 * time.Millisecond) {
		if r = s.helper(t, s.b, fmt.Sprintf("connect 127.0.0.1:%d", port)); r["connect"] == "connected" {
			break
		}
	}
	if r["connect"] != "connected" {
		t.Fatalf("b's listener does not answer inside b: %q", r["connect"])
	}
	if r := s.helper(t, s.b, fmt.Sprintf("connect %s:%d", bIP, port)); r["connect"] != "connected" {
		t.Fatalf("b's listener does not answer on b's own address %s: %q", bIP, r["connect"])
	}
	got := s.helper(t, s.a, fmt.Sprintf("connect %s:%d", bIP, port))["connect"]
	if got != "EHOSTUNREACH" && got != "timeout" {
		t.Errorf("a connecting to b (%s:%d): %q, want EHOSTUNREACH or timeout", bIP, port, got)
	}
	if out := run(t, s.b, "cat "+log); strings.Count(out, "\n")+1 != 2 {
		t.Errorf("b's listener saw %q, want only b's own two connections", out)
	}
	// Nor by ARP/ICMP-free means: a's neighbour table has no b.
	if out := run(t, s.a, "cat /proc/net/arp"); strings.Contains(out, bIP+" ") && !strings.Contains(out, "0x0 ") {
		t.Errorf("a resolved b's address: %s", out)
	}
}

func (s *secSuite) bIP(t *testing.T) string {
	t.Helper()
	return s.ip(t, s.b)
}

// ip is inst's address on the bridge.
func (s *secSuite) ip(t *testing.T, inst *Instance) string {
	t.Helper()
	rec, err := s.p.lay.readRecord(inst.ID())
	if err != nil || rec.IP == "" {
		t.Fatalf("%s's address: %+v %v", inst.ID(), rec, err)
	}
	return rec.IP
}

// waitFor runs cmd in inst until its output holds want, for up to 10 s, and returns the
// last output.
func waitFor(t *testing.T, inst *Instance, cmd, want string) string {
	t.Helper()
	var out string
	for start := time.Now(); time.Since(start) < 10*time.Second; time.Sleep(50 * time.Millisecond) {
		if out, _, _ = runCode(t, inst, cmd); strings.Contains(out, want) {
			break
		}
	}
	return out
}

// 6. A fork bomb stays inside the pids limit; the host and a neighbour keep working; the
// bomb's sandbox can be destroyed.
func (s *secSuite) forkBomb(t *testing.T) {
	const limit = 256
	was := s.p.cfg.PidsLimit
	s.p.cfg.PidsLimit = limit
	bomb := create(t, s.p, provider.CreateSpec{Network: netNone})
	s.p.cfg.PidsLimit = was
	// Under runc and crun the limit is the commands' cgroup's, below the sandbox's, which has
	// room for the agent's threads too (commandcgroup.go); under runsc the sandbox's.
	sandboxCg := filepath.Dir(commandCgroupDir(bomb.ID()))
	cg, total := sandboxCg, limit
	if s.rt != RuntimeRunsc {
		cg, total = commandCgroupDir(bomb.ID()), limit+agentPidsReserve
	}
	if got := readTrim(cg + "/pids.max"); got != strconv.Itoa(limit) {
		testenv.Skip(t, "no cgroup v1 pids controller at "+cg+": pids.max = "+got)
	}
	rec, _ := s.p.lay.readRecord(bomb.ID())
	run(t, bomb, "echo kept > /workspace/kept")
	bootID := run(t, bomb, "cat "+kernelBootID)
	// A bomb that ends by itself: after bombFor seconds no process of it forks again, so
	// the sandbox can be asked afterwards whether its agent survived.
	const bombFor = 15
	cmd := fmt.Sprintf("exec bash -c 'f() { [ $SECONDS -lt %d ] || exit 0; f | f & }; f'", bombFor)
	started := time.Now()
	if _, err := bomb.Exec(s.ctx, provider.ExecRequest{Command: cmd, Detach: true}); err != nil {
		t.Fatal(err)
	}
	// Wait until the bomb runs into the limit (runsc: or takes the sandbox down).
	hit := false
	for ; time.Since(started) < bombFor*time.Second; time.Sleep(50 * time.Millisecond) {
		if pidsEventsMax(cg) > 0 || !alive(rec) {
			hit = true
			break
		}
	}
	if !hit {
		t.Fatalf("the bomb never reached the pids limit: current %s, events %q", readTrim(cg+"/pids.current"), readTrim(cg+"/pids.events"))
	}
	// While it runs: the host and a neighbour work.
	start := time.Now()
	if out, err := exec.Command("sh", "-c", "echo host-ok").Output(); err != nil || string(out) != "host-ok\n" {
		t.Errorf("host during the bomb: %q %v", out, err)
	}
	t.Logf("host command during the bomb: %v", time.Since(start))
	start = time.Now()
	if got := run(t, s.b, "echo neighbour-ok"); got != "neighbour-ok" {
		t.Errorf("neighbour during the bomb: %q", got)
	}
	t.Logf("neighbour command during the bomb: %v", time.Since(start))
	if s.rt != RuntimeRunsc {
		// And the bomb's own agent answers: its threads are not the bomb's to take, so a
		// command either runs or is refused as resource_exhausted, over and over.
		for range 10 {
			ctx, cancel := context.WithTimeout(s.ctx, 30*time.Second)
			_, err := bomb.Exec(ctx, provider.ExecRequest{Command: "true"})
			cancel()
			if err != nil && provider.CodeOf(err) != provider.CodeResourceExhausted {
				t.Errorf("FINDING: the bomb's agent during the bomb: %v", err)
				break
			}
		}
	}
	cur, _ := strconv.Atoi(readTrim(cg + "/pids.current"))
	if cur > limit {
		t.Errorf("pids.current %d with a limit of %d", cur, limit)
	}
	if all, _ := strconv.Atoi(readTrim(sandboxCg + "/pids.current")); all > total {
		t.Errorf("the sandbox's pids.current %d with a limit of %d", all, total)
	}
	t.Logf("pids.current %d, limit hit %d times", cur, pidsEventsMax(cg))
	// After the bomb: its processes are gone, and the agent answers (runc, crun). Under runsc
	// the sentry's host threads run into the limit and the whole sandbox stops (see
	// docs/security.md, finding 7); it must then be reported stopped, not hang.
	for time.Since(started) < (bombFor+60)*time.Second && alive(rec) {
		if n, _ := strconv.Atoi(readTrim(cg + "/pids.current")); n < 16 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(s.ctx, 30*time.Second)
	var out bytes.Buffer
	res, err := bomb.Exec(ctx, provider.ExecRequest{Command: "echo agent-ok", Stdout: &out})
	cancel()
	if err == nil && res.ExitCode == 0 && strings.TrimSpace(out.String()) == "agent-ok" {
		t.Logf("the bomb's sandbox answers %v after the bomb started", time.Since(started))
	} else {
		t.Errorf("FINDING: after the bomb its sandbox does not answer: %+v %v (pids.current %s)", res, err, readTrim(cg+"/pids.current"))
	}
	// Under runsc the bomb stopped the whole sandbox (docs/security.md, finding 7), which
	// came back by itself on its files, a new boot, with the reason recorded; under runc
	// and crun it never stopped.
	restarts, err := bomb.Restarts(s.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if in, err := bomb.Info(s.ctx); err != nil || len(in.Restarts) != len(restarts) {
		t.Errorf("Info's restarts: %+v %v, want %+v", in.Restarts, err, restarts)
	}
	newBoot := run(t, bomb, "cat "+kernelBootID)
	if s.rt == RuntimeRunsc && !alive(rec) {
		if len(restarts) != 1 || !strings.Contains(restarts[0].Reason, "pids limit") || newBoot == bootID {
			t.Errorf("FINDING: the sandbox the bomb stopped: restarts %+v, boot id %s then %s", restarts, bootID, newBoot)
		}
		t.Logf("KNOWN LIMITATION: under runsc the bomb stopped its whole sandbox, which was booted again: %+v", restarts)
	} else if len(restarts) != 0 || newBoot != bootID {
		t.Errorf("a sandbox that never stopped: restarts %+v, boot id %s then %s", restarts, bootID, newBoot)
	}
	if got := run(t, bomb, "cat /workspace/kept"); got != "kept" {
		t.Errorf("the bomb's sandbox lost its files: %q", got)
	}
	ctx, cancel = context.WithTimeout(s.ctx, time.Minute)
	defer cancel()
	start = time.Now()
	if err := s.p.Destroy(ctx, bomb.ID()); err != nil {
		t.Fatalf("destroying the bomb's sandbox: %v", err)
	}
	t.Logf("destroyed the bomb's sandbox in %v", time.Since(start))
	if left, _ := filepath.Glob("/sys/fs/cgroup/*/tupper/" + bomb.ID()); len(left) != 0 {
		t.Errorf("the bomb's cgroups are left: %v", left)
	}
	if got := run(t, s.b, "echo neighbour-ok"); got != "neighbour-ok" {
		t.Errorf("neighbour after the bomb: %q", got)
	}
}

func pidsEventsMax(cg string) int {
	f := strings.Fields(readTrim(cg + "/pids.events"))
	if len(f) == 2 && f[0] == "max" {
		n, _ := strconv.Atoi(f[1])
		return n
	}
	return 0
}

func readTrim(p string) string {
	b, _ := os.ReadFile(p)
	return strings.TrimSpace(string(b))
}

// 7. A memory hog is OOM-killed inside its sandbox; the host and a neighbour are unaffected.
func (s *secSuite) memoryHog(t *testing.T) {
	const memMB = 256
	hog := create(t, s.p, provider.CreateSpec{Network: netNone, Size: provider.Size{CPU: 1, MemoryMB: memMB, DiskGB: 1}})
	s.installHelper(t, hog)
	cg := "/sys/fs/cgroup/memory/tupper/" + hog.ID()
	if got := readTrim(cg + "/memory.limit_in_bytes"); got != strconv.Itoa(memMB<<20) {
		testenv.Skip(t, "no cgroup v1 memory controller at "+cg+": limit "+got)
	}
	rec, _ := s.p.lay.readRecord(hog.ID())
	agentAdj := readTrim(fmt.Sprintf("/proc/%d/oom_score_adj", rec.InitPID))
	// The agent raises a command's score just after starting it (it cannot run code in the
	// child before exec): read the command's own score once that has happened, as the OOM
	// killer sees it for the rest of the command's life.
	cmdAdj := run(t, hog, `i=0; while [ "$(cat /proc/$$/oom_score_adj)" != 1000 ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i+1)); done; cat /proc/$$/oom_score_adj`)
	t.Logf("oom_score_adj on the host: the agent (init) %s, a command %s", agentAdj, cmdAdj)
	if s.rt != RuntimeRunsc {
		// The OOM killer must pick a command before the agent: commands at 1000, the agent at
		// 0, or -1000 where the host has CAP_SYS_RESOURCE to lower it.
		if a, _ := strconv.Atoi(agentAdj); cmdAdj != "1000" || a > 0 || agentAdj == "" {
			t.Errorf("oom_score_adj: agent %q, command %q; want at most 0 and 1000", agentAdj, cmdAdj)
		}
	}
	ctx, cancel := context.WithTimeout(s.ctx, 60*time.Second)
	defer cancel()
	var out bytes.Buffer
	res, err := hog.Exec(ctx, provider.ExecRequest{Command: "exec " + helperIn + " alloc 2048", Stdout: &out, Stderr: &out})
	t.Logf("hog: %+v %v; last output %q", res, err, lastLines(out.String(), 2))
	if strings.Contains(out.String(), "allocated 2048") {
		t.Fatalf("ESCAPE: the hog allocated 2048 MB under a %d MB limit", memMB)
	}
	switch {
	case s.rt != RuntimeRunsc && err == nil:
		if res.ExitCode != 137 || res.Signal != "SIGKILL" || !res.OOMKilled {
			t.Errorf("hog: exit %d signal %q OOM-killed %v, want 137 SIGKILL (the OOM killer)", res.ExitCode, res.Signal, res.OOMKilled)
		}
		if got := run(t, hog, "echo agent-ok"); got != "agent-ok" {
			t.Errorf("after the hog: %q", got)
		}
	case s.rt != RuntimeRunsc:
		t.Errorf("FINDING: under %s the OOM killer took the agent with the hog: %v", s.rt, err)
	default:
		// Under runsc the sentry is one host process that holds all of the sandbox's memory:
		// the cgroup's OOM killer can only kill the whole sandbox, which comes back by itself
		// on its files (revive.go), the reason recorded; the hog's result says the OOM killer
		// ended it (ended.go).
		if err != nil || !res.OOMKilled || res.ExitCode != 137 {
			t.Errorf("under runsc the hog ended %+v, %v; want OOM-killed, 137", res, err)
		}
		// The sentry may still be ending: the next call revives it once it has.
		for start := time.Now(); alive(rec) && time.Since(start) < 30*time.Second; {
			time.Sleep(50 * time.Millisecond)
		}
		if got := run(t, hog, "echo agent-ok"); got != "agent-ok" {
			t.Errorf("the hog's sandbox after it stopped: %q", got)
		}
		if r, _ := hog.Restarts(s.ctx); len(r) != 1 || !strings.Contains(r[0].Reason, "memory limit") {
			t.Errorf("the hog's sandbox's restarts: %+v", r)
		}
	}
	if oc := readTrim(cg + "/memory.oom_control"); !strings.Contains(oc, "oom_kill ") || strings.Contains(oc, "oom_kill 0") {
		if s.rt != RuntimeRunsc { // under runsc the sandbox came back in new cgroups
			t.Errorf("memory.oom_control shows no OOM kill: %q", oc)
		}
	}
	if got := run(t, s.b, "echo neighbour-ok"); got != "neighbour-ok" {
		t.Errorf("neighbour after the hog: %q", got)
	}
	if out, err := exec.Command("sh", "-c", "echo host-ok").Output(); err != nil || string(out) != "host-ok\n" {
		t.Errorf("host after the hog: %q %v", out, err)
	}
	dctx, dcancel := context.WithTimeout(s.ctx, time.Minute)
	defer dcancel()
	if err := s.p.Destroy(dctx, hog.ID()); err != nil {
		t.Errorf("destroying the hog's sandbox: %v", err)
	}
}

// 7. A sandbox's memory plus swap is limited to its memory: neither its anonymous memory nor
// its disk (a tmpfs) can spill into the host's swap.
func (s *secSuite) swap(t *testing.T) {
	if !swapAccounted() {
		testenv.Skip(t, "the host's memory cgroup does not account swap (memory.memsw.* / memory.swap.max absent): no swap limit can be set")
	}
	rec, err := s.p.lay.readRecord(s.n.ID())
	if err != nil {
		t.Fatal(err)
	}
	limit := strconv.Itoa(rec.MemoryMB << 20)
	v1 := "/sys/fs/cgroup/memory/tupper/" + s.n.ID()
	if fileExists(v1) {
		if got := readTrim(v1 + "/memory.memsw.limit_in_bytes"); got != limit {
			t.Errorf("the host's %s/memory.memsw.limit_in_bytes = %s, want %s (the memory limit: no swap)", v1, got, limit)
		}
		if got := readTrim(v1 + "/memory.limit_in_bytes"); got != limit {
			t.Errorf("memory.limit_in_bytes = %s, want %s", got, limit)
		}
	} else if v2 := "/sys/fs/cgroup/tupper/" + s.n.ID(); fileExists(v2) {
		if got := readTrim(v2 + "/memory.swap.max"); got != "0" {
			t.Errorf("the host's %s/memory.swap.max = %s, want 0", v2, got)
		}
	} else {
		t.Fatalf("no memory cgroup of the sandbox at %s or %s", v1, v2)
	}
	// Inside, runc and crun show the sandbox its own cgroup; gVisor has a cgroupfs of its own.
	inside, _ := s.sh(t, s.n, "cat /sys/fs/cgroup/memory/memory.memsw.limit_in_bytes /sys/fs/cgroup/memory.swap.max 2>/dev/null")
	if s.rt != RuntimeRunsc && inside != limit && inside != "0" {
		t.Errorf("inside the sandbox: memory+swap limit %q, want %s", inside, limit)
	}
	t.Logf("inside: %q", inside)
}

// 8. Filling the disk stops with ENOSPC at the sandbox's disk size, on the sandbox's own
// tmpfs; the host's disk barely moves and a neighbour can still write.
func (s *secSuite) diskFill(t *testing.T) {
	fill := create(t, s.p, provider.CreateSpec{Network: netNone, Size: provider.Size{CPU: 1, MemoryMB: 1536, DiskGB: 1}})
	s.installHelper(t, fill)
	hostFree := func() int64 {
		var st syscall.Statfs_t
		if err := syscall.Statfs(s.p.cfg.Home, &st); err != nil {
			t.Fatal(err)
		}
		return int64(st.Bavail) * st.Bsize
	}
	before := hostFree()
	r := s.helper(t, fill, "fill /workspace/big")
	written, _ := strconv.ParseInt(r["written"], 10, 64)
	if r["fill"] != "ENOSPC" {
		t.Errorf("fill: %q after %d bytes, want ENOSPC", r["fill"], written)
	}
	if written > 1<<30 || written < 900<<20 {
		t.Errorf("fill wrote %d MiB into a 1 GiB disk", written>>20)
	}
	t.Logf("filled %d MiB", written>>20)
	if drop := before - hostFree(); drop > 256<<20 {
		t.Errorf("the host's free space at %s fell by %d MiB during the fill", s.p.cfg.Home, drop>>20)
	}
	// Everything writable shares the bound: /tmp too (under runsc a separate mount of it).
	if r := s.helper(t, fill, "fill /tmp/more"); r["fill"] != "ENOSPC" {
		t.Errorf("fill /tmp after /workspace: %q", r["fill"])
	} else if n, _ := strconv.ParseInt(r["written"], 10, 64); n > 64<<20 {
		t.Errorf("/tmp took %d MiB more after the disk was full", n>>20)
	}
	// /dev/shm is a 64 MiB tmpfs of its own.
	if r := s.helper(t, fill, "fill /dev/shm/big"); r["fill"] != "ENOSPC" {
		t.Errorf("fill /dev/shm: %q", r["fill"])
	} else if n, _ := strconv.ParseInt(r["written"], 10, 64); n > 64<<20 {
		t.Errorf("/dev/shm took %d MiB", n>>20)
	}
	// The file API reports a full disk as resource_exhausted.
	files := s.sdk(t, fill).Files
	if err := files.Write(s.ctx, "/workspace/more", bytes.Repeat([]byte("x"), 8<<20), sandbox.WriteOptions{}); !errors.Is(err, sandbox.CodeResourceExhausted) {
		t.Errorf("Files.Write on a full disk: %v, want resource_exhausted", err)
	}
	if got := run(t, s.b, "head -c 8388608 /dev/zero > /workspace/neighbour && wc -c < /workspace/neighbour && rm /workspace/neighbour"); got != "8388608" {
		t.Errorf("neighbour write during the full disk: %q", got)
	}
	run(t, fill, "rm -f /workspace/big /tmp/more /dev/shm/big /workspace/more")
	if got := run(t, fill, "echo ok > /workspace/small && cat /workspace/small"); got != "ok" {
		t.Errorf("after freeing the disk: %q", got)
	}
	dctx, cancel := context.WithTimeout(s.ctx, time.Minute)
	defer cancel()
	if err := s.p.Destroy(dctx, fill.ID()); err != nil {
		t.Errorf("destroying the fill sandbox: %v", err)
	}
}

func randHex(t testing.TB) string {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

func randUint16(t testing.TB) uint16 {
	b := make([]byte, 2)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return uint16(b[0])<<8 | uint16(b[1])
}

// buildSecHelper builds secHelperSource (buildHelper).
func buildSecHelper(t *testing.T) []byte { return buildHelper(t, secHelperSource) }

// helperBuilds are the builds of buildHelper, by source.
var helperBuilds sync.Map // string → *helperBuild

type helperBuild struct {
	once sync.Once
	bin  []byte
	err  error
}

// buildHelper builds a one-file Go program, src, for the host's architecture (the sandboxes
// run the host's kernel and template), static, once per test binary.
func buildHelper(t *testing.T, src string) []byte {
	t.Helper()
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(goBin); err != nil {
		goBin = testenv.RequireBinary(t, "go")
	}
	v, _ := helperBuilds.LoadOrStore(src, &helperBuild{})
	b := v.(*helperBuild)
	b.once.Do(func() {
		dir, err := os.MkdirTemp("", "tupper-helper-")
		if err != nil {
			b.err = err
			return
		}
		defer os.RemoveAll(dir)
		os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644)
		os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module helper\n\ngo 1.22\n"), 0o644)
		cmd := exec.Command(goBin, "build", "-trimpath", "-ldflags=-s -w", "-o", "h", ".")
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=", "GOWORK=off", "GOTOOLCHAIN=local")
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build of a test helper: %v: %s", err, out)
			return
		}
		b.bin, b.err = os.ReadFile(filepath.Join(dir, "h"))
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.bin
}

// secHelperSource is the in-sandbox helper. Each subcommand prints "name result" lines,
// result being "ok", an errno name (EPERM…) or a value.
//
//	probe                    privileged calls and the process's capabilities
//	connect HOST:PORT        a TCP connection (3 s): connected, an errno or timeout
//	udp HOST:PORT...         one datagram to each (broadcast allowed): "udp:HOST:PORT ok" or an errno
//	stat PATH                lstat: ok or an errno
//	readdir PATH             the number of entries, or an errno
//	dialunix PATH            a unix socket connection
//	listen ADDR LOG          accept TCP connections for good, appending each peer to LOG
//	alloc MB                 allocate and touch MB megabytes, printing progress
//	fill PATH                write PATH until an error: "fill ERRNO" and "written BYTES"
const secHelperSource = `package main

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"
)

var names = map[syscall.Errno]string{
	syscall.EPERM: "EPERM", syscall.EACCES: "EACCES", syscall.ENOENT: "ENOENT", syscall.ENOSYS: "ENOSYS",
	syscall.EROFS: "EROFS", syscall.EINVAL: "EINVAL", syscall.ENOSPC: "ENOSPC", syscall.ECONNREFUSED: "ECONNREFUSED",
	syscall.ETIMEDOUT: "ETIMEDOUT", syscall.EHOSTUNREACH: "EHOSTUNREACH", syscall.ENETUNREACH: "ENETUNREACH",
	syscall.EEXIST: "EEXIST", syscall.ENOTDIR: "ENOTDIR", syscall.ESRCH: "ESRCH", syscall.EBADF: "EBADF",
	syscall.EFAULT: "EFAULT", syscall.ENOMEM: "ENOMEM", syscall.EBUSY: "EBUSY", syscall.EOPNOTSUPP: "EOPNOTSUPP",
	syscall.EAFNOSUPPORT: "EAFNOSUPPORT", syscall.EPROTONOSUPPORT: "EPROTONOSUPPORT", syscall.ENODEV: "ENODEV",
	syscall.EIO: "EIO", syscall.ENOEXEC: "ENOEXEC", syscall.ESOCKTNOSUPPORT: "ESOCKTNOSUPPORT", syscall.EDQUOT: "EDQUOT", syscall.EFBIG: "EFBIG",
}

func errname(err error) string {
	if err == nil {
		return "ok"
	}
	var en syscall.Errno
	if errors.As(err, &en) {
		if n, ok := names[en]; ok {
			return n
		}
		return fmt.Sprintf("errno%d", int(en))
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "timeout"
	}
	return "error:" + strings.ReplaceAll(err.Error(), " ", "_")
}

// Numbers the syscall package lacks.
var nr = map[string]map[string]uintptr{
	"amd64": {"finit_module": 313, "open_by_handle_at": 304, "bpf": 321, "io_uring_setup": 425, "userfaultfd": 323,
		"init_module": 175, "delete_module": 176, "kexec_load": 246, "keyctl": 250, "perf_event_open": 298},
	"arm64": {"finit_module": 273, "open_by_handle_at": 265, "bpf": 280, "io_uring_setup": 425, "userfaultfd": 282,
		"init_module": 105, "delete_module": 106, "kexec_load": 104, "keyctl": 219, "perf_event_open": 241},
}

func sys(name string, a ...uintptr) error {
	n, ok := nr[runtime.GOARCH][name]
	if !ok {
		return fmt.Errorf("no number for %s on %s", name, runtime.GOARCH)
	}
	var args [6]uintptr
	copy(args[:], a)
	_, _, e := syscall.Syscall6(n, args[0], args[1], args[2], args[3], args[4], args[5])
	if e != 0 {
		return e
	}
	return nil
}

func p(name string, err error) { fmt.Println(name, errname(err)) }

func ptr(b []byte) uintptr { return uintptr(unsafe.Pointer(&b[0])) }

func probe() {
	runtime.LockOSThread()
	dir, _ := os.MkdirTemp("/tmp", "mnt")
	p("mount-tmpfs", syscall.Mount("tmpfs", dir, "tmpfs", 0, ""))
	p("remount-usr-rw", syscall.Mount("", "/usr", "", syscall.MS_REMOUNT|syscall.MS_BIND, ""))
	p("umount-tupper", syscall.Unmount("/.tupper", syscall.MNT_DETACH))
	p("unshare-mnt", syscall.Unshare(syscall.CLONE_NEWNS))
	p("umount-after-unshare", syscall.Unmount("/.tupper", syscall.MNT_DETACH))
	p("mount-after-unshare", syscall.Mount("tmpfs", dir, "tmpfs", 0, ""))
	p("unshare-user", syscall.Unshare(syscall.CLONE_NEWUSER))
	p("ptrace-attach-1", syscall.PtraceAttach(1))
	_, _, e := syscall.Syscall6(syscall.SYS_PTRACE, 0x4206, 1, 0, 0, 0, 0) // PTRACE_SEIZE
	p("ptrace-seize-1", errOrNil(e))
	f, err := os.Open("/proc/1/mem")
	if err == nil {
		f.Close()
	}
	p("proc1-mem", err)
	_, err = os.ReadFile("/proc/1/environ")
	p("proc1-environ", err)
	_, err = os.ReadDir("/proc/1/root/")
	p("proc1-root", err)
	empty := []byte{0}
	p("init_module", sys("init_module", ptr(empty), 1, ptr(empty)))
	fd, _ := syscall.Open("/proc/self/exe", syscall.O_RDONLY, 0)
	p("finit_module", sys("finit_module", uintptr(fd), ptr(empty), 0))
	mod := []byte("ext4\x00")
	p("delete_module", sys("delete_module", ptr(mod), 0))
	p("kexec_load", sys("kexec_load", 0, 0, 0, 0))
	s, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_RAW, syscall.IPPROTO_ICMP)
	if err == nil {
		syscall.Close(s)
	}
	p("raw-socket", err)
	s, err = syscall.Socket(syscall.AF_PACKET, syscall.SOCK_RAW, 0x0300) // htons(ETH_P_ALL)
	if err == nil {
		syscall.Close(s)
	}
	p("packet-socket", err)
	// vsock reaches the hypervisor whatever the network namespace.
	for name, typ := range map[string]int{"vsock-stream": syscall.SOCK_STREAM, "vsock-dgram": syscall.SOCK_DGRAM} {
		s, err = syscall.Socket(40, typ, 0) // AF_VSOCK
		if err == nil {
			syscall.Close(s)
		}
		p(name, err)
	}
	root, _ := syscall.Open("/", syscall.O_RDONLY, 0)
	handle := make([]byte, 64)
	handle[0] = 8 // handle_bytes
	p("open_by_handle_at", sys("open_by_handle_at", uintptr(root), ptr(handle), 0))
	p("mknod-block", syscall.Mknod("/tmp/tupper-sec-sda", syscall.S_IFBLK|0o600, 8<<8))
	attr := make([]byte, 128)
	p("bpf", sys("bpf", 0, ptr(attr), 128))
	p("keyctl", sys("keyctl", 0, 0, 0, 0, 0)) // KEYCTL_GET_KEYRING_ID
	params := make([]byte, 120)
	p("io_uring_setup", sys("io_uring_setup", 1, ptr(params)))
	p("userfaultfd", sys("userfaultfd", 0))
	pattr := make([]byte, 128)
	pattr[4] = 128 // size
	p("perf_event_open", sys("perf_event_open", ptr(pattr), 0, ^uintptr(0), ^uintptr(0), 0))
	p("write-sysrq", os.WriteFile("/proc/sysrq-trigger", []byte("h"), 0))
	p("write-proc-sys", os.WriteFile("/proc/sys/vm/drop_caches", []byte("3"), 0))
	p("write-sys", os.WriteFile("/sys/kernel/mm/transparent_hugepage/enabled", []byte("never"), 0))
	nnp, _, e := syscall.Syscall6(syscall.SYS_PRCTL, 39, 0, 0, 0, 0, 0) // PR_GET_NO_NEW_PRIVS
	if e != 0 {
		fmt.Println("no_new_privs", errname(e))
	} else {
		fmt.Println("no_new_privs", nnp)
	}
	st, _ := os.ReadFile("/proc/self/status")
	var capEff uint64
	for _, line := range strings.Split(string(st), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			capEff, _ = strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			fmt.Println("capeff", strings.TrimSpace(v))
		}
	}
	for name, bit := range map[string]uint{"cap-sys-admin": 21, "cap-sys-module": 16, "cap-sys-ptrace": 19, "cap-net-raw": 13, "cap-net-admin": 12, "cap-mknod": 27} {
		fmt.Println(name, map[bool]string{true: "yes", false: "no"}[capEff&(1<<bit) != 0])
	}
}

func errOrNil(e syscall.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}

func main() {
	switch os.Args[1] {
	case "probe":
		probe()
	case "connect":
		c, err := net.DialTimeout("tcp", os.Args[2], 3*time.Second)
		if err == nil {
			c.Close()
			fmt.Println("connect connected")
			return
		}
		fmt.Println("connect", errname(err))
	case "udp":
		c, err := net.ListenPacket("udp4", ":0")
		if err != nil {
			fmt.Println("udp", errname(err))
			return
		}
		if rc, err := c.(*net.UDPConn).SyscallConn(); err == nil {
			rc.Control(func(fd uintptr) { syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_BROADCAST, 1) })
		}
		for _, a := range os.Args[2:] {
			ua, err := net.ResolveUDPAddr("udp4", a)
			if err == nil {
				_, err = c.WriteTo([]byte("tupper-sec "+a), ua)
			}
			fmt.Println("udp:"+a, errname(err))
		}
	case "stat":
		_, err := os.Lstat(os.Args[2])
		fmt.Println("stat", errname(err))
	case "modify":
		p := os.Args[2]
		for _, o := range []struct {
			name  string
			flags int
		}{{"open-trunc", os.O_RDONLY | syscall.O_TRUNC}, {"open-wronly", os.O_WRONLY}, {"open-rdwr", os.O_RDWR}, {"open-append", os.O_WRONLY | os.O_APPEND}} {
			f, err := os.OpenFile(p, o.flags, 0)
			if err == nil {
				f.Close()
			}
			fmt.Println(o.name, errname(err))
		}
		fmt.Println("truncate", errname(os.Truncate(p, 0)))
		fmt.Println("chmod", errname(os.Chmod(p, 0o777)))
		fmt.Println("chown", errname(os.Chown(p, 1000, 1000)))
		fmt.Println("utimes", errname(os.Chtimes(p, time.Unix(0, 0), time.Unix(0, 0))))
		fmt.Println("rename", errname(os.Rename(p, p+".moved")))
		fmt.Println("unlink", errname(os.Remove(p)))
	case "readdir":
		ents, err := os.ReadDir(os.Args[2])
		if err != nil {
			fmt.Println("readdir", errname(err))
			return
		}
		fmt.Println("readdir", len(ents))
	case "dialunix":
		c, err := net.Dial("unix", os.Args[2])
		if err == nil {
			c.Close()
			fmt.Println("dialunix connected")
			return
		}
		fmt.Println("dialunix", errname(err))
	case "listen":
		ln, err := net.Listen("tcp", os.Args[2])
		if err != nil {
			fmt.Println("listen", errname(err))
			os.Exit(1)
		}
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if f, err := os.OpenFile(os.Args[3], os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
				fmt.Fprintln(f, c.RemoteAddr())
				f.Close()
			}
			c.Close()
		}
	case "alloc":
		mb, _ := strconv.Atoi(os.Args[2])
		w := bufio.NewWriter(os.Stdout)
		var keep [][]byte
		for i := 1; i <= mb; i++ {
			b := make([]byte, 1<<20)
			for j := 0; j < len(b); j += 4096 {
				b[j] = 1
			}
			keep = append(keep, b)
			if i%64 == 0 {
				fmt.Fprintf(w, "allocated %d\n", i)
				w.Flush()
			}
		}
		fmt.Println("alloc done", len(keep))
	case "fill":
		f, err := os.Create(os.Args[2])
		if err != nil {
			fmt.Println("fill", errname(err))
			fmt.Println("written 0")
			return
		}
		buf := make([]byte, 1<<20)
		var n int64
		for {
			k, err := f.Write(buf)
			n += int64(k)
			if err != nil {
				fmt.Println("fill", errname(err))
				break
			}
		}
		f.Close()
		fmt.Println("written", n)
	}
}
`

// TestSecurityDialSymlink replaces a sandbox's agent socket with a symlink to a host unix
// listener, as sandbox code that reached its socket directory could: every way the host
// dials the agent (the provider's client and DialEnvd, which the server's E2B data plane
// uses) must refuse it, and the host listener must see no connection.
func TestSecurityDialSymlink(t *testing.T) {
	p := newTestProvider(t, RuntimeRunc)
	inst := create(t, p, provider.CreateSpec{Network: netNone})
	hostSock := filepath.Join(t.TempDir(), "host.sock")
	_, accepted := countingListener(t, "unix", hostSock)
	sock := p.lay.socket(inst.ID())
	if err := os.Rename(sock, sock+".real"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(hostSock, sock); err != nil {
		t.Fatal(err)
	}
	defer func() { os.Remove(sock); os.Rename(sock+".real", sock) }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if c, err := inst.DialEnvd(ctx); err == nil {
		c.Close()
		t.Error("ESCAPE: DialEnvd followed a symlink in place of the agent's socket")
	}
	if _, err := inst.Exec(ctx, provider.ExecRequest{Command: "true"}); err == nil {
		t.Error("ESCAPE: Exec followed a symlink in place of the agent's socket")
	}
	if n := accepted.Load(); n != 0 {
		t.Errorf("ESCAPE: the host listener behind the symlink accepted %d connections", n)
	}
}

// TestSecurityHostEtc plants a marker in every host /etc file an administrator may keep
// credentials in (a proxy password in environment, a token in gitconfig, an exported secret
// in profile.d, bash.bashrc, profile, skel): no sandbox may see any of it, in its files or
// in a login or interactive shell's environment. The template is built from a copy of the
// host's /etc with the markers added (hostEtcDir), so the real one is never touched.
func TestSecurityHostEtc(t *testing.T) {
	testenv.RequireRoot(t)
	marker := "tupper-etc-marker-" + randHex(t)
	etc := t.TempDir()
	for _, e := range hostEtc {
		if err := copyTree(filepath.Join("/etc", e), filepath.Join(etc, e)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
	}
	plant := map[string]string{
		"environment":        "https_proxy=http://user:" + marker + "@proxy:3128\n",
		"gitconfig":          "[http]\n\textraHeader = Authorization: Bearer " + marker + "\n",
		"profile.d/creds.sh": "export API_TOKEN=" + marker + "\n",
		"profile":            "export PROFILE_TOKEN=" + marker + "\n",
		"bash.bashrc":        "export BASHRC_TOKEN=" + marker + "\n",
		"skel/.bashrc":       "export SKEL_TOKEN=" + marker + "\n",
		"skel/.netrc":        "machine example.com password " + marker + "\n",
	}
	for name, content := range plant {
		p := filepath.Join(etc, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	hostEtcDir = etc
	t.Cleanup(func() { hostEtcDir = "/etc" })
	forRuntimes(t, func(t *testing.T, rt string) {
		p := newTestProvider(t, rt)
		inst := create(t, p, provider.CreateSpec{Network: netNone})
		for _, cmd := range []string{
			"grep -rl " + marker + " /etc /root /home /workspace /tmp; true",
			"bash -lc env", "bash -ic env", "sh -lc env", "git config --list; true",
			"useradd -m tester 2>&1; cat /home/tester/.bashrc /home/tester/.netrc 2>&1; true",
		} {
			out, errOut, _ := runCode(t, inst, cmd)
			if strings.Contains(out+errOut, marker) {
				t.Errorf("LEAK: %q shows the host /etc marker:\n%s\n%s", cmd, out, errOut)
			}
		}
		// The generated start-up files work: a login shell has a PATH and an interactive
		// one a prompt.
		if got := run(t, inst, `bash -lc 'echo "$PATH"'`); !strings.Contains(got, "/usr/bin") {
			t.Errorf("login shell PATH %q", got)
		}
		if got := run(t, inst, `bash -ic 'echo "$PS1"' 2>/dev/null`); !strings.Contains(got, `\u@\h`) {
			t.Errorf("interactive prompt %q", got)
		}
	})
}

// 11. Another user of the host: the sandbox's host directories are out of reach, and so are
// its file systems, mounted in the sandbox's own mount namespace (where host root reaches
// them through the holder's /proc/PID/root); and a set-uid binary that sandbox code planted
// (under runsc, host root's) gives nothing.
func (s *secSuite) hostUser(t *testing.T) {
	const nobody = 65534
	id := s.a.ID()
	run(t, s.a, "cp /usr/bin/id /workspace/suid-id && chmod 4755 /workspace/suid-id && mkdir -p /workspace/open && chmod 777 /workspace/open && echo "+s.env.marker+" > /workspace/open/secret.txt && chmod 644 /workspace/open/secret.txt")
	rec, err := s.p.lay.readRecord(id)
	if err != nil {
		t.Fatal(err)
	}
	rootfs, err := s.p.nsPath(rec, s.p.lay.rootfs(id))
	if err != nil {
		t.Fatal(err)
	}
	disk, err := s.p.diskDir(rec)
	if err != nil {
		t.Fatal(err)
	}
	suid := filepath.Join(rootfs, "workspace", "suid-id")
	fi, err := os.Stat(suid)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	t.Logf("the planted file on the host: %v, owner %d", fi.Mode(), st.Uid)
	if fi.Mode()&os.ModeSetuid == 0 {
		t.Fatalf("the planted file lost its set-uid bit on the host (%v): nothing to test", fi.Mode())
	}
	asNobody := func(extra []*os.File, name string, args ...string) (string, error) {
		cmd := exec.Command(name, args...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
		cmd.ExtraFiles = extra
		cmd.Dir = "/"
		out, err := cmd.CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	// Listing, reading, writing and running anything under the sandbox's directory, on the
	// host's paths and through the holder's root.
	dir := s.p.lay.dir(id)
	cmds := [][]string{{"ls", dir}, {"ls", s.p.lay.run(id)}, {"ls", "/proc/" + strconv.Itoa(rec.HolderPID) + "/root/"}}
	for _, fs := range []struct{ rootfs, disk string }{{s.p.lay.rootfs(id), s.p.lay.disk(id)}, {rootfs, disk}} {
		cmds = append(cmds, [][]string{
			{"ls", filepath.Join(fs.rootfs, "etc")},
			{"cat", filepath.Join(fs.rootfs, "workspace/open/secret.txt")},
			{"cat", filepath.Join(fs.disk, "upper/workspace/open/secret.txt")},
			{"touch", filepath.Join(fs.rootfs, "workspace/open/x")},
			{"touch", filepath.Join(fs.rootfs, "tmp/x")},
			{filepath.Join(fs.rootfs, "workspace", "suid-id"), "-u"},
		}...)
	}
	for _, c := range cmds {
		out, err := asNobody(nil, c[0], c[1:]...)
		if err == nil || strings.Contains(out, s.env.marker) || !strings.Contains(strings.ToLower(out+" "+fmt.Sprint(err)), "permission denied") {
			t.Errorf("ESCAPE: uid %d on the host ran %q: %v\n%s", nobody, c, err, out)
		}
	}
	for _, p := range []string{filepath.Join(rootfs, "workspace/open/x"), filepath.Join(rootfs, "tmp/x")} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("ESCAPE: uid %d created %s", nobody, p)
		}
	}
	// Even handed the planted binary (an open descriptor, past the directories), it runs as
	// the user who runs it: the kernel honours a set-uid bit only on a mount of the caller's
	// own mount namespace, and these are the sandbox's. Besides, the file systems are nodev,
	// and nosuid where a file made inside can be host root's (runsc, no user namespace); with
	// a user namespace (runc, crun) the root is not nosuid, so that sudo works inside, and
	// the planted file is owned by the sandbox's own root.
	userns := s.p.userns && rec.Runtime != RuntimeRunsc
	want := strconv.Itoa(nobody)
	if userns && st.Uid != rec.UIDBase {
		t.Errorf("ESCAPE: the planted set-uid file is owned by host uid %d, not the sandbox's root %d", st.Uid, rec.UIDBase)
	}
	for _, m := range []string{rootfs, disk} {
		var sfs syscall.Statfs_t
		if err := syscall.Statfs(m, &sfs); err != nil {
			t.Fatal(err)
		}
		const stNosuid, stNodev = 0x2, 0x4
		nosuid := m == disk || !userns
		if sfs.Flags&stNodev == 0 || (nosuid && sfs.Flags&stNosuid == 0) {
			t.Errorf("%s is mounted without nodev or nosuid (flags %#x)", m, sfs.Flags)
		}
	}
	f, err := os.Open(suid)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out, err := asNobody([]*os.File{f}, "/proc/self/fd/3", "-u")
	if errors.Is(err, syscall.ETXTBSY) {
		// runsc's gofer keeps a file the sandbox wrote open for writing, so it cannot be
		// run at all while the sandbox lives. Check the mount with a set-uid copy of it
		// made beside it (host root's, as the planted one is under runsc).
		t.Logf("the planted file cannot be run (%v); trying a set-uid copy on the same mount", err)
		cp := suid + ".copy"
		if b, rerr := os.ReadFile(suid); rerr != nil || os.WriteFile(cp, b, 0o755) != nil || os.Chmod(cp, 0o4755) != nil {
			t.Fatalf("copying the planted file: %v", rerr)
		}
		f2, err2 := os.Open(cp)
		if err2 != nil {
			t.Fatal(err2)
		}
		defer f2.Close()
		out, err = asNobody([]*os.File{f2}, "/proc/self/fd/3", "-u")
	}
	if err != nil || out != want || out == "0" {
		t.Errorf("ESCAPE: the planted set-uid binary run by uid %d on the host: %q %v; want %s", nobody, out, err, want)
	}
	// Inside, the same file raises the sandbox's user to the sandbox's root where set-uid
	// works (sudo's mechanism), and to nothing under runsc.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var o bytes.Buffer
	if _, err := s.a.Exec(ctx, provider.ExecRequest{Command: "/workspace/suid-id -u", User: "user", Stdout: &o, Stderr: &o}); err != nil {
		t.Fatal(err)
	}
	wantInside := "1000"
	if userns {
		wantInside = "0"
	}
	if got := strings.TrimSpace(o.String()); got != wantInside {
		t.Errorf("a set-uid root program run by user inside: euid %q, want %s", got, wantInside)
	}
	t.Logf("the planted set-uid binary, run by uid %d through a descriptor: euid %s", nobody, out)
}

// TestSecuritySnapshotTmpSymlink: sandbox code replaces /tmp with a symlink to a host
// directory, the sandbox is snapshotted, and a runsc sandbox is made from the snapshot. The
// host binds /tmp of a runsc sandbox; it must bind a directory it made, never follow the
// snapshot's symlink: the new sandbox gets a working, empty /tmp and the host directory is
// neither read nor written.
func TestSecuritySnapshotTmpSymlink(t *testing.T) {
	p := newTestProvider(t, RuntimeRunc)
	if _, ok := p.runtimes[RuntimeRunsc]; !ok {
		testenv.Skip(t, "runsc not found")
	}
	if !provider.CapabilitiesOf(p).Has(provider.CapSnapshot) {
		testenv.Skip(t, "snapshots unavailable here")
	}
	marker := "tupper-tmp-marker-" + randHex(t)
	hostDir, err := os.MkdirTemp("/root", "tupper-sec-tmp-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(hostDir) })
	if err := os.WriteFile(filepath.Join(hostDir, "secret.txt"), []byte(marker), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	a := create(t, p, provider.CreateSpec{Network: netNone})
	run(t, a, "rm -rf /tmp && ln -s "+hostDir+" /tmp && ls -ld /tmp")
	snap, err := a.Snapshot(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	inst, err := p.Create(cctx, provider.CreateSpec{From: snap, Runtime: RuntimeRunsc, Network: netNone})
	if err != nil {
		t.Fatalf("create a runsc sandbox from the snapshot: %v", err)
	}
	defer inst.Close()
	out, errOut, code := runCode(t, inst, "cat /tmp/secret.txt; ls -la /tmp; echo x > /tmp/written && cat /tmp/written")
	if strings.Contains(out+errOut, marker) {
		t.Errorf("ESCAPE: the runsc sandbox reads the host directory through the snapshot's /tmp:\n%s\n%s", out, errOut)
	}
	if code != 0 || !strings.HasSuffix(out, "x") {
		t.Errorf("/tmp of the restored sandbox does not work: exit %d\n%s\n%s", code, out, errOut)
	}
	if ents, _ := os.ReadDir(hostDir); len(ents) != 1 {
		t.Errorf("ESCAPE: the host directory now holds %d entries", len(ents))
	}
}

// TestSecurityTmpReplaced: sandbox code clears /tmp and replaces it with a symlink (rm -rf
// /tmp; ln -s / /tmp), as agents do by accident. The SDK's state must survive: a new handle
// still recovers the secrets and redacts them, and background processes still start.
func TestSecurityTmpReplaced(t *testing.T) {
	forRuntimes(t, func(t *testing.T, rt string) {
		p := newTestProvider(t, rt)
		ctx := context.Background()
		sec := "tupper-tmp-secret-" + randHex(t)
		box, err := sandbox.Create(ctx, p, sandbox.CreateOptions{Network: sandbox.NetworkNone, Secrets: map[string]string{"API_TOKEN": sec}})
		if err != nil {
			t.Fatal(err)
		}
		defer box.Close()
		res, err := box.Run(ctx, "rm -rf /tmp/* /tmp/.[!.]* /tmp; ln -s / /tmp; ln -s /tmp /tmp/loop 2>/dev/null; ls -ld /tmp", sandbox.RunOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("after the attack: %s", strings.TrimSpace(res.Output))
		again, err := sandbox.Connect(ctx, p, box.ID, sandbox.ConnectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer again.Close()
		res, err = again.Run(ctx, `echo "token $API_TOKEN"`, sandbox.RunOptions{})
		if err != nil {
			t.Fatalf("run after /tmp was replaced: %v", err)
		}
		if strings.Contains(res.Output, sec) || strings.TrimSpace(res.Stdout) != "token "+sandbox.Redacted {
			t.Errorf("after /tmp was replaced the secret is not redacted: %q", res.Output)
		}
		proc, err := again.Start(ctx, "echo started; sleep 30", sandbox.StartOptions{Name: "after-tmp"})
		if err != nil {
			t.Fatalf("start after /tmp was replaced: %v", err)
		}
		defer proc.Stop(ctx, sandbox.StopOptions{})
	})
}
