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
	root := newRootCmd(os.Args[1:])
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
	var se *sandbox.Error
	fromStore := errors.As(err, &se) && se.Op == "store" // the server's database: no host part is missing
	switch sandbox.CodeOf(err) {
	case sandbox.CodeUnavailable:
		if fromStore {
			return msg
		}
		return msg + "\n(run `tupper doctor` to see what this machine lacks)"
	case sandbox.CodeNotFound:
		if se != nil && se.Op == "template" {
			return msg + "\n(`tupper template ls` lists the templates)"
		}
		return msg + "\n(`tupper ls` lists the sandboxes)"
	}
	return msg
}

// subcommands are the commands of tupper, in the order help lists them.
var subcommands = []struct {
	name string
	make func() *cobra.Command
}{
	{"run", newRunCmd},
	{"create", newCreateCmd},
	{"exec", newExecCmd},
	{"code", newCodeCmd},
	{"network", newNetworkCmd},
	{"cp", newCpCmd},
	{"ls", newLsCmd},
	{"inspect", newInspectCmd},
	{"rm", newRmCmd},
	{"doctor", newDoctorCmd},
	{"version", newVersionCmd},
	{"agent", newAgentCmd},
	{"serve", newServeCmd},
	{"keys", newKeysCmd},
	{"store", newStoreCmd},
	{"webhook", newWebhookCmd},
	{"audit", newAuditCmd},
	{"usage", newUsageCmd},
	{"stats", newStatsCmd},
	{"logs", newLogsCmd},
	{"snapshot", newSnapshotCmd},
	{"pause", newPauseCmd},
	{"resume", newResumeCmd},
	{"fork", newForkCmd},
	{"template", newTemplateCmd},
	{"mcp", newMCPCmd},
	{"bench", newBenchCmd},
	{"egress-proxy", newEgressProxyCmd},
	{"volume", newVolumeCmd},
}

// newRootCmd returns the command tree for args (os.Args[1:]). When args name a subcommand,
// only that one is built: building all of them, with their flags and help, is start-up
// work that `tupper exec` should not pay. Help, completion and anything unknown get the
// whole tree.
func newRootCmd(args []string) *cobra.Command {
	root := &cobra.Command{
		Use:           "tupper",
		Short:         "Disposable Linux sandboxes for AI agents",
		Long:          "tupper runs sandboxes: isolated Linux machines in which untrusted code can run.\nOn Linux it drives runc or gVisor (runsc) directly, with no daemon.",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	if len(args) > 0 {
		for _, c := range subcommands {
			if c.name == args[0] {
				root.AddCommand(c.make())
				root.CompletionOptions.DisableDefaultCmd = true // "completion" is not being run
				return root
			}
		}
	}
	for _, c := range subcommands {
		root.AddCommand(c.make())
	}
	return root
}
