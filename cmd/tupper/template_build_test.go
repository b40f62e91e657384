//go:build linux

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tupper-dev/tupper/server/servertest"
)

// TestTemplateBuildCLI builds a FROM scratch template from a context with the CLI, as a user
// would: progress as docker build prints it, the cache on a second run, the template's
// defaults, and clear refusals of bad input.
func TestTemplateBuildCLI(t *testing.T) {
	home := requireLocal(t)
	ctx := t.TempDir()
	files := map[string]string{
		"Dockerfile":     "FROM scratch\nCOPY app.txt /app/\nENV GREETING=hi\nWORKDIR /app\nCMD [\"/app/app.txt\"]\n",
		"app.txt":        "an app\n",
		"bad.Dockerfile": "FROM scratch\nHEALTHCHECK CMD true\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(ctx, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	res := tupper(t, home, "", "template", "build", "-t", "scr", ctx)
	if res.code != 0 || res.stdout != "scr\n" || !strings.Contains(res.stderr, "Step 1/5 : FROM scratch") ||
		!strings.Contains(res.stderr, "Step 2/5 : COPY app.txt /app/") || !strings.Contains(res.stderr, "built template scr (1 layer)") {
		t.Fatalf("build: %+v", res)
	}
	res = tupper(t, home, "", "template", "build", "-t", "scr", ctx)
	if res.code != 0 || strings.Count(res.stderr, "---> Using cache") != 2 {
		t.Fatalf("rebuild is not all cache hits: %+v", res)
	}
	res = tupper(t, home, "", "template", "inspect", "scr")
	if res.code != 0 || !strings.Contains(res.stdout, `"GREETING=hi"`) || !strings.Contains(res.stdout, `"workingDir": "/app"`) {
		t.Fatalf("inspect: %+v", res)
	}
	// A template a sandbox uses is not removed without --force.
	res = tupper(t, home, "", "create", "--template", "scr", "--network", "none")
	id := strings.TrimSpace(res.stdout)
	if res.code != 0 || id == "" {
		t.Fatalf("create --template scr: %+v", res)
	}
	res = tupper(t, home, "", "template", "rm", "scr")
	if res.code != 125 || !strings.Contains(res.stderr, "sandbox "+id) {
		t.Errorf("rm of a template in use: %+v", res)
	}
	if res = tupper(t, home, "", "rm", id); res.code != 0 {
		t.Fatalf("rm %s: %+v", id, res)
	}
	if res = tupper(t, home, "", "template", "rm", "scr"); res.code != 0 {
		t.Errorf("rm of a template no longer used: %+v", res)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{ctx}, "give the template's name with -t NAME"},
		{[]string{"-t", "bad", "-f", filepath.Join(ctx, "bad.Dockerfile"), ctx}, "Dockerfile line 2: HEALTHCHECK is not supported"},
		{[]string{"-t", "x", "--network", "some", ctx}, `--network "some"`},
		{[]string{"-t", "x", "--build-arg", "=v", ctx}, "--build-arg"},
		{[]string{"-t", "Bad/Name", ctx}, "template name"},
		{[]string{"-t", "x", filepath.Join(ctx, "missing")}, "no such file"},
	} {
		res := tupper(t, home, "", append([]string{"template", "build"}, c.args...)...)
		if res.code != 125 || !strings.Contains(res.stderr, c.want) {
			t.Errorf("build %q: %+v, want exit 125 saying %q", c.args, res, c.want)
		}
	}
}

// TestDebianFirstUse: the first create of template debian says it is making it, and a
// machine without debootstrap is told what to install.
func TestDebianFirstUse(t *testing.T) {
	home := requireLocal(t)
	cmd := exec.Command(tupperBin(t), "create", "--template", "debian", "--network", "none")
	cmd.Env = append(os.Environ(), "TUPPER_HOME="+home, "TUPPER_PROVIDER=", "PATH=/usr/bin:/bin") // no /usr/sbin/debootstrap
	res := runCmd(t, cmd)
	if res.code != 125 || !strings.Contains(res.stderr, "making the debian template from this machine's apt mirror") ||
		!strings.Contains(res.stderr, "debootstrap is not installed") {
		t.Fatalf("create --template debian without debootstrap: %+v", res)
	}
}

// TestTemplateWorkdirCLI: a template built FROM scratch with a root file system and a WORKDIR
// runs `tupper run` and `tupper exec` there, as docker run does; -w still wins.
func TestTemplateWorkdirCLI(t *testing.T) {
	home := requireLocal(t)
	ctx := t.TempDir()
	rootfs, err := os.ReadFile(servertest.BusyboxRootFS(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ctx, "root.tar"), rootfs, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ctx, "Dockerfile"), []byte("FROM scratch\nADD root.tar /\nWORKDIR /app\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if res := tupper(t, home, "", "template", "build", "--network", "none", "-t", "wd", ctx); res.code != 0 {
		t.Fatalf("build: %+v", res)
	}
	if res := tupper(t, home, "", "run", "--template", "wd", "--network", "none", "--", "pwd"); res.code != 0 || res.stdout != "/app\n" {
		t.Errorf("run pwd: %+v, want /app", res)
	}
	res := tupper(t, home, "", "create", "--template", "wd", "--network", "none")
	id := strings.TrimSpace(res.stdout)
	if res.code != 0 || id == "" {
		t.Fatalf("create: %+v", res)
	}
	defer tupper(t, home, "", "rm", id)
	if res := tupper(t, home, "", "exec", id, "--", "pwd"); res.code != 0 || res.stdout != "/app\n" {
		t.Errorf("exec pwd: %+v, want /app", res)
	}
	if res := tupper(t, home, "", "exec", "-w", "/tmp", id, "--", "pwd"); res.code != 0 || res.stdout != "/tmp\n" {
		t.Errorf("exec -w /tmp pwd: %+v", res)
	}
}
