package template

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"

	"github.com/tupper-dev/tupper/internal/flock"
	"github.com/tupper-dev/tupper/provider"
)

// CodeInterpreter is the built-in template "code-interpreter", made on first use
// (EnsureCodeInterpreter) by a build on Base: Python 3 with IPython's kernel and the data
// libraries E2B's code-interpreter template ships, as Debian packages (no PyPI), and the
// code-interpreter server (codeinterpreter/server.py) on port CodeInterpreterPort, started
// with every sandbox. E2B's Code Interpreter SDK talks to that server unchanged.
const CodeInterpreter = "code-interpreter"

// CodeInterpreterPort is the port of the code-interpreter server in a sandbox of
// CodeInterpreter: E2B's (the SDK's JUPYTER_PORT).
const CodeInterpreterPort = 49999

// codeInterpreterServer is the in-sandbox server: Python contexts are Jupyter kernels,
// JavaScript ones Node.js processes of codeInterpreterKernelJS; /execute streams their
// output as E2B's SDK reads it (docs/code-interpreter.md).
var (
	//go:embed codeinterpreter/server.py
	codeInterpreterServer []byte
	//go:embed codeinterpreter/kernel.js
	codeInterpreterKernelJS []byte
)

// CodeInterpreterPackages are the Debian packages of CodeInterpreter beyond Base's, one RUN
// step per group: a step's files live in its sandbox's memory until the step ends (the
// upper layer is on its tmpfs), so no group may pass the build sandbox's memory. E2B's
// template also has what Debian does not package (docs/code-interpreter.md lists them).
var CodeInterpreterPackages = [][]string{
	{"python3-ipykernel", "python3-jupyter-client", "python3-numpy", "python3-requests", "python3-bs4",
		"python3-lxml", "python3-pil", "bash"},
	{"python3-scipy", "python3-pandas", "python3-openpyxl", "python3-xlrd"},
	{"python3-matplotlib", "python3-seaborn", "fonts-dejavu-core"},
	{"python3-sklearn", "python3-sympy", "python3-plotly", "python3-networkx", "python3-tqdm",
		"python3-joblib", "python3-aiohttp"},
	{"python3-nltk", "python3-xarray", "python3-imageio", "python3-docx", "python3-pytest",
		"python3-soundfile", "python3-tz"},
}

// codeInterpreterDockerfile is the build of CodeInterpreter. The packages come first, so
// that a change of the server rebuilds only its COPY.
func codeInterpreterDockerfile() string {
	var b strings.Builder
	b.WriteString("FROM " + Base + "\n")
	for _, group := range CodeInterpreterPackages {
		b.WriteString("RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends " + strings.Join(group, " ") +
			" >/dev/null && apt-get clean && rm -rf /var/lib/apt/lists/*\n")
	}
	b.WriteString("RUN mkdir -p /home/user/.config/matplotlib && echo 'backend: Agg' > /home/user/.config/matplotlib/matplotlibrc \\\n" +
		"    && chown -R user:user /home/user/.config\n" +
		"COPY server.py kernel.js /opt/tupper/code-interpreter/\n")
	b.WriteString("LABEL " + codeInterpreterLabel + "=" + codeInterpreterVersion(b.String()) + "\n")
	return b.String()
}

// codeInterpreterLabel is the label of CodeInterpreter that says which Dockerfile and server
// made it: a template made by another tupper is rebuilt (its package steps from the build
// cache), so that an upgrade of tupper upgrades the server in it.
const codeInterpreterLabel = "dev.tupper.code-interpreter"

func codeInterpreterVersion(dockerfile string) string {
	h := sha256.New()
	for _, b := range [][]byte{[]byte(dockerfile), codeInterpreterServer, codeInterpreterKernelJS} {
		h.Write(b)
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// codeInterpreterCurrent reports whether t was made from this tupper's Dockerfile and server.
func codeInterpreterCurrent(t *Template) bool {
	df := codeInterpreterDockerfile()
	want := df[strings.LastIndex(df, "=")+1 : len(df)-1]
	return t.Config.Labels[codeInterpreterLabel] == want
}

// The start and ready commands of CodeInterpreter: the server runs as user (code in it runs
// as E2B's commands do), and a sandbox is handed out once its default Python kernel answers,
// so that the first cell does not wait for one.
const (
	codeInterpreterStart = "cd /home/user && exec runuser -u user -- env HOME=/home/user python3 /opt/tupper/code-interpreter/server.py >>/tmp/code-interpreter.log 2>&1"
	codeInterpreterReady = "python3 -c \"import urllib.request,sys; sys.exit(urllib.request.urlopen('http://127.0.0.1:49999/health?ready=1', timeout=2).status != 200)\""
)

// CodeInterpreterOptions configure EnsureCodeInterpreter.
type CodeInterpreterOptions struct {
	Runner Runner // the build's sandboxes (required)
	// Network of the build's RUN steps ("" is all): they fetch packages from the machine's
	// own apt mirror.
	Network provider.NetworkMode
	// Progress receives the build's events (nil: none).
	Progress func(BuildEvent)
}

// EnsureCodeInterpreter returns the template CodeInterpreter, building it first when the
// store lacks it (and base and debian before it: several minutes, once) or when another
// tupper's server made it (seconds: only its last steps run). Concurrent callers, in this
// process or another, wait for one build.
func (s *Store) EnsureCodeInterpreter(ctx context.Context, opts CodeInterpreterOptions) (*Template, error) {
	if t, err := s.Get(CodeInterpreter); err == nil && codeInterpreterCurrent(t) {
		return t, nil
	}
	if opts.Runner == nil {
		return nil, provider.Errorf(provider.CodeInvalidArgument, "template %s: a build runner is required", CodeInterpreter)
	}
	lk, err := flock.Acquire(ctx, filepath.Join(s.root, "code-interpreter.lock"))
	if err != nil {
		return nil, err
	}
	defer lk.Unlock()
	if t, err := s.Get(CodeInterpreter); err == nil && codeInterpreterCurrent(t) {
		return t, nil // made meanwhile
	}
	dir, err := os.MkdirTemp(s.root, ".code-interpreter-*")
	if err != nil {
		return nil, provider.Errorf(provider.CodeInternal, "template %s: a build context: %v", CodeInterpreter, err)
	}
	defer os.RemoveAll(dir)
	for name, data := range map[string][]byte{"server.py": codeInterpreterServer, "kernel.js": codeInterpreterKernelJS} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return nil, provider.Errorf(provider.CodeInternal, "template %s: writing its server: %v", CodeInterpreter, err)
		}
	}
	// Its FROM base is made by the build's resolver (Ensure) when the store lacks it.
	return s.Build(ctx, BuildOptions{
		Name: CodeInterpreter, Context: dir, DockerfileText: codeInterpreterDockerfile(),
		Runner: opts.Runner, Network: opts.Network, Progress: opts.Progress,
		// scipy alone, with what it pulls in, passes the default 1 GB of a step's sandbox.
		Size:     provider.Sizes["medium"],
		StartCmd: codeInterpreterStart, ReadyCmd: codeInterpreterReady,
	})
}
