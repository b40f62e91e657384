package tools

import (
	"context"
	"path"

	"github.com/tupper-dev/tupper/sandbox"
)

// Tools that work in a git repository.

func gitTools() []Tool {
	return []Tool{
		define(Tool{
			Name:        "git_clone",
			Description: "Clone a git repository into the sandbox (by default into app in the working directory: /workspace/app unless the sandbox's template sets another). Needs network access.",
		}, gitClone),
		define(Tool{
			Name:        "git_status",
			Description: "Run git status in a repository in the sandbox.",
			ReadOnly:    true,
		}, gitStatus),
		define(Tool{
			Name:        "git_diff",
			Description: "Show the unstaged changes of a repository in the sandbox (git diff).",
			ReadOnly:    true,
		}, gitDiff),
		define(Tool{
			Name:        "git_commit",
			Description: "Commit in a repository in the sandbox. By default every change is staged first (git add -A).",
		}, gitCommit),
	}
}

type gitCloneArgs struct {
	URL    string `json:"url" jsonschema:"Repository URL, e.g. https://github.com/owner/repo.git." minLength:"1"`
	Dir    string `json:"dir,omitempty" jsonschema:"Target directory, absolute or relative to the working directory (/workspace unless the sandbox's template sets one). Default: app."`
	Branch string `json:"branch,omitempty" jsonschema:"Branch or tag to check out. Default: the remote's default branch."`
	Depth  int    `json:"depth,omitempty" jsonschema:"Clone only this many recent commits. Default: full history." minimum:"1" maximum:"2147483647"`
	inSandbox
}

func gitClone(ctx context.Context, s *Session, a gitCloneArgs) (Result, error) {
	b, err := s.Sandbox(ctx, a.SandboxID)
	if err != nil {
		return Result{}, err
	}
	res, err := b.Git.Clone(ctx, a.URL, sandbox.CloneOptions{Dir: a.Dir, Branch: a.Branch, Depth: a.Depth})
	if err != nil {
		return Result{}, err
	}
	r := runResult(res, sandbox.DefaultRunTimeout)
	if res.OK {
		dir := a.Dir
		if dir == "" {
			dir = "app"
		}
		if !path.IsAbs(dir) {
			dir = path.Join(b.Workdir, dir)
		}
		r.Text = "cloned into " + dir + "\n" + r.Text
	}
	return r, nil
}

// gitDirArgs names the repository of git_status, git_diff and git_commit.
type gitDirArgs struct {
	Dir string `json:"dir,omitempty" jsonschema:"Repository directory, absolute or relative to the working directory (/workspace unless the sandbox's template sets one). Default: app (where git_clone puts a repository by default)."`
	inSandbox
}

func gitStatus(ctx context.Context, s *Session, a gitDirArgs) (Result, error) {
	return gitSimple(ctx, s, a, (*sandbox.Git).Status)
}

func gitDiff(ctx context.Context, s *Session, a gitDirArgs) (Result, error) {
	return gitSimple(ctx, s, a, (*sandbox.Git).Diff)
}

func gitSimple(ctx context.Context, s *Session, a gitDirArgs, run func(*sandbox.Git, context.Context, string) (*sandbox.RunResult, error)) (Result, error) {
	b, err := s.Sandbox(ctx, a.SandboxID)
	if err != nil {
		return Result{}, err
	}
	res, err := run(b.Git, ctx, a.Dir)
	if err != nil {
		return Result{}, err
	}
	return runResult(res, sandbox.DefaultRunTimeout), nil
}

type gitCommitArgs struct {
	Message string `json:"message" jsonschema:"The commit message." minLength:"1"`
	gitDirArgs
	All *bool `json:"all,omitempty" jsonschema:"Stage every change, new files included, before committing. Default: true."`
}

func gitCommit(ctx context.Context, s *Session, a gitCommitArgs) (Result, error) {
	b, err := s.Sandbox(ctx, a.SandboxID)
	if err != nil {
		return Result{}, err
	}
	all := a.All == nil || *a.All
	res, err := b.Git.Commit(ctx, a.Dir, sandbox.CommitOptions{Message: a.Message, All: all})
	if err != nil {
		return Result{}, err
	}
	return runResult(res, sandbox.DefaultRunTimeout), nil
}
