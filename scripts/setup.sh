#!/usr/bin/env bash
# Installs what Tupper needs on a Debian or Ubuntu machine, as root: the OCI runtimes (runc,
# and gVisor's runsc), iptables and iproute2 for sandbox networking, git for the git helpers
# and change tracking inside sandboxes. It does nothing that is already done, so it is cheap to
# run before every build or test.
set -euo pipefail

need=()
command -v runc >/dev/null 2>&1 || need+=(runc)
command -v runsc >/dev/null 2>&1 || need+=(runsc)
command -v iptables >/dev/null 2>&1 || need+=(iptables)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v git >/dev/null 2>&1 || need+=(git)

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
	apt-get update -qq
	apt-get install -y -qq "${need[@]}" >/dev/null
fi

if ! command -v go >/dev/null 2>&1; then
	echo "setup: Go 1.26 or newer is needed (https://go.dev/doc/install); /usr/local/go/bin must be on PATH" >&2
	exit 1
fi
