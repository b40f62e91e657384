package local

import (
	"context"
	"testing"

	"github.com/tupper-dev/tupper/provider"
)

func TestCreateExecDestroy(t *testing.T) {
	forRuntimes(t, func(t *testing.T, rt string) {
		p := newTestProvider(t, rt)
		inst := create(t, p, provider.CreateSpec{Network: provider.Network{Mode: provider.NetworkNone}, Labels: map[string]string{"a": "b"}})
		if got := run(t, inst, "echo hi; id -u; pwd"); got != "hi\n0\n/workspace" {
			t.Errorf("got %q", got)
		}
		ctx := context.Background()
		if err := p.Destroy(ctx, inst.ID()); err != nil {
			t.Fatal(err)
		}
		if _, err := p.Connect(ctx, inst.ID()); provider.CodeOf(err) != provider.CodeNotFound {
			t.Errorf("connect after destroy: %v", err)
		}
	})
}
