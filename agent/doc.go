// Package agent is the in-sandbox agent, "tupper agent": the tupper binary
// running as PID 1 of each sandbox (runc or runsc container), serving on a
// unix socket that the host reaches through a bind-mounted directory.
//
// The agent runs on Linux only; on other systems the package holds just its
// Config, which hosts write for the agents they start (providers/docker).
//
// # Wire protocol
//
// One listener (HTTP/1.1 and h2c) serves, wire-compatible with E2B's envd so
// that E2B's SDKs work through Tupper's server unchanged:
//
//   - Connect RPC (JSON and binary codecs) for process.Process (List, Start,
//     Connect, SendInput, StreamInput, CloseStdin, SendSignal, Update) and
//     filesystem.Filesystem (Stat, MakeDir, Move, ListDir, Remove, WatchDir,
//     CreateWatcher, GetWatcherEvents, RemoveWatcher), generated from
//     agent/spec. Start streams start{pid}, data chunks, end{exit_code,
//     exited, status, error}; keepalives follow Keepalive-Ping-Interval
//     (seconds, default 90); Connect-Timeout-Ms kills the process group at
//     the deadline and ends the stream with deadline_exceeded.
//   - GET /health → 204.
//   - GET /files?path=&username= → raw bytes (404 missing, 400 directory;
//     gzip when accepted; Range honoured).
//   - POST /files?path=&username= → multipart parts named "file" whose
//     filename is the full target path (or ?path= for one file), or a raw
//     application/octet-stream body with ?path= (Content-Encoding gzip
//     allowed). Parent directories are created; the answer is
//     [{"path","name","type":"file"}]; 507 when the disk is full.
//   - REST errors are {"code": status, "message": text}.
//
// Users: "Authorization: Basic base64(user:)" (or ?username= on /files)
// selects the OS user, looked up in the sandbox's /etc/passwd and
// /etc/group; without it Config.DefaultUser is used. Relative paths and
// cwds resolve against the user's home, "" against Config.DefaultWorkdir.
// Paths are cleaned, so ".." never climbs above the agent's "/".
//
// Auth: with Config.AccessToken set, every request needs X-Access-Token
// (compared in constant time) except GET /health and GET/POST /files,
// which instead accept E2B's signed URLs: signature = "v1_" +
// base64(sha256(path:op:username:token[:signature_expiration])) with op
// "read" or "write".
//
// # Tupper extensions
//
//   - GET/POST /files ?mode=0644 (octal): the written file's mode, applied
//     to existing files too; without it new files are 0644 and existing
//     ones keep theirs.
//   - GET /files ?offset=N&length=M: a ranged read (length omitted: to the
//     end; past the end: empty).
//   - GET /tupper/tunnel?port=N with "Connection: Upgrade", "Upgrade: tcp":
//     101 Switching Protocols, then the connection is a raw byte stream to
//     127.0.0.1:N inside the sandbox (works with network "none"). A failed
//     dial is 502. Half-close is propagated both ways.
//   - POST /tupper/deadline {"deadlineUnix": N}: sets (0 clears) the
//     lifetime deadline; answers the same object.
//   - GET /tupper/busy → {"busy", "processes", "lastActivityUnixMs",
//     "deadlineUnix"}: whether processes started through the agent run.
//     It and /health do not count as activity for the idle timeout.
//   - POST /tupper/quiesce (HTTP/1.1): before a checkpoint, the agent closes
//     its listener and every connection, answers 204 and closes this one
//     last, and listens again at the same path on SIGUSR2 (quiesce.go). 501
//     when the listener is not a unix socket on a path.
//
// # Protocol version
//
// Host and agent may come from different builds, so they check each other
// before any request (package agent/spec): "tupper agent --protocol" prints
// "tupper-agent-protocol N" and exits, which a host runs before it takes a
// binary as its agent; and Config.Protocol is the version the host speaks,
// which an agent of another version refuses with an error naming both (0
// skips the check).
//
// # Processes
//
// Every process starts in its own session and process group; SendSignal
// and timeouts signal the whole group. A process outlives the stream that
// started it (Detach, then Connect by pid or tag); finished processes stay
// attachable for a while (their end event is replayed). Stdin is /dev/null
// unless the request has stdin: true (unset means true, as in envd). PTYs
// come from /dev/ptmx. Output still pending when the leader exits is read
// for 100 ms more, so a background child holding stdout cannot hang a run.
//
// As PID 1 the agent reaps every child with one wait4(-1) loop that hands
// statuses of its own processes to their waiters (see reaper); as a normal
// process it waits for its own children by pid only. Deadlines (Config
// DeadlineUnix, IdleTimeoutSeconds) kill every process and make Serve
// return ErrDeadline or ErrIdle; the container then stops.
//
// # Hiding
//
// With Config.HidePaths set, Serve first prepares one OS thread (see
// spawner): a goroutine locks itself to a thread other than the main one
// for good, unshares its mount namespace (unshare(CLONE_NEWNS) is per
// thread), makes every mount private, covers each hidden path with an empty
// read-only tmpfs (directories) or a read-only bind of /dev/null (other
// files), and drops CAP_SYS_ADMIN from its bounding, permitted, effective
// and inheritable sets. Every command is then forked from that thread, so
// it starts in that namespace without CAP_SYS_ADMIN (it cannot unmount the
// covers, even as root), while the agent's other threads, and so its file
// API, keep the original view. The agent also marks itself non-dumpable so
// /proc/1/root, /proc/1/exe and /proc/1/fd are closed to processes without
// CAP_SYS_PTRACE. The thread costs nothing per command: no helper process,
// no re-exec. Hiding needs root with CAP_SYS_ADMIN (unshare, mount) and
// CAP_SETPCAP (the bounding set); without them Serve fails rather than run
// commands that would see the agent.
//
// Per runtime:
//
//   - runc (and the host kernel in tests): as above; the command's
//     /proc/self/ns/mnt differs from the agent's.
//   - runsc (gVisor, checked with 0.0~20221219): unshare(CLONE_NEWNS)
//     succeeds but does nothing, as gVisor of that date has a single mount
//     namespace; MS_PRIVATE is rejected (EINVAL, ignored), tmpfs does not
//     know nr_inodes (retried without) and bind mounts cannot be remounted
//     read-only (ignored: the cover is /dev/null). The covers therefore hide
//     the paths sandbox-wide, from the agent too, which needs neither after
//     start-up: its listener is bound and its config read. Capabilities are
//     per thread there as well, so commands still lack CAP_SYS_ADMIN. The
//     agent notices that the covers changed its own view (spawner.shared).
package agent
