//go:build linux

// Package debian tests the built-in debian template end to end: made on first use from the
// machine's own Debian mirror (debootstrap), the shared conformance suite on sandboxes of it
// (an image template: its own layers, nothing of the host's /usr), a sandbox where root
// installs packages with apt-get, a Dockerfile build on it whose RUN installs python3, and
// the base template built on it. It downloads from the mirror, so scripts/test.sh runs it
// in a group of its own.
package debian

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tupper-dev/tupper/internal/netrange"
	"github.com/tupper-dev/tupper/internal/testenv"
	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/providers/local"
	"github.com/tupper-dev/tupper/sandboxtest"
	"github.com/tupper-dev/tupper/server/servertest"
	"github.com/tupper-dev/tupper/template"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

// mirrorAllowance returns the mirror's addresses that a sandbox's default network would
// refuse (a mirror on a private or reserved address, as on a machine behind a local one):
// those the provider must allow for apt-get in a sandbox to reach it.
func mirrorAllowance(t *testing.T, mirror string) []netip.Prefix {
	u, err := url.Parse(mirror)
	if err != nil {
		t.Fatalf("mirror %q: %v", mirror, err)
	}
	addrs, err := net.LookupHost(u.Hostname())
	if err != nil {
		t.Fatalf("mirror %s: %v", u.Hostname(), err)
	}
	var out []netip.Prefix
	for _, a := range addrs {
		ip, err := netip.ParseAddr(a)
		if _, nonPublic := netrange.Lookup(ip); err == nil && ip.Is4() && nonPublic {
			out = append(out, netip.PrefixFrom(ip, 32))
		}
	}
	return out
}

func exec(t *testing.T, inst provider.Instance, cmd string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var out bytes.Buffer
	res, err := inst.Exec(ctx, provider.ExecRequest{Command: cmd, Stdout: &out, Stderr: &out})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("%q: exit %d, %v\n%s", cmd, res.ExitCode, err, out.String())
	}
	return strings.TrimSpace(out.String())
}

func TestDebianTemplate(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireBinary(t, "debootstrap")
	d, err := template.HostDistro("/")
	if err != nil {
		testenv.Skip(t, err.Error())
	}
	home := t.TempDir()
	// t.TempDir's parent is private; a user namespace's root must traverse it.
	if err := os.Chmod(filepath.Dir(home), 0o711); err != nil {
		t.Fatal(err)
	}
	p, err := local.New(local.Config{Home: home, AgentPath: testenv.TupperBinary(t), AllowPrivate: mirrorAllowance(t, d.Mirror),
		Subnet: "10.215.9.0/24", Bridge: "tupperdeb"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 35*time.Minute)
	defer cancel()
	if err := p.Available(ctx); err != nil {
		testenv.Skip(t, err.Error())
	}

	// First use makes the template.
	start := time.Now()
	inst, err := p.Create(ctx, provider.CreateSpec{Template: template.Debian})
	if err != nil {
		t.Fatalf("create from template debian: %v", err)
	}
	defer p.Destroy(context.Background(), mustID(t, inst))
	t.Logf("debian template made and a sandbox created in %v", time.Since(start).Round(time.Second))
	st, err := template.Open(home)
	if err != nil {
		t.Fatal(err)
	}
	tp, err := st.Get(template.Debian)
	if err != nil || !strings.Contains(tp.Source, d.Codename) || !strings.Contains(tp.Source, d.Mirror) {
		t.Fatalf("template record: %+v, %v", tp, err)
	}
	if got := exec(t, inst, ". /etc/os-release; echo $VERSION_CODENAME; id -u; stat -c %U /usr/bin/apt-get; grep -c "+d.Mirror+" /etc/apt/sources.list"); got != d.Codename+"\n0\nroot\n1" {
		t.Errorf("inside the debian sandbox: %q", got)
	}
	t.Run("conformance", func(t *testing.T) { testConformance(t, p, inst) })
	// Root installs packages into the system: the quick start's apt-get install.
	if got := exec(t, inst, "apt-get install -y -qq python3 >/dev/null 2>&1; python3 -c 'print(6*7)'"); got != "42" {
		t.Errorf("python3 after apt-get install: %q", got)
	}
	// Nothing reached the template's layer.
	if _, err := os.Stat(filepath.Join(st.LayerFS(tp.Layers[0]), "usr/bin/python3")); err == nil {
		t.Error("the sandbox's apt-get install reached the template's layer")
	}

	// A build on it: RUN apt-get install -y python3, then a sandbox of the result.
	ctxDir := t.TempDir()
	df := "FROM debian\nRUN apt-get install -y -qq python3 >/dev/null\nCMD [\"python3\"]\n"
	if err := os.WriteFile(filepath.Join(ctxDir, "Dockerfile"), []byte(df), 0o644); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	built, err := st.Build(ctx, template.BuildOptions{Name: "py", Context: ctxDir, Runner: p.BuildRunner()})
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	t.Logf("FROM debian + RUN apt-get install -y python3 built in %v", time.Since(start).Round(time.Second))
	if len(built.Layers) != 2 {
		t.Errorf("built layers %v: want debian's and the RUN's", built.Layers)
	}
	py, err := p.Create(ctx, provider.CreateSpec{Template: "py", Network: provider.Network{Mode: provider.NetworkNone}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Destroy(context.Background(), mustID(t, py))
	if got := exec(t, py, "python3 -c 'import sys; print(sys.version_info[0])'"); got != "3" {
		t.Errorf("python3 in the built template: %q", got)
	}

	t.Run("base", func(t *testing.T) { testBase(ctx, t, p) })
}

// imageProvider is the provider with every create that names no template (and no snapshot)
// made from the template name: the suite's sandboxes on an image template.
type imageProvider struct {
	*local.Provider
	name string
	caps provider.Capabilities
}

func (p imageProvider) spec(s provider.CreateSpec) provider.CreateSpec {
	if s.Template == "" && s.From == "" {
		s.Template = p.name
	}
	return s
}

func (p imageProvider) Capabilities() provider.Capabilities { return p.caps.Clone() }

func (p imageProvider) Create(ctx context.Context, s provider.CreateSpec) (provider.Instance, error) {
	return p.Provider.Create(ctx, p.spec(s))
}

func (p imageProvider) GetOrCreate(ctx context.Context, s provider.CreateSpec) (provider.Instance, bool, error) {
	return p.Provider.GetOrCreate(ctx, p.spec(s))
}

// testConformance runs the shared suite on sandboxes of the debian template, under the
// default runtime, with the capabilities a sandbox of it has (inst's: no git, which debian's
// minimal base lacks).
func testConformance(t *testing.T, p *local.Provider, inst provider.Instance) {
	cr, ok := inst.(provider.CapabilityReporter)
	if !ok {
		t.Fatal("a local sandbox does not report its own capabilities")
	}
	caps := cr.Capabilities()
	if caps.Has(provider.CapGit) {
		t.Errorf("a debian sandbox claims git, which the template lacks: [%s]", caps)
	}
	sandboxtest.Run(t, func(testing.TB) provider.Provider {
		return imageProvider{Provider: p, name: template.Debian, caps: caps}
	})
}

// testBase makes the built-in base template (a build on debian) on first use and checks
// what E2B's base image offers: python, node and npm, git, curl, and sudo without a password
// for user, whose set-uid works in the sandbox. E2B's "base" then names it.
func testBase(ctx context.Context, t *testing.T, p *local.Provider) {
	start := time.Now()
	inst, err := p.Create(ctx, provider.CreateSpec{Template: template.Base})
	if err != nil {
		t.Fatalf("create from template base: %v", err)
	}
	defer p.Destroy(context.Background(), mustID(t, inst))
	t.Logf("base template made and a sandbox created in %v", time.Since(start).Round(time.Second))
	for _, c := range []string{"python --version", "python3 -m pip --version", "python3 -m venv --help", "node --version", "npm --version", "git --version", "curl --version"} {
		exec(t, inst, c)
	}
	asUser := func(cmd string) string {
		t.Helper()
		var out bytes.Buffer
		res, err := inst.Exec(ctx, provider.ExecRequest{Command: cmd, User: "user", Stdout: &out, Stderr: &out})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("%q as user: exit %d, %v\n%s", cmd, res.ExitCode, err, out.String())
		}
		return strings.TrimSpace(out.String())
	}
	if got := asUser("id -un; echo $HOME; sudo -n id -u; sudo -n sh -c 'apt-get --version >/dev/null && echo apt-ok'"); got != "user\n/home/user\n0\napt-ok" {
		t.Errorf("user and sudo in base: %q", got)
	}

	// E2B's "base" is the provider's base once it exists.
	srv := servertest.Start(t, p, "")
	_, key, err := srv.Store.CreateE2BKey(ctx, "debian")
	if err != nil {
		t.Fatal(err)
	}
	var sb struct{ SandboxID, TemplateID string }
	if code := post(t, srv.URL+"/sandboxes", map[string]string{"X-API-Key": key}, `{"templateID":"base","timeout":120}`, &sb); code != 201 || sb.TemplateID != "base" {
		t.Fatalf("E2B create of base: %d %+v", code, sb)
	}
	var run struct {
		ExitCode int
		Output   string
	}
	if code := post(t, srv.URL+"/v1/sandboxes/"+sb.SandboxID+"/run", map[string]string{"Authorization": "Bearer " + srv.Key},
		`{"command":"for c in sudo python node npm git curl; do command -v $c; done | wc -l"}`, &run); code != 200 || run.ExitCode != 0 || strings.TrimSpace(run.Output) != "6" {
		t.Errorf("the E2B base sandbox is not the base template: %d %+v", code, run)
	}
	req, _ := http.NewRequestWithContext(ctx, "DELETE", srv.URL+"/sandboxes/"+sb.SandboxID, nil)
	req.Header.Set("X-API-Key", key)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 204 {
		t.Errorf("kill: %v %v", resp, err)
	}
}

// post sends a JSON body with the headers and decodes the answer into out.
func post(t *testing.T, url string, hdr map[string]string, body string, out any) int {
	t.Helper()
	req, err := http.NewRequest("POST", url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, out); err != nil && resp.StatusCode < 300 {
		t.Fatalf("POST %s: %v: %s", url, err, b)
	}
	return resp.StatusCode
}

func mustID(t *testing.T, inst provider.Instance) string {
	info, err := inst.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.ID
}
