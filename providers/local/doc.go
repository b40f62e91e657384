// Package local is Tupper's embedded provider on Linux: real sandboxes made by driving an
// OCI runtime CLI — crun, runc or gVisor's runsc, per provider (Config.Runtime) or per
// sandbox (CreateSpec.Runtime) — with no daemon. The default is the fastest runtime with
// runc's isolation that works on the host: crun when it is installed and usable, else runc
// (Provider.DefaultRuntime says which and why). Besides the sandbox's own processes, the
// host keeps one idle process per sandbox, its holder (see Mount namespace).
//
//	p, err := local.New(local.Config{})           // Home: $TUPPER_HOME or /var/lib/tupper
//	box, err := p.Create(ctx, provider.CreateSpec{Network: provider.Network{Mode: "none"}})
//
// It registers itself as "local" (the platform default on Linux). It needs root; the first
// call that needs it probes the host, and Available says what is missing (a runtime binary,
// root, overlayfs, the agent binary).
//
// # A sandbox
//
// Its PID 1 is the in-sandbox agent: the static tupper binary ("tupper agent", package
// agent), bound read-only at /.tupper/bin/tupper. The agent serves E2B-envd-compatible
// Connect RPC on /.tupper/run/agent.sock, a bind of the per-sandbox host directory
// Home/sandboxes/ID/run, so the host reaches it at a path. Every Instance method but the
// lifecycle's goes through it, in the part of Instance shared with every provider whose
// sandboxes run the agent (package provider/agentinst, over agent/client). When the agent exits — its lifetime or idle deadline,
// a crash, a kill — the sandbox stops, and the next List, Create, Destroy, Connect or Reap
// removes what it left. Nothing of a sandbox lives in the creating process: another process
// with the same Home finds it by id or key.
//
// The agent binary is found once per Provider (agent.go): Config.AgentPath, else
// $TUPPER_AGENT, else the running program when its build info says it is the tupper command,
// else tupper beside the running program or on PATH when theirs does. Every binary taken from
// disk must answer "tupper agent --protocol" with this build's agent protocol version
// (agent/spec.Version), which the provider also writes into each agent's config, where an
// agent of another version refuses to start. The binary is copied, once per content, to
// Home/agent/<sha256 prefix>/tupper (0755 in 0711 directories, written to a temporary file,
// checked against its hash and renamed), and sandboxes bind the copy, so where the original
// lives never matters. With none found, Available says how to install one. The package's
// tests name ./cmd/tupper built once with CGO_ENABLED=0 (internal/testenv.TupperBinary) in
// Config.AgentPath.
//
// The socket directory is writable by the sandbox, so the host opens the socket with
// O_PATH|O_NOFOLLOW, checks it is a socket and connects through /proc/self/fd: a symlink
// planted there cannot point the host at another sandbox's agent or a host daemon. The
// agent's stdout and stderr go to a log on the sandbox's own bounded tmpfs.
//
// Sandbox ids are 20 lowercase letters and digits (E2B clients require ^[a-z0-9]+$). A
// sandbox's CreatedAt, and the start of its lifetime (CreateSpec.Timeout), is when it became
// ready.
//
// # Steps of Create
//
// state directory → user-namespace range → mount namespace → root file system → agent
// directory → network → bundle → runtime → holder → agent ready → start command → record. Each step is
// undoable; a failure (or a cancelled ctx) undoes the finished ones in reverse, so nothing is
// left behind.
//
// # Mount namespace
//
// A sandbox's mounts (the tmpfs of its disk, the overlay of its root file system, and under
// runsc with network "all" the bind of its network namespace) are never in the host's mount
// namespace (nsworker.go). The runtimes copy the host's whole mount table into every new
// container and walk it, so two host mounts per live sandbox made each create slower the more
// sandboxes there were. Create runs the steps that mount or that start the runtime on a
// dedicated thread of its process (internal/osthread) that unshared its mount namespace and
// made every mount private; the runtime's container copies that namespace (the host's few
// mounts and this sandbox's). A holder process forked there (holder.go: the host's sleep,
// reparented to init, in its own session, in the sandbox's cgroups, oom_score_adj -1000)
// keeps the namespace after Create; its pid and start time are in the record. The host
// reaches the sandbox's files at /proc/HOLDER/root/HOME/sandboxes/ID/… (snapshots, the
// agent's log), which only root can use. Teardown kills the holder first (the runtimes'
// delete removes the sandbox's cgroups, busy while it lives); a sandbox whose holder died
// runs on and is not reaped, but cannot be snapshotted. Records from before the holder have
// their mounts on the host's paths and are torn down as before.
//
// # Root file system
//
// Every template is a stack of read-only lower layers under the sandbox's private upper
// layer (overlayfs), so root inside can change anything — apt-get install, pip install
// into the system, a tool in /usr/local/bin — and what it writes is in its upper layer
// only: never in the template, the host or another sandbox.
//
// Template "host" (the default; rootfs.go): the lowest layer is built once under
// Home/templates/host — mount points for the host's /usr, /bin, /sbin and /lib* (on a
// merged-/usr host the symlinks are copied instead), the static /etc files that make /usr
// work (alternatives, the loader cache, CA certificates), and shell start-up files the
// provider writes (never the host's, which can carry credentials). Each host directory
// that is a real directory is then the read-only lower layer of an overlay of its own,
// mounted at /<dir> above the root overlay, whose upper directory is <dir> inside the
// sandbox's upper layer. One overlay per host directory, not the host directories as
// extra lower layers of the root overlay: a lower layer is a whole tree rooted at /, and
// overlayfs does not cross mounts inside a layer, so /usr could only be a layer by making
// the host's whole root one (its /etc, /root, /home…) and hiding the rest; and with the
// upper directories nested in the one upper layer, the sandbox's writes are one tree,
// which a snapshot copies as it is. The host directories' overlays are mounted before the
// root overlay and moved onto it, so no upper directory is ever inside another overlay's
// upper directory in use. The per-sandbox upper layer starts with the writable skeleton —
// /etc with passwd (root, user 1000 with home /home/user), group, hosts, hostname,
// resolv.conf and nsswitch.conf, /tmp, /root, /home/user, /workspace (the default cwd),
// /var, /opt … — owned by the sandbox's root.
//
// Image templates (images.go): a template of the store (package template,
// Home/store/templates) named by CreateSpec.Template. Its layers, unpacked once under
// Home/store/layers and shared by every template and sandbox that uses them, are the
// lower layers, top first. The upper layer starts with what a sandbox needs and the image
// may lack: /etc/hosts, /etc/hostname and /etc/resolv.conf written by the provider, the
// image's /etc/passwd and /etc/group with root and user (uid 1000, home /home/user) added
// only when absent, and where the image has none /tmp (1777), /root, /home/user,
// /workspace, the template's working directory and the mount points of /proc, /sys, /dev
// and /.tupper (a directory the image has is made with its mode and owner). The agent, a
// static binary, needs nothing from the image. The template's Env is the base of the
// sandbox's environment (CreateSpec.Env and Secrets win), its WorkingDir the default cwd
// (else /workspace), its User the default user of commands (else root; a uid is named
// through the image's passwd). Its StartCmd runs in the background once the agent answers,
// and Create returns once its ReadyCmd exits 0, polled every 100 ms for as long as the
// create's context allows. The capabilities shell and git follow the image's /bin/sh and
// /usr/bin/git. An unknown template is not_found; the record, Info and snapshots keep its
// name.
//
// Owners (idmap.go): the layers keep the image's raw owners on the host (root-owned /usr
// is host uid 0), whatever sandbox uses them. Under runc and crun, whose sandboxes run in
// a user namespace mapping 0..65535 to their own range, every lower layer — the host's
// directories, the host template's, an image's — is mounted idmapped with the sandbox's
// mapping (open_tree(OPEN_TREE_CLONE), mount_setattr(MOUNT_ATTR_IDMAP), read-only,
// nosuid, nodev) before the overlay takes it, so /usr is root's inside and a layer's file
// of uid 1000 is user's. The user namespace the mapping comes from is a short-lived
// process's, whose namespace stays open in the provider (a few are kept, ranges being
// leased again). The upper layer holds host ids shifted by the sandbox's base, as before:
// overlayfs copies a file up with the owner it shows, so a changed /usr/bin/x stays root's
// inside, and snapshots copy and shift the upper layer as they always did. Under runsc (no
// user namespace) and with NoUserNS the views are the same without the idmap. All of it is
// mounted in the sandbox's mount namespace, on its thread (see Mount namespace); the views
// are detached again once the overlays hold them.
//
// The upper layer lives on a tmpfs of the sandbox's disk size (default 5 GB, 64 Ki inodes
// per GB), mounted at Home/sandboxes/ID/disk: writes past it fail with ENOSPC. The tmpfs is
// memory, charged to the sandbox's memory cgroup, so the writable layer is bounded by
// min(disk, memory): a sandbox that fills more than its memory is OOM-killed rather than
// told ENOSPC (and the OOM killer may pick the agent). A loop-mounted file system would
// lift that at the cost of create time.
//
// # Isolation
//
//   - Namespaces: pid, ipc, uts, mount, network, and for runc and crun a user namespace:
//     each sandbox leases its own range of 65536 host ids from Config.UIDBase (default
//     0x70000000), so root inside is an unprivileged uid outside, different for every
//     sandbox. Under runsc
//     there is no user namespace in the spec: gVisor's sentry is the boundary, and its
//     host process runs as root with a cut capability set, seccomp and a chroot.
//   - Capabilities: Docker's default set without CAP_MKNOD, CAP_NET_RAW (no raw sockets),
//     CAP_AUDIT_WRITE and CAP_SETFCAP; plus CAP_SYS_ADMIN (under runc and crun inside the user
//     namespace), which the agent needs to start each command in a child mount namespace
//     hiding /.tupper (its binary, socket and config), and drops it from the bounding
//     set. Under runc and crun no_new_privs is not set and the root is not nosuid, so set-uid
//     programs (sudo) work inside, raising to the sandbox's root at most; under runsc and
//     without a user namespace it is set.
//   - Seccomp (seccomp.go): a deny list over an allow default — kernel modules, kexec, bpf,
//     perf, io_uring, keyrings, ptrace and process_vm_*, file handles, clocks, swap, quotas,
//     syslog, userfaultfd, pivot_root and the new mount API, and new user namespaces
//     (unshare/clone with CLONE_NEWUSER; clone3 is ENOSYS so libc uses clone).
//   - Masked and read-only /proc and /sys paths as runc's and Docker's defaults.
//   - cgroups (cgroupsPath /tupper/ID): memory (default 1024 MB), CPU quota (default 1
//     core), pids (Config.PidsLimit, default 1024, for commands, which run in a pids cgroup
//     of their own below the sandbox's: the sandbox's has 64 more for the agent's threads and
//     the holder, so a command that fills the limit cannot starve the agent of a thread),
//     devices deny-all but the standard set. Sizes small, medium, large or custom set CPU, memory and disk. runc writes them
//     to the v1 controllers on this kind of hybrid host and to v2 on a unified one; runsc
//     applies them to its sandbox's processes.
//
// # Network
//
// "none": the sandbox's own network namespace with loopback only (and no vsock: the seccomp
// profile refuses AF_VSOCK sockets, which no network namespace scopes). "all": a veth pair
// per sandbox, eth0 inside with an address leased from Config.Subnet (default
// 10.213.0.0/16, one file per address under /run/tupper/net-BRIDGE, shared by every Home on
// the bridge, since the bridge is host-wide and, like /run, gone after a reboot), the host
// end on a bridge (Config.Bridge, default tupper0, with a MAC address of its own and IPv6
// off) whose address is the gateway; ports are isolated from each other, so sandboxes do not
// reach one another. iptables masquerades the subnet and a firewall (package internal/hostnet) lets
// sandboxes reach the public internet only: not the host (any of its addresses), not
// private, carrier-grade NAT, link-local (cloud metadata), documentation, benchmarking,
// multicast or reserved ranges, not IPv6, but port 53 of their nameservers, what
// Config.AllowPrivate opens and the recorded address and port of the package mirror their
// template was made from (mirror.go; Config.NoTemplateMirror turns it off). net.ipv4.ip_forward is turned on. The last sandbox's teardown
// removes the bridge and the rules. "allow" lists fail with CodeUnsupported. resolv.conf
// gets the host's IPv4 nameservers that are not loopback (systemd-resolved's upstream ones
// when the host names only its stub).
//
// With runc and a user namespace the sandbox's network namespace must be owned by that user
// namespace (or sysfs cannot be mounted), so the provider runs `runc create`, plumbs the
// veth into /proc/PID/ns/net, then `runc start`; otherwise `runc run --detach`.
//
// Ports: DialPort(port) (provider.PortDialer) connects to 127.0.0.1:port inside through
// the agent's tunnel (GET /tupper/tunnel, upgraded to a raw stream), so it works with
// network none, and opens no listener: tupper serve proxies previews this way.
// PreviewURL(port), for a caller in this process that wants a URL (the SDK's Process.URL),
// opens a listener on 127.0.0.1:random in the calling process that forwards each connection
// the same way; any process of the host can connect to it. The listener belongs to the
// Provider: Destroy of the sandbox or Provider.Close ends it.
//
// # runsc (gVisor release-20260905, which scripts/setup.sh builds; Debian's 20240729 and 20221219)
//
// Global flags on every call: --root Home/runsc, --network=none|host, --host-uds=create
// (the agent's socket on the bind mount becomes a host socket), --overlay2=none (writes go
// to our bounded upper layer, not sentry memory), --oci-seccomp (our profile applies inside
// the sentry too). What these versions need, found by experiment on kernel 6.18:
//
//   - --network=sandbox (netstack) cannot work: runsc decides it runs in the root network
//     namespace when /proc/sys/net/core/rmem_default exists, which newer kernels show in
//     every namespace. Network "all" therefore uses --network=host inside a network
//     namespace the provider makes (Home/sandboxes/ID/netns) and plumbs before start:
//     gVisor's hostinet, socket calls served by the host kernel within that namespace.
//     Network "none" uses --network=none (netstack, loopback only).
//   - runsc mounts a tmpfs in sentry memory on an empty /tmp unless /tmp is in the spec; we
//     bind the rootfs's own /tmp there.
//   - Seccomp inside the sentry answers every denied call with EPERM, ignoring errnoRet, so
//     the clone3→ENOSYS rule is left out (EPERM would stop libc creating threads).
//   - runsc 20221219 fails statx with AT_NO_AUTOMOUNT with EINVAL, which breaks GNU
//     coreutils 9.1's ls and stat of most paths; the provider declares CapShell for runsc
//     only when `runsc --version` dates from 2023 or later.
//   - Since 2025 gVisor walks again, on restore, every file of a host-backed mount that the
//     saved sandbox knew of: the agent removes its socket's name when it quiesces for a
//     checkpoint, so the new sandbox's socket directory lacks nothing. Its /proc/net lists no
//     socket on the host's network stack (network "all"): a ready check by port connects
//     through the agent's tunnel instead (package sandbox).
//   - Release 20260905 boots in about a third of 20240729's time and its idle sentry uses no
//     measurable CPU (20240729's systrap used some 5% of a CPU per idle sandbox).
//   - gVisor has one mount namespace, so the agent's covers over /.tupper apply sandbox-wide
//     (see package agent); commands still run without CAP_SYS_ADMIN.
//   - --pid-file names the runsc-sandbox process; it is the init the host watches.
//
// runc 1.1.5: --root Home/runc; run --detach (or create, plumb, start); pause/resume use
// the freezer; delete --force on teardown.
//
// crun 1.8.1 (Debian 12): the same bundle, user namespace and calls as runc, with --root
// Home/crun; it starts a sandbox in about 40% of runc's time. Differences found by running it:
// on a hybrid cgroup host it uses the v1 controllers but refuses to start anything while the
// v2 hierarchy holds a controller (hugetlb when no v1 hierarchy mounts it; scripts/setup.sh
// mounts such controllers as v1), so the provider reports crun unavailable there, with the
// fix; and for a container it does not know it reports its state file's "No such file or
// directory" (delete --force of one succeeds).
//
// # State
//
// Under Config.Home (layout in state.go): record.json per sandbox (id, key, labels,
// createdAt, deadline, idle timeout, runtime, template, network, address, uid range, size,
// init and holder pids and start times, paused, and whether the pause kept memory), the bundle, the mount points, the agent
// directory, and on the sandbox's disk the log; leases for addresses and uid ranges; file
// locks for exact keys, the network and each sandbox. A sandbox's liveness is its recorded
// init pid with the same start time.
//
// # Deadlines
//
// The agent enforces the lifetime deadline and the idle timeout from inside. The host
// enforces the lifetime deadline authoritatively: List, Create, Destroy, Connect and Reap
// remove sandboxes past their recorded deadline, whatever the agent does. SetTimeout moves
// both.
//
// # Snapshots
//
// Instance.Snapshot copies the sandbox's writable layer — its file system as changed from
// the template, not its processes or memory; read through its holder — to
// Home/snapshots/ID (snapshot.go) while the
// sandbox is frozen (a paused one stays paused), through a temporary directory renamed when
// complete. The copy never follows a symlink and keeps modes, owners, times, hard links,
// holes, device nodes, overlay whiteouts and xattrs (the opaque-directory one included).
// CreateSpec.From fills the new sandbox's upper directory from it before the overlay is
// mounted, shifting owners from the old user-namespace range to the new one; a snapshot
// larger than the new disk is invalid_argument before anything is made. Malformed, unknown
// and expired ids are not_found; expired snapshots are removed by the next create, list,
// destroy, reap or snapshot. runsc runs with --overlay2=none, so its writes are in the
// same host layer; named pipes made inside gVisor are not (they live in the sentry).
//
// Snapshot contents are stored by content (package internal/blocks): each regular file of 64 KiB or more,
// in the copy and in a full snapshot's checkpoint image, goes into Home/blocks as blocks of
// up to 512 KiB named by their SHA-256 and cut at page boundaries chosen by content (so that
// a memory image whose pages moved still makes the same blocks), stored once however many
// snapshots hold them, runs of zeros not at all; the snapshot keeps an empty placeholder with the file's metadata and
// lists the blocks in its blocks.json. Ten snapshots of one sandbox take about one copy. A
// block's hash is checked when it is read. Which blocks are in use is derived from the
// committed manifests by a collector that runs when snapshots are deleted, expire or are
// reaped, under an exclusive lock that snapshot writers and restores hold shared; a crash
// at any point loses no committed snapshot and leaks nothing past the next reap.
// Snapshots from before blocks (no blocks.json) restore as plain copies.
//
// A full snapshot (SnapshotKind with provider.SnapshotFull; runsc only, capability
// snapshot-full) adds a gVisor checkpoint of the sandbox's memory and processes, taken while
// the sandbox is paused for the copy, in Home/snapshots/ID/image (its large files in
// blocks, assembled into the new sandbox's directory for the restore and removed after
// it): the agent first closes its
// host socket (POST /tupper/quiesce, package agent), which gVisor cannot save; after the
// checkpoint the host resumes the sandbox and signals its init (runsc kill ID USR2) to listen
// again. A create From a full snapshot fills the upper layer from the copy, then runs
// `runsc restore` instead of `runsc run`, with the snapshot's size and network mode, signals
// the restored agent to listen (in the new sandbox's socket directory), and gives it the new
// sandbox's deadlines; another runtime is unsupported. Provider.Snapshots and SnapshotInfo
// list and inspect snapshots (provider.SnapshotLister).
//
// # Pause
//
// Pause keeps a sandbox's memory: the freezer (runc, crun, runsc on the host's network
// stack), or under runsc with network none a checkpoint to disk that ends the runtime and
// releases the memory, Resume restoring it in place: the saved pause (pausesaved.go).
// PauseCold (provider.ColdPauser,
// every runtime) keeps the files but not the memory: it deletes the container, ending every
// process, and Resume boots a new one on the same bundle (coldpause.go). Both rest on the
// holder: it keeps the sandbox's mount namespace (disk, rootfs, volumes, and runsc's network
// namespace) while no container runs, and leaves the sandbox's cgroups, with the egress
// proxy, while the runtime removes them. The record says Paused, and Saved or Cold for the
// two that end the container; Cold is written before the kill, so a crash leaves a sandbox
// running or cold-paused, and a cold-paused one whose container a crash left running is
// finished by PauseCold, or by Resume before it boots.
//
// # Warm starts
//
// Two mechanisms make a create skip the boot, each for what can be applied to a sandbox that
// runs already. The warm pool (Config.Pool, pool.go) hands out sandboxes of the default shape
// booted ahead of time. Boot images (Config.BootImages, off by default, bootimage.go) restore
// runsc sandboxes from a checkpoint that the first create of their shape (template, size,
// network none) took of its own sandbox just booted, before its start command; the restored
// sandbox gets a new writable layer, its own id, socket, deadlines, labels and key. Both are
// bypassed, and the create boots as usual, by Env and Secrets (the agent's environment from
// start), From, Volumes and a network other than none; the pool also by another runtime,
// template or size, boot images by a runtime other than runsc and by template build steps.
//
// # Capabilities
//
// network-none (always), network-all (a veth pair and the nat table work), timeout and
// idle-timeout (agent + host), preview (the agent tunnel), users (/etc/passwd has user),
// persistent (state in Home), resource-limit and size (cgroups and the bounded tmpfs), shell (/bin/sh in the template — the host's
// for host —, and runc, crun or a runsc from 2023 on), git (/usr/bin/git in the template),
// snapshot-full and pause-frees-memory (runsc with network none, per sandbox, in its record:
// gVisor checkpoints it, pausesaved.go). Its optional interfaces are listed by
// provider.CapabilitiesOf and refused per call where the host lacks what they need
// (Provider.Refuse): pause, pause-cold and snapshot without a freezer cgroup (a snapshot is
// copied frozen; a cold pause needs no freezer but goes with pause), volumes without loop
// devices and mkfs.ext4; exact-key (a file lock over find and create) and terminal always.
package local
