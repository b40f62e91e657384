#!/usr/bin/env bash
# Runs every test: installs what the tests need, checks formatting and vet, runs the whole Go
# suite with the race detector (real sandboxes under runc and runsc when run as root; fuzz
# tests run their seed corpora, `make fuzz` explores further). Under CI=true, tests whose requirements are
# missing fail instead of skipping.
set -euo pipefail
cd "$(dirname "$0")/.."
# /usr/local/sbin first, as on a usual root PATH: setup.sh puts a current runsc there.
export PATH="/usr/local/sbin:/usr/local/bin:$PATH:/usr/local/go/bin"
scripts/setup.sh --test

echo "== gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
	echo "not gofmt-formatted:" $unformatted >&2
	exit 1
fi
echo "== go vet"
go vet ./...
echo "== cross builds and vet: macOS and Windows (the Docker provider's platforms)"
for target in darwin/amd64 darwin/arm64 windows/amd64 windows/arm64; do
	GOOS=${target%/*} GOARCH=${target#*/} CGO_ENABLED=0 go build -o /dev/null ./cmd/tupper ||
		{ echo "tupper does not build for $target" >&2; exit 1; }
done
# Tests that need Linux (real sandboxes) carry a linux build tag; the rest vet everywhere.
for target in darwin/arm64 windows/amd64; do
	GOOS=${target%/*} GOARCH=${target#*/} CGO_ENABLED=0 go vet ./... ||
		{ echo "go vet fails for $target" >&2; exit 1; }
done
echo "== static build"
CGO_ENABLED=0 go build -o bin/tupper ./cmd/tupper
# The end-to-end groups (the Docker provider against a real dockerd, E2B's SDK, the JavaScript
# packages, the debian template from the apt mirror) drive real sandboxes through real
# servers and clients. They run one after another in the background, beside the main group
# (whose longest package, providers/local, leaves a core mostly waiting on sandboxes), and
# their output is printed, whole, when both are done. Each group uses networks of its own.
later_log=$(mktemp /tmp/tupper-test-later.XXXXXX)
(
	set -e
	echo "== The Docker provider, against a real dockerd"
	# The machine's own engine when one answers; else a private dockerd, stopped (with every
	# container it ran) when this group ends.
	docker_sock=${DOCKER_HOST:-unix:///var/run/docker.sock}
	if ! curl -fsS --unix-socket "${docker_sock#unix://}" http://docker/_ping >/dev/null 2>&1; then
		dockerd_dir=$(mktemp -d /tmp/tupper-dockerd.XXXXXX)
		trap 'scripts/dockerd.sh stop "$dockerd_dir"' EXIT
		DOCKER_HOST=$(scripts/dockerd.sh start "$dockerd_dir")
		export DOCKER_HOST
	fi
	go test -race -count=1 -timeout 30m "$@" ./providers/docker/
	echo "== E2B SDK compatibility"
	go test -race -count=1 -timeout 10m "$@" ./test/e2b/
	echo "== JavaScript packages (js/)"
	go test -race -count=1 -timeout 15m "$@" ./test/js/
	echo "== The debian template, the conformance suite on it, a build on it and base, from this machine's apt mirror"
	go test -race -count=1 -timeout 40m "$@" ./test/debian/
) >"$later_log" 2>&1 </dev/null &
later=$!
# Whatever ends this script stops the background groups too (their own traps clean up).
trap 'kill $later 2>/dev/null || true; wait $later 2>/dev/null || true; rm -f "$later_log"' EXIT

echo "== go test -race (the end-to-end groups run beside it; their output follows)"
main=0
go test -race -count=1 -timeout 50m "$@" $(go list ./... | grep -v -e '/test/e2b$' -e '/test/js$' -e '/test/debian$' -e '/providers/docker$') || main=$?
rest=0
wait $later || rest=$?
cat "$later_log"
if [ "$main" -ne 0 ] || [ "$rest" -ne 0 ]; then
	echo "FAILED: main group exit $main, end-to-end groups exit $rest" >&2
	exit 1
fi
