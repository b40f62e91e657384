package sandbox_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/tupper-dev/tupper/providers/memory"
	"github.com/tupper-dev/tupper/sandbox"
)

// These examples run on the memory provider, which needs no root and isolates nothing, so
// that `go test` checks their output anywhere. A real program takes its provider from
// provider.Resolve (local on Linux) and otherwise reads the same; the programs in
// examples/ do, and the test suite runs them against real sandboxes.

// Create a sandbox, run a command in it, read the result, destroy it.
func Example() {
	ctx := context.Background()
	box, err := sandbox.Create(ctx, memory.New(), sandbox.CreateOptions{Network: sandbox.NetworkNone})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer box.Destroy(context.Background())

	res, err := box.Run(ctx, "echo hello from $(pwd)", sandbox.RunOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Print(res.Stdout)
	// Output: hello from /workspace
}

// A command that fails is a result, not an error: err is for the sandbox or the provider
// failing.
func ExampleSandbox_Run() {
	ctx := context.Background()
	box, _ := sandbox.Create(ctx, memory.New(), sandbox.CreateOptions{})
	defer box.Destroy(ctx)

	res, err := box.Run(ctx, "ls /missing; exit 3", sandbox.RunOptions{})
	fmt.Println(err)
	fmt.Println(res.OK, res.ExitCode, strings.Contains(res.Stderr, "/missing"))
	// Output:
	// <nil>
	// false 3 true
}

// Sh quotes every argument as one shell word, so input from a user or a model cannot become
// shell syntax.
func ExampleSh() {
	query := `it's "quoted"; rm -rf /`
	fmt.Println(sandbox.Sh("grep -rn %s %s", query, []string{"src", "my docs"}))
	// Output: grep -rn 'it'\''s "quoted"; rm -rf /' src 'my docs'
}

// Sandbox.Sh runs the quoted command with options chained on.
func ExampleSandbox_Sh() {
	ctx := context.Background()
	box, _ := sandbox.Create(ctx, memory.New(), sandbox.CreateOptions{})
	defer box.Destroy(ctx)

	name := "notes; echo injected"
	box.Files.Write(ctx, "app/"+name, []byte("a note\n"), sandbox.WriteOptions{})
	res, _ := box.Sh("cat %s", name).Cwd("app").Run(ctx)
	fmt.Print(res.Stdout)
	// Output: a note
}

// Stream hands out output as it arrives, in pieces of any size (c.Stream says stdout or
// stderr); Wait returns the same result as Run.
func ExampleSandbox_Stream() {
	ctx := context.Background()
	box, _ := sandbox.Create(ctx, memory.New(), sandbox.CreateOptions{})
	defer box.Destroy(ctx)

	h := box.Stream(ctx, "for i in 1 2 3; do echo line $i; done", sandbox.RunOptions{})
	for c := range h.Chunks() {
		fmt.Print(c.Text)
	}
	res, _ := h.Wait()
	fmt.Println("ok:", res.OK)
	// Output:
	// line 1
	// line 2
	// line 3
	// ok: true
}

// Secrets are set as environment variables and never appear in output, logs or errors.
func ExampleCreateOptions_secrets() {
	ctx := context.Background()
	box, _ := sandbox.Create(ctx, memory.New(), sandbox.CreateOptions{
		Secrets: map[string]string{"API_TOKEN": "tok-4f9a2c"},
	})
	defer box.Destroy(ctx)

	res, _ := box.Run(ctx, `echo "token is $API_TOKEN"`, sandbox.RunOptions{})
	fmt.Print(res.Stdout)
	// Output: token is ***
}

// Files move bytes in and out; Edit replaces one exact occurrence of a string.
func ExampleFiles_Edit() {
	ctx := context.Background()
	box, _ := sandbox.Create(ctx, memory.New(), sandbox.CreateOptions{})
	defer box.Destroy(ctx)

	box.Files.Write(ctx, "app/main.py", []byte("print(greet())\n"), sandbox.WriteOptions{})
	if err := box.Files.Edit(ctx, "app/main.py", "greet()", `"hello"`); err != nil {
		fmt.Println(err)
	}
	src, _ := box.Files.ReadText(ctx, "app/main.py")
	fmt.Print(src)

	// A string that is not there is an error with its own code.
	err := box.Files.Edit(ctx, "app/main.py", "greet()", "x")
	fmt.Println(errors.Is(err, sandbox.CodeEditNotFound))
	// Output:
	// print("hello")
	// true
}

// Every error carries a stable code to branch on.
func ExampleError() {
	ctx := context.Background()
	box, _ := sandbox.Create(ctx, memory.New(), sandbox.CreateOptions{})
	defer box.Destroy(ctx)

	_, err := box.Files.Read(ctx, "no/such/file")
	var e *sandbox.Error
	if errors.As(err, &e) {
		fmt.Println(e.Code, errors.Is(err, sandbox.CodeNotFound))
	}
	// Output: not_found true
}

// A background process keeps running after Start returns; its logs can be read from any
// process later, from a cursor.
func ExampleSandbox_Start() {
	ctx := context.Background()
	box, _ := sandbox.Create(ctx, memory.New(), sandbox.CreateOptions{})
	defer box.Destroy(ctx)

	p, err := box.Start(ctx, "echo starting; echo ready; sleep 60", sandbox.StartOptions{
		Name:  "worker",
		Ready: sandbox.ReadyLog(regexp.MustCompile(`^ready$`)),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	page, _ := p.Logs(ctx, sandbox.LogsOptions{})
	fmt.Print(page.Text)
	fmt.Println(p.Name(), p.Ready())
	p.Stop(ctx, sandbox.StopOptions{})
	// Output:
	// starting
	// ready
	// worker true
}
