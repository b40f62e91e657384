#!/usr/bin/env bash
# Runs every test: installs what the tests need, checks formatting and vet, runs the whole Go
# suite with the race detector (real sandboxes under runc and runsc when run as root; fuzz
# tests run their seed corpora, `make fuzz` explores further). Under CI=true, tests whose
# requirements are missing fail instead of skipping.
#
# The suite is a list of groups. Every group runs, whatever the ones before it did, and the
# script ends with one line per group (its result and how long it took) and fails if any
# group failed: one broken group never hides the others. Only set-up stops the run, since
# nothing after it could run without what it installs. Budget (docs/performance.md): at most
# 45 minutes on a fresh machine, set-up included, and 25 on one that has run it before.
set -uo pipefail
cd "$(dirname "$0")/.."
# /usr/local/sbin first, as on a usual root PATH: setup.sh puts a current runsc there.
export PATH="/usr/local/sbin:/usr/local/bin:$PATH:/usr/local/go/bin"
start=$SECONDS

# group and summary (scripts/groups.sh): every group runs, and the summary says each one's
# result.
. scripts/groups.sh
results=$(mktemp -d /tmp/tupper-test-results.XXXXXX)

echo "== set-up"
t=$SECONDS
if ! scripts/setup.sh --test; then
	echo "FAILED: set-up (its last lines say which step and what to do); no test can run without it" >&2
	exit 1
fi
printf '0\t%s\tset-up\n' "$((SECONDS - t))" >"$results/0"

gofmt_check() {
	local unformatted
	unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
	if [ -n "$unformatted" ]; then
		echo "not gofmt-formatted:" $unformatted >&2
		return 1
	fi
}
# Tests that need Linux (real sandboxes) carry a linux build tag; the rest vet everywhere.
cross_check() {
	local target cmd
	for target in darwin/amd64 darwin/arm64 windows/amd64 windows/arm64; do
		for cmd in tupper tupper-bench; do
			GOOS=${target%/*} GOARCH=${target#*/} CGO_ENABLED=0 go build -o /dev/null ./cmd/$cmd ||
				{ echo "$cmd does not build for $target" >&2; return 1; }
		done
	done
	for target in darwin/arm64 windows/amd64; do
		GOOS=${target%/*} GOARCH=${target#*/} CGO_ENABLED=0 go vet ./... ||
			{ echo "go vet fails for $target" >&2; return 1; }
	done
}
group "gofmt" gofmt_check
group "go vet" go vet ./...
group "static build" env CGO_ENABLED=0 go build -o bin/ ./cmd/tupper ./cmd/tupper-bench

# The Docker provider's group: against the machine's own engine when one answers; else a
# private dockerd, stopped (with every container it ran) when the group ends.
docker_group() {
	local docker_sock=${DOCKER_HOST:-unix:///var/run/docker.sock} dockerd_dir
	if ! curl -fsS --unix-socket "${docker_sock#unix://}" http://docker/_ping >/dev/null 2>&1; then
		dockerd_dir=$(mktemp -d /tmp/tupper-dockerd.XXXXXX)
		# Expanded now: the trap runs when the group's subshell exits, where this
		# function's local is gone.
		trap "scripts/dockerd.sh stop '$dockerd_dir'" EXIT
		DOCKER_HOST=$(scripts/dockerd.sh start "$dockerd_dir")
		export DOCKER_HOST
	fi
	go test -race -count=1 -timeout 30m "$@" ./providers/docker/
}

# The cross builds, then the end-to-end groups (the Docker provider against a real dockerd,
# E2B's SDK, the server on PostgreSQL, the JavaScript packages, a real Prometheus, the debian template from the
# apt mirror), which drive real sandboxes through real servers and clients, run one after
# another in the background, beside the main group (whose longest package, providers/local,
# leaves a core mostly waiting on sandboxes), and their output is printed, whole, when both are done. Each group
# uses networks of its own, and each runs whatever the one before it did. (The cross builds
# compile the module four more times, minutes on a fresh machine's empty build cache: in
# the foreground they held everything else back.)
# A private PostgreSQL cluster (scripts/postgres.sh) for the store's tests and the server's on
# PostgreSQL: TUPPER_TEST_POSTGRES is its superuser's URL; each test makes a database of its
# own on it. Should it not start, the tests that need it say so (and fail under CI=true).
pg_dir=$(mktemp -d /tmp/tupper-postgres.XXXXXX)
if TUPPER_TEST_POSTGRES=$(scripts/postgres.sh start "$pg_dir"); then
	export TUPPER_TEST_POSTGRES
else
	echo "== PostgreSQL did not start (above): the tests on it will say so" >&2
fi

# The code-interpreter template takes minutes to make from the mirror (debian, base, then its
# packages): its group keeps it in a provider home of its own, once per machine, as set-up
# keeps runsc; the template is made again when its Dockerfile or server changes. The debian
# group still makes debian and base from the mirror on every run.
export TUPPER_TEST_CODEINTERP_HOME=${TUPPER_TEST_CODEINTERP_HOME:-/var/cache/tupper-test/codeinterp}
mkdir -p "$TUPPER_TEST_CODEINTERP_HOME"

later_log=$(mktemp /tmp/tupper-test-later.XXXXXX)
(
	group "cross builds and vet: macOS and Windows (the Docker provider's platforms)" cross_check
	group "the Docker provider, against a real dockerd" docker_group "$@"
	group "E2B SDK compatibility" go test -race -count=1 -timeout 10m "$@" ./test/e2b/
	group "the server and its E2B dialect on PostgreSQL (the store's own tests run on both in the main group)" \
		env TUPPER_TEST_STORE=postgres go test -race -count=1 -timeout 20m "$@" ./server/ ./server/e2b/
	group "JavaScript packages (js/)" go test -race -count=1 -timeout 15m "$@" ./test/js/
	group "a real Prometheus scraping a real server's metrics" go test -race -count=1 -timeout 10m "$@" ./test/prometheus/
	group "the debian template, the conformance suite on it, a build on it and base, from this machine's apt mirror" \
		go test -race -count=1 -timeout 40m "$@" ./test/debian/
) >"$later_log" 2>&1 </dev/null &
later=$!
# Whatever ends this script stops the background groups too (their own traps clean up).
trap 'kill $later 2>/dev/null || true; wait $later 2>/dev/null || true; rm -f "$later_log"; scripts/postgres.sh stop "$pg_dir"' EXIT

echo "== go test -race (the end-to-end groups run beside it; their output follows)"
group "go test -race: every package but the end-to-end groups" \
	go test -race -count=1 -timeout 50m "$@" $(go list ./... | grep -v -e '/test/e2b$' -e '/test/js$' -e '/test/debian$' -e '/test/prometheus$' -e '/test/codeinterp$' -e '/providers/docker$')
wait $later
cat "$later_log"
# After the main group, not beside it: its runsc sandboxes running Jupyter kernels took the
# CPU that providers/local's runsc creates had, and one of those passed its 60 s bound (CI,
# TestConformanceBootImages). Warm, it adds about two minutes.
group "the code-interpreter template from the apt mirror, E2B's Code Interpreter SDK and the Go SDK's RunCode on it" \
	go test -race -count=1 -timeout 50m "$@" ./test/codeinterp/
summary
