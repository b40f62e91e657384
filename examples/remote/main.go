// Command remote uses sandboxes on a tupper server instead of this machine: the same SDK
// calls, over HTTP, through providers/remote. Start a server and make a key first:
//
//	sudo tupper serve &
//	export TUPPER_URL=http://127.0.0.1:7423 TUPPER_API_KEY=$(sudo tupper keys create)
//	go run github.com/tupper-dev/tupper/examples/remote
//
// The program itself needs neither root nor runc: only the server does.
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/tupper-dev/tupper/providers/remote"
	"github.com/tupper-dev/tupper/sandbox"
)

func main() {
	if err := run(context.Background()); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context) error {
	prov := remote.New(remote.Config{URL: os.Getenv("TUPPER_URL"), APIKey: os.Getenv("TUPPER_API_KEY")})
	if err := prov.Available(ctx); err != nil {
		return err // no server there, or the key is wrong
	}
	box, err := sandbox.Create(ctx, prov, sandbox.CreateOptions{
		Key:     "examples-remote", // get-or-create: box.Created says which happened
		Network: sandbox.NetworkNone,
		Timeout: 30 * time.Minute,
	})
	if err != nil {
		return err
	}
	defer box.Destroy(context.Background())
	fmt.Printf("sandbox %s on %s, created %v\n", box.ID, box.Provider, box.Created)

	if err := box.Files.Write(ctx, "notes.txt", []byte("sent over HTTP\n"), sandbox.WriteOptions{}); err != nil {
		return err
	}
	h := box.Stream(ctx, "cat notes.txt; for i in 1 2 3; do echo line $i; sleep 0.1; done", sandbox.RunOptions{})
	for c := range h.Chunks() {
		fmt.Print(c.Text) // as it arrives
	}
	res, err := h.Wait()
	if err != nil {
		return err
	}
	fmt.Printf("exit code %d after %s\n", res.ExitCode, res.Duration.Round(100*time.Millisecond))
	return nil
}
