package sandbox

import (
	"context"

	"github.com/tupper-dev/tupper/provider"
)

// TerminalOptions configures TerminalCommand.
type TerminalOptions struct {
	Cols, Rows int      // the PTY's size, 1 to 1000 each
	Command    []string // argv, run without a shell; empty: a login shell
	Cwd        string   // the working directory; "": the provider's default
}

// TerminalCommand opens an interactive PTY that runs opts.Command (a login shell without
// one), like `docker exec -it`. Secrets are redacted from what it prints, as from every
// other output. CodeUnsupported where the sandbox is no provider.Terminaler, and for a command or a
// directory on a provider that can open only a login shell (see
// provider.CommandTerminaler).
func (b *Sandbox) TerminalCommand(ctx context.Context, opts TerminalOptions) (provider.Terminal, error) {
	const op = "terminal"
	t, ok := b.inst.(provider.Terminaler)
	if !ok {
		return nil, errorf(CodeUnsupported, op, "provider %s has no terminal", b.Provider)
	}
	if opts.Cols < 1 || opts.Rows < 1 || opts.Cols > 1000 || opts.Rows > 1000 {
		return nil, errorf(CodeInvalidArgument, op, "terminal size %dx%d is out of range", opts.Cols, opts.Rows)
	}
	// The one fallback: a provider without CommandTerminaler opens only a login shell.
	open := func() (provider.Terminal, error) { return t.Terminal(ctx, opts.Cols, opts.Rows) }
	if ct, ok := b.inst.(provider.CommandTerminaler); ok {
		open = func() (provider.Terminal, error) {
			return ct.TerminalCommand(ctx, opts.Command, opts.Cwd, opts.Cols, opts.Rows)
		}
	} else if len(opts.Command) > 0 || opts.Cwd != "" {
		return nil, errorf(CodeUnsupported, op, "provider %s cannot run a command on a terminal, only a login shell in the default directory", b.Provider)
	}
	if err := b.ensureSecrets(ctx); err != nil {
		return nil, err
	}
	term, err := open()
	if err != nil {
		return nil, wrapProvider(err, op)
	}
	return b.redactTerminal(term), nil
}

// WaitTerminal waits until term's process ends (or ctx does) and says how it ended.
// CodeUnsupported when term cannot tell (provider.TerminalWaiter): the end of its output is
// then all a caller learns. An error of Wait itself is returned as the terminal gave it.
func WaitTerminal(ctx context.Context, term provider.Terminal) (provider.ExecResult, error) {
	w, ok := term.(provider.TerminalWaiter)
	if !ok {
		return provider.ExecResult{}, errorf(CodeUnsupported, "terminal.wait", "terminal %T cannot say how its process ended", term)
	}
	return w.Wait(ctx)
}
