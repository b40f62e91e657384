#!/usr/bin/env bash
# Installs what Tupper needs on a Debian or Ubuntu machine, as root: the OCI runtimes (runc and
# crun from apt; gVisor's runsc built from its Go module, see below), iptables and iproute2 for
# sandbox networking, git for the git helpers and change tracking inside sandboxes. It does nothing that is already done, so it is cheap to
# run before every build or test. Every step that fails says which step it was and what to do.
#
# TUPPER_SETUP_ROOT (empty by default) is prepended to every system path this script reads or
# writes (/sys/fs/cgroup, /usr/local/sbin and the directories where tupper looks for runtimes), so scripts/setup_test.go can run it against
# a made-up machine with stand-in commands on PATH.
set -Eeuo pipefail

root=${TUPPER_SETUP_ROOT:-}
step="start"
hint=""
trap 'rc=$?; echo "setup: step \"$step\" failed (exit $rc)${hint:+; $hint}" >&2; exit $rc' ERR

say() { echo "setup: $*" >&2; }
fail() {
	say "$*"
	trap - ERR
	exit 1
}
# where prints the path of command $1: on PATH, or in the sbin and bin directories where tupper
# also looks for its runtimes (a non-login root shell may not have /usr/sbin on PATH).
where() {
	local d
	if command -v "$1" 2>/dev/null; then return 0; fi
	for d in /usr/local/sbin /usr/local/bin /usr/sbin /usr/bin /sbin; do
		if [ -f "$root$d/$1" ] && [ -x "$root$d/$1" ]; then
			echo "$root$d/$1"
			return 0
		fi
	done
	return 1
}
have() { where "$1" >/dev/null; }

# The command each package provides, for the check after installing.
command_of() {
	case "$1" in
	iproute2) echo ip ;;
	e2fsprogs) echo mkfs.ext4 ;;
	nodejs) echo node ;;
	busybox-static) echo busybox ;;
	docker.io) echo dockerd ;;
	postgresql) echo pg_ctlcluster ;; # its servers sit in /usr/lib/postgresql/N/bin, off PATH
	*) echo "$1" ;;
	esac
}

for_tests=""
for a in "$@"; do
	case "$a" in
	--test) for_tests=1 ;;
	*) fail "unknown argument $a (usage: setup.sh [--test])" ;;
	esac
done

step="find what is missing"
need=()
# debootstrap makes the built-in debian template from the machine's own mirror; e2fsprogs
# (mkfs.ext4) makes volumes' file systems.
pkgs=(runc crun iptables iproute2 git debootstrap e2fsprogs)
# busybox-static: the tests' image templates are made of its static busybox. docker.io: the
# Docker provider's tests run against a real dockerd, which scripts/test.sh starts.
# postgresql: the server's store is tested on PostgreSQL too, on a private cluster that
# scripts/postgres.sh makes (the package's own service is never used). prometheus: a real
# Prometheus scrapes a test server's metrics (test/prometheus starts its own on loopback).
[ -z "$for_tests" ] || pkgs+=(nodejs npm busybox-static docker.io postgresql prometheus)
for p in "${pkgs[@]}"; do
	have "$(command_of "$p")" || need+=("$p")
done

if [ ${#need[@]} -gt 0 ]; then
	step="check permissions"
	if [ "$(id -u)" -ne 0 ]; then
		fail "missing ${need[*]}; run this script as root (or: sudo apt-get install ${need[*]})"
	fi
	step="find apt-get"
	if ! have apt-get; then
		fail "missing ${need[*]} and there is no apt-get here; install them with this system's package manager"
	fi
	say "installing ${need[*]}"
	export DEBIAN_FRONTEND=noninteractive

	step="apt-get update"
	hint="check the machine's network and its apt sources, then run this again"
	apt-get update -qq

	step="apt-get install ${need[*]}"
	hint="try it by hand to see apt's reason: apt-get install ${need[*]}"
	apt-get install -y -qq "${need[@]}" >/dev/null

	step="check what was installed"
	hint=""
	hash -r
	for p in "${need[@]}"; do
		have "$(command_of "$p")" || fail "apt-get installed $p, but $(command_of "$p") is not on PATH ($PATH)"
	done
fi

# crun uses the v1 controllers on a hybrid cgroup host (v1 under a tmpfs /sys/fs/cgroup, v2 at
# /sys/fs/cgroup/unified) but refuses to start anything while cgroup v2 holds a controller, often
# hugetlb when no v1 hierarchy mounts it. Mount each such controller as v1 (until the next boot,
# like the other cgroup mounts); runc and runsc do not mind either way.
step="mount cgroup v1 controllers for crun"
hint=""
cg="$root/sys/fs/cgroup"
if [ "$(stat -fc %T "$cg" 2>/dev/null)" = tmpfs ] &&
	[ "$(stat -fc %T "$cg/unified" 2>/dev/null)" = cgroup2fs ]; then
	for c in $(cat "$cg/unified/cgroup.controllers" 2>/dev/null || true); do
		if [ "$(id -u)" -ne 0 ]; then
			say "warning: cgroup v2 holds the $c controller, so crun cannot run here; run this script as root to mount it as cgroup v1"
			break
		fi
		say "mounting the $c cgroup controller as v1, for crun"
		mkdir -p "$cg/$c"
		mount -t cgroup -o "$c" cgroup "$cg/$c" ||
			say "warning: could not mount the $c controller as v1; crun will report itself unavailable"
	done
fi

step="find Go"
if ! have go; then
	fail "Go 1.26 or newer is needed (https://go.dev/doc/install); /usr/local/go/bin must be on PATH"
fi

# gVisor's runsc, built from gVisor's own Go module at a pinned commit of its go branch (the way
# gVisor documents `go install`), pure Go (CGO_ENABLED=0: runsc executes itself again inside its
# chroot, where there is no dynamic loader), installed as /usr/local/sbin/runsc, ahead of a
# distribution's on PATH. Debian's runsc (20240729 in bookworm-backports; bookworm's own 20221219
# breaks ls and stat in sandboxes) boots a sandbox in about 0.8 s here, keeps some 5 % of a CPU
# busy per idle sandbox and restores a checkpoint more slowly than it boots; this one boots in
# about 0.25 s, idles at no measurable CPU and restores in about 0.28 s (docs/local.md). A runsc
# of this date or newer is kept as it is. runsc --version prints e.g. "runsc version
# release-20260905.0" (gVisor's builds, this one) or "runsc version 0.0~20240729.0" (Debian).
gvisor_module=gvisor.dev/gvisor
gvisor_version=v0.0.0-20260905035102-160fafc42237
gvisor_date=${gvisor_version#v0.0.0-}
gvisor_date=${gvisor_date:0:8} # the commit's date, which names its release
step="check the runsc version"
runsc_date() {
	local r
	r=$(where runsc) || return 0
	{ "$r" --version 2>/dev/null || true; } | sed -n 's/.*[~-]\([0-9]\{8\}\)\(\.[0-9]*\)\{0,1\}.*/\1/p' | head -n1
}
d=$(runsc_date)
if [ -z "$d" ] || [ "$d" -lt "$gvisor_date" ]; then
	if [ "$(id -u)" -ne 0 ]; then
		what="missing or of an unknown version"
		[ -z "$d" ] || what="from $d, older than $gvisor_date"
		fail "runsc is $what; run this script as root to build gVisor's runsc $gvisor_date into /usr/local/sbin"
	fi
	step="build gVisor's runsc $gvisor_date"
	hint="it needs the Go module proxy; try by hand: CGO_ENABLED=0 go install $gvisor_module/runsc@$gvisor_version"
	say "building gVisor's runsc $gvisor_date from its Go module (a minute or two; runsc here: ${d:-none})"
	gobin=$(mktemp -d)
	CGO_ENABLED=0 GOBIN="$gobin" GOFLAGS= GOWORK=off go install -trimpath \
		-ldflags "-X $gvisor_module/runsc/version.version=release-$gvisor_date.0" "$gvisor_module/runsc@$gvisor_version"
	step="install runsc as /usr/local/sbin/runsc"
	hint=""
	mkdir -p "$root/usr/local/sbin"
	cp "$gobin/runsc" "$root/usr/local/sbin/runsc.new"
	chmod 0755 "$root/usr/local/sbin/runsc.new"
	mv -f "$root/usr/local/sbin/runsc.new" "$root/usr/local/sbin/runsc"
	rm -rf "$gobin"
	hash -r
	step="check the runsc on PATH"
	d=$(runsc_date)
	if [ -z "$d" ] || [ "$d" -lt "$gvisor_date" ]; then
		fail "the runsc first on PATH, $(where runsc || echo none), is ${d:-of an unknown version}, not the $gvisor_date one built into /usr/local/sbin: put /usr/local/sbin ahead of /usr/bin on PATH"
	fi
fi
