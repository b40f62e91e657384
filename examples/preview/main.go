// Command preview starts a web server in a sandbox in the background and opens it from this
// machine through its preview URL: the shape of an agent that builds an app and shows it.
// The sandbox has no network; the preview reaches its port all the same.
//
// The server is Python's http.server, so the sandbox needs python3 (the host's, with the
// local provider).
package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"time"

	"github.com/tupper-dev/tupper/provider"
	_ "github.com/tupper-dev/tupper/providers/local"
	"github.com/tupper-dev/tupper/sandbox"
)

func main() {
	if err := run(context.Background()); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context) error {
	prov, err := provider.Resolve(ctx, provider.ResolveOptions{})
	if err != nil {
		return err
	}
	box, err := sandbox.Create(ctx, prov, sandbox.CreateOptions{
		Network: sandbox.NetworkNone,
		Timeout: 30 * time.Minute,
	})
	if err != nil {
		return err
	}
	defer box.Destroy(context.Background())

	page := []byte("<h1>built in a sandbox</h1>\n")
	if err := box.Files.Write(ctx, "site/index.html", page, sandbox.WriteOptions{}); err != nil {
		return err
	}
	srv, err := box.Start(ctx, "python3 -m http.server 8000", sandbox.StartOptions{
		Cwd:   "site",
		Ready: sandbox.ReadyHTTP(8000, "/"), // Start returns once GET / answers
	})
	if err != nil {
		return err
	}
	fmt.Println("preview:", srv.URL()) // works while this program runs

	resp, err := http.Get(srv.URL())
	if err != nil {
		return err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return err
	}
	fmt.Printf("GET / %s\n%s", resp.Status, body)

	logs, err := srv.Logs(ctx, sandbox.LogsOptions{}) // logs.NextCursor reads on later
	if err != nil {
		return err
	}
	fmt.Printf("server log:\n%s", logs.Text)
	return srv.Stop(ctx, sandbox.StopOptions{})
}
