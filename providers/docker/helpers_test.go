package docker

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/tupper-dev/tupper/internal/testenv"
)

func TestMain(m *testing.M) {
	code := testenv.Main(m)
	cleanEngine()
	os.Exit(code)
}

// testNetwork is the Docker network of this test binary's sandboxes: what cleanEngine
// removes is on it, so the tests never touch other sandboxes of the engine.
var testNetwork = fmt.Sprintf("tupper-test-%d", os.Getpid())

// cleanEngine removes what the tests left on the engine: the containers on testNetwork (and
// the volumes of their cold pauses), the snapshot images made of them (they carry their sandbox's labels), and the network.
func cleanEngine() {
	p, err := New(Config{})
	if err != nil {
		return
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, _ := p.cli.ContainerList(ctx, client.ContainerListOptions{All: true,
		Filters: make(client.Filters).Add("label", labelSandbox).Add("network", testNetwork)})
	for _, c := range res.Items {
		p.remove(ctx, c.ID)
		p.forgetCold(ctx, c.Labels[labelSandbox])
	}
	imgs, _ := p.cli.ImageList(ctx, client.ImageListOptions{Filters: make(client.Filters).Add("label", labelSnapshot+"-network="+testNetwork)})
	for _, im := range imgs.Items {
		p.cli.ImageRemove(ctx, im.ID, client.ImageRemoveOptions{Force: true, PruneChildren: true})
	}
	p.cli.NetworkRemove(ctx, testNetwork, client.NetworkRemoveOptions{})
}

// newTestProvider is a provider on the test engine whose agent is this checkout's tupper.
func newTestProvider(t testing.TB, cfg Config) *Provider {
	t.Helper()
	testenv.RequireDocker(t)
	cfg.AgentPath = testenv.TupperBinary(t)
	if cfg.Network == "" {
		cfg.Network = testNetwork
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	if err := p.Available(t.Context()); err != nil {
		testenv.Skip(t, err.Error())
	}
	return p
}
