package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tupper-dev/tupper/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

// tupperBin is the static binary built from this checkout.
func tupperBin(t *testing.T) string { return testenv.TupperBinary(t) }

type result struct {
	stdout, stderr string
	code           int
}

// tupper runs the binary with a private TUPPER_HOME.
func tupper(t *testing.T, home, stdin string, args ...string) result {
	t.Helper()
	cmd := exec.Command(tupperBin(t), args...)
	cmd.Env = append(os.Environ(), "TUPPER_HOME="+home, "TUPPER_PROVIDER=")
	cmd.Stdin = strings.NewReader(stdin)
	return runCmd(t, cmd)
}

// runCmd runs cmd and returns its output and exit code; failing to start it fails the test.
func runCmd(t *testing.T, cmd *exec.Cmd) result {
	t.Helper()
	out, errOut, code := testenv.Run(t, cmd)
	return result{out, errOut, code}
}

// requireLocal returns a TUPPER_HOME for the local provider, or skips (fails under CI).
func requireLocal(t *testing.T) string { return testenv.LocalHome(t) }

func TestRunMemoryProvider(t *testing.T) {
	r := tupper(t, t.TempDir(), "", "run", "--provider", "memory", "--", "sh", "-c", "echo out; echo err >&2; exit 7")
	if r.code != 7 || r.stdout != "out\n" || r.stderr != "err\n" {
		t.Fatalf("got %+v, want exit 7, out on stdout and err on stderr", r)
	}
}

func TestBadInputIsAClearError(t *testing.T) {
	home := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--provider", "memory", "--network", "some", "--", "true"}, `--network "some"`},
		{[]string{"run", "--provider", "memory", "-e", "NOEQUALS", "--", "true"}, "want KEY=VALUE"},
		{[]string{"run", "--provider", "nosuch", "--", "true"}, `provider "nosuch" is not registered`},
		{[]string{"run", "--provider", "memory", "--size", "huge", "--", "true"}, "size"},
		{[]string{"cp", "a", "b"}, "exactly one of SRC and DST"},
		{[]string{"run", "--provider", "memory", "--allow-private", "nonsense", "--", "true"}, `--allow-private "nonsense"`},
		{[]string{"run", "--provider", "memory", "--allow-private", "fd00::/8", "--", "true"}, "IPv4 only"},
		{[]string{"run", "--provider", "memory", "--allow-private", "10.1.2.0/24", "--", "true"}, "--allow-private needs the local provider, not memory"},
		{[]string{"serve", "--provider", "memory", "--allow-private", "10.1.2.0/24"}, "needs the local provider, not memory"},
		{[]string{"mcp", "--provider", "memory", "--network", "some"}, `--network "some"`},
		{[]string{"mcp", "--provider", "memory", "--url", "http://127.0.0.1:1"}, "--url (or $TUPPER_URL) names a server"},
		{[]string{"mcp", "--provider", "memory", "--network", "none", "--allow", "a.test"}, "--allow, --deny and --learn need a network"},
		{[]string{"mcp", "--provider", "memory", "--egress-proxy", "http://h:1"}, "--egress-proxy"},
		{[]string{"mcp", "--provider", "memory", "-e", "NOEQUALS"}, "--env"},
	} {
		r := tupper(t, home, "", tc.args...)
		if r.code != exitTupperError || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("tupper %v: exit %d, stderr %q; want exit %d mentioning %q", tc.args, r.code, r.stderr, exitTupperError, tc.want)
		}
	}
}

func TestRunLocal(t *testing.T) {
	home := requireLocal(t)
	r := tupper(t, home, "", "run", "--network", "none", "-e", "GREETING=hi there", "--", "sh", "-c", `echo "$GREETING" from $(pwd); ls /sys/class/net`)
	if r.code != 0 || r.stdout != "hi there from /workspace\nlo\n" {
		t.Fatalf("got %+v", r)
	}
	if r := tupper(t, home, "", "run", "--", "sh", "-c", "exit 42"); r.code != 42 {
		t.Fatalf("exit code not propagated: %+v", r)
	}
	if r := tupper(t, home, "", "run", "--timeout", "300ms", "--", "sleep", "30"); r.code != exitTimedOut {
		t.Fatalf("timeout: %+v", r)
	}
	if r := tupper(t, home, "piped input\n", "run", "-i", "--", "cat"); r.code != 0 || r.stdout != "piped input\n" {
		t.Fatalf("stdin: %+v", r)
	}
	if r := tupper(t, home, "", "ls", "--json"); strings.TrimSpace(r.stdout) != "[]" {
		t.Fatalf("run left sandboxes behind: %s", r.stdout)
	}
}

// TestAllowPrivate: --allow-private reaches the local provider. While the sandbox lives, the
// bridge's firewall exempts its address for exactly those ranges. (No traffic is sent; what
// the exemption lets through is providers/local's TestSecurityNetwork.)
func TestAllowPrivate(t *testing.T) {
	home := requireLocal(t)
	iptables := testenv.RequireBinary(t, "iptables")
	r := tupper(t, home, "", "create", "--allow-private", "198.51.100.0/24", "--allow-private", "192.0.2.7")
	if r.code != 0 {
		t.Fatalf("create: %+v", r)
	}
	id := strings.TrimSpace(r.stdout)
	defer tupper(t, home, "", "rm", id)
	r = tupper(t, home, "", "exec", id, "--", "ip", "-4", "-o", "addr", "show", "dev", "eth0")
	f := strings.Fields(r.stdout)
	if r.code != 0 || len(f) < 4 {
		t.Fatalf("the sandbox's address: %+v", r)
	}
	ip, _, _ := strings.Cut(f[3], "/")
	out, err := exec.Command(iptables, "-w", "5", "-S", "TUPPER-FWD-tupper0").CombinedOutput()
	if err != nil {
		t.Fatalf("iptables: %v: %s", err, out)
	}
	for _, dst := range []string{"198.51.100.0/24", "192.0.2.7/32"} {
		if want := "-s " + ip + "/32 -d " + dst + " -j RETURN"; !strings.Contains(string(out), want) {
			t.Errorf("no %q in the firewall:\n%s", want, out)
		}
	}
}

func TestCreateExecCpLsRm(t *testing.T) {
	home := requireLocal(t)
	r := tupper(t, home, "", "create", "--network", "none", "--label", "who=cli-test")
	id := strings.TrimSpace(r.stdout)
	if r.code != 0 || id == "" || strings.ContainsAny(id, " \n") {
		t.Fatalf("create printed %q (stderr %q)", r.stdout, r.stderr)
	}
	if r := tupper(t, home, "", "exec", id, "--", "sh", "-c", "echo $0 $1", "a b", "c"); r.code != 0 || r.stdout != "a b c\n" {
		t.Fatalf("exec argv quoting: %+v", r)
	}
	if r := tupper(t, home, "", "exec", id, "--", "false"); r.code != 1 {
		t.Fatalf("exec exit code: %+v", r)
	}

	local := t.TempDir()
	os.MkdirAll(filepath.Join(local, "src", "sub"), 0o755)
	os.WriteFile(filepath.Join(local, "src", "sub", "f.txt"), []byte("deep\n"), 0o600)
	os.WriteFile(filepath.Join(local, "one.txt"), []byte("one\n"), 0o644)
	if r := tupper(t, home, "", "cp", filepath.Join(local, "src"), id+":copied"); r.code != 0 {
		t.Fatalf("cp dir up: %+v", r)
	}
	if r := tupper(t, home, "", "cp", filepath.Join(local, "one.txt"), id+":/tmp"); r.code != 0 {
		t.Fatalf("cp file up: %+v", r)
	}
	r = tupper(t, home, "", "exec", id, "--", "sh", "-c", "cat /workspace/copied/sub/f.txt /tmp/one.txt; stat -c %a /workspace/copied/sub/f.txt")
	if r.stdout != "deep\none\n600\n" {
		t.Fatalf("files in the sandbox: %+v", r)
	}
	back := filepath.Join(t.TempDir(), "back")
	if r := tupper(t, home, "", "cp", id+":copied", back); r.code != 0 {
		t.Fatalf("cp dir down: %+v", r)
	}
	if data, err := os.ReadFile(filepath.Join(back, "sub", "f.txt")); err != nil || string(data) != "deep\n" {
		t.Fatalf("downloaded file: %q %v", data, err)
	}
	if r := tupper(t, home, "", "cp", id+":/nonexistent", back); r.code != exitTupperError || !strings.Contains(r.stderr, "not_found") {
		t.Fatalf("cp of a missing file: %+v", r)
	}

	r = tupper(t, home, "", "ls", "--json", "--label", "who=cli-test")
	var rows []struct {
		ID     string
		State  string
		Labels map[string]string
	}
	if err := json.Unmarshal([]byte(r.stdout), &rows); err != nil || len(rows) != 1 || rows[0].ID != id || rows[0].State != "running" || rows[0].Labels["who"] != "cli-test" {
		t.Fatalf("ls --json: %s (%v)", r.stdout, err)
	}
	if r := tupper(t, home, "", "rm", id); r.code != 0 {
		t.Fatalf("rm: %+v", r)
	}
	if r := tupper(t, home, "", "exec", id, "--", "true"); r.code != exitTupperError || !strings.Contains(r.stderr, "not_found") {
		t.Fatalf("exec after rm: %+v", r)
	}
}
