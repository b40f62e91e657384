// Command quickstart is the Go SDK's first program: a sandbox on this machine, a command in
// it, the result back. Run it as root on Linux with runc and the tupper binary installed
// (the sandboxes' agent; see docs/local.md):
//
//	go run github.com/tupper-dev/tupper/examples/quickstart
package main

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/tupper-dev/tupper/provider"
	_ "github.com/tupper-dev/tupper/providers/local" // registers "local", the default on Linux
	"github.com/tupper-dev/tupper/sandbox"
)

func main() {
	if err := run(context.Background()); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context) error {
	prov, err := provider.Resolve(ctx, provider.ResolveOptions{}) // local on Linux
	if err != nil {
		return err // says what this machine lacks
	}
	box, err := sandbox.Create(ctx, prov, sandbox.CreateOptions{
		Network: sandbox.NetworkNone, // loopback only
		Timeout: 10 * time.Minute,    // gone by then, even if this program dies first
	})
	if err != nil {
		return err
	}
	defer box.Destroy(context.Background())

	res, err := box.Run(ctx, "echo hello from $(hostname) in $(pwd); ls /nothing", sandbox.RunOptions{})
	if err != nil {
		return err // the sandbox or the provider failed, not the command
	}
	// A command that fails is a result: res.OK, res.ExitCode, res.Stdout, res.Stderr.
	fmt.Printf("exit code %d\nstdout: %sstderr: %s", res.ExitCode, res.Stdout, res.Stderr)
	return nil
}
