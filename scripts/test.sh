#!/usr/bin/env bash
# Runs every test: installs what the tests need, checks formatting and vet, runs the whole Go
# suite with the race detector (real sandboxes under runc and runsc when run as root; fuzz
# tests run their seed corpora, `make fuzz` explores further). Under CI=true, tests whose requirements are
# missing fail instead of skipping.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"
scripts/setup.sh --test

echo "== gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
	echo "not gofmt-formatted:" $unformatted >&2
	exit 1
fi
echo "== go vet"
go vet ./...
echo "== static build"
CGO_ENABLED=0 go build -o bin/tupper ./cmd/tupper
echo "== go test -race"
# The E2B SDK compatibility scripts and the JavaScript packages' tests drive real sandboxes
# through a real server with wall-clock waits; they run on their own afterwards rather than
# beside the heaviest packages.
go test -race -count=1 -timeout 30m "$@" $(go list ./... | grep -v -e '/test/e2b$' -e '/test/js$' -e '/test/debian$' -e '/providers/docker$')
echo "== The Docker provider, against a real dockerd"
# The machine's own engine when one answers; else a private dockerd, stopped (with every
# container it ran) when this script exits.
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
echo "== The debian template and a build on it, from this machine's apt mirror"
go test -race -count=1 -timeout 30m "$@" ./test/debian/
