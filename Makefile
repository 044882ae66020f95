# ratelab: `make demo` to see the race, `make test` to check everything.
GO  ?= go
BIN := bin/ratelab

.PHONY: all build demo test bench deps clean

all: build

build:
	$(GO) build -o $(BIN) ./cmd/ratelab

# The default race: naive, multi, watch and lua, 100 goroutines, limit 5, 20 trials,
# on a private redis-server that ratelab starts and stops.
demo: build
	@scripts/deps.sh redis
	./$(BIN) race

# Installs redis-server, nginx and its lua module when missing (apt-get, as
# root), then vets and runs every test with the race detector. The tests
# start their own servers.
test: deps
	$(GO) vet ./...
	$(GO) test -race ./...

# Per-decision cost of each limiter, the release spread against the machine's
# floor (raw PINGs), a race of every limiter, the two edge engines under wrk,
# and bench http beside wrk (and wrk2, bombardier when installed) on nginx.
bench: build
	@scripts/deps.sh bench
	$(GO) test -run '^$$' -bench . -benchmem ./algorithms/
	$(GO) test -run '^$$' -bench ReleaseSpread -benchtime 20x ./race/
	./$(BIN) race --limiters all
	scripts/bench-edge.sh
	scripts/bench-http.sh

deps:
	@scripts/deps.sh

clean:
	rm -rf bin
