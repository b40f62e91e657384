// Package docker is the provider whose sandboxes are containers of a Docker Engine: the
// platform default on macOS and Windows (Docker Desktop, OrbStack, a remote engine), and a
// choice on Linux (`--provider docker`) where Docker is already how things run.
//
// # How a sandbox is made
//
// A sandbox is one container whose init (PID 1) is Tupper's agent, the Linux tupper binary
// run as "tupper agent", so every operation (exec, files, watches, terminals, port tunnels,
// activity) goes through the shared agent-backed instance (package provider/agentinst)
// exactly as on the local provider. The agent listens on TCP port 49983 inside the container;
// Docker publishes it on the host's 127.0.0.1 only, on a port Docker picks, and every request
// needs the sandbox's own access token. That transport works where the engine runs in a VM
// (Docker Desktop), where a unix socket bind-mounted from the host would not.
//
// The agent binary reaches the container without a download: on Linux, when the engine is on
// this machine, the tupper binary itself is bind-mounted read-only at /.tupper/bin/tupper;
// otherwise it is copied into the container before it starts (Config.CopyAgent), from
// Config.AgentPath, $TUPPER_AGENT, the running tupper command when it is a Linux binary of
// the engine's architecture, or the Linux agent embedded at build time in macOS and Windows
// builds (package agentbin, made by scripts/build.sh; see docs/docker.md).
//
// # Templates
//
// Any image the engine has is a template (`--template python:3.12-slim`); an image that is
// not there is pulled first. The template "host" (the default on Linux with a local engine)
// is a tiny image of Tupper's own whose /usr (and the merged-/usr links) is the host's /usr,
// bind-mounted read-only: instant and complete, like the local provider's host template.
// Snapshots are `docker commit`s of the sandbox's container, images named
// tupper-snapshot:<id>, and CreateSpec.From starts a container from one.
//
// # State
//
// Everything the provider knows is in the engine: containers and images carry the label
// dev.tupper.sandbox (or dev.tupper.snapshot), the key, the user's labels, the template and the
// lifetime deadline are labels of the container, and names start with "tupper-", so nothing
// is confused with the user's own containers and `tupper ls` finds sandboxes after a restart.
// Labels cannot change after creation, so a lifetime deadline moved by SetTimeout is kept in
// the container's name instead, tupper-<id>.<deadline in unix seconds>, which Docker renames
// atomically; the agent is told too and ends the sandbox at that time, and every List, Reap
// and Create removes containers whose deadline has passed, whatever the agent did.
//
// # Isolation
//
// A container shares the engine's kernel (the VM's, on Docker Desktop): isolation is Docker's
// (namespaces, cgroups, its default seccomp profile and capability set), not a user namespace
// per sandbox. Config.Runtime (or CreateSpec.Runtime) picks another OCI runtime the engine
// knows, such as runsc where gVisor is installed.
package docker
