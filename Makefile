# tether's build. `make help` lists the targets.
GO       ?= go
BIN      := bin/tether
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -s -w -X github.com/tether-proxy/tether/node.Version=$(VERSION)
FUZZTIME ?= 3s

.PHONY: help build run test test-unit test-race e2e fuzz bench fmt-check vet tidy-check lint docker clean

help: ## list the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-11s %s\n", $$1, $$2}'

build: ## build the static binary into bin/tether
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/tether

run: build ## build, then run the demo cluster (three nodes, three backends) until Ctrl-C
	./$(BIN) demo

test: fuzz test-race ## each fuzz target briefly, then all unit, integration and end-to-end tests with -race

test-race: ## go test -race over every package (e2e tests build the binary themselves)
	$(GO) test -race -count=1 -timeout 10m ./...

test-unit: ## go test without the race detector (faster)
	$(GO) test -count=1 ./...

e2e: ## only the end-to-end tests that drive the built binary
	$(GO) test -race -count=1 -timeout 10m ./test/...

fuzz: ## run every fuzz target for FUZZTIME (default 3s) each
	FUZZTIME=$(FUZZTIME) ./scripts/fuzz.sh

bench: ## microbenchmarks (route match, load balancing, rewrite, affinity, keyring)
	$(GO) test -run '^$$' -bench . -benchmem -count 1 ./proxy/... ./keyring/...

fmt-check: ## fail if gofmt would change a file
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet: ## go vet
	$(GO) vet ./...

tidy-check: ## fail if go mod tidy would change go.mod or go.sum
	@cp go.mod /tmp/tether-go.mod.bak; cp go.sum /tmp/tether-go.sum.bak; \
	$(GO) mod tidy; \
	if ! cmp -s go.mod /tmp/tether-go.mod.bak || ! cmp -s go.sum /tmp/tether-go.sum.bak; then \
	  echo "go mod tidy changes go.mod/go.sum"; cp /tmp/tether-go.mod.bak go.mod; cp /tmp/tether-go.sum.bak go.sum; exit 1; fi

lint: fmt-check vet tidy-check ## all static checks

docker: ## build the FROM scratch image tether:dev (no image is pulled)
	./deploy/build-image.sh

clean: ## remove build output
	rm -rf bin
