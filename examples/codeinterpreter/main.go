// Command codeinterpreter is the loop of a code-interpreter tool: Python that a model wrote
// runs in a sandbox, and what it printed, the error it raised and the files it made go back.
// A real program sends each result to the model and gets the next cell in return; here a
// fixed list of cells stands in for the model, so the program runs without one.
//
// The sandbox needs python3. The local provider's template is this machine's own /usr, bound
// read-only, so python3 in the sandbox is the host's: apt-get install python3 if it is missing.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/tupper-dev/tupper/provider"
	_ "github.com/tupper-dev/tupper/providers/local"
	"github.com/tupper-dev/tupper/sandbox"
)

// cells are what a model might write, one per turn. Each runs as its own process; files in
// /workspace carry results from one cell to the next.
var cells = []string{
	`import statistics
data = [3, 1, 4, 1, 5, 9, 2, 6]
print("mean", statistics.mean(data), "median", statistics.median(data))`,

	`import csv, os
os.makedirs("out", exist_ok=True)
with open("out/squares.csv", "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["n", "square"])
    w.writerows([n, n * n] for n in range(1, 6))
print("wrote out/squares.csv")`,

	`print(total)  # a mistake: the traceback goes back to the model`,
}

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
		Network: sandbox.NetworkNone, // model-written code gets no network
		Timeout: 30 * time.Minute,
	})
	if err != nil {
		return err
	}
	defer box.Destroy(context.Background())

	if res, err := box.Run(ctx, "command -v python3", sandbox.RunOptions{}); err != nil {
		return err
	} else if !res.OK {
		return errors.New("no python3 in the sandbox: the local provider uses this machine's /usr, so install python3 here")
	}

	for i, code := range cells {
		out, err := runCell(ctx, box, fmt.Sprintf("cell%d.py", i+1), code)
		if err != nil {
			return err
		}
		fmt.Printf("--- cell %d\n%s", i+1, out) // what the model reads next
	}

	// Files the code made come back as bytes.
	data, err := box.Files.Read(ctx, "out/squares.csv")
	if err != nil {
		return err
	}
	fmt.Printf("--- out/squares.csv\n%s", data)
	return nil
}

// runCell runs one cell of Python and returns what the model should see: its output, and
// how it failed if it did. The error is for the sandbox failing, not the code.
func runCell(ctx context.Context, box *sandbox.Sandbox, name, code string) (string, error) {
	if err := box.Files.Write(ctx, name, []byte(code), sandbox.WriteOptions{}); err != nil {
		return "", err
	}
	res, err := box.Sh("python3 %s", name).Timeout(30 * time.Second).Run(ctx) // every %s quoted
	if err != nil {
		return "", err
	}
	switch {
	case res.TimedOut:
		return res.Output + "(stopped after 30 s)\n", nil
	case !res.OK:
		return res.Output + fmt.Sprintf("(exit code %d)\n", res.ExitCode), nil
	}
	return res.Output, nil
}
