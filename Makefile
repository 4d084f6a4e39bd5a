# Every target is documented with a `## ` comment; `make help` lists them.
SHELL := /bin/bash
GO ?= go
PG := scripts/with-pg.sh

.DEFAULT_GOAL := help

.PHONY: help
help: ## list the targets
	@grep -E '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

# -timeout: go test's default of 10 minutes per package is too short for the packages that compile
# generated code (internal/annotate, internal/cli) on a busy 2-core machine with a cold build cache.
# testprogress runs go test with -json and prints go test's own lines as each package finishes,
# plus a line on stderr naming the packages still running whenever nothing was printed for 15s.
TESTPROGRESS := bin/testprogress

.PHONY: test
test: ## run every test with -race on real PostgreSQL (a throwaway server unless TEST_DATABASE_URL is set), saying which packages are still running
	@$(GO) build -o $(TESTPROGRESS) ./scripts/testprogress
	$(PG) TEST_DATABASE_URL $(TESTPROGRESS) $(GO) test -race -count=1 -timeout 20m ./...

.PHONY: lint
lint: ## gofmt, go vet and a tidy go.mod
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags citus ./...  # the Citus verification (make citus) compiles too
	@$(GO) mod tidy -diff >/dev/null || { echo "go.mod is not tidy: run go mod tidy"; $(GO) mod tidy -diff; exit 1; }

.PHONY: bench
bench: ## run the benchmarks on real PostgreSQL and print them as ratios of a baseline from the same run
	$(PG) TEST_DATABASE_URL scripts/bench.sh

.PHONY: bench-http
bench-http: ## serve the payments example over HTTP with and without idempotency on a durable PostgreSQL, and time the generator against oapi-codegen alone: one table, also written as JSON
	PG_DURABLE=1 PG_MAX_CONNECTIONS=400 PG_STATEMENTS=$${BENCH_HTTP_PROFILE:+1} $(PG) TEST_DATABASE_URL scripts/bench-http.sh

.PHONY: bench-instructions
bench-instructions: ## count the instructions PostgreSQL and Go spend per request in each bench server (valgrind's callgrind: repeatable to about 1% in PostgreSQL and a few % in Go, unlike timings)
	scripts/bench-instructions.sh

.PHONY: bench-compare
bench-compare: ## count the Go instructions per request of the work tree and of BASE (a git revision, default HEAD) side by side, beside the hand-written row twins (callgrind, about 2 minutes per round)
	scripts/bench-compare.sh

.PHONY: bench-statements
bench-statements: ## split make bench-instructions' PostgreSQL count statement by statement, for each bench server (callgrind, about 2.5 minutes)
	scripts/bench-statements.sh

.PHONY: citus
citus: ## verify the runtime on Citus: on the coordinator CITUS_DATABASE_URL names, in a schema of its own that it drops, else on a loopback cluster it starts from the installed extension (scripts/citus.sh)
	GO=$(GO) scripts/citus.sh verify

.PHONY: generate
generate: ## regenerate the examples and the golden files
	$(GO) generate ./examples/... ./bench/...
	$(PG) TEST_DATABASE_URL $(GO) test ./internal/cli -run '^TestGenerateGolden$$' -count=1 -update

.PHONY: verify
verify: ## fail when any generated file is stale (the example and every golden case); CI runs it
	$(GO) run ./cmd/idemgen generate -c examples/payments/idemgen.yaml --check
	$(GO) run ./cmd/idemgen generate -c examples/payments/txapi/idemgen.yaml --check
	$(GO) run ./cmd/idemgen generate -c bench/internal/histapi/idemgen.yaml --check
	$(GO) run ./cmd/idemgen generate -c bench/internal/txhistapi/idemgen.yaml --check
	$(GO) run ./cmd/idemgen generate -c examples/orders-sqlc/idemgen.yaml --check
	$(PG) TEST_DATABASE_URL $(GO) test ./internal/cli -run '^TestGenerate' -count=1

.PHONY: demo
demo: ## run the payments example against PostgreSQL and fire the duplicate-request scenario at it
	$(PG) DATABASE_URL scripts/demo.sh

.PHONY: install
install: ## install the idemgen command built from this checkout into $(go env GOBIN), else $(go env GOPATH)/bin
	$(GO) install ./cmd/idemgen
