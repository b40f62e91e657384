#!/bin/sh
# Regenerates the Go code for the agent's Connect services from the .proto files
# next to this script. Needs protoc (3.21 or newer) on PATH; installs the pinned
# Go plugins into a temporary directory.
set -eu
cd "$(dirname "$0")"
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
GOBIN="$bin" go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
GOBIN="$bin" go install connectrpc.com/connect/cmd/protoc-gen-connect-go@v1.21.1
PATH="$bin:$PATH" protoc -I . \
	--go_out=. --go_opt=paths=source_relative \
	--connect-go_out=. --connect-go_opt=paths=source_relative \
	process/process.proto filesystem/filesystem.proto
