# Thin wrappers around the scripts and plain go commands. `make help` lists them.
.PHONY: help demo build dist test bench fuzz

help: ## list the targets
	@grep -E '^[a-z]+:.*##' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

demo: ## install what is needed and run one command in a sandbox
	scripts/demo.sh

build: ## build the static tupper binary and tupper-bench (what `tupper bench` runs) into bin/
	CGO_ENABLED=0 go build -o bin/ ./cmd/tupper ./cmd/tupper-bench

dist: ## build tupper for Linux, macOS and Windows into bin/ (macOS and Windows embed the Linux agents)
	scripts/build.sh

test: ## install what is needed and run every test
	scripts/test.sh

bench: ## run the Go benchmarks (tupper beside docker is `tupper bench`: docs/performance.md)
	go test -run '^$$' -bench . -benchtime 20x ./...

fuzz: ## fuzz the shell quoting for a minute
	go test -run '^$$' -fuzz '^FuzzSh$$' -fuzztime 60s ./sandbox
