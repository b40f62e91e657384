package docker

import (
	"bytes"
	"compress/gzip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/tupper-dev/tupper/internal/testenv"
	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/providers/docker/agentbin"
)

// TestEmbeddedAgent takes the path of a macOS or Windows tupper on Linux: no AgentPath, no
// $TUPPER_AGENT, a program that is not tupper (this test), so the agent comes from the
// embedded files (here this checkout's tupper, gzipped as scripts/build.sh does), is written
// to the cache directory, copied into the container and runs a command there. Without an
// embedded agent the provider is unavailable and says what to do.
func TestEmbeddedAgent(t *testing.T) {
	testenv.RequireDocker(t)
	bin := testenv.TupperBinary(t)
	raw, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	var gz bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&gz, gzip.BestSpeed) // what is embedded is -9; speed matters here
	zw.Write(raw)
	zw.Close()
	t.Setenv(agentEnv, "")
	cache := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", cache)
	saved := embeddedAgents
	t.Cleanup(func() { embeddedAgents = saved })

	embeddedAgents = fstest.MapFS{}
	if got := AgentSource("arm64"); !strings.HasPrefix(got, "none for linux/arm64") {
		t.Errorf("AgentSource without an embedded agent: %q", got)
	}
	none, err := New(Config{Network: testNetwork})
	if err != nil {
		t.Fatal(err)
	}
	defer none.Close()
	err = none.Available(t.Context())
	if provider.CodeOf(err) != provider.CodeUnavailable || !strings.Contains(err.Error(), "embeds none") || !strings.Contains(err.Error(), agentEnv) {
		t.Fatalf("Available without an embedded agent = %v; want unavailable, naming $%s", err, agentEnv)
	}

	embeddedAgents = fstest.MapFS{agentbin.Name(runtime.GOARCH): {Data: gz.Bytes()}}
	if got, want := AgentSource(runtime.GOARCH), "embedded in this binary (linux/"+runtime.GOARCH+")"; got != want {
		t.Errorf("AgentSource with an embedded agent: %q, want %q", got, want)
	}
	copyAgent := true // as on Docker Desktop: the engine cannot see this machine's files
	p, err := New(Config{Network: testNetwork, CopyAgent: &copyAgent})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.Available(t.Context()); err != nil {
		testenv.Skip(t, err.Error())
	}
	inst, err := p.Create(t.Context(), provider.CreateSpec{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Destroy(t.Context(), inst.(*Instance).id)
	var out strings.Builder
	res, err := inst.Exec(t.Context(), provider.ExecRequest{Command: "echo from-embedded; cat /proc/1/cmdline | tr '\\0' ' '", Stdout: &out})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("exec: %v %+v", err, res)
	}
	if got := out.String(); !strings.HasPrefix(got, "from-embedded\n/.tupper/bin/tupper agent") {
		t.Fatalf("output %q", got)
	}
	written, err := filepath.Glob(filepath.Join(cache, "tupper", "agent", "*", "tupper-linux-"+runtime.GOARCH))
	if err != nil || len(written) != 1 {
		t.Fatalf("agents written to the cache: %v, %v; want one", written, err)
	}
	got, err := os.ReadFile(written[0])
	if err != nil || !bytes.Equal(got, raw) {
		t.Fatalf("the cached agent differs from the embedded one (%d bytes, want %d): %v", len(got), len(raw), err)
	}
}
