package provider

import (
	"context"
	"fmt"
	"io"
)

// TemplateBuilder is optional on a Provider that keeps templates (Templater): it builds one
// from a Dockerfile into its own store, each step that changes files in a sandbox of the
// provider, as isolated as any other (providers/local). The caller never opens the store:
// the provider picks the runner, imports the base images a FROM names, and writes the
// template's record only when the build succeeds. Without it, builds and their context
// directories are CodeUnsupported (a server's POST /v1/templates and E2B's template API).
// Its methods may run concurrently.
type TemplateBuilder interface {
	// BuildTemplate builds req into template req.Name (replacing one of that name), its
	// events to req.Progress as they happen. A failing step is a *BuildError; a bad
	// Dockerfile or name CodeInvalidArgument; a cancelled ctx CodeAborted or the context's
	// error. Nothing of a failed build is left but layers in the provider's cache.
	BuildTemplate(ctx context.Context, req BuildRequest) (BuiltTemplate, error)
	// BuildDir makes an empty directory for a build's context (BuildRequest.Context), the
	// caller's to remove: beside the provider's templates, so that a large context is not
	// written to a small temporary file system. Directories a process that died left are
	// removed when a provider is first asked for one.
	BuildDir() (string, error)
	// RetagTemplate sets the tags of template name (or the one tagged name) to what change
	// returns for it, atomically with other retags; change's error is returned as is.
	// E2B's tag API names a template's builds this way.
	RetagTemplate(ctx context.Context, name string, change func(TemplateInfo) ([]string, error)) (TemplateInfo, error)
}

// BuildRequest is a build of a template from a Dockerfile.
type BuildRequest struct {
	Name string   // the template to make (or replace)
	Tags []string // other names for it
	ID   string   // names this build in the template (TemplateInfo.Build); "" makes one up
	// Context is the directory COPY and ADD read. Dockerfile is the Dockerfile's path,
	// relative to Context unless absolute ("" is Context/Dockerfile); DockerfileText, when
	// set, the file itself.
	Context, Dockerfile, DockerfileText string
	BuildArgs                           map[string]string
	Target                              string      // the stage to build up to; "" the last
	Network                             NetworkMode // of RUN steps; "" is all
	NoCache                             bool        // run every step, even those cached
	// StartCmd and ReadyCmd are the template's start and ready commands, which a
	// Dockerfile has no instruction for (E2B's setStartCmd and setReadyCmd).
	StartCmd, ReadyCmd string
	// Progress receives the build's events in order (nil: none); Log the lines of importing
	// the base images a FROM names (nil: none).
	Progress func(BuildEvent)
	Log      io.Writer
}

// BuiltTemplate is what a build made: the template, and its layers' diff IDs, bottom first.
type BuiltTemplate struct {
	TemplateInfo
	LayerIDs []string
}

// BuildEvent is one event of a build, as `docker build` shows them: a step starting, a
// step's output, a step taken from the cache, a step done.
type BuildEvent struct {
	Step, Steps int    // 1-based
	Line        int    // the instruction's line in the Dockerfile
	Instruction string // as written
	Kind        string // "step", "output", "cached", "done", "error"
	Output      string // with "output": a chunk of the step's output
	Layer       string // with "done" and "cached": the diff ID of the step's layer, if it made one
}

// BuildError is a failed build step.
type BuildError struct {
	Line        int
	Instruction string
	ExitCode    int    // a RUN's exit code; 0 for other failures
	Output      string // the end of the step's output
	Err         error
}

func (e *BuildError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("Dockerfile line %d: %s: %v", e.Line, e.Instruction, e.Err)
	}
	return fmt.Sprintf("Dockerfile line %d: %s: exit code %d", e.Line, e.Instruction, e.ExitCode)
}

func (e *BuildError) Unwrap() error { return e.Err }
