package agentinst

import (
	"strconv"
	"strings"

	"github.com/tupper-dev/tupper/agent/client"
	"github.com/tupper-dev/tupper/provider"
)

// execResult is the contract's report of a process's end: a process that did not exit by
// itself was killed by a signal, whose number n (parsed from the status text) gives ExitCode
// 128+n and whose name is Signal; a signal the text does not name counts as SIGKILL.
func execResult(res client.ExecResult) provider.ExecResult {
	out := provider.ExecResult{ExitCode: res.ExitCode, OOMKilled: res.OOMKilled}
	if res.Exited {
		return out
	}
	if sig := signalOf(res.Status); sig != 0 {
		out.ExitCode, out.Signal = 128+sig, signalName(sig)
	} else if out.ExitCode <= 0 {
		out.ExitCode, out.Signal = 128+sigkill, "SIGKILL"
	}
	return out
}

const sigkill = 9

// linuxSignals are Linux's standard signals, 1 to 31: the name, and the text Go's
// os.ProcessState gives a process they killed ("signal: killed"), which is what the agent
// and envd send. The sandbox runs Linux whatever the host runs (macOS numbers its signals
// differently), so these are the sandbox's, not the host's syscall tables.
var linuxSignals = [32]struct{ name, text string }{
	1: {"SIGHUP", "hangup"}, 2: {"SIGINT", "interrupt"}, 3: {"SIGQUIT", "quit"},
	4: {"SIGILL", "illegal instruction"}, 5: {"SIGTRAP", "trace/breakpoint trap"},
	6: {"SIGABRT", "aborted"}, 7: {"SIGBUS", "bus error"}, 8: {"SIGFPE", "floating point exception"},
	9: {"SIGKILL", "killed"}, 10: {"SIGUSR1", "user defined signal 1"},
	11: {"SIGSEGV", "segmentation fault"}, 12: {"SIGUSR2", "user defined signal 2"},
	13: {"SIGPIPE", "broken pipe"}, 14: {"SIGALRM", "alarm clock"}, 15: {"SIGTERM", "terminated"},
	16: {"SIGSTKFLT", "stack fault"}, 17: {"SIGCHLD", "child exited"}, 18: {"SIGCONT", "continued"},
	19: {"SIGSTOP", "stopped (signal)"}, 20: {"SIGTSTP", "stopped"},
	21: {"SIGTTIN", "stopped (tty input)"}, 22: {"SIGTTOU", "stopped (tty output)"},
	23: {"SIGURG", "urgent I/O condition"}, 24: {"SIGXCPU", "CPU time limit exceeded"},
	25: {"SIGXFSZ", "file size limit exceeded"}, 26: {"SIGVTALRM", "virtual timer expired"},
	27: {"SIGPROF", "profiling timer expired"}, 28: {"SIGWINCH", "window changed"},
	29: {"SIGIO", "I/O possible"}, 30: {"SIGPWR", "power failure"}, 31: {"SIGSYS", "bad system call"},
}

// maxSignal is Linux's highest signal number (the last real-time signal).
const maxSignal = 64

// signalOf parses the signal of a status text such as "signal: killed" (a real-time signal:
// "signal: signal 34"); 0 when it names none.
func signalOf(status string) int {
	name, ok := strings.CutPrefix(status, "signal: ")
	if !ok {
		return 0
	}
	name = strings.TrimSuffix(name, " (core dumped)")
	for n, s := range linuxSignals {
		if n > 0 && s.text == name {
			return n
		}
	}
	if num, ok := strings.CutPrefix(name, "signal "); ok {
		if n, err := strconv.Atoi(num); err == nil && n > 0 && n <= maxSignal {
			return n
		}
	}
	return 0
}

// signalName is a signal's name; a real-time signal's is SIG and its number.
func signalName(n int) string {
	if n > 0 && n < len(linuxSignals) {
		return linuxSignals[n].name
	}
	return "SIG" + strconv.Itoa(n)
}
