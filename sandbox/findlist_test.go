package sandbox

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tupper-dev/tupper/provider"
)

// hostShell is an instance whose commands run in the host's /bin/sh with a PATH the test
// chooses: enough for the file fallbacks, which are shell scripts.
type hostShell struct {
	provider.Instance
	path string
}

func (h hostShell) Exec(ctx context.Context, req provider.ExecRequest) (provider.ExecResult, error) {
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", req.Command)
	cmd.Dir, cmd.Stdout, cmd.Stderr = req.Cwd, req.Stdout, req.Stderr
	cmd.Env = []string{"PATH=" + h.path}
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return provider.ExecResult{ExitCode: ee.ExitCode()}, nil
	}
	return provider.ExecResult{}, err
}

// A directory removed after the listing's existence check but before find reads it is
// not-found, as when it was gone before (it happened under load: TestConformanceFallbacks
// Watch/OnError saw a provider error).
func TestFindListDirectoryRemovedMidway(t *testing.T) {
	findPath, err := exec.LookPath("find")
	if err != nil {
		t.Skip("no find(1) on this machine")
	}
	bin := t.TempDir()
	// A find that loses the race every time: the directory goes just before it runs.
	racer := "#!/bin/sh\nfor a; do case $a in /*) rm -rf \"$a\";; esac; break; done\nexec " + findPath + " \"$@\"\n"
	if err := os.WriteFile(filepath.Join(bin, "find"), []byte(racer), 0o755); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "w")
	if err := os.MkdirAll(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	b := &Sandbox{Provider: "host-shell", Capabilities: provider.NewCapabilities(provider.CapShell),
		inst: hostShell{path: bin + ":" + os.Getenv("PATH")}, red: newRedactor()}
	b.Files = &Files{b: b}
	_, err = b.Files.List(context.Background(), dir, FileListOptions{})
	if CodeOf(err) != CodeNotFound {
		t.Fatalf("List of a directory removed under find: %v (code %s), want not_found", err, CodeOf(err))
	}
	// The same shell with the real find lists a directory that stays.
	if err := os.MkdirAll(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	b.inst = hostShell{path: os.Getenv("PATH")}
	list, err := b.Files.List(context.Background(), dir, FileListOptions{})
	if err != nil || len(list) != 1 || list[0].Path != filepath.Join(dir, "sub") {
		t.Fatalf("List with the real find: %+v, %v", list, err)
	}
}

// A file that find lists and that is gone before git reads it (an edit's temporary file,
// renamed meanwhile: @tupper/ai's file_changes beside edit_file under load) is left out of a
// change checkpoint, not an error.
func TestChangesFileGoneMidway(t *testing.T) {
	findPath, err := exec.LookPath("find")
	if err != nil {
		t.Skip("no find(1) on this machine")
	}
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git on this machine")
	}
	bin := t.TempDir()
	// A find that lists one more file than there is, as when it went after the listing.
	racer := "#!/bin/sh\n" + findPath + " \"$@\"\nprintf './gone.tmp\\0'\n"
	if err := os.WriteFile(filepath.Join(bin, "find"), []byte(racer), 0o755); err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	work, sdk := filepath.Join(root, "workspace"), filepath.Join(root, "sdk")
	if err := os.MkdirAll(work, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(work, "kept.txt"), []byte("kept\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	script := strings.NewReplacer(sdkDir, sdk, DefaultCwd, work).Replace(gitIndexPrelude) + "snap\n"
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.Env = []string{"PATH=" + bin + ":" + os.Getenv("PATH"), "HOME=" + root}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("snap with a file gone midway: %v\n%s", err, out)
	}
	if tree := strings.TrimSpace(string(out)); len(tree) != 40 {
		t.Errorf("snap printed %q, want a tree id", out)
	}
}
