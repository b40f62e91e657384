#!/usr/bin/env bash
# Starts or stops a private dockerd for the Docker provider's tests, so that they run against a
# real Docker Engine without touching the machine's own Docker (if it has one).
#
#   scripts/dockerd.sh start DIR   starts dockerd with everything under DIR (data root, exec
#                                  root, pid file, log, socket DIR/docker.sock), waits until it
#                                  answers, and prints the DOCKER_HOST that reaches it
#   scripts/dockerd.sh stop DIR    stops that dockerd (its containers with it) and removes DIR
#
# The daemon leaves the host's firewall alone (--iptables=false, --ip-forward=false): other
# sandboxes on this machine have rules of their own, and Docker's would set the FORWARD
# policy to DROP. Published ports still work through Docker's userland proxy, which is all the
# provider needs: it publishes each sandbox's agent on 127.0.0.1 only.
set -Eeuo pipefail

cmd=${1:-}
dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || {
	echo "usage: dockerd.sh start|stop DIR" >&2
	exit 2
}

case "$cmd" in
start)
	command -v dockerd >/dev/null || PATH="$PATH:/usr/sbin:/sbin"
	command -v dockerd >/dev/null || {
		echo "dockerd.sh: dockerd is not installed (scripts/setup.sh --test installs docker.io)" >&2
		exit 1
	}
	mkdir -p "$dir/data" "$dir/exec"
	sock="$dir/docker.sock"
	# setsid: the daemon is not in the caller's process group, so a ^C of the tests does not
	# kill it before the trap that stops it runs.
	setsid dockerd --data-root "$dir/data" --exec-root "$dir/exec" --pidfile "$dir/dockerd.pid" \
		--host "unix://$sock" --iptables=false --ip-forward=false --ip-masq=false \
		--bridge none --storage-driver overlay2 >"$dir/dockerd.log" 2>&1 </dev/null &
	for _ in $(seq 1 300); do
		if [ -S "$sock" ] && curl -fsS --unix-socket "$sock" http://docker/_ping >/dev/null 2>&1; then
			echo "unix://$sock"
			exit 0
		fi
		sleep 0.1
	done
	echo "dockerd.sh: dockerd did not answer within 30 s; its log:" >&2
	tail -n 30 "$dir/dockerd.log" >&2 || true
	"$0" stop "$dir" || true
	exit 1
	;;
stop)
	# Containers and networks first: a network's bridge would outlive the daemon otherwise.
	sock="$dir/docker.sock"
	if [ -S "$sock" ]; then
		api() { curl -fsS --max-time 60 --unix-socket "$sock" "$@" 2>/dev/null || true; }
		for id in $(api "http://docker/containers/json?all=1" | grep -o '"Id":"[0-9a-f]*"' | cut -d'"' -f4); do
			api -X DELETE "http://docker/containers/$id?force=1&v=1" >/dev/null
		done
		api -X POST http://docker/networks/prune >/dev/null
	fi
	if [ -f "$dir/dockerd.pid" ]; then
		pid=$(cat "$dir/dockerd.pid")
		kill "$pid" 2>/dev/null || true
		for _ in $(seq 1 150); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -9 "$pid" 2>/dev/null || true
	fi
	# The data root holds overlay mounts of containers that were still running.
	{ grep -F " $dir/" /proc/self/mounts || true; } | awk '{print $2}' | sort -r | while read -r m; do
		umount -l "$m" 2>/dev/null || true
	done
	rm -rf "$dir"
	;;
*)
	echo "usage: dockerd.sh start|stop DIR" >&2
	exit 2
	;;
esac
