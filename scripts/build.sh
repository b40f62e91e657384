#!/usr/bin/env bash
# Builds static tupper binaries into bin/: tupper-linux-amd64, tupper-linux-arm64, and the
# macOS and Windows ones, which carry the two Linux binaries as the agents of their Docker
# containers (providers/docker/agentbin). Nothing is downloaded, then or at run time.
#
#   scripts/build.sh                 every target
#   scripts/build.sh darwin/arm64    the Linux binaries and the named targets
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin" CGO_ENABLED=0
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(darwin/amd64 darwin/arm64 windows/amd64 windows/arm64)
embed=providers/docker/agentbin/embedded
mkdir -p bin
# The Linux binaries first, without agents of their own (on Linux tupper is its own agent).
rm -f "$embed"/*.gz
trap 'rm -f "$embed"/*.gz' EXIT
for arch in amd64 arm64; do
	GOOS=linux GOARCH=$arch go build -trimpath -o "bin/tupper-linux-$arch" ./cmd/tupper
done
for arch in amd64 arm64; do
	gzip -9 -c "bin/tupper-linux-$arch" >"$embed/tupper-linux-$arch.gz"
done
for target in "${targets[@]}"; do
	os=${target%/*} arch=${target#*/}
	ext=""
	[ "$os" = windows ] && ext=.exe
	GOOS=$os GOARCH=$arch go build -trimpath -o "bin/tupper-$os-$arch$ext" ./cmd/tupper
	echo "bin/tupper-$os-$arch$ext"
done
