// Command tupper runs sandboxes for AI agents: on this machine (the local provider: runc or
// gVisor, no daemon), or on a tupper server.
//
//	tupper run --network none -- sh -c 'echo hi'   # a sandbox for one command
//	id=$(tupper create)                             # a sandbox that stays
//	tupper exec $id -- ls -la /workspace
//	tupper cp ./src $id:/workspace/src
//	tupper ls; tupper rm $id
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/tupper-dev/tupper/sandbox"
)

// Exit codes of tupper's own failures, apart from a command's exit code, in the manner of
// docker run and timeout(1).
const (
	exitTupperError = 125 // tupper itself failed: bad flags, no provider, provider error
	exitTimedOut    = 124 // the command ran past its timeout
	exitAborted     = 130 // interrupted
)

// exitError carries an exit code out of a command without printing anything more.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	root := newRootCmd()
	err := root.ExecuteContext(ctx)
	stop()
	os.Exit(exitCode(err, root))
}

func exitCode(err error, root *cobra.Command) int {
	if err == nil {
		return 0
	}
	var ee exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	fmt.Fprintln(root.ErrOrStderr(), "tupper:", humanError(err))
	return exitTupperError
}

// humanError says what went wrong and, where it can, what to do about it.
func humanError(err error) string {
	msg := err.Error()
	switch sandbox.CodeOf(err) {
	case sandbox.CodeUnavailable:
		return msg + "\n(run `tupper doctor` to see what this machine lacks)"
	case sandbox.CodeNotFound:
		return msg + "\n(`tupper ls` lists the sandboxes)"
	}
	return msg
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "tupper",
		Short:         "Disposable Linux sandboxes for AI agents",
		Long:          "tupper runs sandboxes: isolated Linux machines in which untrusted code can run.\nOn Linux it drives runc or gVisor (runsc) directly, with no daemon.",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(
		newRunCmd(),
		newCreateCmd(),
		newExecCmd(),
		newCpCmd(),
		newLsCmd(),
		newRmCmd(),
		newDoctorCmd(),
		newVersionCmd(),
		newAgentCmd(),
		newServeCmd(),
		newKeysCmd(),
		newLogsCmd(),
		newSnapshotCmd(),
		newMCPCmd(),
		newBenchCmd(),
	)
	return root
}
