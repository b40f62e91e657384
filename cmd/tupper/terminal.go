package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/tupper-dev/tupper/sandbox"
)

// Default window size when standard output is not a terminal.
const defaultCols, defaultRows = 80, 24

// eot is Ctrl-D: sent when piped standard input ends, so a shell or cat reading the
// terminal sees the end of input as it would from a keyboard.
const eot = 0x04

// runTerminal runs argv (empty: a login shell) on a terminal in box, like `docker exec -it`:
// standard input goes to the terminal (in raw mode when it is a terminal itself), the
// terminal's output, with the sandbox's secrets redacted by the SDK, to standard output,
// window size changes follow SIGWINCH, and the process's exit code comes back as an
// exitError.
func runTerminal(ctx context.Context, cmd *cobra.Command, box *sandbox.Sandbox, argv []string, cwd string) error {
	in, out := cmd.InOrStdin(), cmd.OutOrStdout()
	inFd, inTTY := ttyFd(in)
	outFd, outTTY := ttyFd(out)
	sizeFd := -1
	switch {
	case outTTY:
		sizeFd = outFd
	case inTTY:
		sizeFd = inFd
	}
	size := func() (int, int) {
		if sizeFd < 0 {
			return defaultCols, defaultRows
		}
		w, h, err := term.GetSize(sizeFd)
		if err != nil || w < 1 || h < 1 {
			return defaultCols, defaultRows
		}
		return min(w, 1000), min(h, 1000)
	}

	cols, rows := size()
	t, err := box.TerminalCommand(ctx, sandbox.TerminalOptions{Cols: cols, Rows: rows, Command: argv, Cwd: cwd})
	if err != nil {
		return err
	}
	defer t.Close()

	if inTTY {
		old, err := term.MakeRaw(inFd)
		if err != nil {
			return fmt.Errorf("raw mode: %w", err)
		}
		defer term.Restore(inFd, old)
	}

	if sizeFd >= 0 {
		winch := make(chan os.Signal, 1)
		notifyResize(winch)
		defer signal.Stop(winch)
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case _, ok := <-winch:
					if !ok {
						return
					}
					c, r := size()
					rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
					_ = t.Resize(rctx, c, r)
					cancel()
				}
			}
		}()
	}

	// Standard input may block forever (a keyboard); this goroutine is left behind when the
	// process ends, as docker's is.
	go func() {
		if _, err := io.Copy(t, in); err == nil {
			_, _ = t.Write([]byte{eot})
		}
	}()

	copied := make(chan error, 1)
	go func() {
		_, err := io.Copy(out, t)
		copied <- err
	}()
	select {
	case err = <-copied:
	case <-ctx.Done():
		_ = t.Close()
		<-copied
		return exitError{exitAborted}
	}
	if err != nil && !errors.Is(err, os.ErrClosed) {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	res, err := sandbox.WaitTerminal(wctx, t)
	if errors.Is(err, sandbox.CodeUnsupported) {
		return nil // the end of the output is all there is to know
	}
	if err != nil {
		if ctx.Err() != nil {
			return exitError{exitAborted}
		}
		return err
	}
	if res.ExitCode != 0 {
		return exitError{res.ExitCode}
	}
	return nil
}

// ttyFd returns v's file descriptor and whether it is a terminal.
func ttyFd(v any) (int, bool) {
	f, ok := v.(*os.File)
	if !ok {
		return -1, false
	}
	fd := int(f.Fd())
	return fd, term.IsTerminal(fd)
}
