package agentinst

import (
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tupper-dev/tupper/agent/client"
)

// The Linux table is the host's own on a Linux host: the names of x/sys/unix and the texts
// of Go's syscall package, from which the agent builds a status ("signal: killed").
func TestLinuxSignals(t *testing.T) {
	for n := 1; n < len(linuxSignals); n++ {
		s := syscall.Signal(n)
		if linuxSignals[n].name != unix.SignalName(s) || linuxSignals[n].text != s.String() {
			t.Errorf("signal %d: table %v, host %q %q", n, linuxSignals[n], unix.SignalName(s), s.String())
		}
	}
	for n := 1; n <= maxSignal; n++ {
		status := "signal: " + syscall.Signal(n).String()
		if got := signalOf(status); got != n {
			t.Errorf("%q parses as %d", status, got)
		}
		if got := signalOf(status + " (core dumped)"); got != n {
			t.Errorf("%q (core dumped) parses as %d", status, got)
		}
		res := execResult(client.ExecResult{ExitCode: -1, Status: status})
		if res.ExitCode != 128+n || res.Signal == "" {
			t.Errorf("%q: %+v", status, res)
		}
	}
	for _, status := range []string{"", "exit status 1", "signal: ", "signal: signal 0", "signal: signal 65", "signal: nonsense"} {
		if got := signalOf(status); got != 0 {
			t.Errorf("%q parses as %d", status, got)
		}
	}
	if res := execResult(client.ExecResult{ExitCode: -1, Status: "weird"}); res.ExitCode != 137 || res.Signal != "SIGKILL" {
		t.Errorf("an unnamed end: %+v", res)
	}
	if res := execResult(client.ExecResult{ExitCode: 3, Exited: true, Status: "exit status 3"}); res.ExitCode != 3 || res.Signal != "" {
		t.Errorf("an exit: %+v", res)
	}
}
