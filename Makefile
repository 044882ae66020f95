# ratelab: `make demo` to see the race, `make test` to check everything.
GO  ?= go
BIN := bin/ratelab

# The version make build stamps: the tag at HEAD, else a Go pseudo-version
# of the commit; and the commit itself.
COMMIT  := $(shell git rev-parse HEAD 2>/dev/null)
VERSION := $(shell git describe --tags --exact-match 2>/dev/null || \
	TZ=UTC git log -1 --date=format-local:%Y%m%d%H%M%S --format=v0.0.0-%cd-%h --abbrev=12 2>/dev/null || echo v0.0.0-dev)
LDFLAGS := -X main.version=$(VERSION) -X main.commit=$(COMMIT)

.PHONY: all build image demo test test-short lint check docs bench fuzz deps clean

all: build

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/ratelab

# The container image for load machines (docs/distributed.md): a static
# ratelab and Debian's CA certificates on an empty base, written by
# scripts/image as a tarball that docker load and crane push take. It needs
# no container daemon and pulls no base image; one commit's image is the same
# bytes wherever it is built. GOARCH=arm64 make image builds another's.
IMAGE    := bin/ratelab-image.tar
CA_CERTS ?= /etc/ssl/certs/ca-certificates.crt
EPOCH    := $(shell git log -1 --format=%ct 2>/dev/null || echo 0)

image:
	CGO_ENABLED=0 GOOS=linux $(GO) build -trimpath -ldflags "-s -w $(LDFLAGS)" -o bin/ratelab-linux ./cmd/ratelab
	$(GO) run ./scripts/image -binary bin/ratelab-linux -certs $(CA_CERTS) -version $(VERSION) -commit $(COMMIT) \
		-epoch $(EPOCH) -out $(IMAGE)

# The default race: naive, multi, watch and lua, 100 goroutines, limit 5, 20 trials,
# on a private redis-server that ratelab starts and stops.
demo: build
	@scripts/deps.sh redis
	./$(BIN) race

# Installs redis-server, nginx and its lua module when missing (apt-get, as
# root), checks the tree, then runs every test with the race detector. The
# tests start their own servers; most wait on them more than they compute,
# hence eight at a time.
test: deps lint
	$(GO) test -race -parallel 8 ./...

# The quick tier: no apt, no nginx, no drills; tests that need a
# redis-server it does not find are skipped.
test-short:
	$(GO) test -short ./...

# Formatting, go.mod, vet, and the generated command reference.
lint:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt -l: not formatted:"; echo "$$out"; exit 1; fi
	$(GO) mod tidy -diff
	$(GO) vet ./...
	@dir=$$(mktemp -d) && $(GO) run ./cmd/ratelab gen-docs $$dir && \
		if ! diff -r $$dir docs/cli >/dev/null; then rm -rf $$dir; echo "docs/cli is out of date: run make docs"; exit 1; fi; rm -rf $$dir

# make lint, and a build for each system ratelab runs on: each is a whole
# compile of ratelab and its dependencies, so make test leaves them here.
check: lint
	GOOS=linux $(GO) build ./...
	GOOS=darwin $(GO) build ./...
	GOOS=windows $(GO) build ./...

# The command reference in docs/cli, generated from the commands.
docs:
	rm -rf docs/cli && mkdir -p docs/cli
	$(GO) run ./cmd/ratelab gen-docs docs/cli

# Per-decision cost of each limiter, Redis's CPU per decision of each
# algorithm's script beside the floor of a script call (BenchmarkRedisCost),
# CPU per decision in the gateway and in Redis for each algorithm
# (bench-cost.sh), the release spread against the machine's
# floor (raw PINGs), a race of every limiter, the two edge engines under wrk,
# batching decisions (limited over off, Go over nginx, idle latency, round
# trips), bench http beside wrk (and wrk2, bombardier when installed) on
# nginx, compare's batched throughput beside redis-benchmark pipelining the
# same script, and ratelab rls beside envoyproxy/ratelimit under bench rls,
# with the floor of a gRPC service that decides nothing (skipped when its
# service_cmd is not built). (./rules/: matching a
# request against ten rules.)
bench: build
	@scripts/deps.sh bench
	$(GO) test -run '^$$' -bench . -benchmem ./algorithms/ ./rules/
	$(GO) test -run '^$$' -bench ReleaseSpread -benchtime 20x ./race/
	./$(BIN) race --limiters all
	scripts/bench-cost.sh
	scripts/bench-edge.sh
	scripts/bench-batch.sh
	scripts/bench-http.sh
	scripts/bench-compare.sh
	scripts/bench-rls.sh

# Every fuzz target (func FuzzXxx in any package, found with go test -list)
# for FUZZTIME each, one after another; a crash stops here, its input kept
# under the package's testdata/fuzz. Plain go test runs those inputs.
FUZZTIME ?= 30s
fuzz:
	@$(GO) test -list '^Fuzz' ./... | awk '/^Fuzz/ { names[n++] = $$1 } /^(ok|FAIL|\?)[ \t]/ { if ($$1 == "ok") for (i = 0; i < n; i++) print $$2, names[i]; n = 0 }' | \
	while read -r pkg name; do \
		echo "== $$name ($$pkg), $(FUZZTIME)"; \
		$(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 5s $$pkg || exit 1; \
	done

deps:
	@scripts/deps.sh

clean:
	rm -rf bin
