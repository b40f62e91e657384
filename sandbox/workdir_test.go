package sandbox_test

import (
	"context"
	"testing"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/providers/memory"
	"github.com/tupper-dev/tupper/sandbox"
)

// workdirProvider is the memory provider with sandboxes whose template names a working
// directory, as the local provider reports one (provider.Info.Workdir).
type workdirProvider struct {
	provider.Provider
	dir string
}

func (p workdirProvider) Create(ctx context.Context, spec provider.CreateSpec) (provider.Instance, error) {
	inst, err := p.Provider.Create(ctx, spec)
	if err != nil {
		return nil, err
	}
	return workdirInstance{inst, p.dir}, nil
}

type workdirInstance struct {
	provider.Instance
	dir string
}

func (i workdirInstance) Info(ctx context.Context) (provider.Info, error) {
	in, err := i.Instance.Info(ctx)
	in.Workdir = i.dir
	return in, err
}

// TestWorkdir: the provider's Workdir is where a command without a cwd runs and what relative
// cwds and file paths resolve against; without one, /workspace.
func TestWorkdir(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct{ reported, want string }{{"/app", "/app"}, {"", sandbox.DefaultCwd}} {
		box, err := sandbox.Create(ctx, workdirProvider{memory.New(), c.reported}, sandbox.CreateOptions{Network: sandbox.NetworkNone})
		if err != nil {
			t.Fatal(err)
		}
		if box.Workdir != c.want {
			t.Errorf("Workdir = %q, want %q", box.Workdir, c.want)
		}
		if _, err := box.Run(ctx, "mkdir -p "+c.want+"/sub", sandbox.RunOptions{Cwd: "/"}); err != nil {
			t.Fatal(err)
		}
		for cwd, want := range map[string]string{"": c.want, "sub": c.want + "/sub", "/tmp": "/tmp"} {
			res, err := box.Run(ctx, "pwd", sandbox.RunOptions{Cwd: cwd})
			if err != nil || res.Stdout != want+"\n" || res.Cwd != want {
				t.Errorf("reported %q, cwd %q: %v %+v, want %s", c.reported, cwd, err, res, want)
			}
		}
		if err := box.Files.Write(ctx, "note.txt", []byte("x"), sandbox.WriteOptions{}); err != nil {
			t.Fatal(err)
		}
		if res, err := box.Run(ctx, "cat "+c.want+"/note.txt", sandbox.RunOptions{}); err != nil || res.Stdout != "x" {
			t.Errorf("a relative write went elsewhere: %v %+v", err, res)
		}
		box.Destroy(ctx)
	}
}
