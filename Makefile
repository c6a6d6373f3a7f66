# envoy-rls — the front door. `make help` lists the targets.
SHELL := /bin/bash
GO    ?= go
BIN   := bin
PKGS  := ./...
# The benchmark tools (load generator, floor server, plotter, ceiling stub,
# bench scripts) are a module of their own, so the service's go.mod carries
# none of their dependencies.
TOOLS := tools
# The end-to-end suite, the deployment tests and the container and browser
# tests are a module of their own too (e2e/, which requires the service
# module through a replace), so the service's go.mod carries none of their
# dependencies (chromedp, testcontainers, compose).
E2E   := e2e
CONFIG ?= config/examples
# Race tests need cgo; the machine's gcc provides it.
TESTFLAGS ?= -race -count=1 -timeout 20m

.PHONY: help build run test test-containers test-short lint vet fmt tidy filesize bench deps clean helm-check chart-docs release-check release-snapshot

# What `envoy-rls version`, the start-up log line and envoy_rls_build_info
# report for a `make build` binary (internal/buildinfo).
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
REVISION  ?= $(shell git rev-parse HEAD 2>/dev/null)
DATE      ?= $(shell date -u +%Y-%m-%dT%H:%M:%SZ)
BUILDINFO := github.com/envoy-rls/envoy-rls/internal/buildinfo
LDFLAGS   := -X $(BUILDINFO).version=$(VERSION) -X $(BUILDINFO).revision=$(REVISION) -X $(BUILDINFO).date=$(DATE)

help: ## list targets
	@grep -hE '^[a-zA-Z0-9_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN{FS=":.*?## "} \
	  {name[NR] = $$1; text[NR] = $$2; if (length($$1) > w) w = length($$1)} \
	  END{for (i = 1; i <= NR; i++) printf "  %-" w "s  %s\n", name[i], text[i]}'

build: ## build bin/envoy-rls (and bin/ratelimit, a link: the reference's entry point), stamped with git describe, the commit and the date
	@mkdir -p $(BIN)
	$(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN)/envoy-rls ./cmd/envoy-rls
	ln -sf envoy-rls $(BIN)/ratelimit

run: build ## serve config/examples on the in-memory store (gRPC :8081, admin :8080)
	$(BIN)/envoy-rls serve --config $(CONFIG)

deps: ## install what the tests need (redis-server, helm, helm-docs) when missing
	@scripts/ensure-deps.sh
	@scripts/ensure-tool.sh helm >/dev/null
	@scripts/ensure-tool.sh helm-docs >/dev/null

# -tags containers builds the e2e module's test that needs testcontainers'
# compose module (the compose demo), when a container engine answers; the
# container lane (e2e/containers) runs by itself where one answers
# (docs/testing.md).
CONTAINER_TAGS = $(shell docker info >/dev/null 2>&1 && echo -tags=containers)

test: deps ## install test dependencies if missing, then run every test with -race (service, tools and e2e modules); ends with the Redis and container lanes that ran
	CI=$${CI:-} $(GO) test $(TESTFLAGS) $(PKGS)
	CI=$${CI:-} $(GO) -C $(TOOLS) test $(TESTFLAGS) ./...
	# -p 1: the e2e packages one after the other, so that no other package's
	# binaries load the cores while the deadline tests time the binary's answers.
	CI=$${CI:-} $(GO) -C $(E2E) test -p 1 $(TESTFLAGS) $(CONTAINER_TAGS) ./...
	@$(GO) test -count=1 -run '^TestLane$$' -v ./internal/redistest | sed -n 's/.*\(redis lane: \)/\1/p'
	@$(GO) -C $(E2E) test -count=1 -run '^TestLane$$' -v ./containers | sed -n 's/.*\(container lane: \)/\1/p'

test-containers: ## the container lane alone (needs a container engine): the harness's suite, the image matrix and the compose demo
	ENVOY_RLS_TEST_REDIS=containers $(GO) -C $(E2E) test -count=1 -tags=containers \
		-run 'TestLane|TestServers|TestMatrixStart|TestVersionMatrix|TestComposeUp' -v ./containers ./deploy/compose

test-short: ## unit tests only (no Redis lanes), in every module
	$(GO) test -short -count=1 $(PKGS)
	$(GO) -C $(TOOLS) test -short -count=1 ./...
	$(GO) -C $(E2E) test -short -count=1 ./...

.PHONY: e2e
e2e: ## end-to-end suite only (the e2e module's root package): the real binary, replicas on real Redis (installs redis-server if missing; also part of make test)
	@scripts/ensure-deps.sh
	CI=$${CI:-} $(GO) -C $(E2E) test -race -count=1 .

vet: ## go vet (service, tools and e2e modules)
	$(GO) vet $(PKGS)
	$(GO) -C $(TOOLS) vet ./...
	$(GO) -C $(E2E) vet ./...
	$(GO) -C $(E2E) vet -tags containers ./deploy/compose

fmt: ## gofmt check (fails on unformatted files)
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

tidy: ## fail when go.mod/go.sum (service, tools or e2e) are not tidy
	$(GO) mod tidy -diff
	$(GO) -C $(TOOLS) mod tidy -diff
	$(GO) -C $(E2E) mod tidy -diff

filesize: ## fail when a non-test Go file is over 500 lines (a ceiling: a file is one concept, reviewed by concern)
	@out=$$(for f in $$(git ls-files '*.go' | grep -v '_test.go$$'); do n=$$(wc -l < $$f); [ $$n -gt 500 ] && echo "$$f: $$n lines"; done; true); if [ -n "$$out" ]; then echo "over 500 lines:"; echo "$$out"; exit 1; fi

lint: fmt vet tidy filesize ## gofmt + go vet + go mod tidy check + file size

CHART := deploy/helm/envoy-rls
helm-check: ## helm lint + template the chart, then its manifest tests (builds helm once if missing)
	@helm=$$(scripts/ensure-tool.sh helm) && set -x && \
	  $$helm lint --strict $(CHART) && \
	  $$helm template rls $(CHART) >/dev/null && \
	  $$helm template rls $(CHART) --set store=redis --set redis.addr=redis:6379 \
	    --set-string hmac.secret=0123456789abcdef0123 --set autoscaling.enabled=true >/dev/null
	@scripts/ensure-tool.sh helm-docs >/dev/null
	CI=$${CI:-} $(GO) -C $(E2E) test -count=1 ./deploy/helm

chart-docs: ## regenerate the chart README's values table from values.yaml (helm-docs; builds it once if missing)
	@helmdocs=$$(scripts/ensure-tool.sh helm-docs) && $$helmdocs --chart-search-root $(CHART) --log-level warning

release-check: ## goreleaser check + actionlint on .github/workflows (installs the pinned tools once)
	@goreleaser=$$(scripts/ensure-tool.sh goreleaser) && actionlint=$$(scripts/ensure-tool.sh actionlint) && set -x && \
	  $$goreleaser check && \
	  $$actionlint

release-snapshot: ## the release build without publishing: binaries and archives for linux/amd64+arm64 in dist/ (no image)
	@goreleaser=$$(scripts/ensure-tool.sh goreleaser) && set -x && \
	  $$goreleaser release --snapshot --clean --skip=docker,publish,sign && \
	  dist/envoy-rls_linux_$$($(GO) env GOARCH)*/envoy-rls version && \
	  for a in dist/envoy-rls_*_linux_amd64.tar.gz dist/envoy-rls_*_linux_arm64.tar.gz; do \
	    test "$$(tar -tzf $$a | LC_ALL=C sort | tr '\n' ' ')" = "LICENSE README.md THIRD_PARTY_NOTICES envoy-rls " || \
	      { echo "$$a: unexpected contents: $$(tar -tzf $$a | tr '\n' ' ')" >&2; exit 1; }; \
	  done

bench: deps ## run the Go benchmarks (figures go to docs/performance.md)
	$(GO) test -run '^$$' -bench . -benchmem $(PKGS)
	$(GO) -C $(TOOLS) test -run '^$$' -bench . -benchmem ./...
	$(GO) -C $(E2E) test -run '^$$' -bench . -benchmem ./...

.PHONY: bench-load
BENCH_ARGS ?=
bench-load: ## gRPC load runs at 16/64/256 calls → bench/results/*.jsonl + PNG (BENCH_ARGS="--target envoy-rls --store redis"; see tools/scripts/bench.sh --help)
	$(TOOLS)/scripts/bench.sh $(BENCH_ARGS)

.PHONY: bench-standard
bench-standard: ## the standard set back to back: floor + reference + memory/Redis × 3 algorithms × 16/64/256 → bench/results/standard-*/ + docs/img/perf-{memory,redis}.png
	$(TOOLS)/scripts/bench-standard.sh

clean: ## remove build output
	rm -rf $(BIN) dist
