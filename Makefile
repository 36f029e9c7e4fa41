# tether's build. `make help` lists the targets.
GO       ?= go
BIN      := bin/tether
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -s -w -X github.com/tether-proxy/tether/node.Version=$(VERSION)
FUZZTIME ?= 3s
# The tools module (tools/go.mod): the benchmark harness, the browser test
# and the manifests test, with the dependencies the product does not need.
TOOLS    := cd tools &&

.PHONY: help build run test test-unit test-race test-allocs test-norace test-chaosclock e2e chaos chaos-short ui-screenshots crs fuzz bench bench-cluster bench-health bench-race fmt-check vet tidy-check staticcheck lint docker e2e-docker clean

help: ## list the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-11s %s\n", $$1, $$2}'

build: ## build the static binary into bin/tether
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/tether

run: build ## build, then run the demo cluster (three nodes, three backends) until Ctrl-C
	./$(BIN) demo

test: fuzz test-race test-allocs test-norace test-chaosclock chaos-short ## each fuzz target briefly, then all unit, integration and end-to-end tests with -race, then the allocation counts and the Raft address changes without it, the fault test's clock hook, then 25 s of the fault test

test-allocs: ## the data path's allocation tests without -race (the race detector's sync.Pool drops items at random)
	$(GO) test -count=1 -run 'Alloc' ./proxy/...

test-norace: ## the tests that change a live Raft server's address in place, without -race (hashicorp/raft reads a replication's peer without its lock there, which -race reports)
	$(GO) test -count=1 -run 'TestMembershipChangesAreIdempotent|TestAddressChangesInPlaceAndNeverEvictsALiveVoter' ./store/

test-chaosclock: ## the node tests of the fault test's build (-tags chaosclock): its clock hook moves only the wall clock
	$(GO) test -race -count=1 -tags chaosclock -run 'ChaosClock' ./node/...

test-race: ## go test -race over every package of both modules (e2e tests build the binary themselves)
	$(GO) test -race -count=1 -timeout 10m ./...
	$(TOOLS) $(GO) test -race -count=1 -timeout 10m ./...

test-unit: ## go test over both modules without the race detector (faster)
	$(GO) test -count=1 ./...
	$(TOOLS) $(GO) test -count=1 ./...

e2e: ## only the end-to-end tests that drive the built binary (test/... and the browser test)
	$(GO) test -race -count=1 -timeout 10m ./test/...
	$(TOOLS) $(GO) test -race -count=1 -timeout 10m ./uitest/

CHAOS_DURATION ?= 5m
CHAOS_SEED     ?= 0
chaos: ## the fault test: 5 nodes under kill -9, pause, partitions, restarts, leave/join, address changes while clients write and seal/open; CHAOS_DURATION (5m), CHAOS_SEED (0: random, printed)
	@mkdir -p bin; TETHER_CHAOS=1 TETHER_CHAOS_SEED=$(CHAOS_SEED) TETHER_CHAOS_DURATION=$(CHAOS_DURATION) \
	$(GO) test -count=1 -timeout 90m -run 'TestChaos$$' -v ./test/chaos/ > bin/chaos.log 2>&1; rc=$$?; \
	grep -E '^(CHAOS|ok|FAIL|--- )|chaos: ' bin/chaos.log; [ $$rc -eq 0 ] || { echo "--- the last 60 lines of bin/chaos.log:"; tail -n 60 bin/chaos.log; }; exit $$rc

chaos-short: ## the fault test for 25 s with seed 1 (under a minute; part of make test)
	TETHER_CHAOS=1 TETHER_CHAOS_SEED=1 TETHER_CHAOS_DURATION=25s $(GO) test -count=1 -timeout 5m -run 'TestChaos$$' ./test/chaos/

ui-screenshots: ## the browser test of the cluster page (needs chromium), refreshing docs/img/ui-1280.png and ui-390.png
	$(TOOLS) TETHER_UI_SCREENSHOTS=$(CURDIR)/docs/img $(GO) test -race -count=1 -timeout 5m -run TestUIInARealBrowser -v ./uitest/

crs: ## the whole OWASP CRS regression suite through tether (make test runs a subset)
	TETHER_CRS_FULL=1 $(GO) test -count=1 -timeout 20m -run TestCRSRegression -v ./test/crs/

fuzz: ## run every fuzz target for FUZZTIME (default 3s) each
	FUZZTIME=$(FUZZTIME) ./scripts/fuzz.sh

bench: ## microbenchmarks (route match, load balancing, rewrite, affinity, keyring)
	$(GO) test -run '^$$' -bench . -benchmem -count 1 ./proxy/... ./keyring/...

bench-cluster: ## cluster figures over 20 trials each: rotation to active, failover after kill -9, join to voter (minutes)
	TETHER_BENCH_CLUSTER=1 $(GO) test -count=1 -timeout 30m -run TestClusterFigures -v ./test/ | grep -E 'FIGURE|^(ok|FAIL|---)'

BENCHRACE_FLAGS ?=
bench-race: ## tether vs HAProxy, nginx, Caddy and a stdlib proxy (cleartext, TLS, handshakes, HTTP/2; raw and net/http backends; memory after a burst) under wrk/h2load, pinned cores, interleaved rounds; rewrites the race block of docs/BENCHMARKS.md, raw figures in bin/ (~30 min; BENCHRACE_FLAGS=-quick for a smoke run)
	@mkdir -p bin; $(TOOLS) $(GO) build -o ../bin/benchrace ./benchrace && cd .. && ./bin/benchrace -repo . $(BENCHRACE_FLAGS)

bench-health: ## health gossip simulation: 5 and 50 in-process nodes, 1,000 destinations: agreement p50/p99, bytes per node (minutes)
	TETHER_BENCH_HEALTH=1 $(GO) test -count=1 -timeout 20m -run TestHealthScale -v ./cluster/healthgossip/ | grep -E 'sim_test|^(ok|FAIL|---)'

fmt-check: ## fail if gofmt would change a file
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet: ## go vet over both modules
	$(GO) vet ./...
	$(TOOLS) $(GO) vet ./...

tidy-check: ## fail if go mod tidy would change go.mod or go.sum of either module
	@for dir in . tools; do \
	  bak=$$(mktemp -d); cp $$dir/go.mod $$dir/go.sum $$bak/; \
	  (cd $$dir && $(GO) mod tidy); \
	  if ! cmp -s $$dir/go.mod $$bak/go.mod || ! cmp -s $$dir/go.sum $$bak/go.sum; then \
	    echo "go mod tidy changes $$dir/go.mod or $$dir/go.sum"; cp $$bak/go.mod $$bak/go.sum $$dir/; rm -rf $$bak; exit 1; fi; \
	  rm -rf $$bak; \
	done

STATICCHECK := $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2
staticcheck: ## staticcheck over both modules (its settings: staticcheck.conf)
	$(STATICCHECK) ./...
	$(TOOLS) $(STATICCHECK) ./...

lint: fmt-check vet tidy-check staticcheck ## all static checks

docker: ## build the FROM scratch images tether:dev and tether-demo-backend:dev (no image is pulled)
	./deploy/build-image.sh

e2e-docker: docker ## the container scenarios (test/docker) against the images: formation, sessions, kills, ...
	@mkdir -p bin; run=$$(od -An -tx1 -N3 /dev/urandom | tr -d ' \n'); \
	TETHER_E2E_DOCKER=1 TETHER_E2E_RUN=$$run $(GO) test -count=1 -timeout 8m -v ./test/docker/ > bin/e2e-docker.log 2>&1; rc=$$?; \
	grep -E '^(FIGURE|ok|FAIL|--- )' bin/e2e-docker.log; [ $$rc -eq 0 ] || { echo "--- the last 200 lines of bin/e2e-docker.log:"; tail -n 200 bin/e2e-docker.log; }; \
	./test/docker/cleanup.sh $$run; exit $$rc

clean: ## remove build output
	rm -rf bin
