#!/usr/bin/env bash
# ratelab bench http beside wrk (and wrk2 and bombardier when installed) on
# nginx serving a static 200 with one worker, on loopback: alternating
# rounds, medians and ratios (scripts/benchhttp). Every run is bounded by
# its duration. Extra arguments go to the driver: -rounds, -duration,
# -connections, -rates, -rss-connections.
set -euo pipefail
cd "$(dirname "$0")/.."
go build -o bin/ratelab ./cmd/ratelab
exec go run ./scripts/benchhttp -ratelab bin/ratelab "$@"
