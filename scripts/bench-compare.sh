#!/usr/bin/env bash
# ratelab compare's throughput workload batched (--redis-batch) beside
# redis-benchmark pipelining the same algorithm: EVALSHA of the sliding log
# (algorithms/decide.lua, built from the same source as the script compare
# runs for one sliding log) with what compare sends (one client's key with
# the consumer in a hash tag, the limit, window in ms, the caller's time in
# ms, a member) over as many clients, the same decisions in flight on as
# many connections: redis-benchmark -c CONNECTIONS -P BATCH keeps CONNECTIONS
# × BATCH requests in flight on CONNECTIONS connections; compare's
# CONNECTIONS × BATCH goroutines, batched BATCH to a pipeline, use
# CONNECTIONS connections at once. Unbatched, for scale, compare on those
# goroutines (a connection each) beside redis-benchmark -P 1 on as many
# connections. ROUNDS alternating rounds, the medians, and their ratios.
# Redis is pinned to REDIS_CPU and both tools to LOAD_CPU. Loopback only;
# every run is bounded (DURATION, REQUESTS).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
CONNECTIONS=${CONNECTIONS:-50}
KEYS=${KEYS:-10000}
BATCH=${BATCH:-16}            # compare's --redis-batch and redis-benchmark's -P
INFLIGHT=$((CONNECTIONS * BATCH)) # compare's --connections (goroutines)
DURATION=${DURATION:-3s}      # of each compare measurement
REQUESTS=${REQUESTS:-150000}  # of each redis-benchmark -P run
REQUESTS_P1=${REQUESTS_P1:-40000}
LIMIT=${LIMIT:-100}           # per 1s: over what one client gets in a run, so that every decision admits
REDIS_CPU=${REDIS_CPU:-0}
LOAD_CPU=${LOAD_CPU:-1}

for bin in redis-server redis-cli redis-benchmark taskset python3; do
  command -v "$bin" >/dev/null || { echo "bench-compare: needs $bin" >&2; exit 1; }
done
go build -o bin/ratelab ./cmd/ratelab

dir=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
taskset -c "$REDIS_CPU" redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" \
  --daemonize yes --logfile "$dir/redis.log" --pidfile "$dir/redis.pid"
trap 'redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.05; done
sha=$(redis-cli -p "$port" -x script load <algorithms/decide.lua)

# compare_rps runs ratelab compare's throughput workload on the sliding log,
# batched, and prints its batched and unbatched decisions per second.
compare_rps() {
  taskset -c "$LOAD_CPU" ./bin/ratelab compare --redis "redis://127.0.0.1:$port" --algorithms sliding-log \
    --workloads throughput --redis-batch "$BATCH" --connections "$INFLIGHT" --keys "$KEYS" \
    --duration "$DURATION" --limit "$LIMIT" --window 1s --output json >"$dir/compare.json" 2>"$dir/compare.log"
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["results"][0]; print("%.0f %.0f %.2f" % (r["batched_ops_per_sec"], r["ops_per_sec"], r["batched_round_trips"]))' "$dir/compare.json"
}

# benchmark_rps runs redis-benchmark on $1 connections with pipeline depth
# $2 for $3 requests and prints its requests per second. Keys and members are drawn from KEYS
# values (-r); the caller's time is the round's start.
benchmark_rps() {
  local now
  now=$(python3 -c 'import time; print(int(time.time()*1000))')
  taskset -c "$LOAD_CPU" redis-benchmark -h 127.0.0.1 -p "$port" -c "$1" -P "$2" -n "$3" -r "$KEYS" --csv \
    EVALSHA "$sha" 1 'rl:{bench-__rand_int__}:sliding-log' decide "$now" 1 sliding-log "$LIMIT" 1000 1 0 'm-__rand_int__' 0 "$LIMIT" >"$dir/benchmark.csv"
  redis-cli -p "$port" flushall >/dev/null # this script's own server: the next run starts as empty as compare's
  awk -F, 'NR==2 {gsub(/"/, "", $2); print $2}' "$dir/benchmark.csv"
}

median() { sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }

echo "sliding log, $INFLIGHT decisions in flight, $KEYS clients, limit $LIMIT/1s, Redis $(redis-server --version | awk '{print $3}') on cpu $REDIS_CPU, tools on cpu $LOAD_CPU, load average$(uptime | sed 's/.*load average//')"
batched=() plain=() trips=() p16=() p1=()
for i in $(seq "$ROUNDS"); do
  read -r b u t < <(compare_rps)
  batched+=("$b") plain+=("$u") trips+=("$t")
  p16+=("$(benchmark_rps "$CONNECTIONS" "$BATCH" "$REQUESTS")")
  p1+=("$(benchmark_rps "$INFLIGHT" 1 "$REQUESTS_P1")")
done
mb=$(printf '%s\n' "${batched[@]}" | median)
mu=$(printf '%s\n' "${plain[@]}" | median)
mt=$(printf '%s\n' "${trips[@]}" | median)
m16=$(printf '%s\n' "${p16[@]}" | median)
m1=$(printf '%s\n' "${p1[@]}" | median)
echo "median of $ROUNDS alternating rounds (each round's figures in brackets):"
printf '  compare --connections %s --redis-batch %s  %10s decisions/s  %s round trips a decision  (%s)\n' "$INFLIGHT" "$BATCH" "$mb" "$mt" "${batched[*]}"
printf '  redis-benchmark -c %s -P %s             %10s requests/s   (%s)\n' "$CONNECTIONS" "$BATCH" "$m16" "${p16[*]}"
printf '  compare --connections %s, unbatched      %10s decisions/s  (%s)\n' "$INFLIGHT" "$mu" "${plain[*]}"
printf '  redis-benchmark -c %s -P 1             %10s requests/s   (%s)\n' "$INFLIGHT" "$m1" "${p1[*]}"
awk -v a="$mb" -v b="$m16" 'BEGIN {printf "  batched: compare / redis-benchmark %.2f (target at least 0.9)\n", a/b}'
awk -v a="$mu" -v b="$m1" 'BEGIN {printf "  unbatched: compare / redis-benchmark %.2f\n", a/b}'
echo "load average after$(uptime | sed 's/.*load average//')"
