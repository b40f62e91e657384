package sandboxtest

import (
	"encoding/base64"
	"regexp"
	"strings"
	"time"

	"github.com/tupper-dev/tupper/provider"
	"github.com/tupper-dev/tupper/sandbox"
)

func gitCases() []testCase {
	return []testCase{
		{"Unsupported", gitUnsupported},
		{"CloneLocal", gitClone},
		{"CloneBranchDepth", gitCloneDepth},
		{"StatusDiff", gitStatusDiff},
		{"CommitAuthor", gitCommit},
		{"CheckoutCreatePush", gitCheckoutPush},
		{"InvalidArguments", gitInvalid},
		{"TokenNeverLeaks", gitToken},
	}
}

func gitUnsupported(c *C) {
	c.NeedNot(provider.CapGit, "the other Git cases")
	b := c.Box()
	_, err := b.Git.Clone(c.Ctx, "file:///tmp/x.git", sandbox.CloneOptions{})
	c.WantCode("Clone without git", err, sandbox.CodeUnsupported)
	_, err = b.Git.Status(c.Ctx, "")
	c.WantCode("Status without git", err, sandbox.CodeUnsupported)
}

const originURL = "file:///tmp/origin.git"

// gitOrigin makes a bare repository with two commits on main inside the sandbox.
func gitOrigin(c *C, b *sandbox.Sandbox) {
	c.Helper()
	c.MustRun(b, `set -e
git init -q --bare /tmp/origin.git
git -C /tmp/origin.git symbolic-ref HEAD refs/heads/main
git init -q /tmp/seed
cd /tmp/seed
git checkout -q -b main
echo hi > README
git add README
git -c user.name=seed -c user.email=seed@example.com commit -q -m one
echo two >> README
git -c user.name=seed -c user.email=seed@example.com commit -q -a -m two
git push -q /tmp/origin.git main`)
}

func gitClone(c *C) {
	c.Need(provider.CapGit)
	b := c.Box()
	gitOrigin(c, b)
	res, err := b.Git.Clone(c.Ctx, originURL, sandbox.CloneOptions{})
	c.NoErr("Clone", err)
	if !res.OK {
		c.Fatalf("Clone failed: %s", res.Output)
	}
	Eq(c, "Clone Cwd", res.Cwd, "/workspace")
	Eq(c, "README in the default dir app", c.Read(b, "app/README"), "hi\ntwo\n")
	res, err = b.Git.Clone(c.Ctx, originURL, sandbox.CloneOptions{Dir: "other"})
	c.NoErr("Clone into a dir", err)
	Eq(c, "Clone into a dir OK", res.OK, true)
	Eq(c, "README in other", c.Read(b, "other/README"), "hi\ntwo\n")
	res, err = b.Git.Clone(c.Ctx, "file:///tmp/missing.git", sandbox.CloneOptions{Dir: "missing"})
	if err != nil {
		c.Errorf("a failing clone must be a result, not an error: %v", err)
	} else if res.OK {
		c.Errorf("Clone of a missing repository succeeded")
	}
}

func gitCloneDepth(c *C) {
	c.Need(provider.CapGit)
	b := c.Box()
	gitOrigin(c, b)
	res, err := b.Git.Clone(c.Ctx, originURL, sandbox.CloneOptions{Dir: "shallow", Branch: "main", Depth: 1})
	c.NoErr("Clone", err)
	if !res.OK {
		c.Fatalf("Clone failed: %s", res.Output)
	}
	Eq(c, "commits in a depth-1 clone", c.Out(b, "git -C shallow rev-list --count HEAD"), "1\n")
	Eq(c, "branch", c.Out(b, "git -C shallow rev-parse --abbrev-ref HEAD"), "main\n")
	res, err = b.Git.Clone(c.Ctx, originURL, sandbox.CloneOptions{Dir: "nobranch", Branch: "does-not-exist"})
	c.NoErr("Clone of a missing branch", err)
	Eq(c, "Clone of a missing branch OK", res.OK, false)
}

func gitStatusDiff(c *C) {
	c.Need(provider.CapGit)
	b := c.Box()
	gitOrigin(c, b)
	res, err := b.Git.Clone(c.Ctx, originURL, sandbox.CloneOptions{})
	c.NoErr("Clone", err)
	Eq(c, "Clone OK", res.OK, true)
	c.Write(b, "app/README", "hi\nchanged\n")
	res, err = b.Git.Status(c.Ctx, "")
	c.NoErr("Status", err)
	Eq(c, "Status OK", res.OK, true)
	Eq(c, "Status Cwd", res.Cwd, "/workspace/app")
	if !strings.Contains(res.Stdout, "README") || !strings.Contains(res.Stdout, "modified") {
		c.Errorf("Status does not show README modified:\n%s", res.Stdout)
	}
	res, err = b.Git.Diff(c.Ctx, "app")
	c.NoErr("Diff", err)
	for _, want := range []string{"-two", "+changed", "README"} {
		if !strings.Contains(res.Stdout, want) {
			c.Errorf("Diff lacks %q:\n%s", want, res.Stdout)
		}
	}
	res, err = b.Git.Status(c.Ctx, "/tmp")
	c.NoErr("Status outside a repository", err)
	Eq(c, "Status outside a repository OK", res.OK, false)
}

func gitCommit(c *C) {
	c.Need(provider.CapGit)
	b := c.Box()
	gitOrigin(c, b)
	_, err := b.Git.Clone(c.Ctx, originURL, sandbox.CloneOptions{})
	c.NoErr("Clone", err)
	c.Write(b, "app/new.txt", "new\n")
	res, err := b.Git.Commit(c.Ctx, "app", sandbox.CommitOptions{Message: "add new.txt\n\nwith a body and 'quotes' $(x)", All: true, Author: "Ada Lovelace <ada@example.com>"})
	c.NoErr("Commit", err)
	if !res.OK {
		c.Fatalf("Commit failed: %s", res.Output)
	}
	Eq(c, "author", c.Out(b, "git -C app log -1 --format='%an <%ae>'"), "Ada Lovelace <ada@example.com>\n")
	Eq(c, "message", c.Out(b, "git -C app log -1 --format=%B"), "add new.txt\n\nwith a body and 'quotes' $(x)\n\n")
	Eq(c, "committed files", c.Out(b, "git -C app show --name-only --format= HEAD"), "new.txt\n")
	// Default author.
	c.Write(b, "app/second.txt", "2\n")
	res, err = b.Git.Commit(c.Ctx, "", sandbox.CommitOptions{Message: "second", All: true})
	c.NoErr("Commit", err)
	Eq(c, "Commit OK", res.OK, true)
	if out := c.Out(b, "git -C app log -1 --format=%an"); strings.TrimSpace(out) == "" {
		c.Errorf("default author is empty")
	}
	// Nothing to commit is a failed result.
	res, err = b.Git.Commit(c.Ctx, "app", sandbox.CommitOptions{Message: "empty"})
	c.NoErr("Commit with nothing staged", err)
	Eq(c, "Commit with nothing staged OK", res.OK, false)
}

func gitCheckoutPush(c *C) {
	c.Need(provider.CapGit)
	b := c.Box()
	gitOrigin(c, b)
	_, err := b.Git.Clone(c.Ctx, originURL, sandbox.CloneOptions{})
	c.NoErr("Clone", err)
	res, err := b.Git.Checkout(c.Ctx, "app", sandbox.CheckoutOptions{Branch: "feature/x", Create: true})
	c.NoErr("Checkout", err)
	if !res.OK {
		c.Fatalf("Checkout failed: %s", res.Output)
	}
	Eq(c, "current branch", c.Out(b, "git -C app rev-parse --abbrev-ref HEAD"), "feature/x\n")
	c.Write(b, "app/f.txt", "feature\n")
	res, err = b.Git.Commit(c.Ctx, "app", sandbox.CommitOptions{Message: "feature", All: true})
	c.NoErr("Commit", err)
	Eq(c, "Commit OK", res.OK, true)
	res, err = b.Git.Push(c.Ctx, "app", sandbox.PushOptions{})
	c.NoErr("Push", err)
	if !res.OK {
		c.Fatalf("Push failed: %s", res.Output)
	}
	Eq(c, "pushed commit", c.Out(b, "git --git-dir=/tmp/origin.git log -1 --format=%s feature/x"), "feature\n")
	res, err = b.Git.Checkout(c.Ctx, "app", sandbox.CheckoutOptions{Branch: "main"})
	c.NoErr("Checkout main", err)
	Eq(c, "Checkout main OK", res.OK, true)
	Eq(c, "branch after checkout", c.Out(b, "git -C app rev-parse --abbrev-ref HEAD"), "main\n")
	res, err = b.Git.Checkout(c.Ctx, "app", sandbox.CheckoutOptions{Branch: "nope"})
	c.NoErr("Checkout of a missing branch", err)
	Eq(c, "Checkout of a missing branch OK", res.OK, false)
	res, err = b.Git.Push(c.Ctx, "app", sandbox.PushOptions{Remote: "origin", Branch: "main:pushed-main"})
	c.NoErr("Push with remote and branch", err)
	Eq(c, "Push with remote and branch OK", res.OK, true)
	Eq(c, "pushed branch", c.Out(b, "git --git-dir=/tmp/origin.git rev-parse --verify -q pushed-main >/dev/null && echo yes"), "yes\n")
}

func gitInvalid(c *C) {
	c.Need(provider.CapGit)
	b := c.Box()
	_, err := b.Git.Clone(c.Ctx, "", sandbox.CloneOptions{})
	c.WantCode("Clone of an empty url", err, sandbox.CodeInvalidArgument)
	_, err = b.Git.Clone(c.Ctx, "https://user:hunter2pass@example.com/r.git", sandbox.CloneOptions{})
	if c.WantCode("Clone of a url with credentials", err, sandbox.CodeInvalidArgument) && strings.Contains(err.Error(), "hunter2pass") {
		c.Errorf("the error %q repeats the password", err)
	}
	_, err = b.Git.Clone(c.Ctx, originURL, sandbox.CloneOptions{Depth: -1})
	c.WantCode("Clone with a negative depth", err, sandbox.CodeInvalidArgument)
	_, err = b.Git.Clone(c.Ctx, originURL, sandbox.CloneOptions{Token: "a\nb"})
	c.WantCode("Clone with a token holding a newline", err, sandbox.CodeInvalidArgument)
	_, err = b.Git.Commit(c.Ctx, "app", sandbox.CommitOptions{Message: " "})
	c.WantCode("Commit with an empty message", err, sandbox.CodeInvalidArgument)
	for _, a := range []string{"no email", "<only@email>", "Name <>", "Name <a b@c>"} {
		_, err = b.Git.Commit(c.Ctx, "app", sandbox.CommitOptions{Message: "m", Author: a})
		c.WantCode("Commit with author "+a, err, sandbox.CodeInvalidArgument)
	}
	_, err = b.Git.Checkout(c.Ctx, "app", sandbox.CheckoutOptions{})
	c.WantCode("Checkout without a branch", err, sandbox.CodeInvalidArgument)
}

// gitToken runs a clone and a push with a token against an HTTP server in the sandbox that
// always answers 401, while a monitor records every process's command line and environment,
// then looks for the token everywhere it must not be.
func gitToken(c *C) {
	c.Need(provider.CapGit, provider.CapShell)
	b := c.Box()
	bin := c.helper(b)
	token := "tok" + randHex(16)
	start(c, b, bin+" -port 18090 -auth401 -log /tmp/sbt-authlog", sandbox.StartOptions{Name: "authsrv",
		Ready: sandbox.ReadyLog(regexp.MustCompile("^listening on 18090$"))}) // port readiness is Process/ReadyPort's
	mon := start(c, b, `echo monitoring
while true; do
	for f in /proc/[0-9]*/cmdline /proc/[0-9]*/environ; do tr '\0' ' ' < "$f"; echo; done >> /tmp/sbt-procs 2>/dev/null
done`, sandbox.StartOptions{Name: "monitor", Ready: sandbox.ReadyLog(regexp.MustCompile("monitoring"))})

	texts := map[string]string{}
	url := "http://127.0.0.1:18090/repo.git"
	res, err := b.Git.Clone(c.Ctx, url, sandbox.CloneOptions{Dir: "cloned", Token: token})
	texts["clone error"] = errText(err)
	if res != nil {
		Eq(c, "Clone against a server that refuses OK", res.OK, false)
		texts["clone Stdout"], texts["clone Stderr"], texts["clone Output"], texts["clone Command"] = res.Stdout, res.Stderr, res.Output, res.Command
	}
	gitOrigin(c, b)
	if r, err := b.Git.Clone(c.Ctx, originURL, sandbox.CloneOptions{Dir: "local"}); err != nil || !r.OK {
		c.Fatalf("local clone: %v", err)
	}
	res, err = b.Git.Push(c.Ctx, "local", sandbox.PushOptions{Remote: url, Token: token})
	texts["push error"] = errText(err)
	if res != nil {
		Eq(c, "Push against a server that refuses OK", res.OK, false)
		texts["push Stdout"], texts["push Stderr"], texts["push Output"], texts["push Command"] = res.Stdout, res.Stderr, res.Output, res.Command
	}
	c.NoErr("Stop monitor", mon.Stop(c.Ctx, sandbox.StopOptions{Grace: time.Second}))

	procs, err := b.Files.ReadText(c.Ctx, "/tmp/sbt-procs")
	c.NoErr("read the process capture", err)
	if !strings.Contains(procs, "git") {
		c.Errorf("the monitor never saw git run; the /proc capture proves nothing")
	}
	texts["/proc/*/cmdline and environ while git ran"] = procs
	hist, _ := b.Files.ReadText(c.Ctx, "/root/.bash_history")
	texts["/root/.bash_history"] = hist
	hist2 := c.Run(b, `cat "$HOME/.bash_history" "$HOME/.sh_history" 2>/dev/null; true`, sandbox.RunOptions{}).Stdout
	texts["~/.bash_history"] = hist2
	found := c.Run(b, `grep -rlF -e "$T" /tmp /workspace /root /home /etc 2>/dev/null; true`, sandbox.RunOptions{Env: map[string]string{"T": token}}).Stdout
	texts["files holding the token (grep -rl)"] = found
	leftovers := c.Run(b, `ls -a /var/lib/sandbox-sdk/ | grep '^cred-'; true`, sandbox.RunOptions{}).Stdout
	if leftovers != "" {
		c.Errorf("credential files left behind: %q", leftovers)
	}
	c.noLeak(token, texts)

	// The token did reach the server, through the credential helper: otherwise this case
	// would pass without testing anything.
	authlog, err := b.Files.ReadText(c.Ctx, "/tmp/sbt-authlog")
	c.NoErr("read the server's log", err)
	want := base64.StdEncoding.EncodeToString([]byte("x-access-token:" + token))
	if strings.Count(authlog, want) < 2 {
		c.Errorf("the server did not receive the token from both clone and push (credential helper not used?); log:\n%s", authlog)
	}
}
