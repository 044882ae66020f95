#!/usr/bin/env bash
# Side by side on this machine, with ratelab bench rls: ratelab rls and
# envoyproxy/ratelimit (its service_cmd), the same Redis, the same config
# file (a fixed window per minute, high enough that every call is admitted:
# the whole decision path), keyed by a descriptor value over CONSUMERS
# values, the same load. ROUNDS alternating rounds, the median of each:
#   1. the most calls per second each serves (closed model, CONNECTIONS
#      channels), and ratelab rls with algorithm: sliding-log against the
#      reference's fixed window;
#   2. the p99 of each at half of the reference's most (open model, --rate);
# with the CPU time each service takes per call and the Redis commands it
# sends per call (INFO commandstats). Beside them in 1, the floor: Envoy's
# rate limit service on grpc-go answering every call OK and deciding
# nothing (scripts/grpcfloor), the CPU per call of the gRPC server alone.
# Redis runs on
# REDIS_CPU; the service under test on SERVER_CPU, bench rls on LOAD_CPU.
# Loopback only; every run is bounded by DURATION.
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${DURATION:-10s}
WARMUP=${WARMUP:-1s}
CONNECTIONS=${CONNECTIONS:-50}
CONSUMERS=${CONSUMERS:-1000}
PER_MINUTE=${PER_MINUTE:-1000000000} # high enough that every call is admitted
ROUNDS=${ROUNDS:-3}
REDIS_CPU=${REDIS_CPU:-0}
SERVER_CPU=${SERVER_CPU:-1}
if [ "$(nproc)" -gt 2 ]; then LOAD_CPU=${LOAD_CPU:-2}; else LOAD_CPU=${LOAD_CPU:-$SERVER_CPU}; fi
RLS_TIMEOUT=${RLS_TIMEOUT:-10s} # ratelab rls's --redis-timeout: long enough that no call fails open
RLS_FLAGS=${RLS_FLAGS:-}       # more flags of ratelab rls, such as --redis-batch 1

ref=${RATELAB_ENVOY_RATELIMIT:-}
if [ -z "$ref" ]; then
  ref=$(command -v service_cmd || true)
  if [ -z "$ref" ] && [ -x "$(go env GOPATH)/bin/service_cmd" ]; then ref=$(go env GOPATH)/bin/service_cmd; fi
fi
if [ -z "$ref" ]; then
  echo "bench-rls: skipped: envoyproxy/ratelimit's service_cmd not found (on PATH, in \$(go env GOPATH)/bin, or \$RATELAB_ENVOY_RATELIMIT)."
  echo "  build it with: GOFLAGS=-mod=mod go install github.com/envoyproxy/ratelimit/src/service_cmd@v1.4.1-0.20260122083618-3fb702589d36"
  exit 0
fi
for c in redis-server redis-cli taskset curl python3; do
  command -v "$c" >/dev/null || { echo "bench-rls: needs $c" >&2; exit 1; }
done
go build -o bin/ratelab ./cmd/ratelab
go build -o bin/grpcfloor ./scripts/grpcfloor

dir=$(mktemp -d)
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
port=$(free_port)
pids=()
# SIGTERM, not SIGINT: a command a script starts with & ignores SIGINT, and
# a program that does not ask for it (grpcfloor) keeps ignoring it.
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
  rm -rf "$dir"
}
trap cleanup EXIT
taskset -c "$REDIS_CPU" redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" \
  --daemonize yes --logfile "$dir/redis.log" --pidfile "$dir/redis.pid"
for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.05; done

# One config file for both services: envoyproxy/ratelimit's runtime layout;
# the same with algorithm: sliding-log for ratelab alone.
mkdir -p "$dir/fixed/ratelimit/config" "$dir/log/ratelimit/config"
cat >"$dir/fixed/ratelimit/config/bench.yaml" <<EOF
domain: bench
descriptors:
  - key: consumer
    rate_limit:
      unit: minute
      requests_per_unit: $PER_MINUTE
EOF
sed 's/^      unit: minute$/      unit: minute\n      algorithm: sliding-log/' "$dir/fixed/ratelimit/config/bench.yaml" >"$dir/log/ratelimit/config/bench.yaml"

# wait_http waits for URL to answer 200, at most 30s.
wait_http() {
  for _ in $(seq 600); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' "$1")" = 200 ] && return 0
    sleep 0.05
  done
  echo "bench-rls: $2 did not start; its log:" >&2
  cat "$dir/$2.log" >&2
  exit 1
}

declare -A addr pid metrics
start_ref() {
  local g h d
  g=$(free_port) h=$(free_port) d=$(free_port)
  env RUNTIME_ROOT="$dir/fixed" RUNTIME_SUBDIRECTORY=ratelimit RUNTIME_WATCH_ROOT=false USE_STATSD=false \
    REDIS_SOCKET_TYPE=tcp REDIS_URL="127.0.0.1:$port" LOG_LEVEL=warn GRPC_PORT="$g" PORT="$h" DEBUG_PORT="$d" \
    taskset -c "$SERVER_CPU" "$ref" >"$dir/ref.log" 2>&1 &
  pids+=($!)
  addr[ref]=127.0.0.1:$g pid[ref]=$!
  wait_http "http://127.0.0.1:$h/healthcheck" ref
}
start_ratelab() { # name, config directory
  local g h
  g=$(free_port) h=$(free_port)
  # shellcheck disable=SC2086
  taskset -c "$SERVER_CPU" ./bin/ratelab rls --config "$2/ratelimit/config" --redis "redis://127.0.0.1:$port" \
    --grpc "127.0.0.1:$g" --http "127.0.0.1:$h" --redis-timeout "$RLS_TIMEOUT" $RLS_FLAGS >"$dir/$1.log" 2>&1 &
  pids+=($!)
  addr[$1]=127.0.0.1:$g pid[$1]=$! metrics[$1]=http://127.0.0.1:$h/metrics
  wait_http "http://127.0.0.1:$h/healthz" "$1"
}

# undecided is how many calls ratelab rls name has answered other than
# from a decision in Redis that admitted them (by its /metrics); 0 for the
# reference.
undecided() {
  [ -n "${metrics[$1]:-}" ] || { echo 0; return; }
  curl -s "${metrics[$1]}" | awk '/^ratelab_edge_decisions_total/ && !/outcome="allowed"/ {n += $NF} END {print n + 0}'
}

# cpu_ticks is the CPU time the service name has used, in clock ticks.
cpu_ticks() { awk '{print $14 + $15}' "/proc/${pid[$1]}/stat"; }

# load runs bench rls against the service name with the rate given (0:
# closed model), keeps its JSON as name-tag.json, and the CPU time the
# service used per call, in µs, as name-tag.cpu.
load() { # name, tag, rate
  local t0 u0
  t0=$(cpu_ticks "$1") u0=$(undecided "$1")
  taskset -c "$LOAD_CPU" ./bin/ratelab bench rls "${addr[$1]}" --domain bench --descriptor 'consumer={consumer}' \
    --consumers "$CONSUMERS" --connections "$CONNECTIONS" --rate "$3" --duration "$DURATION" --warmup "$WARMUP" \
    -o json --out "$dir/$1-$2.json" 2>>"$dir/$1-bench.log" || true
  awk -v t=$(($(cpu_ticks "$1") - t0)) -v hz="$(getconf CLK_TCK)" -v n="$(field "$dir/$1-$2.json" 'r["requests"] + r["warmup_requests"]')" \
    'BEGIN {printf "%.0f\n", t * 1e6 / hz / n}' >"$dir/$1-$2.cpu"
  local u=$(($(undecided "$1") - u0))
  if [ "$u" != 0 ]; then echo "bench-rls: $1: $u calls answered without a decision that admitted them (failed open, denied, circuit open): see its /metrics" >&2; fi
  python3 - "$dir/$1-$2.json" "$1" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
bad = r["errors"] + sum(n for s, n in r["status_counts"].items() if s != "200")
if bad:
    print(f"bench-rls: {sys.argv[2]}: {bad} of {r['requests']} calls not OK: {r['status_counts']} {r['error_kinds']}", file=sys.stderr)
EOF
}
field() { python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(eval(sys.argv[2], {}, {"r": r}))' "$@"; }
median() { sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }

# commands prints the Redis commands per call of name's run tag, from
# the INFO commandstats saved after it (a script's own commands included).
commands() { # name, tag
  tr -d '\r' <"$dir/$1-$2.stats" | awk -F'[:,=]' -v name="$(label "$1")" \
    -v n="$(field "$dir/$1-$2.json" 'r["requests"] + r["warmup_requests"]')" '
    /^cmdstat_/ && $3 > 0 { sub("cmdstat_", "", $1); if ($1 == "ping" || $1 == "hello" || $1 ~ /^(info|config)/) next
      line = line sprintf("  %s %.2f (%.1fµs)", $1, $3 / n, $7) }
    END { printf "  %-26s%s\n", name, line }'
}

start_floor() {
  local g
  g=$(free_port)
  taskset -c "$SERVER_CPU" ./bin/grpcfloor -listen "127.0.0.1:$g" >"$dir/floor.log" 2>&1 &
  pids+=($!)
  addr[floor]=127.0.0.1:$g pid[floor]=$!
  for _ in $(seq 600); do
    (exec 3<>"/dev/tcp/127.0.0.1/$g") 2>/dev/null && return 0
    sleep 0.05
  done
  echo "bench-rls: grpcfloor did not start; its log:" >&2
  cat "$dir/floor.log" >&2
  exit 1
}
label() { case $1 in ref) echo "envoyproxy/ratelimit" ;; rls) echo "ratelab rls" ;; rls-log) echo "ratelab rls, sliding-log" ;; floor) echo "floor: grpc-go, no decision" ;; esac; }

start_ref
start_ratelab rls "$dir/fixed"
start_ratelab rls-log "$dir/log"
start_floor

cores=$(nproc)
echo "bench-rls: ratelab rls (commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)) against envoyproxy/ratelimit ($ref), Redis $(redis-server --version | awk '{sub("v=", "", $3); print $3}')"
echo "  one config file: domain bench, descriptor consumer (its value one of $CONSUMERS: consumer={consumer}), fixed window $PER_MINUTE per minute; ratelab's sliding-log the same with algorithm: sliding-log"
echo "  bench rls --connections $CONNECTIONS --duration $DURATION --warmup $WARMUP, median of $ROUNDS alternating rounds; ratelab rls --redis-timeout $RLS_TIMEOUT $RLS_FLAGS"
if [ "$LOAD_CPU" = "$SERVER_CPU" ]; then
  echo "  $cores cores: Redis on cpu $REDIS_CPU; the service under test and bench rls share cpu $SERVER_CPU (the load generator's cost counts against each service alike)"
else
  echo "  $cores cores: Redis on cpu $REDIS_CPU, the service under test on cpu $SERVER_CPU, bench rls on cpu $LOAD_CPU"
fi
echo "  load average: $(cut -d' ' -f1-3 /proc/loadavg)"

# 1. The most each serves: closed model, alternating which goes first.
names=(ref rls rls-log floor)
declare -A rps cpu
for i in $(seq "$ROUNDS"); do
  order=("${names[@]}")
  if [ $((i % 2)) = 0 ]; then order=(floor rls-log rls ref); fi
  for n in "${order[@]}"; do
    redis-cli -p "$port" config resetstat >/dev/null
    load "$n" "max-$i" 0
    redis-cli -p "$port" info commandstats >"$dir/$n-max-$i.stats"
    rps[$n]+="$(field "$dir/$n-max-$i.json" 'round(r["throughput_rps"])') "
    cpu[$n]+="$(cat "$dir/$n-max-$i.cpu") "
  done
done
declare -A med cmed
echo "most calls per second (closed model, --rate 0):"
for n in "${names[@]}"; do
  med[$n]=$(printf '%s\n' ${rps[$n]} | median)
  cmed[$n]=$(printf '%s\n' ${cpu[$n]} | median)
  printf '  %-28s %8s calls/s   (%s)   CPU per call %sµs (%s)\n' "$(label "$n")" "${med[$n]}" "${rps[$n]% }" \
    "${cmed[$n]}" "${cpu[$n]% }"
done
awk -v a="${cmed[rls]}" -v b="${cmed[ref]}" 'BEGIN {printf "  CPU per call, ratelab ÷ reference     %5.2f   (target at most 0.3)\n", a/b}'
awk -v a="${cmed[floor]}" -v b="${cmed[ref]}" 'BEGIN {printf "  CPU per call, the floor ÷ reference   %5.2f   (no service that decides can go under it)\n", a/b}'
awk -v a="${med[rls]}" -v b="${med[ref]}" 'BEGIN {printf "  ratelab ÷ reference        %8.2f   (target at least 1.0)\n", a/b}'
awk -v a="${med[rls-log]}" -v b="${med[ref]}" 'BEGIN {printf "  sliding-log ÷ reference    %8.2f   (target at least 0.8)\n", a/b}'

# 2. The p99 of each at half of the reference's most: open model.
half=$(( ${med[ref]} / 2 ))
declare -A p99 lag
for i in $(seq "$ROUNDS"); do
  order=(ref rls)
  if [ $((i % 2)) = 0 ]; then order=(rls ref); fi
  for n in "${order[@]}"; do
    load "$n" "half-$i" "$half"
    p99[$n]+="$(field "$dir/$n-half-$i.json" 'r["latency_us"]["p99"]') "
    lag[$n]+="$(field "$dir/$n-half-$i.json" 'r["send_lag_us"]["p99"]') "
  done
done
echo "p99 at half of the reference's most (open model, --rate $half, latency from each call's intended send):"
declare -A pmed
for n in ref rls; do
  pmed[$n]=$(printf '%s\n' ${p99[$n]} | median)
  printf '  %-26s %8sµs     (%s)   bench rls send-lag p99 (%s)µs\n' "$(label "$n")" "${pmed[$n]}" "${p99[$n]% }" "${lag[$n]% }"
done
awk -v a="${pmed[rls]}" -v b="${pmed[ref]}" 'BEGIN {printf "  ratelab ÷ reference        %8.2f   (target at most 1.0)\n", a/b}'
echo "  (a send-lag p99 near the latency p99 is the load generator held up too: the machine stalled, not the service)"

# 3. What each asks of Redis per call.
echo "Redis commands per call in round 1's closed-model runs (INFO commandstats: commands per call, and µs in Redis per command;"
echo "  a script's EVALSHA includes the commands it calls):"
for n in ref rls rls-log; do commands "$n" max-1; done
echo "  load average: $(cut -d' ' -f1-3 /proc/loadavg)"
