#!/usr/bin/env bash
# Installs what Tupper needs on a Debian or Ubuntu machine, as root: the OCI runtimes (runc,
# gVisor's runsc and crun), iptables and iproute2 for sandbox networking, git for the git helpers
# and change tracking inside sandboxes. It does nothing that is already done, so it is cheap to
# run before every build or test.
set -euo pipefail

need=()
command -v runc >/dev/null 2>&1 || need+=(runc)
command -v runsc >/dev/null 2>&1 || need+=(runsc)
command -v crun >/dev/null 2>&1 || need+=(crun)
command -v iptables >/dev/null 2>&1 || need+=(iptables)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v git >/dev/null 2>&1 || need+=(git)

# gVisor from before 2023 (bookworm's runsc 20221219) fails statx with AT_NO_AUTOMOUNT, which
# breaks GNU ls and stat inside runsc sandboxes; Debian 12 has a current runsc in its official
# backports, so take it from there.
runsc_date() { runsc --version 2>/dev/null | sed -n 's/.*0\.0~\([0-9]\{8\}\).*/\1/p' | head -n1; }
codename=$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}")
backports=""
if [ "$codename" = bookworm ]; then
	d=$(runsc_date)
	if [ -z "$d" ] || [ "$d" -lt 20230101 ]; then
		backports=bookworm-backports
		[[ " ${need[*]} " == *" runsc "* ]] || need+=(runsc)
	fi
fi

if [ ${#need[@]} -gt 0 ]; then
	if [ "$(id -u)" -ne 0 ]; then
		echo "setup: missing ${need[*]}; run this script as root (or: sudo apt-get install ${need[*]})" >&2
		exit 1
	fi
	if ! command -v apt-get >/dev/null 2>&1; then
		echo "setup: missing ${need[*]} and no apt-get here; install them with your package manager" >&2
		exit 1
	fi
	echo "setup: installing ${need[*]}" >&2
	export DEBIAN_FRONTEND=noninteractive
	if [ -n "$backports" ] && ! grep -rqs "$backports" /etc/apt/sources.list /etc/apt/sources.list.d/; then
		echo "deb http://deb.debian.org/debian $backports main" >/etc/apt/sources.list.d/tupper-backports.list
	fi
	apt-get update -qq
	rest=()
	for p in "${need[@]}"; do [ "$p" = runsc ] && [ -n "$backports" ] || rest+=("$p"); done
	[ ${#rest[@]} -eq 0 ] || apt-get install -y -qq "${rest[@]}" >/dev/null
	if [ -n "$backports" ]; then
		apt-get install -y -qq -t "$backports" runsc >/dev/null
	fi
fi

# crun uses the v1 controllers on a hybrid cgroup host (v1 under a tmpfs /sys/fs/cgroup, v2 at
# /sys/fs/cgroup/unified) but refuses to start anything while cgroup v2 holds a controller, often
# hugetlb when no v1 hierarchy mounts it. Mount each such controller as v1 (until the next boot,
# like the other cgroup mounts); runc and runsc do not mind either way.
if [ "$(stat -fc %T /sys/fs/cgroup 2>/dev/null)" = tmpfs ] &&
	[ "$(stat -fc %T /sys/fs/cgroup/unified 2>/dev/null)" = cgroup2fs ]; then
	for c in $(cat /sys/fs/cgroup/unified/cgroup.controllers 2>/dev/null); do
		if [ "$(id -u)" -ne 0 ]; then
			echo "setup: cgroup v2 holds the $c controller, so crun cannot run here; run this script as root to mount it as cgroup v1" >&2
			break
		fi
		echo "setup: mounting the $c cgroup controller as v1, for crun" >&2
		mkdir -p "/sys/fs/cgroup/$c"
		mount -t cgroup -o "$c" cgroup "/sys/fs/cgroup/$c" ||
			echo "setup: could not mount the $c controller as v1; crun will report itself unavailable" >&2
	done
fi

if ! command -v go >/dev/null 2>&1; then
	echo "setup: Go 1.26 or newer is needed (https://go.dev/doc/install); /usr/local/go/bin must be on PATH" >&2
	exit 1
fi
