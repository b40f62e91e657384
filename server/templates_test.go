//go:build linux

package server

import (
	"archive/tar"
	"bytes"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/tupper-dev/tupper/internal/testenv"
	"github.com/tupper-dev/tupper/providers/local"
	"github.com/tupper-dev/tupper/server/api"
	"github.com/tupper-dev/tupper/template"
)

// TestTemplatesAPI lists, inspects and deletes the local provider's templates over the API:
// the built-ins, one of the store, one a sandbox uses (409 until force), and the refusals.
func TestTemplatesAPI(t *testing.T) {
	testenv.RequireRoot(t)
	home := t.TempDir()
	// A user namespace's root must traverse t.TempDir's private parent.
	if err := os.Chmod(filepath.Dir(home), 0o711); err != nil {
		t.Fatal(err)
	}
	lp, err := local.New(local.Config{Home: home, AgentPath: testenv.TupperBinary(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := lp.Available(context.Background()); err != nil {
		testenv.Skip(t, err.Error())
	}
	defer lp.Close()
	e := newEnv(t, func(c *Config) { c.Provider = lp })
	st, err := template.Open(lp.Home())
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: "hello.txt", Mode: 0o644, Size: 5, Typeflag: tar.TypeReg})
	tw.Write([]byte("hello"))
	tw.Close()
	l, err := st.AddLayer(context.Background(), &buf, template.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Put(&template.Template{Name: "tiny", Tags: []string{"tiny:1"}, Layers: []string{l.DiffID}, Source: "test"}); err != nil {
		t.Fatal(err)
	}

	var list struct{ Templates []api.Template }
	e.want(200, &list, "GET", "/v1/templates", e.key, nil)
	got := map[string]api.Template{}
	for _, tp := range list.Templates {
		got[tp.Name] = tp
	}
	if !got["host"].Builtin || !got["debian"].Builtin || !got["base"].Builtin || got["tiny"].Builtin || got["tiny"].Layers != 1 || got["tiny"].Size != 5 || got["tiny"].Created == nil {
		t.Fatalf("templates: %+v", list.Templates)
	}
	var one api.Template
	e.want(200, &one, "GET", "/v1/templates/tiny:1", e.key, nil)
	if one.Name != "tiny" || one.Source != "test" {
		t.Errorf("by tag: %+v", one)
	}
	e.want(404, nil, "GET", "/v1/templates/nope", e.key, nil)
	// Built in: host always; base before it is made has no layers.
	e.want(200, &one, "GET", "/v1/templates/host", e.key, nil)
	if !one.Builtin || one.Name != "host" {
		t.Errorf("host: %+v", one)
	}
	one = api.Template{}
	e.want(200, &one, "GET", "/v1/templates/base", e.key, nil)
	if !one.Builtin || one.Name != "base" || one.Layers != 0 {
		t.Errorf("base, not made: %+v", one)
	}
	e.want(400, nil, "DELETE", "/v1/templates/host", e.key, nil)
	e.want(400, nil, "DELETE", "/v1/templates/tiny?force=maybe", e.key, nil)

	// In use: refused until force.
	var sb struct{ ID, Token string }
	e.want(201, &sb, "POST", "/v1/sandboxes", e.key, map[string]any{"template": "tiny", "network": "none"})
	e.want(403, nil, "GET", "/v1/templates", sb.Token, nil) // a sandbox token manages no templates
	if data := e.want(409, nil, "DELETE", "/v1/templates/tiny", e.key, nil); !bytes.Contains(data, []byte(sb.ID)) {
		t.Errorf("the refusal does not name the sandbox: %s", data)
	}
	e.want(http.StatusNoContent, nil, "DELETE", "/v1/sandboxes/"+sb.ID, e.key, nil)
	e.want(http.StatusNoContent, nil, "DELETE", "/v1/templates/tiny", e.key, nil)
	e.want(404, nil, "GET", "/v1/templates/tiny", e.key, nil)
	if st.HasLayer(l.DiffID) {
		t.Error("the deleted template's layer is still in the store")
	}
}

// TestTemplatesUnsupported: a provider without templates lists none and refuses deletes.
func TestTemplatesUnsupported(t *testing.T) {
	e := newEnv(t) // the memory provider
	var list struct{ Templates []api.Template }
	e.want(200, &list, "GET", "/v1/templates", e.key, nil)
	if len(list.Templates) != 0 {
		t.Errorf("templates: %+v", list.Templates)
	}
	e.want(501, nil, "DELETE", "/v1/templates/x", e.key, nil)
}
