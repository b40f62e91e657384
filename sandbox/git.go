package sandbox

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"path"
	"strings"

	"github.com/tupper-dev/tupper/provider"
)

// Git runs git in the sandbox. Every method returns the command's RunResult: a failing git
// command is a result with OK false, not an error.
//
// Tokens never appear in argv, shell history, output or errors: they are written to a
// private file inside the sandbox, handed to git by a temporary credential helper that reads
// that file, and removed when the command ends; they are also redacted from the result.
type Git struct{ b *Sandbox }

// CloneOptions configures Git.Clone.
type CloneOptions struct {
	Dir    string // default "app", relative to the sandbox's Workdir
	Branch string
	Depth  int // 0: full history
	Token  string
}

// CommitOptions configures Git.Commit.
type CommitOptions struct {
	Message string // required
	All     bool   // stage every change first (git add -A)
	Author  string // "Name <email>"; default "Tupper <sandbox@tupper.dev>"
}

// PushOptions configures Git.Push.
type PushOptions struct {
	Token  string
	Remote string // default "origin"
	Branch string // default the current branch
}

// CheckoutOptions configures Git.Checkout.
type CheckoutOptions struct {
	Branch string // required
	Create bool   // create the branch (git checkout -b)
}

const defaultAuthor = "Tupper <sandbox@tupper.dev>"

// Clone clones url into opts.Dir.
func (g *Git) Clone(ctx context.Context, repo string, opts CloneOptions) (*RunResult, error) {
	const op = "git.clone"
	if repo == "" || containsNUL(repo) {
		return nil, errorf(CodeInvalidArgument, op, "repository url is empty or invalid")
	}
	if u, err := url.Parse(repo); err == nil && u.User != nil {
		return nil, errorf(CodeInvalidArgument, op, "put credentials in Token, not in the url")
	}
	if opts.Depth < 0 {
		return nil, errorf(CodeInvalidArgument, op, "depth must not be negative")
	}
	dir := opts.Dir
	if dir == "" {
		dir = "app"
	}
	var args strings.Builder
	args.WriteString("git clone")
	if opts.Branch != "" {
		args.WriteString(" --branch " + Quote(opts.Branch))
	}
	if opts.Depth > 0 {
		fmt.Fprintf(&args, " --depth %d", opts.Depth)
	}
	args.WriteString(" -- " + Quote(repo) + " " + Quote(g.b.resolvePath(dir)))
	return g.run(ctx, op, g.b.Workdir, args.String(), opts.Token)
}

// Status runs git status in dir ("" is app).
func (g *Git) Status(ctx context.Context, dir string) (*RunResult, error) {
	return g.run(ctx, "git.status", g.dir(dir), "git status", "")
}

// Diff runs git diff in dir ("" is app).
func (g *Git) Diff(ctx context.Context, dir string) (*RunResult, error) {
	return g.run(ctx, "git.diff", g.dir(dir), "git diff", "")
}

// Commit commits in dir ("" is app).
func (g *Git) Commit(ctx context.Context, dir string, opts CommitOptions) (*RunResult, error) {
	const op = "git.commit"
	if strings.TrimSpace(opts.Message) == "" {
		return nil, errorf(CodeInvalidArgument, op, "commit message is empty")
	}
	author := opts.Author
	if author == "" {
		author = defaultAuthor
	}
	name, email, ok := parseAuthor(author)
	if !ok {
		return nil, errorf(CodeInvalidArgument, op, "author %q is not \"Name <email>\"", author)
	}
	script := ""
	if opts.All {
		script = "git add -A && "
	}
	script += Sh("git -c user.name=%s -c user.email=%s commit --author=%s -m %s", name, email, author, opts.Message).String()
	return g.run(ctx, op, g.dir(dir), script, "")
}

// Push pushes from dir ("" is app).
func (g *Git) Push(ctx context.Context, dir string, opts PushOptions) (*RunResult, error) {
	remote := opts.Remote
	if remote == "" {
		remote = "origin"
	}
	script := "git push " + Quote(remote)
	if opts.Branch != "" {
		script += " " + Quote(opts.Branch)
	} else {
		script += " HEAD"
	}
	return g.run(ctx, "git.push", g.dir(dir), script, opts.Token)
}

// Checkout switches dir ("" is app) to a branch, creating it with opts.Create.
func (g *Git) Checkout(ctx context.Context, dir string, opts CheckoutOptions) (*RunResult, error) {
	const op = "git.checkout"
	if opts.Branch == "" {
		return nil, errorf(CodeInvalidArgument, op, "branch is empty")
	}
	script := "git checkout "
	if opts.Create {
		script += "-b "
	}
	script += Quote(opts.Branch)
	return g.run(ctx, op, g.dir(dir), script, "")
}

func (g *Git) dir(dir string) string {
	if dir == "" {
		dir = "app"
	}
	return g.b.resolvePath(dir)
}

func parseAuthor(a string) (name, email string, ok bool) {
	i := strings.LastIndex(a, "<")
	if i <= 0 || !strings.HasSuffix(a, ">") {
		return "", "", false
	}
	name = strings.TrimSpace(a[:i])
	email = a[i+1 : len(a)-1]
	return name, email, name != "" && email != "" && !strings.ContainsAny(email, "<> \n")
}

// run runs a git command line in dir, with a credential helper when token is set.
func (g *Git) run(ctx context.Context, op, dir, script, token string) (*RunResult, error) {
	b := g.b
	if !b.Capabilities.Has(provider.CapGit) {
		return nil, errorf(CodeUnsupported, op, "provider %s has no git", b.Provider)
	}
	if containsNUL(token) || strings.ContainsAny(token, "\n\r") {
		return nil, errorf(CodeInvalidArgument, op, "token is not valid")
	}
	if err := b.ensureSecrets(ctx); err != nil {
		return nil, err
	}
	env := map[string]string{"GIT_ASKPASS": "/bin/false", "SSH_ASKPASS": "/bin/false"}
	if token == "" {
		res, err := b.Run(ctx, script, RunOptions{Cwd: dir, Env: env})
		return res, b.red.Err(err)
	}
	// This command's redactor also knows the token.
	red := newRedactor()
	red.addValues(b.red.snapshot()...)
	red.addValues(token)
	var rnd [12]byte
	_, _ = rand.Read(rnd[:])
	credFile := path.Join(sdkDir, "cred-"+hex.EncodeToString(rnd[:]))
	cred := fmt.Sprintf("username=x-access-token\npassword=%s\n", token)
	if err := b.inst.WriteFile(ctx, credFile, bytes.NewReader([]byte(cred)), ptr(uint32(0o600))); err != nil {
		return nil, b.red.Err(wrapProvider(err, op))
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30e9)
		defer cancel()
		_, _ = b.inst.Exec(rctx, provider.ExecRequest{Command: "rm -f " + Quote(credFile), Cwd: "/"})
	}()
	// The helper prints the file for "get" and ignores "store" and "erase". Only the file's
	// path is on the command line.
	helper := fmt.Sprintf("!f() { test \"$1\" = get && cat %s; }; f", Quote(credFile))
	env["GIT_CONFIG_COUNT"] = "2"
	env["GIT_CONFIG_KEY_0"] = "credential.helper"
	env["GIT_CONFIG_VALUE_0"] = ""
	env["GIT_CONFIG_KEY_1"] = "credential.helper"
	env["GIT_CONFIG_VALUE_1"] = helper
	res, err := b.streamWith(ctx, script, RunOptions{Cwd: dir, Env: env}, red).Wait()
	return res, red.Err(err)
}
