#!/usr/bin/env bash
# Starts or stops a private PostgreSQL cluster for the tests of the server's store on
# PostgreSQL, so that they run against a real server without touching the machine's own (if it
# has one): its own data directory, reached over a Unix socket only, in a directory of its own.
#
#   scripts/postgres.sh start DIR   makes a cluster under DIR (initdb, as the postgres user:
#                                   PostgreSQL refuses to run as root), starts it listening on
#                                   DIR/sock only (no TCP), waits until it answers, and prints
#                                   the superuser's connection URL (TUPPER_TEST_POSTGRES)
#   scripts/postgres.sh stop DIR    stops that cluster and removes DIR
#
# The server programs are Debian's (scripts/setup.sh --test installs postgresql), found in
# /usr/lib/postgresql/N/bin, the newest N; $PG_BIN overrides.
set -Eeuo pipefail

cmd=${1:-}
dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || {
	echo "usage: postgres.sh start|stop DIR" >&2
	exit 2
}

bin=${PG_BIN:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)}
# as runs a command as the cluster's owner: the postgres user when we are root.
as() {
	if [ "$(id -u)" -eq 0 ]; then
		runuser -u postgres -- "$@"
	else
		"$@"
	fi
}

case "$cmd" in
start)
	[ -n "$bin" ] && [ -x "$bin/initdb" ] || {
		echo "postgres.sh: PostgreSQL's initdb is not installed (scripts/setup.sh --test installs postgresql)" >&2
		exit 1
	}
	if [ "$(id -u)" -eq 0 ] && ! id postgres >/dev/null 2>&1; then
		echo "postgres.sh: there is no postgres user to run the cluster as (Debian's postgresql package makes it)" >&2
		exit 1
	fi
	mkdir -p "$dir/sock"
	[ "$(id -u)" -ne 0 ] || chown -R postgres: "$dir"
	chmod 0700 "$dir"
	# trust: only processes that can reach DIR/sock connect, and DIR is 0700 (root passes).
	as "$bin/initdb" --pgdata "$dir/data" --username postgres --auth trust --encoding UTF8 \
		--no-instructions >"$dir/initdb.log" 2>&1 || {
		echo "postgres.sh: initdb failed; its log:" >&2
		tail -n 30 "$dir/initdb.log" >&2
		exit 1
	}
	# fsync off: a test cluster needs no durability across a crash of the machine, and
	# syncing every commit costs the tests seconds. setsid: not in the caller's process group,
	# so a ^C of the tests does not kill it before the trap that stops it runs.
	as setsid "$bin/pg_ctl" --pgdata "$dir/data" --log "$dir/postgres.log" --silent \
		-o "-c listen_addresses='' -c unix_socket_directories='$dir/sock' -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=300" \
		start </dev/null >/dev/null 2>&1 || true
	for _ in $(seq 1 300); do
		if as "$bin/pg_isready" --host "$dir/sock" --username postgres --quiet 2>/dev/null; then
			echo "postgres://postgres@/postgres?host=$dir/sock&sslmode=disable"
			exit 0
		fi
		sleep 0.1
	done
	echo "postgres.sh: PostgreSQL did not answer within 30 s; its log:" >&2
	tail -n 30 "$dir/postgres.log" >&2 || true
	"$0" stop "$dir" || true
	exit 1
	;;
stop)
	if [ -n "$bin" ] && [ -f "$dir/data/postmaster.pid" ]; then
		as "$bin/pg_ctl" --pgdata "$dir/data" --mode immediate --silent stop >/dev/null 2>&1 || true
	fi
	rm -rf "$dir"
	;;
*)
	echo "usage: postgres.sh start|stop DIR" >&2
	exit 2
	;;
esac
