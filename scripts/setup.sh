#!/usr/bin/env bash
# Installs what Tupper needs on a Debian or Ubuntu machine, as root: the OCI runtimes (runc,
# gVisor's runsc and crun), iptables and iproute2 for sandbox networking, git for the git helpers
# and change tracking inside sandboxes. It does nothing that is already done, so it is cheap to
# run before every build or test. Every step that fails says which step it was and what to do.
#
# TUPPER_SETUP_ROOT (empty by default) is prepended to every system path this script reads or
# writes (/etc/os-release, /etc/apt, /sys/fs/cgroup), so scripts/setup_test.go can run it against
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
	for d in /usr/sbin /usr/bin /sbin /usr/local/sbin /usr/local/bin; do
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
pkgs=(runc runsc crun iptables iproute2 git debootstrap e2fsprogs)
# busybox-static: the tests' image templates are made of its static busybox. docker.io: the
# Docker provider's tests run against a real dockerd, which scripts/test.sh starts.
[ -z "$for_tests" ] || pkgs+=(nodejs npm busybox-static docker.io)
for p in "${pkgs[@]}"; do
	have "$(command_of "$p")" || need+=("$p")
done

# gVisor from before 2023 (bookworm's runsc 20221219) fails statx with AT_NO_AUTOMOUNT, which
# breaks GNU ls and stat inside runsc sandboxes; Debian 12 has a current runsc in its backports,
# so take it from there. runsc --version prints e.g. "runsc version 0.0~20240729.0" (Debian) or
# "runsc version release-20240729.0" (gVisor's own builds).
step="check the runsc version"
runsc_date() {
	local r
	r=$(where runsc) || return 0
	{ "$r" --version 2>/dev/null || true; } | sed -n 's/.*[~-]\([0-9]\{8\}\)\(\.[0-9]*\)\{0,1\}.*/\1/p' | head -n1
}
codename=""
if [ -r "$root/etc/os-release" ]; then
	codename=$(. "$root/etc/os-release" && echo "${VERSION_CODENAME:-}")
fi
backports=""
old_runsc=""
if have runsc; then
	d=$(runsc_date)
	if [ -z "$d" ] || [ "$d" -lt 20230101 ]; then
		old_runsc="${d:-unknown}"
	fi
fi
if [ "$codename" = bookworm ] && { [ -n "$old_runsc" ] || [[ " ${need[*]} " == *" runsc "* ]]; }; then
	backports=bookworm-backports
	[[ " ${need[*]} " == *" runsc "* ]] || need+=(runsc)
elif [ -n "$old_runsc" ]; then
	say "warning: runsc $old_runsc is older than 2023; ls and stat fail inside runsc sandboxes with it." \
		"Install a current gVisor (https://gvisor.dev/docs/user_guide/install/); runc and crun are unaffected"
fi

# The Debian mirror this machine already uses, from its own apt sources: a deb822 .sources file's
# URIs: line or a one-line "deb URI suite ..." entry whose suite is $1 (comments skipped).
debian_mirror() {
	local suite=$1 f
	for f in "$root"/etc/apt/sources.list.d/*.sources; do
		[ -r "$f" ] || continue
		awk -v suite="$suite" '
			/^[[:space:]]*#/ { next }
			/^[[:space:]]*$/ { if (uri != "" && ok) { print uri; exit } uri = ""; ok = 0; next }
			tolower($1) == "uris:" { uri = $2 }
			tolower($1) == "suites:" { for (i = 2; i <= NF; i++) if ($i == suite) ok = 1 }
			END { if (uri != "" && ok) print uri }
		' "$f"
	done
	for f in "$root"/etc/apt/sources.list "$root"/etc/apt/sources.list.d/*.list; do
		[ -r "$f" ] || continue
		awk -v suite="$suite" '
			$1 == "deb" {
				i = 2
				if ($i ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
				if ($(i + 1) == suite) print $i
			}
		' "$f"
	done
}

# Which of our backports lines apt already has, in either format.
has_suite() {
	grep -Eqs "^[^#]*[[:space:]]$1([[:space:]]|$)" "$root"/etc/apt/sources.list "$root"/etc/apt/sources.list.d/*.list "$root"/etc/apt/sources.list.d/*.sources
}

if [ ${#need[@]} -gt 0 ]; then
	step="check permissions"
	if [ "$(id -u)" -ne 0 ]; then
		fail "missing ${need[*]}; run this script as root (or: sudo apt-get install ${need[*]})"
	fi
	step="find apt-get"
	if ! have apt-get; then
		fail "missing ${need[*]} and there is no apt-get here; install them with this system's package manager${backports:+ (runsc from 2023 or newer)}"
	fi
	say "installing ${need[*]}"
	export DEBIAN_FRONTEND=noninteractive

	if [ -n "$backports" ] && ! has_suite "$backports"; then
		step="add $backports"
		mirror=$(debian_mirror "$codename" | head -n1)
		if [ -z "$mirror" ]; then
			fail "no apt source for $codename was found in /etc/apt/sources.list or /etc/apt/sources.list.d/, so there is no mirror to take $backports from; add a $backports line for your mirror, then run this again"
		fi
		hint="could not write $root/etc/apt/sources.list.d/tupper-backports.sources"
		printf 'Types: deb\nURIs: %s\nSuites: %s\nComponents: main\n' "$mirror" "$backports" \
			>"$root/etc/apt/sources.list.d/tupper-backports.sources"
		say "added $backports from $mirror"
	fi

	step="apt-get update"
	hint="check the machine's network and its apt sources, then run this again"
	apt-get update -qq

	rest=()
	for p in "${need[@]}"; do [ "$p" = runsc ] && [ -n "$backports" ] || rest+=("$p"); done
	if [ ${#rest[@]} -gt 0 ]; then
		step="apt-get install ${rest[*]}"
		hint="try it by hand to see apt's reason: apt-get install ${rest[*]}"
		apt-get install -y -qq "${rest[@]}" >/dev/null
	fi
	if [ -n "$backports" ]; then
		step="apt-get install -t $backports runsc"
		hint="try it by hand to see apt's reason: apt-get install -t $backports runsc"
		apt-get install -y -qq -t "$backports" runsc >/dev/null
	fi

	step="check what was installed"
	hint=""
	hash -r
	for p in "${need[@]}"; do
		have "$(command_of "$p")" || fail "apt-get installed $p, but $(command_of "$p") is not on PATH ($PATH)"
	done
	if [ -n "$backports" ]; then
		d=$(runsc_date)
		if [ -z "$d" ] || [ "$d" -lt 20230101 ]; then
			fail "runsc is still ${d:-of an unknown version} after installing it from $backports; check that apt can see $backports (apt-cache policy runsc)"
		fi
	fi
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
