// Package scripts holds the tests of the repository's shell scripts. TestSetup runs
// scripts/setup.sh the way a fresh machine would: none of the runtimes on PATH, a stand-in
// apt-get that records what it is asked for, and a made-up /etc (TUPPER_SETUP_ROOT).
package scripts

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// hidden are the real commands a fresh machine lacks (or that the test stands in for).
var hidden = map[string]bool{
	"runc": true, "runsc": true, "crun": true, "iptables": true, "ip": true,
	"apt-get": true, "id": true, "node": true, "npm": true, "dockerd": true, "pg_ctlcluster": true, "prometheus": true,
}

// farm is a directory of links to every command on the test's own PATH but the hidden ones.
func farm(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	path := os.Getenv("PATH") + ":/usr/local/go/bin:/usr/sbin:/sbin"
	for _, d := range filepath.SplitList(path) {
		ents, err := os.ReadDir(d)
		if err != nil {
			continue
		}
		for _, e := range ents {
			if hidden[e.Name()] {
				continue
			}
			link := filepath.Join(dir, e.Name())
			if _, err := os.Lstat(link); err == nil {
				continue
			}
			os.Symlink(filepath.Join(d, e.Name()), link)
		}
	}
	return dir
}

// machine is a made-up fresh machine for one run of setup.sh.
type machine struct {
	root, stubs, installed, aptLog string
	uid                            int
	noAptGet                       bool
	aptFails                       bool
	goFails                        bool
	localSbinLast                  bool // PATH has /usr/local/sbin after the other directories
	// runsc is the version line of a runsc already installed, or ""; present are the other
	// commands already installed (where apt-get installs).
	runsc   string
	present []string
	goLog   string // the stand-in go's calls, with the environment the build needs
}

func newMachine(t *testing.T) *machine {
	d := t.TempDir()
	m := &machine{
		root: filepath.Join(d, "root"), stubs: filepath.Join(d, "stubs"),
		installed: filepath.Join(d, "installed"), aptLog: filepath.Join(d, "apt.log"),
		goLog: filepath.Join(d, "go.log"),
	}
	for _, dir := range []string{m.stubs, m.installed, m.root} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return m
}

func script(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
}

// run runs setup.sh on m and returns its exit code, stderr and the apt-get calls.
func (m *machine) run(t *testing.T, farmDir string, args ...string) (int, string, []string) {
	t.Helper()
	script(t, filepath.Join(m.stubs, "id"), fmt.Sprintf("[ \"$1\" = -u ] && echo %d && exit 0\necho 'uid=%d'\n", m.uid, m.uid))
	if !m.noAptGet {
		// The stand-in records each call and "installs" a package by putting its command in
		// m.installed.
		fail := ""
		if m.aptFails {
			fail = "[ \"$1\" = install ] && { echo 'E: Unable to locate package' >&2; exit 100; }\n"
		}
		script(t, filepath.Join(m.stubs, "apt-get"), fmt.Sprintf(`echo "$*" >>%q
%s[ "$1" = install ] || exit 0
shift
for a in "$@"; do
	case "$a" in
	-*) ;;
	*)
		cmd=$a; [ "$a" = iproute2 ] && cmd=ip; [ "$a" = nodejs ] && cmd=node; [ "$a" = docker.io ] && cmd=dockerd; [ "$a" = postgresql ] && cmd=pg_ctlcluster
		printf '#!/bin/sh\necho "%%s version 1.0"\n' "$cmd" >%q/$cmd
		chmod +x %q/$cmd
		;;
	esac
done
`, m.aptLog, fail, m.installed, m.installed))
	}
	// The stand-in go records each call with CGO_ENABLED and GOBIN, and "builds" runsc by
	// writing one that prints the version the -ldflags gave it.
	goFail := ""
	if m.goFails {
		goFail = "echo 'go: gvisor.dev/gvisor/runsc@v0: reading proxy: 403 Forbidden' >&2; exit 1\n"
	}
	script(t, filepath.Join(m.stubs, "go"), fmt.Sprintf(`echo "CGO_ENABLED=$CGO_ENABLED $*" >>%q
[ "$1" = install ] || exit 0
%sv=$(echo "$*" | sed -n 's/.*version\.version=\([^ ]*\).*/\1/p')
printf '#!/bin/sh\necho "runsc version %%s"\n' "$v" >"$GOBIN/runsc"
chmod +x "$GOBIN/runsc"
`, m.goLog, goFail))
	if m.runsc != "" {
		script(t, filepath.Join(m.installed, "runsc"), "echo '"+m.runsc+"'\n")
	}
	for _, c := range m.present {
		script(t, filepath.Join(m.installed, c), "echo present\n")
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatal(err)
	}
	// As on a real machine, /usr/local/sbin comes first on PATH.
	dirs := []string{filepath.Join(m.root, "usr/local/sbin"), m.stubs, m.installed, farmDir}
	if m.localSbinLast {
		dirs = append(dirs[1:], dirs[0])
	}
	path := strings.Join(dirs, ":")
	cmd := exec.Command(bash, append([]string{"setup.sh"}, args...)...)
	cmd.Env = []string{
		"HOME=" + t.TempDir(),
		"PATH=" + path,
		"TUPPER_SETUP_ROOT=" + m.root,
	}
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	err = cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	var calls []string
	if b, err := os.ReadFile(m.aptLog); err == nil {
		calls = strings.Split(strings.TrimSpace(string(b)), "\n")
	}
	return code, stderr.String(), calls
}

func TestSetup(t *testing.T) {
	fd := farm(t)
	for _, c := range []string{"bash", "sed", "awk", "grep", "head", "stat", "cat", "go"} {
		if _, err := os.Stat(filepath.Join(fd, c)); err != nil {
			t.Fatalf("the test needs %s on PATH: %v", c, err)
		}
	}

	// wantBuild is the one go call that builds the pinned runsc, as pure Go.
	const wantBuild = "CGO_ENABLED=0 install -trimpath -ldflags -X gvisor.dev/gvisor/runsc/version.version=release-20260905.0 gvisor.dev/gvisor/runsc@v0.0.0-20260905035102-160fafc42237"

	t.Run("FreshMachine", func(t *testing.T) {
		m := newMachine(t)
		code, out, calls := m.run(t, fd)
		if code != 0 {
			t.Fatalf("exit %d:\n%s", code, out)
		}
		want := []string{
			"update -qq",
			"install -y -qq runc crun iptables iproute2",
		}
		if strings.Join(calls, "\n") != strings.Join(want, "\n") {
			t.Errorf("apt-get calls:\n%s\nwant:\n%s", strings.Join(calls, "\n"), strings.Join(want, "\n"))
		}
		if got := m.goCalls(); len(got) != 1 || got[0] != wantBuild {
			t.Errorf("go calls %q, want %q\n%s", got, wantBuild, out)
		}
		if b, err := exec.Command(filepath.Join(m.root, "usr/local/sbin/runsc"), "--version").Output(); err != nil || string(b) != "runsc version release-20260905.0\n" {
			t.Errorf("/usr/local/sbin/runsc --version: %q %v", b, err)
		}
		if strings.Contains(out, "nodejs") || strings.Contains(out, "docker.io") || strings.Contains(out, "postgresql") || strings.Contains(out, "prometheus") {
			t.Errorf("installs Node.js, Docker, PostgreSQL or Prometheus without --test:\n%s", out)
		}
		// Run again on the machine as it now is: nothing more to do.
		os.Remove(m.aptLog)
		os.Remove(m.goLog)
		code, out, calls = m.run(t, fd)
		if code != 0 || len(calls) != 0 || len(m.goCalls()) != 0 {
			t.Errorf("second run: exit %d, apt-get calls %q, go calls %q\n%s", code, calls, m.goCalls(), out)
		}
	})

	t.Run("ForTests", func(t *testing.T) {
		m := newMachine(t)
		code, out, calls := m.run(t, fd, "--test")
		if code != 0 {
			t.Fatalf("exit %d:\n%s", code, out)
		}
		if len(calls) < 2 || calls[1] != "install -y -qq runc crun iptables iproute2 nodejs npm docker.io postgresql prometheus" {
			t.Errorf("apt-get calls: %q\n%s", calls, out)
		}
		code, out, _ = m.run(t, fd, "--bogus")
		if code == 0 || !strings.Contains(out, "unknown argument --bogus") {
			t.Errorf("a bad argument: exit %d:\n%s", code, out)
		}
	})

	// A distribution's runsc (Debian's newest is 20240729, bookworm's own 20221219) is older
	// than the pinned one: the build puts the current one ahead of it; apt is not asked.
	for _, old := range []string{"runsc version 0.0~20240729.0", "runsc version 0.0~20221219.0", "runsc version VERSION_MISSING"} {
		t.Run("OldRunsc/"+strings.Fields(old)[2], func(t *testing.T) {
			m := newMachine(t)
			m.present = []string{"runc", "crun", "iptables", "ip"}
			m.runsc = old
			code, out, calls := m.run(t, fd)
			if code != 0 || len(calls) != 0 {
				t.Fatalf("exit %d, apt-get calls %q:\n%s", code, calls, out)
			}
			if got := m.goCalls(); len(got) != 1 || got[0] != wantBuild {
				t.Errorf("go calls %q, want %q\n%s", got, wantBuild, out)
			}
		})
	}

	t.Run("CurrentRuntimes", func(t *testing.T) {
		m := newMachine(t)
		m.present = []string{"runc", "crun", "iptables", "ip"}
		m.runsc = "runsc version release-20260905.0"
		code, out, calls := m.run(t, fd)
		if code != 0 || len(calls) != 0 || len(m.goCalls()) != 0 {
			t.Fatalf("exit %d, apt-get calls %q, go calls %q:\n%s", code, calls, m.goCalls(), out)
		}
	})

	t.Run("NotRoot", func(t *testing.T) {
		m := newMachine(t)
		m.uid = 1000
		code, out, calls := m.run(t, fd)
		if code == 0 || len(calls) != 0 {
			t.Fatalf("exit %d, apt-get calls %q:\n%s", code, calls, out)
		}
		for _, want := range []string{"run this script as root", "runc", "crun", "iptables"} {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
		}
		// Everything there but a current runsc: the build is refused too, saying why.
		m.present = []string{"runc", "crun", "iptables", "ip"}
		m.runsc = "runsc version 0.0~20240729.0"
		code, out, _ = m.run(t, fd)
		if code == 0 || len(m.goCalls()) != 0 || !strings.Contains(out, "runsc is from 20240729, older than 20260905; run this script as root") {
			t.Errorf("not root with an old runsc: exit %d, go calls %q:\n%s", code, m.goCalls(), out)
		}
	})

	t.Run("NoAptGet", func(t *testing.T) {
		m := newMachine(t)
		m.noAptGet = true
		code, out, _ := m.run(t, fd)
		if code == 0 || !strings.Contains(out, "no apt-get") || !strings.Contains(out, "runc") {
			t.Fatalf("exit %d:\n%s", code, out)
		}
	})

	t.Run("BuildFails", func(t *testing.T) {
		m := newMachine(t)
		m.present = []string{"runc", "crun", "iptables", "ip"}
		m.goFails = true
		code, out, _ := m.run(t, fd)
		if code == 0 {
			t.Fatalf("exit 0:\n%s", out)
		}
		if !strings.Contains(out, `step "build gVisor's runsc 20260905" failed`) || !strings.Contains(out, "CGO_ENABLED=0 go install gvisor.dev/gvisor/runsc@") {
			t.Errorf("the failure does not say which step failed and what to do:\n%s", out)
		}
		if _, err := os.Stat(filepath.Join(m.root, "usr/local/sbin/runsc")); err == nil {
			t.Error("a failed build installed a runsc")
		}
	})

	t.Run("LocalSbinBehind", func(t *testing.T) {
		// An old runsc that stays first on PATH after the build: said, not taken for done.
		m := newMachine(t)
		m.present = []string{"runc", "crun", "iptables", "ip"}
		m.runsc = "runsc version 0.0~20240729.0"
		m.localSbinLast = true
		code, out, _ := m.run(t, fd)
		if code == 0 || !strings.Contains(out, "put /usr/local/sbin ahead of /usr/bin on PATH") {
			t.Errorf("exit %d:\n%s", code, out)
		}
	})

	t.Run("AptFails", func(t *testing.T) {
		m := newMachine(t)
		m.aptFails = true
		code, out, _ := m.run(t, fd)
		if code == 0 {
			t.Fatalf("exit 0:\n%s", out)
		}
		if !strings.Contains(out, `step "apt-get install runc crun iptables iproute2" failed`) ||
			!strings.Contains(out, "try it by hand") {
			t.Errorf("the failure does not say which step failed and what to do:\n%s", out)
		}
	})
}

// goCalls returns the stand-in go's calls so far.
func (m *machine) goCalls() []string {
	b, err := os.ReadFile(m.goLog)
	if err != nil {
		return nil
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}
