#!/usr/bin/env bash
# The quick start: installs what is needed, builds tupper and runs one command in a sandbox on
# the default (local) provider. Extra arguments replace the command.
set -euo pipefail
cd "$(dirname "$0")/.."
# /usr/local/sbin first, as on a usual root PATH: setup.sh puts a current runsc there.
export PATH="/usr/local/sbin:/usr/local/bin:$PATH:/usr/local/go/bin"
scripts/setup.sh
CGO_ENABLED=0 go build -o bin/tupper ./cmd/tupper
if [ $# -eq 0 ]; then
	set -- sh -c 'echo "hello from $(uname -n) as $(id -un) in $(pwd)"'
fi
exec bin/tupper run --network none -- "$@"
