package builds

import (
	"context"
	"os"
	"testing"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/providers/memory"
)

// homeProvider is the memory provider that claims to build templates: Reserve, Get and
// Cancel build nothing (TestTemplateBuildAPI in package server runs real builds).
type homeProvider struct {
	*memory.Provider
	home string
}

func (p homeProvider) BuildTemplate(context.Context, provider.BuildRequest) (provider.BuiltTemplate, error) {
	return provider.BuiltTemplate{}, provider.Errorf(provider.CodeInternal, "no build runs in this test")
}

func (p homeProvider) BuildDir() (string, error) { return os.MkdirTemp(p.home, "build-*") }

func (p homeProvider) RetagTemplate(context.Context, string, func(provider.TemplateInfo) ([]string, error)) (provider.TemplateInfo, error) {
	return provider.TemplateInfo{}, provider.Errorf(provider.CodeInternal, "no retag in this test")
}

// TestReserve: a build belongs to its key; a name being built is a conflict for another
// key, while the same key's new request replaces its waiting one; Cancel of a waiting build
// ends it; only Keep finished builds are remembered; a provider that builds nothing is
// unsupported.
func TestReserve(t *testing.T) {
	ctx := context.Background()
	s, err := New(Config{Provider: homeProvider{memory.New(), t.TempDir()}, Keep: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	a, err := s.Reserve(ctx, "k1", "app", []string{"app:1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get("k2", a.ID); provider.CodeOf(err) != provider.CodeNotFound {
		t.Errorf("another key's build: %v", err)
	}
	if b, err := s.Get("k1", a.ID); err != nil || b.Status().State != Waiting || b.Status().Template != "app" {
		t.Errorf("own build: %+v, %v", b, err)
	}
	if _, err := s.Reserve(ctx, "k2", "app", nil); provider.CodeOf(err) != provider.CodeConflict {
		t.Errorf("another key, a name being built: %v", err)
	}
	b, err := s.Reserve(ctx, "k1", "app", nil)
	if err != nil {
		t.Fatalf("the same key again: %v", err)
	}
	if _, err := s.Get("k1", a.ID); provider.CodeOf(err) != provider.CodeNotFound {
		t.Errorf("the replaced build is still there: %v", err)
	}
	for _, bad := range []string{"", "Bad", "../x"} {
		if _, err := s.Reserve(ctx, "k1", bad, nil); provider.CodeOf(err) != provider.CodeInvalidArgument {
			t.Errorf("Reserve(%q): %v", bad, err)
		}
	}
	if err := s.Cancel("k1", b.ID); err != nil {
		t.Fatal(err)
	}
	if st := b.Status(); st.State != Failed || st.Error == nil || st.Error.Code != provider.CodeAborted {
		t.Errorf("cancelled: %+v", st)
	}
	if err := s.Cancel("k1", b.ID); provider.CodeOf(err) != provider.CodeConflict {
		t.Errorf("cancel of an ended build: %v", err)
	}
	c, _ := s.Reserve(ctx, "k1", "other", nil)
	s.Cancel("k1", c.ID)
	if _, err := s.Get("k1", b.ID); provider.CodeOf(err) != provider.CodeNotFound {
		t.Errorf("past Keep, the oldest finished build is remembered: %v", err)
	}
	if _, err := s.Get("k1", c.ID); err != nil {
		t.Errorf("the newest finished build: %v", err)
	}

	plain, _ := New(Config{Provider: memory.New()})
	defer plain.Close()
	if _, err := plain.Reserve(ctx, "k1", "app", nil); provider.CodeOf(err) != provider.CodeUnsupported {
		t.Errorf("a provider that builds nothing: %v", err)
	}
}
