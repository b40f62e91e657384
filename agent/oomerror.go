package agent

// OOMKilledError is the end event's error of a command the kernel's OOM killer ended (E2B's
// SDKs show it as CommandExitError's error); the text after it says why. The SDK and the
// REST API turn it into their own oom_killed.
const OOMKilledError = "oom_killed"
