package agent

import (
	"fmt"
	"os"
)

// ExecMain implemented "tupper agent-exec", the helper the agent used to
// re-execute for every command to hide paths. The agent now forks commands
// from a prepared thread instead (see spawner) and never runs it.
//
// Deprecated: kept only while cmd/tupper/main.go and providers/local's
// testagent still register the subcommand; it always fails with 127.
func ExecMain(args []string) int {
	fmt.Fprintln(os.Stderr, "tupper agent-exec: no longer used: the agent hides paths itself")
	return 127
}
