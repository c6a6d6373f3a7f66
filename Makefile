# envoy-rls — the front door. `make help` lists the targets.
SHELL := /bin/bash
GO    ?= go
BIN   := bin
PKGS  := ./...
CONFIG ?= config/examples
# Race tests need cgo; the machine's gcc provides it.
TESTFLAGS ?= -race -count=1 -timeout 20m

.PHONY: help build run test test-short lint vet fmt bench tools deps clean

help: ## list targets
	@grep -hE '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN{FS=":.*?## "}{printf "  %-12s %s\n", $$1, $$2}'

build: ## build bin/envoy-rls (and the load tool when present)
	@mkdir -p $(BIN)
	$(GO) build -trimpath -o $(BIN)/envoy-rls ./cmd/envoy-rls

run: build ## serve config/examples on the in-memory store (gRPC :8081, admin :8080)
	$(BIN)/envoy-rls serve --config $(CONFIG)

deps: ## install what the tests need (redis-server) when missing
	@scripts/ensure-deps.sh

test: deps ## install test dependencies if missing, then run every test with -race
	CI=$${CI:-} $(GO) test $(TESTFLAGS) $(PKGS)

test-short: ## unit tests only (no Redis lanes)
	$(GO) test -short -count=1 $(PKGS)

vet: ## go vet
	$(GO) vet $(PKGS)

fmt: ## gofmt check (fails on unformatted files)
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

lint: fmt vet ## gofmt + go vet

bench: deps ## run the Go benchmarks (figures go to docs/performance.md)
	$(GO) test -run '^$$' -bench . -benchmem $(PKGS)

.PHONY: bench-load
BENCH_ARGS ?=
bench-load: ## gRPC load runs at 16/64/256 calls → bench/results/*.jsonl + PNG (BENCH_ARGS="--target envoy-rls --store redis"; see scripts/bench.sh --help)
	scripts/bench.sh $(BENCH_ARGS)

clean: ## remove build output
	rm -rf $(BIN)
