# Salvage — the Makefile is the contract with CI and with users.
SHELL := /bin/bash
GO ?= go
BIN := $(CURDIR)/bin
STATICCHECK_VERSION := v0.8.2
NATSCLI_VERSION := v0.5.0
# The server the cluster section of the README runs as processes: the
# version go.mod embeds.
NATS_SERVER_VERSION := v2.15.2
# The TypeScript agent example, built with Node's npm (npm ci: the lock file).
AGENT_TS := examples/agent-ts
# Packages whose tests start goroutines that race: all of them, in practice.
# -parallel 4: most tests wait on servers, timers and child processes, not
# on the CPU (the consumers package used 45 CPU-seconds in 95 s on two
# cores); four at a time instead of GOMAXPROCS (2) took the suite from 322
# to 286 s (docs/development.md).
# -timeout 20m: a bound for a hung test binary, not a speed. The CLI package
# took 388 s of its 600 in a clean-clone run under a CPU hog; a slow machine
# makes it slower, never red.
TEST_FLAGS ?= -race -count=1 -timeout 20m -parallel 4

.PHONY: help run build test lint bench tools clean fuzz stress timings
# Fuzz targets, as package:target; make test runs each for FUZZ_BRIEF,
# make fuzz for FUZZTIME. Crashers land in the package's testdata/fuzz
# and from then on run in every go test as regression tests. FUZZ_BRIEF is
# a count, not a duration: a duration's deadline races the coordinator's
# shutdown and fails a target that found nothing ("context deadline
# exceeded", golang/go#75804) on a loaded machine.
FUZZ_TARGETS := ./streams:FuzzValidateToken ./streams:FuzzParseSubjects ./streams:FuzzParseTraceParent \
	./consumers/splitter:FuzzParseJob ./recovery:FuzzDecodeEnvelope .:FuzzEnvelopeRequest
FUZZ_BRIEF ?= 10000x
FUZZTIME ?= 60s

help: ## list the targets
	@grep -E '^[a-z]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-8s %s\n", $$1, $$2}'

run: build ## the main job: the demo on an embedded server
	$(BIN)/salvage demo

build: ## build ./bin/salvage
	$(GO) build -o $(BIN)/salvage ./cmd/salvage

# The examples module's tests, the scale tests and the brief fuzz runs go
# on beside the module's suite rather than after it (docs/development.md).
# Their output follows the suite's; any failure fails the target.
#
# The scale tests check what holds at a volume (a listing out of 100,000
# records), not under concurrency: their files build only without the
# race detector (//go:build !race), under which seeding alone cost six
# times the CPU on two cores the suite keeps busy. SCALE_PKGS and
# SCALE_RUN name them; the race detector checks the same code in each
# package's other tests.
SCALE_PKGS := ./kv
SCALE_RUN := ^TestEnvelopeListingStaysFlatAt100000$$
test: $(BIN)/nats $(BIN)/nats-server $(AGENT_TS)/dist/agent.js ## the whole suite, on real embedded NATS servers (the pinned nats CLI and nats-server, the Node agent example), and beside it the examples' own tests, the scale tests and each fuzz target briefly
	@side=$$(mktemp -d); \
	  ( cd examples && $(GO) test $(TEST_FLAGS) ./... > $$side/examples.out 2>&1; echo $$? > $$side/examples.rc; \
	    cd .. && $(GO) test -count=1 -timeout 10m -run '$(SCALE_RUN)' $(SCALE_PKGS) > $$side/scale.out 2>&1; echo $$? > $$side/scale.rc; \
	    $(MAKE) --no-print-directory fuzz FUZZTIME=$(FUZZ_BRIEF) > $$side/fuzz.out 2>&1; echo $$? > $$side/fuzz.rc ) & \
	  echo "$(GO) test $(TEST_FLAGS) ./...  (and beside it: the examples module's tests, the scale tests without -race, then the fuzz targets)"; \
	  $(GO) test $(TEST_FLAGS) ./...; rc=$$?; wait; \
	  echo "examples:"; cat $$side/examples.out; echo "scale tests:"; cat $$side/scale.out; \
	  echo "fuzz ($(FUZZ_BRIEF) each):"; cat $$side/fuzz.out; \
	  rce=$$(cat $$side/examples.rc); rcs=$$(cat $$side/scale.rc); rcf=$$(cat $$side/fuzz.rc); rm -rf $$side; \
	  test $$rc = 0 && test $$rce = 0 && test $$rcs = 0 && test $$rcf = 0

# The flake hunt: STRESS_PKGS run STRESS_COUNT times each, with -race,
# while two busy loops keep both cores loaded, as CI's machine is when
# every package tests at once. A test that fails here decides by the
# machine's speed; the output names it, and go test -run NAME -count N
# reproduces it.
STRESS_PKGS ?= ./recovery ./kv ./consumers/...
STRESS_COUNT ?= 5

stress: ## run STRESS_PKGS STRESS_COUNT times under a CPU hog on both cores, then list what failed
	@set -o pipefail; hog() { while :; do :; done; }; hog & h1=$$!; hog & h2=$$!; \
	  trap 'kill $$h1 $$h2 2>/dev/null' EXIT; \
	  $(GO) test -race -count=$(STRESS_COUNT) -timeout 30m $(STRESS_PKGS) 2>&1 | tee $(CURDIR)/stress.out | grep -E '^(ok|FAIL|--- FAIL|panic)' ; \
	  rc=$$?; echo "failures (full output in stress.out):"; grep -E -- '--- FAIL' $(CURDIR)/stress.out | sort | uniq -c || echo "  none"; exit $$rc

# Where the suite spends its time: every top-level test's seconds, the
# slowest first (timings.json has go test -json's whole record).
timings: $(BIN)/nats $(BIN)/nats-server $(AGENT_TS)/dist/agent.js ## run the suite with go test -json and list the slowest tests
	@$(GO) test $(TEST_FLAGS) -json ./... > $(CURDIR)/timings.json || echo "(the suite failed: see timings.json)"
	@grep -E '"Action":"(pass|fail)".*"Test":"[^"/]*",' $(CURDIR)/timings.json | \
	  sed -E 's/.*"Package":"github.com\/salvagehq\/salvage\/?([^"]*)","Test":"([^"]*)","Elapsed":([0-9.]+).*/\3 s  \2  \1/' | sort -rn | head -$(TIMINGS_TOP)
TIMINGS_TOP ?= 30

fuzz: ## run every fuzz target for FUZZTIME (60s) each
	@set -e; for t in $(FUZZ_TARGETS); do \
	  pkg=$${t%%:*}; fn=$${t##*:}; echo "fuzz $$pkg $$fn ($(FUZZTIME))"; \
	  $(GO) test -run '^$$' -fuzz "^$$fn\$$" -fuzztime $(FUZZTIME) $$pkg; \
	done

lint: $(BIN)/staticcheck ## gofmt, go vet, staticcheck
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(BIN)/staticcheck ./...
	cd examples && $(GO) vet ./... && $(BIN)/staticcheck ./...

bench: build $(BIN)/nats-server ## the performance table (salvage bench: throughput vs the JetStream floor, critical path, crash to resume, cost growth), then the Go benchmarks
	$(BIN)/salvage bench --log-level error --nats-server $(BIN)/nats-server
	$(GO) test -run '^$$' -bench BenchmarkWorkers -benchtime 3x -count 1 ./cmd/salvage/internal/contractreview/
	$(GO) test -run '^$$' -bench BenchmarkJournal -benchtime 2x -count 1 ./kv/
	$(GO) test -run '^$$' -bench BenchmarkEnvelopeStatsMemory -benchtime 1x -count 1 ./cmd/salvage/internal/dashboard/
	$(GO) test -run '^$$' -bench BenchmarkEnvelopeListing -benchtime 5x -count 1 ./cmd/salvage/internal/cli/
	$(GO) test -run '^$$' -bench BenchmarkJobSearch -benchtime 20x -count 1 .
	$(GO) test -run '^$$' -bench BenchmarkDashboardMemory -benchtime 1x -count 1 ./cmd/salvage/internal/cli/

screenshots: ## regenerate docs/screenshots: the operator walk in Chromium at 1,280 and 1,920 px
	mkdir -p docs/screenshots
	SALVAGE_SCREENSHOTS=$(CURDIR)/docs/screenshots $(GO) test -count 1 -run TestOperatorWalkInABrowser ./cmd/salvage/internal/dashboard/

tools: $(BIN)/nats $(BIN)/nats-server $(BIN)/staticcheck ## pinned natscli, nats-server and staticcheck into ./bin

$(BIN)/staticcheck:
	GOBIN=$(BIN) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

$(BIN)/nats:
	GOBIN=$(BIN) $(GO) install github.com/nats-io/natscli/nats@$(NATSCLI_VERSION)

$(BIN)/nats-server:
	GOBIN=$(BIN) $(GO) install github.com/nats-io/nats-server/v2@$(NATS_SERVER_VERSION)

$(AGENT_TS)/dist/agent.js: $(AGENT_TS)/agent.ts $(AGENT_TS)/package-lock.json $(AGENT_TS)/tsconfig.json
	cd $(AGENT_TS) && npm ci --no-audit --no-fund && npm run build

clean: ## remove ./bin, the demo's data and the Node example's packages
	rm -rf $(BIN) salvage-data $(AGENT_TS)/node_modules $(AGENT_TS)/dist
